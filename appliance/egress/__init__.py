"""HTTP egress: the SSRF guard, the one HTTP client and its HTTP/1.1, answer bodies, where
credentials go on a request (and OAuth), and an OpenAPI tool call over it."""
