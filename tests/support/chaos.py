"""Steady agent-loop load for the chaos test, and what it saw.

Each ``AgentClient`` is one official-SDK client of its own tenant, in a thread, running
turns of a function-call loop (question, tool call, tool output with
``previous_response_id``, ...) over HTTP or over one WebSocket, until told to stop. Every
call is bounded (``timeout_s``: the SDK's own on HTTP, a watchdog that closes the socket on
WebSocket); a failed turn is recorded with its error and the conversation goes on from the
last completed response, on a new socket for WebSocket: that is the recovery a client does.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import OpenAI
from openai.types.websocket_reconnection import ReconnectingEvent
from support.tools import WEATHER_TOOL, tool_result
from support.wire import TERMINAL

MODEL = "turnpike-sim-4000"
REPLICA_HEADER = "x-turnpike-replica"
# Between two turns of one client, and before a retry: a light load on a small machine.
THINK_S = 0.1
RETRY_S = 0.5


@dataclass(frozen=True)
class Turn:
    client: str
    transport: str
    began: float  # time.monotonic()
    ended: float
    response_id: str | None  # set when completed
    error: str | None  # what the client saw, when not completed
    replica: str | None = None  # X-Turnpike-Replica, on HTTP
    usage: tuple[int, int] = (0, 0)  # input, output tokens of a completed response
    previous_id: str | None = None  # the response it continued (previous_response_id)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def completed_id(self) -> str:
        """The response's id, which a completed turn has."""
        assert self.response_id is not None, self
        return self.response_id

    @property
    def seconds(self) -> float:
        return self.ended - self.began


