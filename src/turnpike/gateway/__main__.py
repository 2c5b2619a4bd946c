"""``python -m turnpike.gateway``: serve the API with uvicorn, in ``TURNPIKE_GATEWAY_PROCESSES``
processes that share the port (uvicorn's workers; each builds its own app), and
/metrics on the gateway's metrics port.

With several processes, each records its metrics into files of a shared folder
(prometheus-client's multiprocess mode) and this parent process serves their sum, so a
scrape sees the whole gateway, not whichever process answered it."""

from __future__ import annotations

import base64
import functools
import logging
import math
import os
import shutil
import tempfile

import uvicorn

from turnpike import metrics
from turnpike.config import (
    SERVER_KEY_BYTES,
    SERVER_KEY_VARIABLE,
    GatewaySettings,
    exit_on_config_error,
    log_level,
)
from turnpike.gateway.api.uvicorn_protocols import BoundedWSProtocol, HeadTimeoutProtocol
from turnpike.gateway.tenancy.tenants import TenantDirectory

log = logging.getLogger(__name__)


def main() -> None:
    logging.basicConfig(level=log_level(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = GatewaySettings()  # every setting read (and checked) before serving
    TenantDirectory.from_settings(settings)  # and the tenants file: a bad one stops here
    shared_folder = None
    if settings.processes > 1:
        # Set before uvicorn starts its processes, which read it when they import
        # prometheus-client; a fresh folder, as stale files would add old counts.
        shared_folder = tempfile.mkdtemp(prefix="turnpike-gateway-metrics-")
        os.environ[metrics.MULTIPROC_DIR_VARIABLE] = shared_folder
        if not settings.server_key:
            # One key for the processes of this host, made here: an item one of them
            # seals opens in the others (not after a restart, nor on another replica).
            log.warning(
                "%s is not set: the gateway processes share a key generated at start; "
                "sealed items will not open after a restart or on another replica.",
                SERVER_KEY_VARIABLE,
            )
            os.environ[SERVER_KEY_VARIABLE] = base64.b64encode(
                os.urandom(SERVER_KEY_BYTES)
            ).decode()
    metrics_server = metrics.serve(
        metrics.MetricsEndpoint(settings.host, settings.metrics_port),
        metrics.multiprocess_registry() if shared_folder else None,
    )
    try:
        serve(settings)
    finally:
        metrics_server.shutdown()
        if shared_folder:
            shutil.rmtree(shared_folder, ignore_errors=True)


def serve(settings: GatewaySettings) -> None:
    uvicorn.run(
        "turnpike.gateway.api.app:create_app",
        factory=True,
        workers=settings.processes,
        host=settings.host,
        port=settings.port,
        # Frames over the API's own limit still arrive, so the client gets a clear
        # error event; only frames far beyond it are cut off by the library (close 1009).
        ws_max_size=max(4 * settings.max_frame_bytes, 16 * 1024 * 1024),
        # wsproto: a refused upgrade (401, 429) is a complete handshake to it, where
        # the websockets implementations log an ERROR for each one.
        # The two protocols bound slow clients (turnpike.gateway.api.uvicorn_protocols): httptools with a
        # bound on the time a request's head may take (slowloris), and both abort a
        # connection whose client stopped reading.
        # uvicorn calls these as it would call the classes its types ask for.
        ws=functools.partial(BoundedWSProtocol, write_stall_s=settings.write_stall_s),  # type: ignore[arg-type]
        http=functools.partial(  # type: ignore[arg-type]
            HeadTimeoutProtocol,
            head_timeout_s=settings.header_timeout_s,
            write_stall_s=settings.write_stall_s,
        ),
        ws_per_message_deflate=settings.ws_per_message_deflate,
        log_level="warning",
        timeout_graceful_shutdown=math.ceil(settings.drain_s),
    )


if __name__ == "__main__":
    with exit_on_config_error("gateway"):
        main()
