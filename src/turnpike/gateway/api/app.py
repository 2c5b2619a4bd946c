"""The FastAPI application: routes, lifespan and the HTTP edge's error handlers (every
failure leaves as the API's error shape)."""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from turnpike import runtime, telemetry
from turnpike.config import GatewaySettings
from turnpike.gateway.api import conversations as conversations_api
from turnpike.gateway.api import dashboard as dashboard_api
from turnpike.gateway.api import edge_shedding
from turnpike.gateway.api import http_endpoints as http_api
from turnpike.gateway.api import openapi as openapi_api
from turnpike.gateway.api import websocket_endpoint as ws_api
from turnpike.gateway.api.json_response import JSONResponse
from turnpike.gateway.api.lame_duck import lame_duck_on_sigterm
from turnpike.gateway.observability import access_log
from turnpike.gateway.observability.tracing import FASTAPI_TELEMETRY
from turnpike.gateway.observability.turn_metrics import OVERHEAD_HEADER
from turnpike.gateway.protocol.errors import ApiError, invalid, server_error, store_unavailable
from turnpike.gateway.state.responses import StoreUnavailable
from turnpike.gateway.tenancy.tenants import reload_on_sighup
from turnpike.gateway.wiring import Gateway

log = logging.getLogger(__name__)

OVERHEAD_HEADER_BYTES = OVERHEAD_HEADER.encode()


def create_app(settings: GatewaySettings | None = None) -> FastAPI:
    settings = settings or GatewaySettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        telemetry.setup_tracing("gateway")
        gateway = Gateway.build(settings)
        await gateway.start()
        app.state.gateway = gateway
        runtime.tune_gc()  # start-up is done: what it built is long-lived
        draining = lame_duck_on_sigterm(settings.shutdown_delay_s, gateway.start_draining)
        with reload_on_sighup(gateway.keys), draining:  # the tenants file, re-read
            yield
        await gateway.stop()
        telemetry.shutdown_tracing()

    app = FastAPI(
        title="Turnpike",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # ours is assembled from the spec (turnpike.gateway.api.openapi)
        telemetry=FASTAPI_TELEMETRY,
    )
    app.include_router(http_api.router)
    app.include_router(ws_api.router)
    app.include_router(dashboard_api.router)
    app.include_router(conversations_api.router)
    app.include_router(openapi_api.router)

    def error_response(err: ApiError, request: Request) -> JSONResponse:
        # For the access line (EdgeMiddleware): routing shares the one scope.
        request.scope[ERROR_SCOPE_KEY] = (err.code, err.param)
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(ApiError)
    async def on_api_error(request: Request, err: ApiError) -> JSONResponse:
        return error_response(err, request)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        message = {
            404: f"Invalid URL ({request.method} {request.url.path}).",
            405: f"Method {request.method} is not allowed on {request.url.path}.",
        }.get(err.status_code, str(err.detail))
        return error_response(ApiError(err.status_code, message, code=code), request)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(invalid(str(err), None, "invalid_request"), request)

    @app.exception_handler(StoreUnavailable)
    async def on_store_unavailable(request: Request, err: StoreUnavailable) -> JSONResponse:
        return error_response(store_unavailable(), request)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(server_error(), request)

    app.add_middleware(EdgeMiddleware, log_lines=settings.access_log)
    return app


# Where an error handler leaves the error's (code, param) for the access line.
ERROR_SCOPE_KEY = "turnpike.error"
EVENT_STREAM = b"text/event-stream"


class EdgeMiddleware:
    """Every HTTP request at the edge: adds ``x-request-id`` to its response (the SDK
    exposes it as ``request_id``) and ``x-turnpike-overhead-ms`` where the handler did
    not (the time until the headers left, all of it API time; a create response sets
    its own, without the model's time), and records it once its body has left
    (``turnpike.gateway.observability.access_log``). A create that overload shedding refuses
    is answered here, before routing reads its body (``turnpike.gateway.api.edge_shedding``).
    Plain ASGI, so streamed bodies pass through untouched."""

    def __init__(self, app, log_lines: bool = True) -> None:
        self.app = app
        self.log_lines = log_lines

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        access = access_log.Access(
            access_log.new_request_id(), "http", access_log.UNMATCHED, scope["method"]
        )
        request_id = access.request_id.encode()

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                access.status = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", request_id)]
                overhead_set = False
                for name, value in headers:
                    if name == OVERHEAD_HEADER_BYTES:
                        overhead_set = True
                    elif name == b"content-type" and value.startswith(EVENT_STREAM):
                        access.transport = "sse"
                if not overhead_set:
                    elapsed_ms = (time.perf_counter() - access.started) * 1000
                    headers.append((OVERHEAD_HEADER_BYTES, f"{elapsed_ms:.3f}".encode()))
                message["headers"] = headers
            await send(message)

        try:
            if (shed := edge_shedding.refusal(scope)) is not None:
                access.route = edge_shedding.CREATE_PATH
                scope[ERROR_SCOPE_KEY] = (shed.code, shed.param)
                answer = JSONResponse(shed.body(), status_code=shed.status, headers=shed.headers)
                await answer(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            self.record(scope, access)

    def record(self, scope, access: access_log.Access) -> None:
        """Count the request and write its line (what routing and the handlers left in
        ``scope``: the route, the error)."""
        if (route := scope.get("route")) is not None:
            access.route = route.path
        if (error := scope.get(ERROR_SCOPE_KEY)) is not None:
            access.code, access.param = error
        if self.log_lines:  # only the line names the tenant
            access.tenant = tenant_of(scope)
        access_log.record(access, self.log_lines)


def tenant_of(scope) -> str:
    """The caller's tenant for the access line, or "-" (no key, an unknown one)."""
    app = scope.get("app")
    gateway = getattr(getattr(app, "state", None), "gateway", None)
    if gateway is None:
        return "-"
    try:
        return gateway.keys.tenant_for(Headers(scope=scope))
    except ApiError:
        return "-"
