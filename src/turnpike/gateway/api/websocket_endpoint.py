"""WebSocket transport: frames in, events out. The rules live in ``ws_protocol``; this
module only moves frames, runs responses and applies the protocol's actions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from turnpike.gateway import metrics
from turnpike.gateway.api.json_response import JSONResponse
from turnpike.gateway.api.uvicorn_protocols import CORK, DRAIN
from turnpike.gateway.api.websocket_protocol import (
    Action,
    CloseConnection,
    InjectRunning,
    SendEvent,
    StartResponse,
    WsSession,
)
from turnpike.gateway.api.websocket_steering import (
    Ended,
    SteerRunning,
    ended_from,
    successor_failed,
)
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.observability import access_log
from turnpike.gateway.observability.tracing import response_span
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.variants import Pipeline
from turnpike.gateway.protocol import injection
from turnpike.gateway.protocol.errors import ApiError, server_error, store_unavailable
from turnpike.gateway.protocol.injection import InjectInbox, InjectRefused
from turnpike.gateway.protocol.json_codec import dumps
from turnpike.gateway.protocol.steering import SteerSignal
from turnpike.gateway.state.responses import StoreUnavailable
from turnpike.gateway.tenancy.admission import connection_refused
from turnpike.gateway.upstream.sessions import ConnectionStreams
from turnpike.gateway.wiring import Gateway

log = logging.getLogger(__name__)
router = APIRouter()

# What sending on a socket the client has closed raises.
GONE = (WebSocketDisconnect, WebSocketDisconnected)
# Disconnect codes of a socket lost without a close frame (uvicorn reports 1005 then):
# the client did not choose to leave, and its stored responses go on, resumable.
DROPPED = frozenset({1005, 1006})
# A response's last event (an ``error`` comes before any response.created).
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})


class Connection:
    """One accepted socket: serialises sends, runs responses, applies actions."""

    def __init__(
        self,
        ws: WebSocket,
        gw: Gateway,
        tenant: str,
        session: WsSession,
        pipeline: Pipeline,
        streams: ConnectionStreams | None = None,
    ) -> None:
        self.ws = ws
        self.gw = gw
        self.tenant = tenant
        self.session = session
        self.pipeline = pipeline
        # The socket's session streams to safety and the tokenizer (None: calls only).
        self.streams = streams
        self.open = True
        self._send_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        # The running responses' steer signals, by response id; multi_agent ones' inboxes.
        self._signals: dict[str, SteerSignal] = {}
        self._inboxes: dict[str, InjectInbox] = {}
        # The client closed the socket itself (a close frame): its responses stop. A
        # socket lost without one leaves its stored responses running, kept (_kept).
        self.left = False
        self._kept: dict[str, ResponseEventQueue] = {}

    async def send(self, event: dict, more: bool = False) -> None:
        """Send one event; ``more``: another follows at once, and they may leave in one
        write (turnpike.gateway.api.uvicorn_protocols, CORK)."""
        if not self.open:
            return
        text = dumps(event)
        async with self._send_lock:
            try:
                if more:
                    await self.ws.send({"type": "websocket.send", "text": text, CORK: True})
                else:
                    await self.ws.send_text(text)
            except GONE:
                self.open = False

    async def close(self, code: int, reason: str) -> None:
        async with self._send_lock:
            if self.open:
                self.open = False
                try:
                    await self.ws.close(code, reason=reason)
                except GONE:
                    pass

    def leave(self) -> None:
        """The client closed the socket: stop what was kept for it meanwhile (its send
        failed before the close was read)."""
        self.left = True
        for queue in self._kept.values():
            queue.abandon()

    def record(self, access: access_log.Access) -> None:
        gw_record(self.gw, access)

    async def apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendEvent):
                if action.event["type"] == "error":  # the protocol refused a frame
                    self.record(refused_frame(self.tenant, action.event))
                await self.send(action.event)
            elif isinstance(action, StartResponse):
                task = asyncio.create_task(self._respond(action))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif isinstance(action, SteerRunning):
                # The session sees a response as running exactly while its signal is here.
                self._signals[action.response_id].accept(action.event)
            elif isinstance(action, InjectRunning):
                await self._inject(action)
            elif isinstance(action, CloseConnection):
                await self.close(action.code, action.reason)

    async def _respond(self, start: StartResponse) -> None:
        request = start.request
        lane = request.stream_id
        engine = self.gw.engine
        access = new_access("response.create", self.tenant)
        steering = SteerSignal()
        steerable: str | None = None  # the response's id once it can be steered
        ended: Ended | None = None
        inbox = InjectInbox("") if request.multi_agent else None
        try:
            ctx = RequestContext(
                self.tenant,
                self.pipeline.name,
                transport="websocket",
                connection_cache=self.session.cache,
                streams=self.streams,
                lane=lane,
                steering=steering,
                injection=inbox,
                stage_spans=self.gw.settings.trace_stages,
            )
            try:
                # The frame's size is not kept: only the output is reserved up front,
                # and the response's real usage is charged when it ends.
                limits = self.gw.keys.limits(self.tenant)
                admission = self.gw.admission.hold(self.tenant, limits, request, 0)
                async with admission as ctx.admission:
                    # One trace per response, not per connection (turnpike.gateway.observability.tracing).
                    with response_span(ctx, request.model, request.client_metadata):
                        queue = engine.start(await engine.prepare(request, ctx, self.pipeline))
            except ApiError as err:
                await self._refused(start, err, access)
                return
            except StoreUnavailable:
                await self._refused(start, store_unavailable(), access)
                return
            access.status = 200
            last: dict | None = None
            # A stored response's events as sent, for resuming it if the socket drops.
            kept_events = engine.background.buffer.max_events
            sent: deque[dict] | None = deque(maxlen=kept_events) if request.store else None
            keep: Callable[[dict], None] | None = None
            async for event in queue.events():
                if last is None:  # response.created: from now on it can be steered
                    steerable = queue.response_id
                    self._signals[steerable] = steering
                    if inbox is not None:
                        inbox.response_id = steerable
                        self._inboxes[steerable] = inbox
                    self.session.on_response_started(request, steerable)
                last = event
                if keep is not None:
                    keep(event)
                    continue
                if lane is not None:
                    event["stream_id"] = lane
                await self.send(event, more=queue.has_ready())
                if sent is not None:
                    sent.append(event)
                if not self.open:
                    if sent is None or self.left:  # the client left: stop generating for it
                        queue.abandon()
                        break
                    # Lost without a close frame: the response goes on, resumable.
                    keep = engine.background.keep(self.tenant, queue.response_id, sent)
                    self._kept[queue.response_id] = queue
            if last is not None:
                ended = await self._ended(last, steering)
        except Exception:
            log.exception("websocket response failed")
            failure = server_error("The server had an error.")
            access.failed(failure)
            await self.send(failure.ws_event(lane))
        finally:
            self.record(access)
            if steerable is not None:
                self._signals.pop(steerable)
                self._inboxes.pop(steerable, None)
                self._kept.pop(steerable, None)
                # A response whose client left (or that broke) before its end: as good
                # as cancelled, its steers returned.
                ended = ended or Ended(steerable, "cancelled", [], 0)
            await self.apply(self.session.on_response_done(request, time.monotonic(), ended))

    async def _inject(self, action: InjectRunning) -> None:
        """Commit an inject into its response, or answer why not, on the response's lane."""
        inject, lane = action.inject, action.lane
        inbox = self._inboxes.get(action.response_id)
        try:
            if inbox is None:  # it ended a moment ago: its terminal event is on its way
                raise InjectRefused(
                    "response_already_completed",
                    f"Response {inject.response_id!r} is not waiting for input any more.",
                )
            inbox.commit(inject)
        except InjectRefused as refused:
            event = injection.failed(
                refused.code,
                refused.message,
                response_id=inject.response_id,
                raw_input=inject.raw_input,
            )
            if lane is not None:
                event["stream_id"] = lane
            await self.send(event)
        except ApiError as err:
            event = err.ws_event(lane)
            self.record(refused_frame(self.tenant, event))
            await self.send(event)

    async def _ended(self, last: dict, steering: SteerSignal) -> Ended | None:
        """How the response ended (None: its client left first), once the steers
        accepted after its ending was decided have followed its terminal event (they go
        to its successor)."""
        if last["type"] not in TERMINAL:
            return None
        seq = last.get("sequence_number") or 0
        while steering.late:  # more may come while one is sent
            seq += 1
            await self.send({**steering.late.pop(0), "sequence_number": seq})
        return ended_from(last, seq)

    async def _refused(
        self, start: StartResponse, err: ApiError, access: access_log.Access
    ) -> None:
        """The response could not start: the client's create gets the error; the steers
        it was to commit are returned (a successor's are all the client gets: it sent
        no create)."""
        access.failed(err)
        lane = start.request.stream_id
        if not start.successor:
            await self.send(err.ws_event(lane))
        for event in successor_failed(start.steers, err.message, lane):
            await self.send(event)


