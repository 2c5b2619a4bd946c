"""The load generator (``make bench-load``): many agent loops at once over raw WebSocket and
HTTP/SSE, without the SDK, so what it measures is the stack's, not its own client's."""
