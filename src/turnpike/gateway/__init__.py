"""The Turnpike gateway: the OpenAI Responses API over HTTP, SSE and WebSocket."""
