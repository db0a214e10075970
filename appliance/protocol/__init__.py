"""MCP wire vocabulary shared by both sides of the gateway: the server faces (``rpc/``,
``web/``) and the client of upstream servers (``upstream/``).

Pure rules and constants only (revisions, ``_meta`` keys, log levels, parameter headers);
nothing here holds state or does I/O, and it imports nothing of the project but ``errors``.
"""
