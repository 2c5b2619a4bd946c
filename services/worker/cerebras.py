"""The Cerebras backend: a hosted model behind Cerebras' OpenAI-compatible chat API,
called with Cerebras' own SDK (``AsyncCerebras``), streamed into the Inference contract.
The request and chunk mapping is ``chat_mapping``; this module does the I/O.

The model id is sent as is: a model served here must be registered under Cerebras'
own id (e.g. ``gpt-oss-120b``).

Rate limits: the SDK's own retry is off (``max_retries=0``). It would also retry 5xx
and connection failures without telling us, and it ignores a ``retry-after`` above 60 s
in favour of its own (shorter) backoff. Here only a 429 that arrives before any output
(an HTTP 429, or an in-stream error with status 429 before the first delta) is retried,
at most ``max_retries`` times. Each wait is what the backend asked (``retry-after-ms``,
else ``retry-after`` in seconds or as an HTTP date) capped at ``max_retry_delay_s``;
without either header, 0.5 s doubling per retry (same cap, 25% jitter). So a request
spends at most ``max_retries * max_retry_delay_s`` waiting.

Failures, each as exactly one Error event:

- 401: ``backend_auth_failed`` (not retryable);
- 429 after the retries: ``rate_limited`` (retryable);
- 408, 5xx, connection failures and timeouts: ``backend_unavailable`` (retryable);
- any other 4xx: ``backend_rejected`` with the backend's message (not retryable);
- the stream breaks (an in-stream ``error`` payload, a dropped connection, a malformed
  or unfinished stream) after output began: the open item gets its ItemDone, then
  ``backend_stream_error`` (not retryable: output was delivered). Before any output,
  an in-stream error is classified by its ``status_code`` as above, and a broken
  stream is a retryable ``backend_stream_error``.

Timings come from Cerebras' ``time_info`` (seconds -> ms): ``queue_time`` -> queue_ms,
``prompt_time`` -> prefill_ms, ``completion_time`` -> decode_ms, ``total_time`` ->
total_ms. ``ttft_ms`` is measured here, from receiving the request to the first
Delta. Without ``time_info`` the local measurements stand in (queue 0).

Cancellation: a caller that goes away closes the upstream HTTP stream (the generator's
``finally``), so the backend stops generating for nobody.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from cerebras.cloud.sdk import APIConnectionError, APIStatusError, AsyncCerebras
from turnpike.config import WorkerSettings
from turnpike.inference.v1 import inference_pb2 as pb

from worker.backends import InvalidRequestError, error_event
from worker.chat_mapping import ChunkMapper, MappingError, StreamProtocolError, chat_params

log = logging.getLogger(__name__)

# The SDK's own default; passed explicitly because the SDK would take a set-but-empty
# CEREBRAS_BASE_URL from the environment as the base URL itself.
DEFAULT_BASE_URL = "https://api.cerebras.ai"
MAX_RETRY_DELAY_S = 10.0
INITIAL_BACKOFF_S = 0.5


@dataclass(frozen=True)
class Failure:
    code: str
    message: str
    retryable: bool
    rate_limited: bool = False
    retry_after_s: float | None = None


class CerebrasBackend:
    def __init__(
        self,
        worker_id: str,
        client: AsyncCerebras,
        *,
        max_retries: int = 3,
        max_retry_delay_s: float = MAX_RETRY_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("the Cerebras max retries must be >= 0")
        self.worker_id = worker_id
        self.max_retries = max_retries
        self.max_retry_delay_s = max_retry_delay_s
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()

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
            max_retries=0,  # retries are ours (see the module docstring)
            # Its warm-up is a blocking request at construction; the first call warms.
            warm_tcp_connection=False,
        )
        return cls(settings.worker_id, client, max_retries=settings.cerebras_max_retries)

    async def aclose(self) -> None:
        await self._client.close()

    async def generate(self, request: pb.GenerateRequest) -> AsyncIterator[pb.GenerateEvent]:
        received = self._clock()
        try:
            params = chat_params(request)
        except MappingError as exc:
            raise InvalidRequestError(str(exc)) from exc
        mapper = ChunkMapper(
            fallback_input_tokens=len(request.prompt_tokens) + max(0, request.image_tokens)
        )
        first_delta = last_delta = None
        retries = 0
        while True:
            failure: Failure | None = None
            stream = None
            try:
                stream = await self._client.chat.completions.create(
                    **params, stream=True, stream_options={"include_usage": True}
                )
                async for chunk in stream:
                    for event in mapper.feed(_as_dict(chunk)):
                        if event.HasField("delta"):
                            last_delta = self._clock()
                            if first_delta is None:
                                first_delta = last_delta
                        yield event
            except Exception as exc:  # every failure becomes one Error event
                failure = self._failure(exc, output_began=mapper.emitted)
            finally:
                if stream is not None:
                    await stream.close()  # also when the caller cancels or goes away
            if failure is None:
                break
            if failure.rate_limited and retries < self.max_retries:
                delay = self._retry_delay(retries, failure.retry_after_s)
                retries += 1
                log.info(
                    "%s: rate limited by Cerebras; retry %d/%d in %.2fs",
                    request.request_id,
                    retries,
                    self.max_retries,
                    delay,
                )
                await self._sleep(delay)
                continue
            log.warning("%s: %s: %s", request.request_id, failure.code, failure.message)
            for event in mapper.abort():
                yield event
            if failure.rate_limited:
                failure = Failure(
                    "rate_limited",
                    f"{failure.message} (still rate limited after {retries} retries)",
                    retryable=True,
                )
            yield _error(failure)
            return

        try:
            closing, reason, usage = mapper.finish()
        except StreamProtocolError as exc:
            for event in mapper.abort():
                yield event
            yield _error(_stream_failure(str(exc), output_began=mapper.emitted))
            return
        for event in closing:
            yield event
        done = self._clock()
        yield pb.GenerateEvent(
            finished=pb.Finished(
                finish_reason=reason,
                usage=usage,
                timings=_timings(mapper.time_info, received, first_delta, last_delta, done),
                worker_id=self.worker_id,
            )
        )

    def _failure(self, exc: Exception, *, output_began: bool) -> Failure:
        if output_began:
            message = _backend_message(exc) if isinstance(exc, APIStatusError) else _describe(exc)
            return _stream_failure(message, output_began=True)
        if isinstance(exc, APIStatusError):
            return classify_status(exc.status_code, _backend_message(exc), exc.response.headers)
        if isinstance(exc, APIConnectionError):
            return Failure(
                "backend_unavailable", f"Cerebras could not be reached: {_describe(exc)}", True
            )
        if isinstance(exc, StreamProtocolError | httpx.HTTPError | ValueError):
            # A stream that broke before any output (ValueError: undecodable JSON).
            return _stream_failure(_describe(exc), output_began=False)
        log.error("unexpected failure calling Cerebras", exc_info=exc)
        return Failure("backend_unavailable", f"The Cerebras call failed: {_describe(exc)}", True)

    def _retry_delay(self, retries_done: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(max(0.0, retry_after_s), self.max_retry_delay_s)
        backoff = min(INITIAL_BACKOFF_S * 2**retries_done, self.max_retry_delay_s)
        return backoff * (1 - 0.25 * self._rng.random())


def classify_status(status: int, message: str, headers: Mapping[str, str]) -> Failure:
    if status == 429:
        return Failure(
            "rate_limited",
            f"Cerebras rate limit: {message}",
            retryable=True,
            rate_limited=True,
            retry_after_s=parse_retry_after(headers),
        )
    if status == 401:
        return Failure(
            "backend_auth_failed", f"Cerebras rejected the API key (401): {message}", False
        )
    if status == 408 or status >= 500:
        return Failure("backend_unavailable", f"Cerebras failed ({status}): {message}", True)
    return Failure(
        "backend_rejected", f"Cerebras rejected the request ({status}): {message}", False
    )


def parse_retry_after(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> float | None:
    """Seconds the backend asks us to wait: ``retry-after-ms``, else ``retry-after`` as
    seconds or an HTTP date. None when absent or unreadable."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


