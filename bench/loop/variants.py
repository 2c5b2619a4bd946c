"""The ways a client can drive the same agent loop, each timed the same way.

- ``legacy-http`` / ``sprint-http``: the official SDK's ``responses.create(stream=True)``
  with ``previous_response_id`` and only the new items, on the legacy or sprint pipeline.
- ``connection-ws``: ``client.responses.connect()``, one socket for the whole loop,
  ``previous_response_id`` and only the new items, on the connection pipeline.
- ``inject-ws``: ``client.beta.responses.connect()`` with the multi-agent beta: the whole
  loop is one response (``multi_agent``) that waits on each call; every tool output goes
  in by ``response.inject``, so a turn is a step of that response. Its turn ends at the
  call's ``output_item.done`` (the last at ``response.completed``), and each step's model
  time comes from the response's ``steps`` timings. The floor of API overhead per tool
  round trip.
- ``stateless-http``: the whole history re-sent every turn without
  ``previous_response_id`` (what openai-agents does by default), sprint pipeline.
- ``direct-worker``: the lower bound. The worker's ``Generate`` over gRPC with no API
  service in between: every turn's request (items, rendered prompt tokens, the model's
  speed from the model registry) is built before the timed loop, so the loop is only the
  model's time, the gRPC hop and the tool time.

Every request carries the instructions and the tools, as real clients send them. A turn
is timed from just before the request is handed to the client library to its terminal
event; time to first token ends at the first delta event (text or call arguments).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from bench.loop.rollout import Rollout
from turnpike.inference.v1 import inference_pb2, inference_pb2_grpc

PIPELINE_HEADER = "X-Turnpike-Pipeline"
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")

LEGACY = "legacy-http"
SPRINT = "sprint-http"
CONNECTION = "connection-ws"
INJECT = "inject-ws"
STATELESS = "stateless-http"
DIRECT = "direct-worker"
VARIANTS = (LEGACY, SPRINT, CONNECTION, INJECT, STATELESS, DIRECT)
# Which gateway pipeline each variant asks for.
PIPELINE_OF = {
    LEGACY: "legacy",
    SPRINT: "sprint",
    CONNECTION: "connection",
    INJECT: "connection",
    STATELESS: "sprint",
}
# The beta header of response.inject and multi_agent.
MULTI_AGENT_BETA = {"OpenAI-Beta": "responses_multi_agent=v1"}


class LoopError(RuntimeError):
    """The loop did not go as scripted (a failed response, an unexpected answer)."""


@dataclass
class Call:
    call_id: str
    name: str
    arguments: str


@dataclass
class Turn:
    """One request of the loop, as the client saw it."""

    turn: int
    ttft_ms: float  # request handed to the client library -> first delta event
    turn_ms: float  # -> terminal event
    model_ms: dict[str, float]  # the worker's own timings (queue, prefill, decode, ttft, total)
    stages_ms: dict[str, float]  # the gateway's stage timers (empty for the direct worker)
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    answer: str  # "function_call" | "message"
    # Until the client library's call returned: on a WebSocket the SDK's encoding and the
    # frame's send (client work only); over HTTP until the response headers arrived.
    send_ms: float = 0.0
    call: Call | None = field(default=None, repr=False)
    output_items: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def overhead_ms(self) -> float:
        """What the client waited beyond the model's own time."""
        return self.turn_ms - self.model_ms.get("total_ms", 0.0)

    def record(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "answer": self.answer,
            "ttft_ms": round(self.ttft_ms, 3),
            "turn_ms": round(self.turn_ms, 3),
            "send_ms": round(self.send_ms, 3),
            "model_ms": {k: round(v, 3) for k, v in self.model_ms.items()},
            "overhead_ms": round(self.overhead_ms, 3),
            "stages_ms": {k: round(v, 3) for k, v in self.stages_ms.items()},
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
        }


