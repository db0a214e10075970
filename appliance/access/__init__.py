"""Who is calling and what they may do: principals, API keys (grants come later)."""
