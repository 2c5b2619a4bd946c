"""The OpenAI-compatible backend: any server that speaks the chat completions protocol
(vLLM, SGLang, llama.cpp's server, ...), called with the official ``openai`` SDK.
Retries, failures, timings and cancellation are ``chat_backend``'s; this builds the
SDK's client, names the model, and reads what the SDK raises.

Configured by the server's base URL (with its ``/v1``, as these servers document it),
an API key (a server started without one ignores it) and the model name the server
knows (``--served-model-name``); without a name, the router's model id is sent as is.

Each tenant's prompts get a ``cache_salt`` of their own (vLLM's prefix-cache isolation).
With ``calls_as_json`` a call that tool_choice requires is asked as JSON
(``calls_as_json``): for a model whose chat template makes no tool calls.

An in-stream error event reaches us as the SDK's ``APIError`` without a status; these
servers put the HTTP status in the error's ``code`` (``{"error": {"message", "type",
"code": 429}}``), so that classifies it.

Timings: llama.cpp's server puts its own on the last chunk (``timings``: ``prompt_ms``
for the prefill of the uncached part of the prompt, ``predicted_ms`` for the decode),
which then stand for prefill and decode; for a server that reports none, ours stand in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from openai import APIConnectionError, APIError, APIStatusError, AsyncOpenAI

from turnpike.config import WorkerSettings
from turnpike.worker.chat_backend import (
    ChatBackend,
    ChatStream,
    ReportedTimings,
    UpstreamError,
    body_message,
    check_limits,
    sdk_error,
)

# The SDK insists on a key; servers started without one accept any.
NO_API_KEY = "unused"


class OpenAICompatibleBackend(ChatBackend):
    label = "OpenAI-compatible server"

    def __init__(
        self,
        worker_id: str,
        client: AsyncOpenAI,
        *,
        model: str = "",
        cache_salt: bool = True,
        calls_as_json: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(worker_id, client, **kwargs)
        self.model = model  # the server's name for the model; empty: the request's
        self.cache_salt = cache_salt
        self.calls_as_json = calls_as_json

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> OpenAICompatibleBackend | None:
        """The backend, or None when no base URL is configured."""
        if not settings.openai_compat_base_url:
            return None
        check_limits(
            "TURNPIKE_OPENAI_COMPAT",
            settings.openai_compat_timeout_s,
            settings.openai_compat_max_retries,
        )
        client = AsyncOpenAI(
            api_key=settings.openai_compat_api_key or NO_API_KEY,
            base_url=settings.openai_compat_base_url,
            timeout=settings.openai_compat_timeout_s,
            max_retries=0,  # retries are ours (see chat_backend)
        )
        return cls(
            settings.worker_id,
            client,
            model=settings.openai_compat_model,
            cache_salt=settings.openai_compat_cache_salt,
            calls_as_json=settings.openai_compat_calls_as_json,
            max_retries=settings.openai_compat_max_retries,
        )

    async def open_stream(self, params: dict[str, Any]) -> ChatStream:
        if self.model:
            params = {**params, "model": self.model}
        return await super().open_stream(params)

    def tenant_params(self, tenant: str) -> dict[str, Any]:
        """vLLM's ``cache_salt``: a cached prefix is reused only by requests with the same
        salt, so one tenant's prompts are never a cache hit (cached tokens, a faster first
        token) for another. A hash, so the tenant's name stays here. Off
        (``TURNPIKE_OPENAI_COMPAT_CACHE_SALT=false``) for a server that refuses the field."""
        if not tenant or not self.cache_salt:
            return {}
        salt = hashlib.blake2b(tenant.encode(), digest_size=16, person=b"turnpike-salt").hexdigest()
        return {"extra_body": {"cache_salt": salt}}

    def reported_timings(self, chunk: Mapping[str, Any]) -> ReportedTimings | None:
        """llama.cpp's ``timings`` (ms already); queue and total stay ours."""
        info = chunk.get("timings")
        if not isinstance(info, Mapping):
            return None

        def ms(key: str) -> float | None:
            value = info.get(key)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                return None
            return float(value)

        return ReportedTimings(prefill_ms=ms("prompt_ms"), decode_ms=ms("predicted_ms"))

    def read_error(self, exc: Exception) -> UpstreamError | None:
        known = sdk_error(exc, APIStatusError, APIConnectionError)
        if known is None and isinstance(exc, APIError):  # an in-stream error event
            code = exc.body.get("code") if isinstance(exc.body, Mapping) else None
            status = code if isinstance(code, int) and not isinstance(code, bool) else None
            return UpstreamError(body_message(exc.body, exc.message), status)
        return known
