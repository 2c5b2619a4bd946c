"""The Cerebras backend: a hosted model behind Cerebras' chat completions API, called
with Cerebras' own SDK (``AsyncCerebras``). Retries, failures, timings and cancellation
are ``chat_backend``'s; this says how to call the SDK and read what it raises.

The model id is sent as is: a model served here must be registered under Cerebras'
own id (e.g. ``gpt-oss-120b``).

Timings come from Cerebras' ``time_info`` on the last chunk (seconds -> ms):
``queue_time`` -> queue_ms, ``prompt_time`` -> prefill_ms, ``completion_time`` ->
decode_ms, ``total_time`` -> total_ms. Without it the local measurements stand in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cerebras.cloud.sdk import APIConnectionError, APIStatusError, AsyncCerebras
from turnpike.config import WorkerSettings

from worker.chat_backend import (
    ChatBackend,
    ChatStream,
    ReportedTimings,
    UpstreamError,
    body_message,
    describe,
)

# The SDK's own default; passed explicitly because the SDK would take a set-but-empty
# CEREBRAS_BASE_URL from the environment as the base URL itself.
DEFAULT_BASE_URL = "https://api.cerebras.ai"


class CerebrasBackend(ChatBackend):
    label = "Cerebras"

    def __init__(self, worker_id: str, client: AsyncCerebras, **kwargs: Any) -> None:
        super().__init__(worker_id, **kwargs)
        self._client = client

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> CerebrasBackend | None:
        """The backend, or None when no API key is configured."""
        if not settings.cerebras_api_key:
            return None
        if settings.cerebras_timeout_s <= 0:
            raise ValueError("TURNPIKE_CEREBRAS_TIMEOUT_S must be > 0")
        if settings.cerebras_max_retries < 0:
            raise ValueError("TURNPIKE_CEREBRAS_MAX_RETRIES must be >= 0")
        client = AsyncCerebras(
            api_key=settings.cerebras_api_key,
            base_url=settings.cerebras_base_url or DEFAULT_BASE_URL,
            timeout=settings.cerebras_timeout_s,
            max_retries=0,  # retries are ours (see chat_backend)
            # Its warm-up is a blocking request at construction; the first call warms.
            warm_tcp_connection=False,
        )
        return cls(settings.worker_id, client, max_retries=settings.cerebras_max_retries)

    async def aclose(self) -> None:
        await self._client.close()

    async def open_stream(self, params: dict[str, Any]) -> ChatStream:
        return await self._client.chat.completions.create(**params)

    def read_error(self, exc: Exception) -> UpstreamError | None:
        if isinstance(exc, APIStatusError):
            # An in-stream error's status is the payload's ``status_code``; the SDK
            # puts it in ``status_code`` either way.
            return UpstreamError(
                body_message(exc.body, exc.message), exc.status_code, exc.response.headers
            )
        if isinstance(exc, APIConnectionError):
            return UpstreamError(describe(exc), unreachable=True)
        return None

    def reported_timings(self, chunk: Mapping[str, Any]) -> ReportedTimings | None:
        info = chunk.get("time_info")
        if not info or not isinstance(info, Mapping):
            return None

        def ms(key: str) -> float | None:
            value = info.get(key)
            return None if value is None else float(value) * 1000

        return ReportedTimings(
            queue_ms=ms("queue_time"),
            prefill_ms=ms("prompt_time"),
            decode_ms=ms("completion_time"),
            total_ms=ms("total_time"),
        )
