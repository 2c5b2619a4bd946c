"""The CPU simulator backend: real answers to the conversation, simulated model time.

Model time is the only simulated time in the stack:

- time to first token = ``ttft_ms`` + the prompt tokens NOT in this worker's prefix
  cache at ``prefill_tokens_per_second``; the tokens of resolved input images
  (``image_tokens``) are prompt tokens too, charged and prefilled, never cached (the
  cache keys rendered text tokens only);
- decode at ``tokens_per_second``, paced against absolute due times (``pacing``): the
  first token alone, then a delta per ``delta_interval`` of tokens (20 ms: one a token
  below 100 tokens/s, 20 tokens at 1,000 tokens/s) but at most ``delta_tokens`` (20)
  tokens. Each delta is a message on the stream, which costs the worker (and every hop
  after it) far more than a token does. The token cap keeps a fast stream's deltas
  close together: a message sent after a longer idle reaches the client later (up to a
  millisecond on a shared machine, 0.1% of a one-second stream), and the last delta,
  which ends the stream on time, is such a message.

Everything else (deciding the answer, tokenizing it, the cache lookup) is real work,
reported as ``queue_ms``. The output is tokenized with the model's encoding, so the
token counts in deltas and usage are the ones a real gpt-oss would bill.

``max_output_tokens`` cuts the output (finish reason ``"length"``); a function call
cut short still ends its item, with the argument text as far as it got (not valid
JSON), as a real model's would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

from turnpike import ids, token_bytes
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.token_pieces import encode_in_pieces
from turnpike.vocab import harmony_encoding, plain_encoding
from turnpike.worker import metrics
from turnpike.worker.answer_kinds import AnswerError, FunctionCallAnswer
from turnpike.worker.answers import plan_answer
from turnpike.worker.backends import InvalidRequestError, error_event
from turnpike.worker.pacing import Chunk, paced, token_chunks
from turnpike.worker.prefix_cache import PrefixCache
from turnpike.worker.reasoning import plan_reasoning

DELTA_INTERVAL_S = 0.020
DELTA_TOKENS = 20


class SimulatorBackend:
    def __init__(
        self,
        worker_id: str,
        cache: PrefixCache,
        *,
        error_rate: float = 0.0,
        stall_after_tokens: int = 0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        encoding=None,
        delta_interval: float = DELTA_INTERVAL_S,
        delta_tokens: int = DELTA_TOKENS,
    ) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError("error_rate must be within 0..1")
        if stall_after_tokens < 0:
            raise ValueError("stall_after_tokens must be >= 0")
        if delta_interval < 0 or delta_tokens < 1:
            raise ValueError("delta_interval must be >= 0 and delta_tokens >= 1")
        self.worker_id = worker_id
        self.cache = cache
        self.error_rate = error_rate
        self.stall_after_tokens = stall_after_tokens
        self._rng = rng or random.Random()
        # Model time runs on these two (tests give a virtual clock and its sleep).
        self._clock = clock
        self._sleep = sleep
        self._encoding = encoding or harmony_encoding()
        self._plain = plain_encoding()  # text as harmony encodes it, faster (turnpike.vocab)
        self.delta_interval = delta_interval
        self.delta_tokens = delta_tokens
        self.active = 0  # generations in progress (cancellation must bring it back down)

    def encode(self, text: str) -> list[int]:
        # Text that looks like a special token ("<|end|>" echoed from a tool output)
        # is plain text here. disallowed_special=() also skips harmony's per-call
        # scan for special tokens, which costs milliseconds even on short text.
        # Answers quote the input: long text goes in bounded pieces (turnpike.token_pieces).
        return encode_in_pieces(self._encode_whole, text)

    def _encode_whole(self, text: str) -> list[int]:
        return self._plain.encode_ordinary(text)

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def _tokens_per_delta(self, tokens_per_second: float) -> int:
        """The tokens of ``delta_interval``, whole, from one to ``delta_tokens``."""
        return max(1, min(int(self.delta_interval * tokens_per_second), self.delta_tokens))

    async def generate(self, request: pb.GenerateRequest) -> AsyncGenerator[pb.GenerateEvent, None]:
        received = self._clock()
        self.active += 1
        try:
            async with contextlib.aclosing(self._generate(request, received)) as events:
                async for event in events:
                    yield event
        finally:
            self.active -= 1

    async def _generate(
        self, request: pb.GenerateRequest, received: float
    ) -> AsyncGenerator[pb.GenerateEvent, None]:
        _validate(request)
        try:
            answer = plan_answer(
                request.items,
                request.tools,
                request.tool_choice,
                request.sampling.seed,
                self.count_tokens,
                request.instructions,
                request.text_format,
                request.max_tool_calls if request.HasField("max_tool_calls") else None,
                request.verbosity,
            )
            reasoning = plan_reasoning(
                request.items,
                request.reasoning_effort,
                request.reasoning_summary,
                request.sampling.seed,
                self.count_tokens,
                request.instructions,
            )
        except AnswerError as exc:
            raise InvalidRequestError(str(exc)) from exc

        is_call = isinstance(answer, FunctionCallAnswer)
        text = answer.arguments if isinstance(answer, FunctionCallAnswer) else answer.text
        tokens = self.encode(text)
        thought = self.encode(reasoning.text) if reasoning is not None else []
        finish_reason = "tool_calls" if is_call else "stop"
        limit = request.sampling.max_output_tokens
        if limit and len(thought) + len(tokens) > limit:
            thought = thought[:limit]
            tokens, finish_reason = tokens[: limit - len(thought)], "length"
        chunks = token_chunks(tokens, self._plain.decode)
        thought_chunks = token_chunks(thought, self._plain.decode)

        prompt = token_bytes.unpack(request.prompt)
        cached = self.cache.lookup_and_insert(prompt, namespace=cache_namespace(request))
        metrics.SIMULATOR_PREFIX_CACHE.lookup(cached)
        input_tokens = len(prompt) + request.image_tokens
        prefill_s = request.ttft_ms / 1000 + (input_tokens - cached) / (
            request.prefill_tokens_per_second
        )
        prepared = self._clock()

        if self.error_rate and self._rng.random() < self.error_rate:
            yield error_event(
                "model_error",
                "The model failed to generate a response (simulated fault).",
                retryable=True,
            )
            return

        first_due = prepared + prefill_s
        await self._sleep(max(0.0, first_due - self._clock()))
        stall = self.stall_after_tokens
        stalled = bool(stall and stall < len(thought) + len(tokens))
        if stalled:
            thought_chunks = _first_tokens(thought_chunks, stall)
            chunks = _first_tokens(chunks, stall - min(stall, len(thought)))
        spans: list[tuple[pb.ItemStarted, list[Chunk], float]] = []
        if reasoning is not None:
            spans.append((pb.ItemStarted(kind=pb.ItemStarted.REASONING), thought_chunks, first_due))
        # An output cut within its reasoning has no answer item.
        if not (reasoning is not None and not tokens and finish_reason == "length"):
            if isinstance(answer, FunctionCallAnswer):
                started = pb.ItemStarted(
                    kind=pb.ItemStarted.FUNCTION_CALL,
                    call_id=ids.new_id("call"),
                    name=answer.name,
                    custom=answer.custom,
                )
            else:
                started = pb.ItemStarted(kind=pb.ItemStarted.MESSAGE)
            due = first_due + len(thought) / request.tokens_per_second
            spans.append((started, chunks, due))
        stall_span = 0 if reasoning is not None and stall <= len(thought) else len(spans) - 1
        first_delta = last_delta = None
        for index, (started, span_chunks, due) in enumerate(spans):
            yield pb.GenerateEvent(item_started=started)
            async for chunk in paced(
                span_chunks,
                request.tokens_per_second,
                due,
                min_tokens=self._tokens_per_delta(request.tokens_per_second),
                clock=self._clock,
                sleep=self._sleep,
            ):
                last_delta = self._clock()
                if first_delta is None:
                    first_delta = last_delta
                yield pb.GenerateEvent(delta=pb.Delta(text=chunk.text, tokens=chunk.tokens))
            if stalled and index == stall_span:
                # Fault knob: a backend that stops mid-stream; only the caller can end it.
                await asyncio.get_running_loop().create_future()
            if started.kind == pb.ItemStarted.REASONING and reasoning and reasoning.summary:
                yield pb.GenerateEvent(delta=pb.Delta(text=reasoning.summary, summary=True))
            yield pb.GenerateEvent(item_done=pb.ItemDone())
        done = self._clock()
        first_delta = done if first_delta is None else first_delta
        last_delta = done if last_delta is None else last_delta
        yield pb.GenerateEvent(
            finished=pb.Finished(
                finish_reason=finish_reason,
                usage=pb.Usage(
                    input_tokens=input_tokens,
                    cached_tokens=cached,
                    output_tokens=len(thought) + len(tokens),
                    reasoning_tokens=len(thought),
                ),
                timings=pb.Timings(
                    queue_ms=(prepared - received) * 1000,
                    prefill_ms=(first_delta - prepared) * 1000,
                    decode_ms=(last_delta - first_delta) * 1000,
                    ttft_ms=(first_delta - received) * 1000,
                    total_ms=(done - received) * 1000,
                ),
                worker_id=self.worker_id,
            )
        )


def _validate(request: pb.GenerateRequest) -> None:
    if not request.model:
        raise InvalidRequestError("model is required")
    if request.tokens_per_second <= 0:
        raise InvalidRequestError("tokens_per_second must be > 0")
    if request.prefill_tokens_per_second <= 0:
        raise InvalidRequestError("prefill_tokens_per_second must be > 0")
    if request.ttft_ms < 0:
        raise InvalidRequestError("ttft_ms must be >= 0")
    if request.image_tokens < 0:
        raise InvalidRequestError("image_tokens must be >= 0")
    if request.sampling.max_output_tokens < 0:
        raise InvalidRequestError("sampling.max_output_tokens must be >= 0")


def _first_tokens(chunks: list[Chunk], count: int) -> list[Chunk]:
    kept: list[Chunk] = []
    total = 0
    for chunk in chunks:
        if total >= count:
            break
        kept.append(chunk)
        total += chunk.tokens
    return kept


def cache_namespace(request: pb.GenerateRequest) -> str:
    """The prefix cache's namespace: the model and the tenant. A hit never crosses tenants,
    so neither cached_tokens nor the time to first token tells one tenant what another
    sent. (Model ids and tenant names hold no NUL.)"""
    return f"{request.model}\0{request.tenant}"
