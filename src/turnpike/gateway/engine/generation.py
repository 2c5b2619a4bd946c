"""Generating a response on a worker: the worker's stream relayed as Responses events,
and, when a worker cannot be reached before it has streamed anything, another worker
tried (at most ``MAX_WORKER_ATTEMPTS``). Returns how the worker finished (``StepEnd``),
or the terminal events of a response that ended otherwise (failed, steered)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import grpc

from turnpike import token_bytes
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.timings import annotate
from turnpike.gateway.observability import turn_metrics
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.stages.route import pick_worker
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.response_object import usage
from turnpike.gateway.protocol.steering import CLIENT_CALLS
from turnpike.gateway.upstream.worker_stream import WorkerSilentError, worker_events
from turnpike.imageres.v1 import imageres_pb2
from turnpike.inference.v1 import inference_pb2
from turnpike.router.v1 import router_pb2

log = logging.getLogger(__name__)

# How many workers a generation may try before it fails (connection refused only).
MAX_WORKER_ATTEMPTS = 3
# The worker's answer to a continuation of a request it does not hold (inference.proto).
CONTINUATION_UNKNOWN = "continuation_unknown"


@dataclass
class Generation:
    """What generating a response found out: the worker that served it (after any
    reroute) and the model's own timings."""

    route: router_pb2.RouteDecision | None
    model_ms: dict[str, float] = field(default_factory=dict)
    worker_id: str = ""
    output_tokens: int = 0  # streamed so far (what a cancelled response is billed)
    # A rollout's (turnpike.gateway.engine.rollout): the prompt tokens of its steps so far
    # (what a cancelled one is billed; 0: the response's own prompt), and the time it
    # waited on the client's tools (neither the model's time nor the API's).
    input_tokens: int = 0
    client_ms: float = 0.0


@dataclass(frozen=True)
class StepEnd:
    """The worker finished: the usage it counted, and whether it ran out of output tokens."""

    usage: dict[str, Any]
    length: bool = False
    # The model ended without a call although tool_choice required one: (code, message).
    unmet: tuple[str, str] | None = None

    def terminal(self, events: ResponseEvents) -> list[Event]:
        """The response completed (or incomplete, out of output tokens) with this usage;
        failed, and billed, when the model ignored a tool_choice that required a call."""
        if self.unmet is not None:
            return events.failed(*self.unmet, self.usage)
        if self.length:
            return events.incomplete("max_output_tokens", self.usage)
        return [events.completed(self.usage)]