def new_access(route: str, tenant: str) -> access_log.Access:
    return access_log.Access(access_log.new_request_id(), "websocket", route, tenant=tenant)


def refused_frame(tenant: str, event: dict) -> access_log.Access:
    access = new_access(FRAME_ROUTE, tenant)
    error = event.get("error") or {}
    access.status = event.get("status") or 400
    access.code, access.param = error.get("code"), error.get("param")
    return access


def gw_record(gw: Gateway, access: access_log.Access) -> None:
    access_log.record(access, gw.settings.access_log)


# The route of a frame the protocol refused before any response began.
FRAME_ROUTE = "websocket.frame"
UPGRADE_ROUTE = "/v1/responses"


def websocket_refused(reason: str) -> ApiError:
    """426 Upgrade Required for an upgrade the server will not take: the status on which
    Codex (and other clients that fall back) continue the session over HTTP and SSE."""
    return ApiError(
        426,
        f"{reason} Use HTTP: POST /v1/responses (with stream=true for events).",
        code="websocket_unavailable",
    )


@router.websocket("/v1/responses")
async def responses_socket(ws: WebSocket) -> None:
    gw: Gateway = ws.app.state.gateway
    access = new_access(UPGRADE_ROUTE, "-")
    access.method = "GET"
    try:
        tenant = access.tenant = gw.keys.tenant_for(ws.headers)
        pipeline = gw.pipeline_for(ws.headers, websocket=True)
        if not gw.settings.websocket_mode:
            raise websocket_refused("WebSocket mode is turned off on this server.")
        if not gw.admission.can_admit():
            # Shedding: a new socket would only queue behind the in-flight bound. 426 moves
            # Codex to HTTP for the session, where each request is admitted (or shed with
            # 503) on its own; 503 here would make it retry the upgrade until it gives up.
            raise websocket_refused("The server is at capacity for new WebSocket connections.")
        # A tenant over its own connection limit keeps 429: its other sockets work, and a
        # 429 at the upgrade is what that limit is everywhere else (Retry-After included).
        slot = await gw.admission.limiter.open_connection(tenant, gw.keys.limits(tenant))
        if slot is None:
            raise connection_refused()
    except ApiError as err:
        # Refuse the upgrade with a real HTTP status and the API's error body.
        access.failed(err)
        gw_record(gw, access)
        denial = JSONResponse(err.body(), status_code=err.status, headers=err.headers)
        await ws.send_denial_response(denial)
        return
    access.status = 101
    gw_record(gw, access)
    try:
        await serve_socket(ws, gw, tenant, pipeline)
    finally:
        await gw.admission.limiter.close_connection(slot)


