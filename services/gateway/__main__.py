"""``python -m gateway``: serve the API with uvicorn, in ``TURNPIKE_GATEWAY_PROCESSES``
processes that share the port (uvicorn's workers; each builds its own app)."""

from __future__ import annotations

import logging

import uvicorn
from turnpike.config import GatewaySettings, exit_on_config_error


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = GatewaySettings()  # every setting read (and checked) before serving
    uvicorn.run(
        "gateway.app:create_app",
        factory=True,
        workers=settings.processes,
        host=settings.host,
        port=settings.port,
        # Frames over the API's own limit still arrive, so the client gets a clear
        # error event; only frames far beyond it are cut off by the library (close 1009).
        ws_max_size=max(4 * settings.max_frame_bytes, 16 * 1024 * 1024),
        ws="websockets-sansio",
        ws_per_message_deflate=settings.ws_per_message_deflate,
        log_level="warning",
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    with exit_on_config_error("gateway"):
        main()
