"""HAProxy (the stack's image and deploy/haproxy as compose.yaml mounts it) with no gateway
replica at all: what a client gets from the proxy itself. Every request, a WebSocket
upgrade included, gets a 503 in the API's error shape, as HTTP/1.1, which the WebSocket
client reads as a refused upgrade. With HTTP/1.0 errorfiles (sent as written) the client
saw "did not receive a valid HTTP response" (InvalidMessage) instead: the handshakes the
chaos test saw fail while Redis was cut off. Seconds, without the rest of the stack."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.loopback import publish_on_loopback
from support.procs import free_port

REPO = Path(__file__).resolve().parents[2]
GATEWAY_PORT = "8080"
UPGRADE = (
    b"GET /v1/responses HTTP/1.1\r\nHost: turnpike\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer sk-test-nobody\r\n\r\n"
)


def exchange(port: int, request: bytes, timeout_s: float = 10.0) -> bytes:
    """What the proxy sends back, every byte until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


@pytest.fixture(scope="module")
def lonely_haproxy(images) -> Iterator[int]:
    """The proxy alone (its replicas' names resolve to nothing): its published port."""
    from testcontainers.core.container import DockerContainer

    port = free_port()
    container = (
        DockerContainer(images.settings["HAPROXY_IMAGE"])
        .with_env("GATEWAY_PORT", GATEWAY_PORT)
        .with_volume_mapping(str(REPO / "deploy" / "haproxy"), "/usr/local/etc/haproxy", "ro")
        .with_command(["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"])
    )
    publish_on_loopback(container, f"{GATEWAY_PORT}/tcp", port)
    with container:
        deadline = time.monotonic() + 30
        while True:
            # Docker's port proxy accepts before HAProxy listens, then closes or resets:
            # only an answer from the proxy itself says it is up.
            try:
                probe = b"GET /healthz HTTP/1.1\r\nHost: turnpike\r\n\r\n"
                if exchange(port, probe, 2).startswith(b"HTTP/"):
                    break
            except OSError:
                pass
            logs = container.get_wrapped_container().logs().decode()[-2000:]
            assert time.monotonic() < deadline, f"HAProxy did not listen: {logs}"
            time.sleep(0.2)
        yield port


def test_a_websocket_upgrade_with_no_replica_gets_the_api_503(lonely_haproxy):
    import websockets
    from websockets.exceptions import InvalidStatus

    raw = exchange(lonely_haproxy, UPGRADE)
    assert raw.startswith(b"HTTP/1.1 503 "), raw
    body = raw.partition(b"\r\n\r\n")[2]
    assert json.loads(body)["error"]["code"] == "service_unavailable", raw

    async def handshake() -> None:
        async with websockets.connect(
            f"ws://127.0.0.1:{lonely_haproxy}/v1/responses",
            additional_headers={"Authorization": "Bearer sk-test-nobody"},
            open_timeout=10,
        ):
            pass

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(handshake())
    assert refused.value.response.status_code == 503
    error = json.loads(refused.value.response.body)["error"]
    assert error["code"] == "service_unavailable" and error["type"] == "server_error"


def test_a_request_with_no_replica_gets_the_api_503(lonely_haproxy):
    base = f"http://127.0.0.1:{lonely_haproxy}"
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/responses")):
        answer = httpx.request(method, base + path, json={}, timeout=10)
        assert answer.status_code == 503 and answer.http_version == "HTTP/1.1"
        assert answer.json()["error"]["code"] == "service_unavailable"
    # A client that speaks HTTP/1.0 gets its answer too.
    raw = exchange(lonely_haproxy, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert raw.split(b"\r\n", 1)[0] == b"HTTP/1.1 503 Service Unavailable", raw
