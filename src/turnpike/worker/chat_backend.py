"""A backend behind a chat completions API (Cerebras, or any OpenAI-compatible server),
streamed into the Inference contract. This is what every such backend does the same
way; a subclass builds its SDK's client and reads its SDK's exceptions (and any timings
the backend reports). The request and chunk mapping is ``chat_request`` and ``chat_stream`` (pure).

Rate limits: the SDKs' own retry is off (``max_retries=0`` on the client). It would
also retry 5xx and connection failures without telling us, and it ignores a
``retry-after`` above 60 s in favour of its own (shorter) backoff. Here only a 429 that
arrives before any output (an HTTP 429, or an in-stream error with status 429 before
the first delta) is retried, at most ``max_retries`` times. Each wait is what the
backend asked (``retry-after-ms``, else ``retry-after`` in seconds or as an HTTP date)
capped at ``max_retry_delay_s``; without either header, 0.5 s doubling per retry (same
cap, 25% jitter). So a request spends at most ``max_retries * max_retry_delay_s``
waiting.

Failures, each as exactly one Error event:

- 401: ``backend_auth_failed`` (not retryable);
- 429 after the retries: ``rate_limited`` (retryable);
- 408, 5xx, connection failures and timeouts: ``backend_unavailable`` (retryable);
- any other 4xx: ``backend_rejected`` with the backend's message (not retryable);
- the stream breaks (an in-stream ``error`` payload, a dropped connection, a malformed
  or unfinished stream) after output began: the open item gets its ItemDone, then
  ``backend_stream_error`` (not retryable: output was delivered). Before any output,
  an in-stream error with a status is classified by it as above, and any other broken
  stream is a retryable ``backend_stream_error``.

Timings are measured here: ``ttft_ms`` from receiving the request to the first Delta
(also the prefill time), decode from the first to the last Delta, total to the end,
queue 0. A backend that reports its own (Cerebras' ``time_info``) overrides queue,
prefill, decode and total; ``ttft_ms`` is always ours.

Cancellation: a caller that goes away closes the upstream HTTP stream (the generator's
``finally``), so the backend stops generating for nobody.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import httpx

from turnpike import token_bytes
from turnpike.config import ConfigError
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.backends import InvalidRequestError, error_event
from turnpike.worker.calls_as_json import CallChunks, as_json_call, required_tools
from turnpike.worker.chat_request import MappingError, call_limit, chat_params
from turnpike.worker.chat_stream import ChunkMapper, StreamProtocolError

log = logging.getLogger(__name__)

MAX_RETRY_DELAY_S = 10.0
INITIAL_BACKOFF_S = 0.5


class ChatStream(Protocol):
    """What both SDKs' ``AsyncStream`` offer: chunks, and a way to hang up."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def close(self) -> None: ...


class ChatClient(Protocol):
    """What both SDKs' async clients offer: ``chat.completions.create`` and ``close``."""

    @property
    def chat(self) -> Any: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class UpstreamError:
    """An SDK's exception as this module needs it, read by the backend's class."""

    message: str
    # The HTTP status, or the status an in-stream error carries; None when it has none.
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    unreachable: bool = False  # no answer at all: connection refused, timed out


@dataclass(frozen=True)
class ReportedTimings:
    """Timings a backend reports itself (ms); None where it reports nothing."""

    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    total_ms: float | None = None


@dataclass(frozen=True)
class Failure:
    code: str
    message: str
    retryable: bool
    rate_limited: bool = False
    retry_after_s: float | None = None
    # The server never answered (no connection, or one it had closed): nothing generated.
    unanswered: bool = False


