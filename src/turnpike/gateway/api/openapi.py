"""``GET /openapi.json``: the gateway's OpenAPI document, without a key (as /healthz).

A static file beside this module, assembled from the Open Responses schemas by
``scripts/gen_openapi.py`` (``make openapi``): the handlers read raw bodies, so FastAPI
could not describe them. Read once, on the first request, and served as it is.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

DOCUMENT_PATH = Path(__file__).with_name("openapi.json")

router = APIRouter()


@cache
def document_bytes() -> bytes:
    return DOCUMENT_PATH.read_bytes()


@router.get("/openapi.json")
async def openapi_document() -> Response:
    return Response(document_bytes(), media_type="application/json")
