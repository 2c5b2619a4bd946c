"""Session streams between the gateway and safety and the tokenizer, with real
processes: a WebSocket's turns go on across a restart of both services (the streams
break, the next turn opens new ones and classifies the whole history there) and answer
as the same turns on an undisturbed socket do."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from support.gateway_process import start_gateway, stop
from support.procs import free_port, start_service
from support.tools import WEATHER_TOOL

from turnpike.grpc_client import wait_healthy

TURNS: list[Any] = [
    "What is the weather in Lisbon?",
    None,  # the call's output
    "And what should I wear there?",
]


class Service:
    """A service process of the test's own, on a fixed port, that it may restart."""

    def __init__(self, name: str, port: int, metrics_port: int) -> None:
        self.name, self.port = name, port
        self.env = {
            f"TURNPIKE_{name.upper()}_PORT": str(port),
            f"TURNPIKE_{name.upper()}_METRICS_PORT": str(metrics_port),
        }
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = start_service(self.name, self.env)
        assert asyncio.run(wait_healthy(self.address, 60.0)), f"{self.name} did not start"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


@pytest.fixture
def services() -> Iterator[dict[str, Service]]:
    made = {name: Service(name, free_port(), free_port()) for name in ("safety", "tokenizer")}
    try:
        for service in made.values():
            service.start()
        yield made
    finally:
        for service in made.values():
            service.stop()


def play(client: OpenAI, between: Any = None) -> list[dict[str, Any]]:
    """The three turns on one socket (``between`` runs before the last); their responses."""
    done: list[dict[str, Any]] = []
    with client.responses.connect() as conn:
        previous = None
        for number, turn in enumerate(TURNS):
            if number == len(TURNS) - 1 and between is not None:
                between()
            if turn is None:
                call = next(i for i in done[-1]["output"] if i["type"] == "function_call")
                turn = [
                    {
                        "type": "function_call_output",
                        "call_id": call["call_id"],
                        "output": "sunny, 24C",
                    }
                ]
            conn.response.create(
                model="turnpike-sim",
                input=turn,
                tools=[WEATHER_TOOL],
                previous_response_id=previous,
            )
            for event in conn:
                if event.type in ("response.completed", "response.failed", "error"):
                    break
            assert event.type == "response.completed", event
            done.append(event.response.model_dump())
            previous = event.response.id
    return done


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in output]


def metric(port: int, name: str, labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_socket_goes_on_across_a_restart_of_safety_and_the_tokenizer(stack, services):
    metrics_port = free_port()
    proc, base = start_gateway(
        stack,
        TURNPIKE_SAFETY_ADDR=services["safety"].address,
        TURNPIKE_TOKENIZER_ADDR=services["tokenizer"].address,
        TURNPIKE_GATEWAY_METRICS_PORT=str(metrics_port),
        TURNPIKE_SESSION_STREAMS="true",
    )
    try:
        client = OpenAI(base_url=f"{base}/v1", api_key="sk-turnpike-dev", max_retries=0)
        undisturbed = play(client)

        def restart() -> None:
            for service in services.values():
                service.kill()  # no goodbye: the streams just break
            for service in services.values():
                service.start()

        restarted = play(client, between=restart)
        # The same answers, with the same prompts: the whole history was classified and
        # the prompt rendered on the new streams as on the old.
        for turn, (calm, moved) in enumerate(zip(undisturbed, restarted, strict=True)):
            assert moved["usage"]["input_tokens"] == calm["usage"]["input_tokens"], turn
            assert without_ids(moved["output"]) == without_ids(calm["output"]), turn
        for service in ("safety", "tokenizer"):
            breaks = metric(metrics_port, "turnpike_gateway_session_stream_breaks_total", service)
            assert breaks >= 1, service
            ok = metric(
                metrics_port,
                "turnpike_gateway_session_exchanges_total",
                f'outcome="ok",service="{service}"',
            )
            assert ok == 2 * len(TURNS), service  # every turn of both sockets on a stream
    finally:
        stop(proc)
