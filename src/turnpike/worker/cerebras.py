"""The Cerebras backend: a hosted model behind Cerebras' chat completions API, called
with Cerebras' own SDK (``AsyncCerebras``). Retries, failures, timings and cancellation
are ``chat_backend``'s; this builds the SDK's client and reads what it raises.

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
from turnpike.worker.chat_backend import (
    ChatBackend,
    ReportedTimings,
    UpstreamError,
    check_limits,
    sdk_error,
)

# The SDK's own default; passed explicitly because the SDK would take a set-but-empty
# CEREBRAS_BASE_URL from the environment as the base URL itself.
DEFAULT_BASE_URL = "https://api.cerebras.ai"


class CerebrasBackend(ChatBackend):
    label = "Cerebras"

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> CerebrasBackend | None:
        """The backend, or None when no API key is configured."""
        if not settings.cerebras_api_key:
            return None
        check_limits(
            "TURNPIKE_CEREBRAS", settings.cerebras_timeout_s, settings.cerebras_max_retries
        )
        client = AsyncCerebras(
            api_key=settings.cerebras_api_key,
            base_url=settings.cerebras_base_url or DEFAULT_BASE_URL,
            timeout=settings.cerebras_timeout_s,
            max_retries=0,  # retries are ours (see chat_backend)
            # Its warm-up is a blocking request at construction; the first call warms.
            warm_tcp_connection=False,
        )
        return cls(settings.worker_id, client, max_retries=settings.cerebras_max_retries)

    def read_error(self, exc: Exception) -> UpstreamError | None:
        # An in-stream error is an APIStatusError too: the SDK takes its status from
        # the payload's ``status_code``.
        return sdk_error(exc, APIStatusError, APIConnectionError)

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