@dataclass
class Loop:
    """One run of the whole agent loop."""

    variant: str
    model: str
    tool_ms: float
    rep: int
    run_id: str
    turns: list[Turn]
    loop_ms: float  # wall time: connect + every turn + every tool run
    connect_ms: float = 0.0
    client_cpu_ms: float = 0.0  # this process's CPU time during the loop (SDK, parsing)
    service_cpu_ms: dict[str, float] = field(default_factory=dict)  # filled by the runner

    def record(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "model": self.model,
            "tool_ms": self.tool_ms,
            "rep": self.rep,
            "run_id": self.run_id,
            "loop_ms": round(self.loop_ms, 3),
            "connect_ms": round(self.connect_ms, 3),
            "client_cpu_ms": round(self.client_cpu_ms, 3),
            "service_cpu_ms": {k: round(v, 1) for k, v in self.service_cpu_ms.items()},
            "turns": [t.record() for t in self.turns],
        }


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def _call_of(output: Sequence[Any]) -> Call | None:
    for item in output:
        if getattr(item, "type", None) == "function_call":
            return Call(item.call_id, item.name, item.arguments)
    return None


def _turn_from_response(
    turn: int, response: Any, ttft_ms: float, turn_ms: float, keep_output: bool = False
) -> Turn:
    """A Turn from the SDK's Response object of the terminal event (with its output items
    as request items when ``keep_output``: a stateless client re-sends them)."""
    extra = (response.model_extra or {}).get("turnpike") or {}
    usage = response.usage
    call = _call_of(response.output)
    return Turn(
        turn=turn,
        ttft_ms=ttft_ms,
        turn_ms=turn_ms,
        model_ms=dict(extra.get("model_ms") or {}),
        stages_ms=dict(extra.get("stages_ms") or {}),
        input_tokens=usage.input_tokens if usage else 0,
        cached_tokens=usage.input_tokens_details.cached_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        answer="function_call" if call else "message",
        call=call,
        output_items=[item.model_dump(mode="json", exclude_none=True) for item in response.output]
        if keep_output
        else [],
    )


def _failure(event: Any) -> LoopError:
    if getattr(event, "type", "") == "error":
        return LoopError(f"error event: {getattr(event, 'error', event)}")
    response = getattr(event, "response", None)
    return LoopError(f"{event.type}: {getattr(response, 'error', None) or event}")


# -- the sessions: one agent loop's transport -----------------------------------------------


class Session:
    """Sends one turn's new items and returns what the client observed."""

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def send(self, turn: int, new_items: list[dict[str, Any]]) -> Turn:
        raise NotImplementedError


class HttpSession(Session):
    """``responses.create(stream=True)``; chained with ``previous_response_id`` or, when
    ``stateless``, re-sending the whole history."""

    def __init__(self, client, rollout: Rollout, model: str, pipeline: str, stateless: bool):
        self.client = client
        self.rollout = rollout
        self.model = model
        self.headers = {PIPELINE_HEADER: pipeline}
        self.stateless = stateless
        self.previous_id: str | None = None
        self.history: list[dict[str, Any]] = []

    async def send(self, turn: int, new_items: list[dict[str, Any]]) -> Turn:
        body: dict[str, Any] = {"model": self.model, **self.rollout.request_options()}
        if self.stateless:
            self.history += new_items
            body["input"] = self.history
        else:
            body["input"] = new_items
            if self.previous_id:
                body["previous_response_id"] = self.previous_id
        start = time.perf_counter()
        ttft_ms = None
        terminal = None
        stream = await self.client.responses.create(**body, stream=True, extra_headers=self.headers)
        send_ms = _ms(start)
        async for event in stream:
            kind = event.type
            if ttft_ms is None and kind.endswith(".delta"):
                ttft_ms = _ms(start)
            elif kind in TERMINAL:
                turn_ms = _ms(start)
                terminal = event
                # The stream ends right after; reading on releases the connection.
        if terminal is None:
            raise LoopError(f"turn {turn}: the stream ended without a terminal event")
        if terminal.type != "response.completed":
            raise _failure(terminal)
        result = _turn_from_response(
            turn, terminal.response, ttft_ms or turn_ms, turn_ms, keep_output=self.stateless
        )
        result.send_ms = send_ms
        self.previous_id = terminal.response.id
        if self.stateless:
            self.history += result.output_items
        return result