def _stream_failure(message: str, *, output_began: bool) -> Failure:
    when = "after output began" if output_began else "before any output"
    return Failure(
        "backend_stream_error",
        f"The Cerebras stream broke {when}: {message}",
        retryable=not output_began,
    )


def _backend_message(exc: APIStatusError) -> str:
    # The SDK keeps the body's "error" object when there is one (in-stream errors).
    body = exc.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return body["message"]
    if isinstance(body, str) and body:
        return body
    return exc.message


def _describe(exc: BaseException) -> str:
    text = str(exc)
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({cause})" if text else str(cause)
    return text or type(exc).__name__


def _as_dict(chunk: Any) -> dict[str, Any]:
    return chunk.to_dict() if hasattr(chunk, "to_dict") else dict(chunk)


def _timings(
    time_info: Mapping[str, Any] | None,
    received: float,
    first_delta: float | None,
    last_delta: float | None,
    done: float,
) -> pb.Timings:
    first = done if first_delta is None else first_delta
    last = done if last_delta is None else last_delta
    ttft_ms = (first - received) * 1000
    info = time_info or {}

    def ms(key: str, local: float) -> float:
        value = info.get(key)
        return local if value is None else float(value) * 1000

    return pb.Timings(
        queue_ms=ms("queue_time", 0.0),
        prefill_ms=ms("prompt_time", ttft_ms),
        decode_ms=ms("completion_time", (last - first) * 1000),
        ttft_ms=ttft_ms,
        total_ms=ms("total_time", (done - received) * 1000),
    )


def _error(failure: Failure) -> pb.GenerateEvent:
    return error_event(failure.code, failure.message, retryable=failure.retryable)
