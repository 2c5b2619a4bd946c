"""The live dashboard: ``GET /dashboard`` (one HTML page, no external assets) and
``GET /dashboard/data`` (the JSON it polls every two seconds).

No key is asked: both show aggregates over all tenants only, never a tenant's name or a
figure of one tenant (turnpike.gateway.observability.dashboard.sampler drops the labels as it reads them). The
page's Content-Security-Policy lets it reach nothing but this gateway.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, Response

from turnpike import metrics
from turnpike.gateway.api.json_response import JSONResponse
from turnpike.gateway.observability.dashboard.live import LiveDashboard
from turnpike.gateway.pipeline.variants import PIPELINES

PAGE = (Path(__file__).parents[1] / "observability" / "dashboard" / "page.html").read_text()


def _script_hash(page: str) -> str:
    """The CSP source of the page's one inline script."""
    script = re.search(r"<script>(.*?)</script>", page, re.DOTALL)
    assert script is not None, "page.html has its script inline"
    digest = hashlib.sha256(script.group(1).encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        f"script-src {_script_hash(PAGE)}",
        "style-src 'unsafe-inline'",
        "connect-src 'self'",
        "img-src data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
NO_STORE = {"cache-control": "no-store"}


def stage_order() -> dict[str, list[tuple[str, int]]]:
    """Each pipeline's stages in the order it runs them, with the index of their step
    (the stages of one ``Concurrently`` share it)."""
    return {
        name: [
            (stage.name, index)
            for index, step in enumerate(pipeline.steps)
            for stage in step.stages
        ]
        for name, pipeline in PIPELINES.items()
    }


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Created with the app (inside its own lifespan, so the gateway exists), idle until
    the first dashboard request."""
    gateway = app.state.gateway
    dashboard = LiveDashboard(
        lambda: metrics.registry().collect(), gateway.readiness, stage_order()
    )
    app.state.dashboard = dashboard
    try:
        yield
    finally:
        await dashboard.close()


router = APIRouter(lifespan=lifespan)


def dashboard_of(request: Request) -> LiveDashboard:
    return request.app.state.dashboard


@router.get("/dashboard")
async def page(request: Request) -> Response:
    dashboard_of(request).touch()
    return HTMLResponse(
        PAGE, headers={"content-security-policy": CONTENT_SECURITY_POLICY, **NO_STORE}
    )


@router.get("/dashboard/data")
async def data(request: Request) -> Response:
    return JSONResponse(await dashboard_of(request).data(), headers=NO_STORE)
