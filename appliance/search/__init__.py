"""Search: safe FTS5 queries, lexical ranking, retrieval metrics."""