async def serve_socket(ws: WebSocket, gw: Gateway, tenant: str, pipeline: Pipeline) -> None:
    await ws.accept()
    settings = gw.settings
    session = WsSession(
        default_model=settings.default_model,
        max_frame_bytes=settings.max_frame_bytes,
        max_active=settings.ws_max_active_responses,
        max_queued=settings.ws_max_queued_responses,
        max_lanes=settings.ws_max_lanes,
        cache_size=settings.ws_cache_size,
        lifetime_s=settings.ws_max_lifetime_s,
        now=time.monotonic(),
        max_input_chars=settings.max_input_chars,
        max_pending_steers=settings.ws_max_pending_steers,
        multi_agent_beta=injection.beta_enabled(ws.headers.getlist("openai-beta")),
        drain_idle_s=settings.ws_drain_idle_s,
    )
    sessions = gw.engine.res.sessions
    streams = sessions.for_socket() if sessions is not None else None
    conn = Connection(ws, gw, tenant, session, pipeline, streams)
    metrics.WEBSOCKET_CONNECTIONS.inc()
    try:
        while conn.open:
            deadline = session.deadline(time.monotonic())
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = await asyncio.wait_for(ws.receive(), timeout)
            except TimeoutError:
                await conn.apply(session.on_timer(time.monotonic()))
                continue
            if message["type"] == "websocket.disconnect":
                if message.get("code") not in DROPPED:
                    conn.leave()
                break
            if DRAIN in message:
                await conn.apply(session.on_drain(time.monotonic()))
                continue
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await conn.apply(session.on_frame(data, time.monotonic()))
    except GONE:
        pass
    finally:
        conn.open = False
        session.on_disconnect()
        metrics.WEBSOCKET_CONNECTIONS.dec()
        if streams is not None:
            assert sessions is not None  # whence the streams came
            # Responses still running (resumable, steered) ask by calls from now on.
            sessions.socket_closed(streams)