class AgentClient:
    def __init__(
        self,
        name: str,
        transport: str,
        base_url: str,
        api_key: str,
        timeout_s: float,
        reconnect: bool = False,
    ) -> None:
        self.name = name
        self.transport = transport  # "http" | "websocket"
        # WebSocket: let the SDK reconnect (on_reconnecting) on the close codes it takes
        # as recoverable (1001, 1012, ...), one connection object for the whole run.
        self.reconnect = reconnect
        self.reconnects = 0  # the SDK's reconnections
        self.resent = 0  # creates sent again: the socket had closed, the frame not sent
        self.base_url = base_url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.turns: list[Turn] = []
        self.previous: Any = None  # the last completed response: where the loop goes on
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name=f"chaos-{name}", daemon=True)

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        with OpenAI(
            base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=self.timeout_s
        ) as sdk:
            while not self.stopping.is_set():
                if self.transport == "http":
                    self.http_turn(sdk)
                elif self.reconnect:
                    self.reconnecting_session(sdk)
                else:
                    self.websocket_session(sdk)

    def body(self) -> dict[str, Any]:
        n = len(self.turns)
        previous = self.previous
        calls = [i for i in previous.output if i.type == "function_call"] if previous else []
        if not calls:
            body: dict[str, Any] = {"input": f"What is the weather in town {n}?"}
        else:
            body = {"input": tool_result(calls[0].call_id, f"rain {n}", f"And in town {n}?")}
        if previous is not None:
            body["previous_response_id"] = previous.id
        return {"model": MODEL, "tools": [WEATHER_TOOL], **body}

    def record(self, began: float, response: Any = None, error: str | None = None, **kw) -> None:
        if response is not None and response.status != "completed":
            error, response = f"status {response.status}", None
        turn = Turn(
            self.name,
            self.transport,
            began,
            time.monotonic(),
            response.id if response is not None else None,
            error,
            usage=(response.usage.input_tokens, response.usage.output_tokens)
            if response
            else (0, 0),
            previous_id=response.previous_response_id if response is not None else None,
            **kw,
        )
        with self.lock:
            self.turns.append(turn)
        if response is not None:
            self.previous = response
        self.stopping.wait(THINK_S if turn.ok else RETRY_S)

    def http_turn(self, sdk: OpenAI) -> None:
        began = time.monotonic()
        try:
            raw = sdk.responses.with_raw_response.create(**self.body())
            self.record(began, raw.parse(), replica=raw.headers.get(REPLICA_HEADER))
        except openai.APIStatusError as err:
            self.record(began, error=describe_status(err))
        except openai.APIError as err:  # connection errors and timeouts
            self.record(began, error=type(err).__name__)

    def websocket_session(self, sdk: OpenAI) -> None:
        """One socket, turns on it until one fails; then a new socket."""
        began = time.monotonic()
        watchdog: threading.Timer | None = None
        try:
            with sdk.responses.connect() as conn:
                while not self.stopping.is_set():
                    began = time.monotonic()
                    watchdog = threading.Timer(self.timeout_s, conn.close)
                    watchdog.start()
                    conn.response.create(**self.body())
                    event = None
                    for event in conn:
                        if event.type in TERMINAL:
                            break
                    watchdog.cancel()
                    if event is None or event.type not in TERMINAL:
                        late = time.monotonic() - began >= self.timeout_s
                        self.record(began, error="timeout" if late else "socket closed")
                        return
                    if event.type == "error":
                        self.record(began, error=f"error event {event.status} {event.error.code}")
                        continue
                    if event.type != "response.completed":
                        error = event.response.error
                        self.record(began, error=f"{event.type} {error.code if error else ''}")
                        continue
                    self.record(began, event.response)
        except Exception as err:  # the handshake refused, or the socket dropped
            self.record(began, error=f"websocket {type(err).__name__}")
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def reconnecting_session(self, sdk: OpenAI) -> None:
        """One SDK connection that reconnects by itself. A reader thread iterates it all
        along, as the SDK expects of a client: a close between responses is seen at once
        and the SDK reconnects (the next create then goes out on the new socket, or waits
        in its queue). A create that raced the close raises without being sent: it is
        sent again once the SDK has reconnected (never a second response)."""
        events: queue.Queue[Any] = queue.Queue()

        def count(_: ReconnectingEvent) -> None:
            self.reconnects += 1

        began = time.monotonic()
        try:
            with sdk.responses.connect(on_reconnecting=count, max_retries=10) as conn:

                def read() -> None:
                    try:
                        for event in conn:
                            events.put(event)
                    finally:
                        events.put(None)  # the SDK gave up, or the connection was closed

                threading.Thread(target=read, name=f"reader-{self.name}", daemon=True).start()
                while not self.stopping.is_set():
                    began = time.monotonic()
                    if not self._send_create(conn):
                        self.record(began, error="create not sent")
                        return
                    event = self._terminal(events, began)
                    if event is None:
                        late = time.monotonic() - began >= self.timeout_s
                        self.record(began, error="timeout" if late else "socket closed")
                        return
                    if event.type == "error":
                        self.record(began, error=f"error event {event.status} {event.error.code}")
                    elif event.type != "response.completed":
                        error = event.response.error
                        self.record(began, error=f"{event.type} {error.code if error else ''}")
                    else:
                        self.record(began, event.response)
        except Exception as err:  # the handshake refused
            self.record(began, error=f"websocket {type(err).__name__}")

    def _send_create(self, conn: Any) -> bool:
        body = self.body()
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                conn.response.create(**body)
                return True
            except Exception:  # closed under it: not sent; the reader is reconnecting
                if time.monotonic() > deadline:
                    return False
                self.resent += 1
                time.sleep(RETRY_S)

    def _terminal(self, events: queue.Queue[Any], began: float) -> Any:
        """The turn's terminal event, or None (the connection ended, or the timeout)."""
        while True:
            remaining = self.timeout_s - (time.monotonic() - began)
            try:
                event = events.get(timeout=max(0.0, remaining))
            except queue.Empty:
                return None
            if event is None or event.type in TERMINAL:
                return event

    # -- control ----------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout_s: float) -> None:
        self.stopping.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"{self.name} did not stop within {timeout_s} s"

    def snapshot(self) -> list[Turn]:
        with self.lock:
            return list(self.turns)


def describe_status(err: openai.APIStatusError) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    code = error.get("code") if isinstance(error, dict) else None
    return f"{err.status_code} {code or type(err).__name__}"


@contextmanager
def running(clients: list[AgentClient], stop_timeout_s: float) -> Iterator[list[AgentClient]]:
    """The clients started, and each past two completed turns (warm), until closed."""
    for client in clients:
        client.start()
    try:
        deadline = time.monotonic() + 60
        while not all(sum(t.ok for t in c.snapshot()) >= 2 for c in clients):
            assert time.monotonic() < deadline, {
                c.name: [t.error for t in c.snapshot()][-3:] for c in clients
            }
            time.sleep(0.2)
        yield clients
    finally:
        for client in clients:
            client.stop(stop_timeout_s)


