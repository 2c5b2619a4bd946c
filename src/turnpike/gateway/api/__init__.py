"""The transports: HTTP with Server-Sent Events and WebSocket, and the routes beside them."""
