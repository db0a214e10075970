"""JSON-RPC 2.0 framing and the MCP method table; the only place errors become JSON-RPC."""
