"""WebSocket adapter: frames in, events out; the rules live in ws_protocol."""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from gateway.errors import ApiError, server_error
from gateway.gateway_core import Gateway, dumps
from gateway.request import CreateRequest
from gateway.tracing import response_span
from gateway.ws_protocol import SendEvent, StartResponse, WsSession

log = logging.getLogger(__name__)
router = APIRouter()

# Close codes: 1000 normal end; 1001 going away (the SDK reconnects on it).
CLOSE_GOING_AWAY = 1001


class Connection:
    """One accepted socket: serialises sends, runs responses, applies actions."""

    def __init__(
        self, ws: WebSocket, gw: Gateway, tenant: str, session: WsSession, pipeline
    ) -> None:
        self.ws = ws
        self.gw = gw
        self.tenant = tenant
        self.session = session
        self.pipeline = pipeline
        self.open = True
        self._send_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()
        self.idle.set()

    async def send(self, event: dict) -> None:
        if not self.open:
            return
        text = dumps(event)
        async with self._send_lock:
            try:
                await self.ws.send_text(text)
            except (WebSocketDisconnect, RuntimeError):
                self.open = False

    async def apply(self, actions) -> None:
        for action in actions:
            if isinstance(action, SendEvent):
                await self.send(action.event)
            elif isinstance(action, StartResponse):
                self.idle.clear()
                task = asyncio.create_task(self._respond(action.request))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _respond(self, request: CreateRequest) -> None:
        lane = request.stream_id
        try:
            ctx = self.gw.context(
                self.tenant, self.pipeline, connection_cache=self.session.cache, lane=lane
            )
            try:
                # One trace per response, not per connection (gateway.tracing).
                with response_span(ctx, "websocket", request.model):
                    run = self.gw.engine.start(await self.gw.engine.prepare(request, ctx))
            except ApiError as err:
                await self.send(err.ws_event(lane))
                return
            async for event in run.events():
                if lane is not None:
                    event["stream_id"] = lane
                await self.send(event)
        except Exception:
            log.exception("websocket response failed")
            await self.send(server_error("The server had an error.").ws_event(lane))
        finally:
            await self.apply(self.session.on_response_done(request))
            if self.session.idle:
                self.idle.set()


@router.websocket("/v1/responses")
async def responses_socket(ws: WebSocket) -> None:
    gw: Gateway = ws.app.state.gateway
    try:
        tenant = gw.keys.tenant_for(ws.headers)
        pipeline = gw.pipeline_for(ws.headers, websocket=True)
    except ApiError as err:
        # Refuse the upgrade with a real HTTP status and the API's error body.
        await ws.send_denial_response(JSONResponse(err.body(), status_code=err.status))
        return
    await ws.accept()
    settings = gw.settings
    session = WsSession(
        default_model=settings.default_model,
        max_frame_bytes=settings.max_frame_bytes,
        max_active=settings.ws_max_active_responses,
        max_lanes=settings.ws_max_lanes,
        cache_size=settings.ws_cache_size,
    )
    conn = Connection(ws, gw, tenant, session, pipeline)
    deadline = time.monotonic() + settings.ws_max_lifetime_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not session.expired:
                session.expired = True
            if session.expired and session.idle:
                await ws.close(
                    CLOSE_GOING_AWAY,
                    reason=f"connection lifetime of {int(settings.ws_max_lifetime_s)}s reached",
                )
                break
            timeout = remaining if remaining > 0 else 0.5
            try:
                message = await asyncio.wait_for(ws.receive(), timeout=timeout)
            except TimeoutError:
                continue
            if message["type"] == "websocket.disconnect":
                break
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await conn.apply(session.on_frame(data))
    except WebSocketDisconnect:
        pass
    finally:
        conn.open = False