class ChatBackend(ABC):
    """``generate`` for a chat completions backend. A subclass sets ``label``, builds its
    SDK's client (``from_settings``) and reads its SDK's errors (``read_error``)."""

    label: ClassVar[str]  # names the backend in error messages and logs ("Cerebras")
    # A required call asked as a json_schema response format (calls_as_json): for a
    # server whose model's template makes no tool calls.
    calls_as_json: bool = False

    def __init__(
        self,
        worker_id: str,
        client: ChatClient,
        *,
        max_retries: int = 3,
        max_retry_delay_s: float = MAX_RETRY_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"the {self.label} max retries must be >= 0")
        self.worker_id = worker_id
        self.max_retries = max_retries
        self.max_retry_delay_s = max_retry_delay_s
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()

    # -- what a backend says ---------------------------------------------------------

    @abstractmethod
    def read_error(self, exc: Exception) -> UpstreamError | None:
        """What the SDK's exception says; None for an exception that is not the SDK's."""

    def tenant_params(self, tenant: str) -> dict[str, Any]:
        """What keeps this tenant's prompts apart on the server (its caches), if the
        server takes anything for that."""
        return {}

    def reported_timings(self, chunk: Mapping[str, Any]) -> ReportedTimings | None:
        """Timings the backend put in this chunk, if it reports any."""
        return None

    async def open_stream(self, params: dict[str, Any]) -> ChatStream:
        """The SDK's call (``params`` ask for a stream)."""
        return await self._client.chat.completions.create(**params)

    async def aclose(self) -> None:
        await self._client.close()

    # -- the stream ------------------------------------------------------------------

    async def generate(self, request: pb.GenerateRequest) -> AsyncGenerator[pb.GenerateEvent, None]:
        received = self._clock()
        try:
            params = chat_params(request)
        except MappingError as exc:
            raise InvalidRequestError(str(exc)) from exc
        forced = required_tools(request) if self.calls_as_json else None
        if forced:
            params = as_json_call(params, forced)
        params |= {"stream": True, "stream_options": {"include_usage": True}}
        params |= self.tenant_params(request.tenant)
        mapper = ChunkMapper(
            fallback_input_tokens=token_bytes.count(request.prompt) + max(0, request.image_tokens),
            max_tool_calls=call_limit(request),
            custom_tool_names=frozenset(t.name for t in request.tools if t.custom),
        )
        reported: ReportedTimings | None = None
        first_delta = last_delta = None
        retries = 0
        resent = False
        while True:
            failure: Failure | None = None
            stream = None
            held = CallChunks(forced) if forced else None  # a try's own: retries start over
            try:
                stream = await self.open_stream(params)
                async for raw in stream:
                    chunk = _as_dict(raw)
                    reported = self.reported_timings(chunk) or reported
                    if held is not None:
                        chunk = held.feed(chunk)
                    for event in mapper.feed(chunk):
                        if event.HasField("delta"):
                            last_delta = self._clock()
                            if first_delta is None:
                                first_delta = last_delta
                        yield event
            except Exception as exc:  # every failure becomes one Error event
                failure = self._redacted(
                    self._failure(exc, opened=stream is not None, output=mapper.emitted)
                )
            finally:
                if stream is not None:
                    await stream.close()  # also when the caller cancels or goes away
            if failure is None:
                break
            if failure.unanswered and not resent:
                # No answer at all, e.g. a pooled connection the server had closed while
                # idle ("Server disconnected without sending a response", llama.cpp's
                # server): nothing was generated, so it is sent once more at once.
                resent = True
                log.info("%s: %s: sent again once", request.request_id, failure.message)
                continue
            if failure.rate_limited and retries < self.max_retries:
                delay = self._retry_delay(retries, failure.retry_after_s)
                retries += 1
                log.info(
                    "%s: rate limited by %s; retry %d/%d in %.2fs",
                    request.request_id,
                    self.label,
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
            yield _error(self._stream_failure(str(exc), output_began=mapper.emitted))
            return
        for event in closing:
            yield event
        done = self._clock()
        yield pb.GenerateEvent(
            finished=pb.Finished(
                finish_reason=reason,
                usage=usage,
                timings=_timings(reported, received, first_delta, last_delta, done),
                worker_id=self.worker_id,
            )
        )

    # -- failures --------------------------------------------------------------------

    def _redacted(self, failure: Failure) -> Failure:
        """The failure without this backend's API key: some servers quote the key they
        were sent in their 401 message, and the message goes to the log, the trace and
        the client."""
        key = getattr(self._client, "api_key", None)
        if not isinstance(key, str) or len(key) < 4 or key not in failure.message:
            return failure
        return replace(failure, message=failure.message.replace(key, "[redacted]"))

    def _failure(self, exc: Exception, *, opened: bool, output: bool) -> Failure:
        upstream = self.read_error(exc)
        if output:
            return self._stream_failure(
                upstream.message if upstream else describe(exc), output_began=True
            )
        if upstream is not None and upstream.status is not None:
            return self.classify_status(upstream.status, upstream.message, upstream.headers)
        if upstream is not None and upstream.unreachable and not opened:
            return Failure(
                "backend_unavailable",
                f"{self.label} could not be reached: {upstream.message}",
                True,
                unanswered=True,
            )
        if upstream is not None or isinstance(
            exc, StreamProtocolError | httpx.HTTPError | ValueError
        ):
            # A stream that broke before any output (ValueError: undecodable JSON).
            message = upstream.message if upstream else describe(exc)
            return self._stream_failure(message, output_began=False)
        log.error("unexpected failure calling %s", self.label, exc_info=exc)
        return Failure(
            "backend_unavailable", f"The {self.label} call failed: {describe(exc)}", True
        )

    def classify_status(self, status: int, message: str, headers: Mapping[str, str]) -> Failure:
        label = self.label
        if status == 429:
            return Failure(
                "rate_limited",
                f"{label} rate limit: {message}",
                retryable=True,
                rate_limited=True,
                retry_after_s=parse_retry_after(headers),
            )
        if status == 401:
            return Failure(
                "backend_auth_failed", f"{label} rejected the API key (401): {message}", False
            )
        if status == 408 or status >= 500:
            return Failure("backend_unavailable", f"{label} failed ({status}): {message}", True)
        return Failure(
            "backend_rejected", f"{label} rejected the request ({status}): {message}", False
        )

    def _stream_failure(self, message: str, *, output_began: bool) -> Failure:
        when = "after output began" if output_began else "before any output"
        return Failure(
            "backend_stream_error",
            f"The {self.label} stream broke {when}: {message}",
            retryable=not output_began,
        )

    def _retry_delay(self, retries_done: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(max(0.0, retry_after_s), self.max_retry_delay_s)
        backoff = min(INITIAL_BACKOFF_S * 2**retries_done, self.max_retry_delay_s)
        return backoff * (1 - 0.25 * self._rng.random())


def check_limits(prefix: str, timeout_s: float, max_retries: int) -> None:
    """Settings no backend can run with, named by their variables (``prefix``_...)."""
    if timeout_s <= 0:
        raise ConfigError.invalid(f"{prefix}_TIMEOUT_S", str(timeout_s), "must be > 0")
    if max_retries < 0:
        raise ConfigError.invalid(f"{prefix}_MAX_RETRIES", str(max_retries), "must be >= 0")


def sdk_error(
    exc: Any, status_error: type[Any], connection_error: type[BaseException]
) -> UpstreamError | None:
    """Both SDKs are generated alike: ``status_error`` (an HTTP error, or an in-stream
    one the SDK gives a status) has ``status_code``, ``response.headers`` and ``body``;
    ``connection_error`` means no answer came."""
    if isinstance(exc, status_error):
        return UpstreamError(
            body_message(exc.body, exc.message), exc.status_code, exc.response.headers
        )
    if isinstance(exc, connection_error):
        return UpstreamError(describe(exc), unreachable=True)
    return None


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


def body_message(body: object, fallback: str) -> str:
    """The backend's own words from an error body (the SDKs keep the body's ``error``
    object when there is one)."""
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return body["message"]
    if isinstance(body, str) and body:
        return body
    return fallback


def describe(exc: BaseException) -> str:
    """An exception's text with its cause's (an SDK's "Connection error." says little)."""
    text = str(exc)
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({cause})" if text else str(cause)
    return text or type(exc).__name__


def _as_dict(chunk: Any) -> dict[str, Any]:
    return chunk.to_dict() if hasattr(chunk, "to_dict") else dict(chunk)


def _timings(
    reported: ReportedTimings | None,
    received: float,
    first_delta: float | None,
    last_delta: float | None,
    done: float,
) -> pb.Timings:
    first = done if first_delta is None else first_delta
    last = done if last_delta is None else last_delta
    ttft_ms = (first - received) * 1000
    theirs = reported or ReportedTimings()

    def pick(value: float | None, local: float) -> float:
        return local if value is None else value

    return pb.Timings(
        queue_ms=pick(theirs.queue_ms, 0.0),
        prefill_ms=pick(theirs.prefill_ms, ttft_ms),
        decode_ms=pick(theirs.decode_ms, (last - first) * 1000),
        ttft_ms=ttft_ms,
        total_ms=pick(theirs.total_ms, (done - received) * 1000),
    )


def _error(failure: Failure) -> pb.GenerateEvent:
    return error_event(failure.code, failure.message, retryable=failure.retryable)
