"""The safety gRPC adapter in-process: which calls leave the event loop for a worker thread,
and what its metrics count.

A hop costs more than scoring a few kilobytes, so the fast path scores on the event loop
unless much text is still to score; texts found in the score cache are not."""

from __future__ import annotations

import asyncio

import pytest
from support.metric_samples import Delta

from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.safety import server
from turnpike.safety.classifier import ProfanityClassifier
from turnpike.safety.engine import SafetyEngine
from turnpike.safety.policy import Thresholds
from turnpike.safety.server import INLINE_TEXT_CHARS, SafetyServicer
from turnpike.safety.state import ConversationStore
from turnpike.safety.v1 import safety_pb2

LINE = "def handler(request):  # reads the request and answers it\n"


def output(item_id: str, chars: int) -> Item:
    text = f"{item_id}\n" + LINE * (chars // len(LINE))
    return Item(kind=Item.FUNCTION_CALL_OUTPUT, id=item_id, name="read_file", text=text)


def request(
    mode: safety_pb2.Mode, items: list[Item], fast: bool = True, tenant: str = "acme"
) -> safety_pb2.ClassifyRequest:
    return safety_pb2.ClassifyRequest(
        tenant=tenant, conversation_id="conv", mode=mode, fast_path=fast, items=items
    )


@pytest.fixture(scope="module")
def classifier() -> ProfanityClassifier:
    return ProfanityClassifier()


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every function the servicer sends to a worker thread."""
    sent: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(fn, /, *args, **kwargs):
        sent.append(fn.__name__)
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(server.asyncio, "to_thread", counted)
    return sent


async def test_only_text_still_to_score_decides_the_thread_hop(
    classifier: ProfanityClassifier, hops: list[str]
) -> None:
    engine = SafetyEngine(classifier, Thresholds(), ConversationStore(10))
    servicer = SafetyServicer(engine)
    history = [output(f"o{i}", 4_000) for i in range(6)]
    assert sum(len(item.text) for item in history) > INLINE_TEXT_CHARS

    # A long history seen for the first time: off the event loop.
    first = await servicer.Classify(request(safety_pb2.FULL, history), None)
    assert hops == ["complete"]
    # Re-sent with one new item (a stateless client's follow-up): the cached texts cost
    # nothing, so the new item is scored here.
    follow_up = [*history, output("o6", 4_000)]
    second = await servicer.Classify(request(safety_pb2.FULL, follow_up), None)
    assert hops == ["complete"]
    assert second.items_scored == len(follow_up) and second.verdict == first.verdict
    # A large new item: off the event loop again, whatever the mode.
    big = output("o7", INLINE_TEXT_CHARS + 1_000)
    await servicer.Classify(request(safety_pb2.INCREMENTAL, [big]), None)
    assert hops == ["complete", "complete"]
    # The library's model has a fixed cost of milliseconds: always off the event loop.
    await servicer.Classify(request(safety_pb2.FULL, [output("o8", 100)], fast=False), None)
    assert hops == ["complete", "complete", "analyze"]


async def test_a_huge_request_is_not_even_hashed_on_the_event_loop(
    classifier: ProfanityClassifier, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "LOOK_UP_INLINE_CHARS", 10_000)
    servicer = SafetyServicer(SafetyEngine(classifier, Thresholds(), ConversationStore(10)))
    history = [output(f"o{i}", 4_000) for i in range(3)]
    await servicer.Classify(request(safety_pb2.FULL, history[:2]), None)
    assert hops == []
    # Everything but the last item is in the cache, but the whole request is over the bound.
    reply = await servicer.Classify(request(safety_pb2.FULL, history), None)
    assert hops == ["analyze"] and reply.items_scored == 3


def test_look_up_leaves_only_uncached_texts_to_score(classifier: ProfanityClassifier) -> None:
    engine = SafetyEngine(classifier, Thresholds(), ConversationStore(10))
    seen = [output("a", 500), output("b", 800)]
    engine.analyze(seen, fast=True)
    new = output("c", 300)
    pending = engine.look_up([*seen, new], fast=True)
    assert pending.missing == [2] and pending.chars_to_score == len(new.text)
    evidence = engine.complete(pending)
    assert [e.item_id for e in evidence] == ["a", "b", "c"]
    assert evidence == engine.analyze([*seen, new], fast=True)
    # Without the fast path nothing comes from the cache.
    assert engine.look_up(seen).chars_to_score == sum(len(i.text) for i in seen)


async def test_the_score_cache_never_serves_another_tenant(classifier) -> None:
    """A text another tenant sent is scored anew (the same work, the same time), so how
    fast a verdict comes says nothing about what another tenant sent."""
    servicer = SafetyServicer(SafetyEngine(classifier, Thresholds(), ConversationStore(10)))
    scored = "turnpike_safety_texts_scored_total"
    by_model, from_cache = Delta(scored, source="model"), Delta(scored, source="cache")
    items = [output("secret", 2000)]
    await servicer.Classify(request(safety_pb2.FULL, items, tenant="alice"), None)
    await servicer.Classify(request(safety_pb2.FULL, items, tenant="bob"), None)
    assert (by_model.change, from_cache.change) == (2, 0)
    await servicer.Classify(request(safety_pb2.FULL, items, tenant="alice"), None)
    assert (by_model.change, from_cache.change) == (2, 1)


async def test_scores_sources_and_decisions_are_counted(classifier: ProfanityClassifier) -> None:
    servicer = SafetyServicer(SafetyEngine(classifier, Thresholds(), ConversationStore(10)))
    scored = "turnpike_safety_texts_scored_total"
    by_model, from_cache = Delta(scored, source="model"), Delta(scored, source="cache")
    prefiltered = Delta(scored, source="prefilter")
    scores, score_sum = Delta("turnpike_safety_score_count"), Delta("turnpike_safety_score_sum")
    below_block = Delta("turnpike_safety_score_bucket", le="0.95")
    decisions = "turnpike_safety_decisions_total"
    allowed, blocked = Delta(decisions, verdict="allow"), Delta(decisions, verdict="block")
    flagged = Delta(decisions, verdict="flag")

    # A text for the model, and one without a letter: scored 0 before the model.
    items = [output("o1", 500), Item(kind=Item.FUNCTION_CALL_OUTPUT, id="o2", text="404 {}")]
    first = await servicer.Classify(request(safety_pb2.FULL, items), None)
    assert first.verdict == safety_pb2.ALLOW
    assert (by_model.change, prefiltered.change, from_cache.change) == (1, 1, 0)
    assert scores.change == below_block.change == 1
    assert allowed.change == 1

    # Re-sent with a new, profane user message: the first two come from the score cache.
    rude = Item(kind=Item.MESSAGE, id="m1", role="user", text="fuck you, asshole")
    second = await servicer.Classify(request(safety_pb2.FULL, [*items, rude]), None)
    assert second.verdict == safety_pb2.BLOCK
    assert (by_model.change, prefiltered.change, from_cache.change) == (2, 1, 2)
    assert scores.change == 2 and below_block.change == 1  # the block scores above 0.95
    assert score_sum.change == pytest.approx(first.max_score + second.max_score)
    assert (allowed.change, flagged.change, blocked.change) == (1, 0, 1)