# -- what must survive -------------------------------------------------------------------------

LEDGER_QUERY = """
import json, sqlite3, sys
db = sqlite3.connect("file:/var/lib/turnpike/billing/ledger.sqlite3?mode=ro", uri=True)
rows = db.execute(
    "SELECT event_id, tenant, input_tokens, output_tokens, COUNT(*) FROM usage_events "
    "WHERE tenant LIKE ? GROUP BY event_id", (sys.argv[1] + "%",)
).fetchall()
print(json.dumps({r[0]: r[1:] for r in rows}))
"""


def missing_from_store(stack, completed: list[Turn]) -> list[str]:
    """Completed responses the store does not give back to their tenant."""
    missing = []
    for tenant in sorted({t.client for t in completed}):
        with OpenAI(
            base_url=stack.base_url, api_key=stack.keys[tenant], max_retries=2, timeout=10
        ) as sdk:
            for turn in completed:
                if turn.client != tenant:
                    continue
                try:
                    sdk.responses.retrieve(turn.completed_id)
                except openai.NotFoundError:
                    missing.append(turn.completed_id)
    return missing


def ledger_mismatches(stack, completed: list[Turn], tenant_prefix: str) -> list[str]:
    """Completed responses not in the billing ledger once with their tokens, once every
    gateway's outbox has delivered (bounded). The clients' tenants share ``tenant_prefix``."""
    deadline = time.monotonic() + 60
    while True:
        query = ["python", "-c", LEDGER_QUERY, tenant_prefix]
        result = stack.container("billing").exec_run(query)
        assert result.exit_code == 0, result.output.decode()[-2000:]
        ledger = json.loads(result.output.decode().strip().splitlines()[-1])
        wrong = [
            t.completed_id
            for t in completed
            if ledger.get(t.completed_id) != [t.client, *t.usage, 1]
        ]
        if not wrong or time.monotonic() > deadline:
            return wrong
        time.sleep(1)


# -- what one fault did ---------------------------------------------------------------------


@dataclass
class FaultResult:
    fault: str  # "stop gateway-1", "partition worker-2"
    began: float
    down: float  # the container stopped (its drain over), or cut off
    healed: float  # the container started, or reconnected
    settled: float  # every client completed a turn after the heal
    turns: list[Turn]  # those that began between the fault and settled
    lost: list[str] = field(default_factory=list)  # completed, yet missing from store/ledger
    behind: list[str] = field(default_factory=list)  # clients that never recovered

    @property
    def failed(self) -> list[Turn]:
        return [t for t in self.turns if not t.ok]

    @property
    def error_rate(self) -> float:
        return len(self.failed) / len(self.turns) if self.turns else 0.0

    @property
    def recovery_s(self) -> float:
        """From the fault to the last client's first completed turn after its last failure
        (0: no client saw a failure)."""
        worst = 0.0
        for name in {t.client for t in self.failed}:
            mine = sorted((t for t in self.turns if t.client == name), key=lambda t: t.began)
            last_failure = max(t.ended for t in mine if not t.ok)
            after = [t.ended for t in mine if t.ok and t.began >= last_failure]
            worst = max(worst, (min(after) if after else self.settled) - self.began)
        return worst

    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for turn in self.failed:
            counts[f"{turn.transport}: {turn.error}"] = (
                counts.get(f"{turn.transport}: {turn.error}", 0) + 1
            )
        return counts


def table(results: Iterable[FaultResult]) -> str:
    lines = [
        "| fault | turns | failed | error rate | recovery (s) | lost | errors seen |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        errors = "; ".join(f"{e} x{n}" for e, n in sorted(r.errors().items())) or "none"
        recovery = f"{r.recovery_s:.1f}" if not r.behind else f"not ({', '.join(r.behind)})"
        lines.append(
            f"| {r.fault} | {len(r.turns)} | {len(r.failed)} | {r.error_rate:.0%} | "
            f"{recovery} | {len(r.lost) or 'nothing'} | {errors} |"
        )
    return "\n".join(lines) + "\n"
