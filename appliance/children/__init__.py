"""Local stdio MCP servers as children: what one may be, spawning it, supervising it."""
