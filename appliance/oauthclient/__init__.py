"""OAuth 2.1 as an MCP client: from an upstream's 401 to a bearer token (issue 19, item 3).

A room of its own over HTTP egress (every URL that metadata names goes through the guard).
``challenge`` reads ``WWW-Authenticate``; ``documents`` fetches metadata strictly;
``discovery`` finds the protected resource's and the authorization server's metadata;
``identity`` picks the client identity (pre-registered, Client ID Metadata Document, dynamic
registration); ``flow`` builds the authorization request and exchanges the code and refresh
tokens; ``connector`` holds one connection's tokens and answers the MCP client's challenges.
"""
