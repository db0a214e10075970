"""Lore: knowledge bases as tools. Files read within bounds, documents to text and chunks
(pure), and their store."""