class WorkerGeneration:
    def __init__(self, res: Resources, worker_silence_s: float) -> None:
        self.res = res
        self.worker_silence_s = worker_silence_s
        # Workers that answered GenerateBatched UNIMPLEMENTED (an older version, in a
        # rolling deploy): asked by Generate.
        self.unbatched: set[str] = set()

    async def run(
        self,
        prepared: Prepared,
        generation: Generation,
        events: ResponseEvents,
        queue: ResponseEventQueue,
        save_progress: Callable[[], Awaitable[None]],
    ) -> StepEnd | list[Event]:
        """Generate the response, emitting its events to ``queue`` as they come; how the
        worker finished, or the terminal events, is returned. A background response
        calls ``save_progress`` as each output item starts and ends, so that a poll sees
        the output so far."""
        request, model, prompt = prepared.request, prepared.model, prepared.prompt
        assert model is not None and prompt is not None and prepared.conversation is not None
        excluded: list[str] = []
        whole = False  # the worker did not hold what a continuation named: send it whole
        attempt = 0
        while attempt < MAX_WORKER_ATTEMPTS:
            route = generation.route
            assert route is not None
            # Continuations only to a worker that knows them: one that answers
            # GenerateBatched (an older one would take the continuation for the whole).
            continuable = not whole and route.worker_address not in self.unbatched
            gen_request = _generate_request(prepared, route if continuable else None)
            started = False
            stream = self._worker_stream(prepared, route, gen_request)
            try:
                # aclosing: an early return (a steer, the end) cancels the worker's call now.
                async with aclosing(worker_events(stream, self.worker_silence_s)) as relayed:
                    async for event in relayed:
                        started = True
                        kind = event.WhichOneof("event")
                        if kind == "finished":
                            return _finished(prepared, generation, event.finished)
                        if kind == "error":
                            if event.error.code == CONTINUATION_UNKNOWN and gen_request.continues:
                                whole = True  # before anything was generated: ask again
                                break
                            return events.failed(
                                event.error.code or "server_error",
                                f"The model failed: {event.error.message}",
                            )
                        _relay(kind, event, prepared, generation, events, queue)
                        if request.background and kind in ("item_started", "item_done"):
                            await save_progress()
                        if kind == "item_done" and _steered(prepared):
                            use = usage(prepared.input_tokens, 0, generation.output_tokens)
                            return events.incomplete("steered", use)
                if whole and gen_request.continues:
                    continue  # the same worker, the whole request
                return events.failed("server_error", "The model stream ended unexpectedly.")
            except (grpc.aio.AioRpcError, WorkerSilentError) as err:
                # A silent worker is as good as an unavailable one: another may serve.
                code = err.code() if isinstance(err, grpc.aio.AioRpcError) else None
                if code == grpc.StatusCode.UNIMPLEMENTED and route.worker_address not in (
                    self.unbatched
                ):
                    self.unbatched.add(route.worker_address)
                    continue  # the same worker, by Generate

                reason = code.name.lower() if code is not None else str(err)
                retry = (
                    not started
                    and code in (None, grpc.StatusCode.UNAVAILABLE)
                    and attempt + 1 < MAX_WORKER_ATTEMPTS
                )
                log.warning(
                    "worker %s failed (%s); %s",
                    route.worker_id,
                    reason,
                    "rerouting" if retry else "failing the response",
                )
                if not retry:
                    return events.failed(
                        "server_error",
                        f"The inference worker failed while generating ({reason}).",
                    )
                excluded.append(route.worker_id)
                attempt += 1
                try:
                    generation.route = await pick_worker(
                        self.res.backends,
                        model.id,
                        prepared.conversation.affinity_key,
                        len(prompt.tokens),
                        exclude=excluded,
                    )
                except ApiError as api_err:
                    return events.failed("server_error", api_err.message)
        return events.failed("server_error", "No inference worker could serve the response.")

    def _worker_stream(
        self,
        prepared: Prepared,
        route: router_pb2.RouteDecision,
        gen_request: inference_pb2.GenerateRequest,
    ):
        assert prepared.policy is not None
        backends = self.res.backends
        if prepared.policy.worker_via_imageres:
            return backends.imageres.ProxyGenerate(
                imageres_pb2.ProxyGenerateRequest(
                    worker_address=route.worker_address, request=gen_request
                )
            )
        worker = backends.worker(route.worker_address)
        if route.worker_address in self.unbatched:  # a worker from before GenerateBatched
            return worker.Generate(gen_request)
        return worker.GenerateBatched(gen_request)


def _continuation(prepared: Prepared, route: router_pb2.RouteDecision | None) -> str | None:
    """The request this one may continue on ``route``'s worker (inference.proto,
    ``continues``): on a WebSocket, the parent's, when it ran on that same worker and this
    prompt was appended to its prompt. None: send the whole request."""
    parent, prompt = prepared.parent, prepared.prompt
    if route is None or parent is None or prompt is None or not parent.from_connection_cache:
        return None
    state = parent.state
    if state.route is None or state.route.worker_id != route.worker_id:
        return None
    if prompt.base is None or prompt.base is not state.rendered or prompt.truncated:
        return None
    return str(state.response["id"])


def _generate_request(
    prepared: Prepared, route: router_pb2.RouteDecision | None = None
) -> inference_pb2.GenerateRequest:
    """The worker's request: whole, or, as a continuation of its parent on ``route``'s
    worker, only what follows the parent's. On a WebSocket the worker keeps it for the
    next turn (turnpike.worker.continuations)."""
    request, model, prompt = prepared.request, prepared.model, prepared.prompt
    assert model is not None and prompt is not None and prepared.conversation is not None
    assert prepared.policy is not None
    on_socket = prepared.ctx.connection_cache is not None
    keep = on_socket and not prepared.policy.worker_via_imageres
    continues = _continuation(prepared, route) if keep else None
    items = prepared.conversation.items if prompt.kept_items is None else prompt.kept_items
    tokens = prompt.tokens
    continued_items = continued_tokens = 0
    if continues is not None:
        assert prompt.base is not None  # _continuation says so
        continued_items, continued_tokens = prompt.base.items, len(prompt.base.tokens)
        items, tokens = items[continued_items:], tokens[continued_tokens:]
    return inference_pb2.GenerateRequest(
        request_id=prepared.response_id,
        keep=keep,
        continues=continues or "",
        continued_items=continued_items,
        continued_tokens=continued_tokens,
        model=model.id,
        prompt=token_bytes.pack(tokens),
        instructions=request.instructions or "",
        items=items,
        tools=request.callable_proto_tools,
        tool_choice=request.tool_choice_name(),
        parallel_tool_calls=request.parallel_tool_calls,
        max_tool_calls=request.max_tool_calls,
        verbosity=request.verbosity,
        sampling=inference_pb2.SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            max_output_tokens=request.max_output_tokens or 0,
            seed=request.seed or 0,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
        ),
        tokens_per_second=model.tokens_per_second,
        ttft_ms=model.ttft_ms,
        prefill_tokens_per_second=model.prefill_tokens_per_second,
        backend=model.backend,
        # On the legacy path the imageres proxy resolves the images and sets this.
        image_tokens=prepared.image_tokens or 0,
        text_format=request.proto_text_format,
        reasoning_effort=(request.reasoning or {}).get("effort") or "",
        reasoning_summary=(request.reasoning or {}).get("summary") or "",
        tenant=prepared.ctx.tenant,  # scopes the worker's prefix cache
    )