class WsSession(Session):
    """One ``client.responses.connect()`` socket for the whole loop."""

    def __init__(self, client, rollout: Rollout, model: str, pipeline: str):
        self.client = client
        self.rollout = rollout
        self.model = model
        self.headers = {PIPELINE_HEADER: pipeline}
        self.previous_id: str | None = None
        # The SDK's connection manager and connection: ``client`` is not annotated.
        self._manager: Any = None
        self.conn: Any = None

    async def open(self) -> None:
        self._manager = self.client.responses.connect(extra_headers=self.headers)
        self.conn = await self._manager.__aenter__()

    async def close(self) -> None:
        if self._manager is not None:
            await self._manager.__aexit__(None, None, None)
            self._manager = self.conn = None

    async def send(self, turn: int, new_items: list[dict[str, Any]]) -> Turn:
        body: dict[str, Any] = {
            "model": self.model,
            **self.rollout.request_options(),
            "input": new_items,
        }
        if self.previous_id:
            body["previous_response_id"] = self.previous_id
        start = time.perf_counter()
        ttft_ms = None
        await self.conn.response.create(**body)
        send_ms = _ms(start)
        async for event in self.conn:
            kind = event.type
            if ttft_ms is None and kind.endswith(".delta"):
                ttft_ms = _ms(start)
            elif kind in TERMINAL:
                turn_ms = _ms(start)
                if kind != "response.completed":
                    raise _failure(event)
                self.previous_id = event.response.id
                result = _turn_from_response(turn, event.response, ttft_ms or turn_ms, turn_ms)
                result.send_ms = send_ms
                return result
        raise LoopError(f"turn {turn}: the socket closed before the terminal event")


class InjectSession(WsSession):
    """One multi_agent response for the whole loop: the first turn creates it, each
    later one injects the tool output (and the nudge) into it."""

    def __init__(self, client, rollout: Rollout, model: str, pipeline: str):
        super().__init__(client, rollout, model, pipeline)
        self.headers = {**self.headers, **MULTI_AGENT_BETA}
        self.response_id: str | None = None
        self.turns: list[Turn] = []

    async def open(self) -> None:
        self._manager = self.client.beta.responses.connect(extra_headers=self.headers)
        self.conn = await self._manager.__aenter__()

    async def send(self, turn: int, new_items: list[dict[str, Any]]) -> Turn:
        start = time.perf_counter()
        if self.response_id is None:
            await self.conn.response.create(
                model=self.model,
                **self.rollout.request_options(),
                input=new_items,
                multi_agent={"enabled": True},
            )
        else:
            await self.conn.response.inject(response_id=self.response_id, input=new_items)
        send_ms = _ms(start)
        ttft_ms = None
        last = turn == self.rollout.turns
        # With calls_only the last step is a call too; the stack's inject step bound
        # (TURNPIKE_WS_INJECT_MAX_STEPS, set to the rollout's turns) then completes it.
        call: Call | None = None
        async for event in self.conn:
            kind = event.type
            if kind == "response.created":
                self.response_id = event.response.id
            elif ttft_ms is None and kind.endswith(".delta"):
                ttft_ms = _ms(start)
            elif kind == "response.inject.failed":
                raise LoopError(f"turn {turn}: inject failed: {event.error}")
            elif kind in TERMINAL:
                if kind != "response.completed":
                    raise _failure(event)
                if not last:
                    raise LoopError(f"turn {turn}: the response ended before its last step")
                result = _turn_from_response(
                    turn, event.response, ttft_ms or _ms(start), _ms(start)
                )
                # The output holds every step's calls: this turn's answer is its last item.
                result.answer = event.response.output[-1].type
                result.call = call
                result.send_ms = send_ms
                self.turns.append(result)
                self._steps(event.response)
                return result
            elif kind == "response.output_item.done" and event.item.type == "function_call":
                item = event.item
                if last and self.rollout.calls_only:
                    call = Call(item.call_id, item.name, item.arguments)
                    continue
                if last:
                    raise LoopError(f"turn {turn}: the model called a tool on the last turn")
                turn_ms = _ms(start)
                result = Turn(
                    turn=turn,
                    ttft_ms=ttft_ms or turn_ms,
                    turn_ms=turn_ms,
                    model_ms={},
                    stages_ms={},
                    input_tokens=0,
                    cached_tokens=0,
                    output_tokens=0,
                    answer="function_call",
                    send_ms=send_ms,
                    call=Call(item.call_id, item.name, item.arguments),
                )
                self.turns.append(result)
                return result
        raise LoopError(f"turn {turn}: the socket closed before the step ended")

    def _steps(self, response: Any) -> None:
        """Each turn's model time and tokens, from the response's per-step timings."""
        extra = (response.model_extra or {}).get("turnpike") or {}
        steps = extra.get("steps") or []
        if len(steps) != len(self.turns):
            raise LoopError(f"{len(steps)} steps reported for {len(self.turns)} turns")
        for turn, step in zip(self.turns, steps, strict=True):
            turn.model_ms = dict(step["model_ms"])
            turn.stages_ms = {"prepare": step["prepare_ms"]}
            turn.input_tokens = step["input_tokens"]
            turn.cached_tokens = step["cached_tokens"]
            turn.output_tokens = step["output_tokens"]


