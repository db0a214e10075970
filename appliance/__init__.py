"""toolspoke: a self-hosted MCP tool gateway that ships as one executable."""

__version__ = "0.1.0"