def _relay(
    kind: str | None,
    event: inference_pb2.GenerateEvent,
    prepared: Prepared,
    generation: Generation,
    events: ResponseEvents,
    queue: ResponseEventQueue,
) -> None:
    """One event of the worker's stream (not its last, of ``kind``) as the Responses
    events it makes."""
    if kind == "item_started":
        started = event.item_started
        if started.kind == inference_pb2.ItemStarted.FUNCTION_CALL:
            tool = prepared.request.called_tool(started.name) or {}
            for e in events.start_function_call(
                started.call_id, started.name, tool.get("namespace"), custom=started.custom
            ):
                queue.emit(e)
        elif started.kind == inference_pb2.ItemStarted.REASONING:
            for e in events.start_reasoning():
                queue.emit(e)
        else:
            for e in events.start_message():
                queue.emit(e)
    elif kind == "delta" and event.delta.summary:
        for e in events.summary(event.delta.text):
            queue.emit(e)
    elif kind == "delta":
        ctx = prepared.ctx
        if ctx.first_token_at is None:
            turn_metrics.first_token(ctx)
            if ctx.admission is not None and ctx.first_token_at is not None:
                # The adaptive admission limit's signal (turnpike.gateway.tenancy.adaptive_limit),
                # on its clock: perf_counter's, as first_token_at.
                ctx.admission.first_token(ctx.first_token_at)
        generation.output_tokens += event.delta.tokens
        text = event.delta.text
        if queue.merge_delta(events.open_item_id, text):
            events.extend_delta(text)
        else:
            queue.emit(events.delta(text))
    elif kind == "item_done":
        for e in events.finish_item():
            queue.emit(e)
        inbox = prepared.ctx.injection
        assert prepared.response is not None
        item = prepared.response["output"][-1]
        if inbox is not None and item["type"] in CLIENT_CALLS:  # its output may be injected
            inbox.expect(item["call_id"], item["type"])


def _steered(prepared: Prepared) -> bool:
    """Whether the response stops here for a steer: one is queued, and the item that
    just ended is not a call the client must answer (the response then runs to its end
    and the steer waits for the client's tool results)."""
    signal = prepared.ctx.steering
    if signal is None or not signal.requested:
        return False
    assert prepared.response is not None
    output = prepared.response["output"]
    return bool(output) and output[-1]["type"] not in CLIENT_CALLS


def _finished(
    prepared: Prepared, generation: Generation, finished: inference_pb2.Finished
) -> StepEnd:
    """The worker's last event: its timings noted, with the usage the backend counted."""
    t = finished.timings
    generation.model_ms = {
        "queue_ms": t.queue_ms,
        "prefill_ms": t.prefill_ms,
        "decode_ms": t.decode_ms,
        "ttft_ms": t.ttft_ms,
        "total_ms": t.total_ms,
    }
    generation.worker_id = finished.worker_id
    annotate(prepared, generation)
    u = finished.usage
    assert prepared.prompt is not None
    # The backend's count is authoritative (images, a hosted model's own tokenizer).
    use = usage(
        u.input_tokens or len(prepared.prompt.tokens),
        u.cached_tokens,
        u.output_tokens,
        u.reasoning_tokens,
    )
    length = finished.finish_reason == "length"
    return StepEnd(use, length=length, unmet=None if length else _unmet_tool_choice(prepared))


def _unmet_tool_choice(prepared: Prepared) -> tuple[str, str] | None:
    """A tool_choice that required a call (``required``, or a tool by name) the model
    did not make. The simulator always follows it; a model behind a chat completions
    server may not (a chat template without tools): a clear failure, not an answer that
    looks like one."""
    choice = prepared.request.tool_choice_name()
    if choice in ("auto", "none") or not prepared.request.tools:
        return None
    assert prepared.response is not None
    if any(item["type"] in CLIENT_CALLS for item in prepared.response["output"]):
        return None
    assert prepared.model is not None
    return (
        "tool_choice_not_followed",
        f"The model {prepared.model.id!r} finished without calling a tool, although "
        f"tool_choice required one ({choice!r}). Its server may not produce tool calls for "
        "this model (a chat template without tools).",
    )
