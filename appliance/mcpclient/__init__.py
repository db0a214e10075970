"""The gateway's MCP client: sessions of both eras, their streamable-HTTP, legacy-SSE and
stdio transports, the pool of sessions, the listen stream."""