class DirectSession(Session):
    """The worker's ``Generate`` with requests built before the loop (``DirectPlan``)."""

    def __init__(self, address: str, plan):
        self.address = address
        self.plan = plan
        self.channel: grpc.aio.Channel | None = None
        self.stub: inference_pb2_grpc.InferenceStub | None = None

    async def open(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.address)
        self.stub = inference_pb2_grpc.InferenceStub(self.channel)
        await self.channel.channel_ready()

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None

    async def send(self, turn: int, new_items: list[dict[str, Any]]) -> Turn:
        request = self.plan.requests[turn - 1]
        start = time.perf_counter()
        ttft_ms = None
        started: inference_pb2.ItemStarted | None = None
        text: list[str] = []
        assert self.stub is not None  # opened
        async for event in self.stub.Generate(request):
            kind = event.WhichOneof("event")
            if kind == "delta":
                if ttft_ms is None:
                    ttft_ms = _ms(start)
                text.append(event.delta.text)
            elif kind == "item_started":
                started = event.item_started
            elif kind == "error":
                raise LoopError(
                    f"turn {turn}: worker error {event.error.code}: {event.error.message}"
                )
            elif kind == "finished":
                turn_ms = _ms(start)
                return self._turn(turn, event.finished, started, "".join(text), ttft_ms, turn_ms)
        raise LoopError(f"turn {turn}: the worker stream ended without Finished")

    def _turn(self, turn, finished, started, text, ttft_ms, turn_ms) -> Turn:
        t = finished.timings
        is_call = started is not None and started.kind == inference_pb2.ItemStarted.FUNCTION_CALL
        call = Call(started.call_id, started.name, text) if is_call else None
        expected = self.plan.answers[turn - 1]
        got = (call.name, call.arguments) if call else None
        if got != expected:
            raise LoopError(f"turn {turn}: the worker answered {got}, the plan expected {expected}")
        return Turn(
            turn=turn,
            ttft_ms=ttft_ms if ttft_ms is not None else turn_ms,
            turn_ms=turn_ms,
            model_ms={
                "queue_ms": t.queue_ms,
                "prefill_ms": t.prefill_ms,
                "decode_ms": t.decode_ms,
                "ttft_ms": t.ttft_ms,
                "total_ms": t.total_ms,
            },
            stages_ms={},
            input_tokens=finished.usage.input_tokens,
            cached_tokens=finished.usage.cached_tokens,
            output_tokens=finished.usage.output_tokens,
            answer="function_call" if call else "message",
            call=call,
        )


# -- the loop ----------------------------------------------------------------------------


async def run_loop(
    session: Session,
    rollout: Rollout,
    *,
    variant: str,
    model: str,
    tool_s: float,
    rep: int = 0,
) -> Loop:
    """The agent loop: send, "run" the called tool (``tool_s`` of sleep: the only
    simulated client time), send its output, until the last turn."""
    turns: list[Turn] = []
    cpu_start = time.process_time()
    start = time.perf_counter()
    await session.open()
    connect_ms = _ms(start)
    try:
        new_items = rollout.first_input()
        for number in range(1, rollout.turns + 1):
            turn = await session.send(number, new_items)
            turns.append(turn)
            if number == rollout.turns:
                break
            if turn.call is None:
                raise LoopError(f"turn {number}: the model answered with a message, not a call")
            if tool_s > 0:
                await asyncio.sleep(tool_s)
            new_items = rollout.follow_up_input(number + 1, turn.call.call_id, turn.call.name)
        loop_ms = _ms(start)
        client_cpu_ms = (time.process_time() - cpu_start) * 1000
    finally:
        await session.close()
    return Loop(
        variant,
        model,
        tool_s * 1000,
        rep,
        rollout.run_id,
        turns,
        loop_ms,
        connect_ms,
        client_cpu_ms,
    )
