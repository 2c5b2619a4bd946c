"""The safety policy, chunked scoring and conversation state, without gRPC.

Conversations go through the real classifier; pure policy rules use hand-made evidence."""

from __future__ import annotations

import itertools
import json

import pytest

from turnpike.config import SafetySettings
from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.safety.classifier import Chunk, ProfanityClassifier, TextScore, chunk_text
from turnpike.safety.detectors import AWS_ACCESS_KEY_ID, OPENAI_API_KEY, PRIVATE_KEY, Detection
from turnpike.safety.engine import InvalidRequest, Mode, SafetyEngine
from turnpike.safety.policy import (
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MESSAGE,
    PROFANITY,
    Finding,
    ItemEvidence,
    Thresholds,
    Verdict,
    assess,
    item_verdict,
)
from turnpike.safety.state import ConversationStore

# Assembled at run time: nothing in this file looks like a real secret.
OPENAI_KEY = "sk-" + "proj-" + "Ab3dEfGhIjKlMnOp_QrStUvWx-Yz0123456789abcdEFGH"
AWS_KEY = "AKIA" + "Q3EXAMPLE7KEY2ID"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "MIIEowIBAAKCAQEA7x9Jb2Fr7Yw0Zl6aQH3h5f1X2p8s9d0k3jL4m5n6o7p8q9r0s1t2u3v\n" * 3
    + "-----END RSA PRIVATE KEY-----\n"
)
PROFANE = "This fucking limiter is a piece of shit, you asshole."

SOURCE = (
    '"""Token bucket rate limiter shared by the API workers."""\n\n'
    "import threading\nimport time\n\n\n"
    "class RateLimiter:\n"
    '    """One bucket per key; `allow` takes a token if one is available."""\n\n'
    "    def __init__(self, capacity: float, refill_per_s: float) -> None:\n"
    "        self._capacity = capacity\n"
    "        self._refill = refill_per_s\n"
    "        self._buckets: dict[str, list[float]] = {}\n"
    "        self._lock = threading.Lock()\n\n"
    "    def allow(self, key: str, cost: float = 1.0) -> bool:\n"
    "        now = time.monotonic()\n"
    "        with self._lock:\n"
    "            tokens, updated = self._buckets.get(key, [0.0, now])\n"
    "            tokens = min(self._capacity, tokens + (now - updated) * self._refill)\n"
    "            allowed = tokens >= cost\n"
    "            self._buckets[key] = [tokens - cost if allowed else tokens, now]\n"
    "            return allowed\n"
) * 4


def msg(role: str, text: str, item_id: str) -> Item:
    return Item(kind=Item.MESSAGE, id=item_id, role=role, text=text)


def call(item_id: str, name: str, arguments: dict) -> Item:
    return Item(kind=Item.FUNCTION_CALL, id=item_id, name=name, arguments=json.dumps(arguments))


def out(item_id: str, name: str, text: str) -> Item:
    return Item(kind=Item.FUNCTION_CALL_OUTPUT, id=item_id, name=name, text=text)


def coding_turns(prefix: str) -> list[Item]:
    return [
        msg("user", "The first request of every tenant gets a 429. Can you fix it?", f"{prefix}1"),
        call(f"{prefix}2", "read_file", {"path": "ratelimit.py"}),
        out(f"{prefix}3", "read_file", SOURCE),
        msg("assistant", "New buckets start empty; they should start full.", f"{prefix}4"),
        msg("user", "Great, please apply the fix and run the tests.", f"{prefix}5"),
        call(f"{prefix}6", "run_tests", {"selector": "tests/test_ratelimit.py"}),
        out(f"{prefix}7", "run_tests", "6 passed in 0.03s"),
    ]


CONVERSATIONS = {
    "allow": (
        Verdict.ALLOW,
        [msg("developer", "You are a coding agent.", "d0"), *coding_turns("a")],
    ),
    "flag-env-file-in-tool-output": (
        Verdict.FLAG,
        [
            *coding_turns("a"),
            call("e1", "read_file", {"path": ".env"}),
            out("e2", "read_file", f"DEBUG=1\nOPENAI_API_KEY={OPENAI_KEY}\nAWS_KEY={AWS_KEY}\n"),
            out("e3", "read_file", f"deploy/id_rsa:\n{PEM}"),
            msg("assistant", "The .env file holds live keys; rotate them.", "e4"),
        ],
    ),
    "flag-profanity-in-tool-output": (
        Verdict.FLAG,
        [*coding_turns("a"), out("p1", "read_file", SOURCE + "\n# " + PROFANE + "\n" + SOURCE)],
    ),
    "block-profane-user-message": (
        Verdict.BLOCK,
        [*coding_turns("a"), msg("user", "fuck you, asshole", "b1"), *coding_turns("b")],
    ),
    "block-private-key-from-user": (
        Verdict.BLOCK,
        [*coding_turns("a"), msg("user", f"Use this deploy key:\n{PEM}", "k1"), *coding_turns("b")],
    ),
}


@pytest.fixture(scope="module")
def classifier() -> ProfanityClassifier:
    return ProfanityClassifier()


@pytest.fixture
def engine(classifier: ProfanityClassifier) -> SafetyEngine:
    return SafetyEngine(classifier, Thresholds(flag=0.8, block=0.98), ConversationStore(100))


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_full_verdicts(engine: SafetyEngine, name: str) -> None:
    expected, items = CONVERSATIONS[name]
    outcome = engine.classify("acme", f"conv-{name}", Mode.FULL, items)
    assert outcome.state.verdict is expected
    assert outcome.items_scored == outcome.state.items_seen == len(items)
    if expected is Verdict.ALLOW:
        assert outcome.state.max_score < 0.8
        assert outcome.assessment.findings == ()


@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_incremental_equals_full(engine: SafetyEngine, name: str, group: int) -> None:
    _, items = CONVERSATIONS[name]
    full = engine.classify("acme", "full", Mode.FULL, items)
    findings: list[Finding] = []
    for start in range(0, len(items), group):
        step = engine.classify("acme", "incr", Mode.INCREMENTAL, items[start : start + group])
        assert step.items_scored == len(items[start : start + group])
        findings += step.assessment.findings
    assert step.state.verdict is full.state.verdict
    assert step.state.max_score == pytest.approx(full.state.max_score, abs=1e-12)
    assert step.state.items_seen == full.state.items_seen == len(items)
    assert step.state.category_counts == full.state.category_counts
    assert sorted(findings, key=repr) == sorted(full.assessment.findings, key=repr)


def test_credentials_in_tool_output_are_flagged_and_redacted(engine: SafetyEngine) -> None:
    _, items = CONVERSATIONS["flag-env-file-in-tool-output"]
    outcome = engine.classify("acme", "env", Mode.FULL, items)
    by_item = {(f.item_id, f.category): f for f in outcome.assessment.findings}
    assert set(by_item) == {
        ("e2", OPENAI_API_KEY),
        ("e2", AWS_ACCESS_KEY_ID),
        ("e3", PRIVATE_KEY),
    }
    assert by_item[("e2", OPENAI_API_KEY)].detail.startswith("sk-p… (")
    for finding in outcome.assessment.findings:
        assert finding.score == 1.0
        for secret in (OPENAI_KEY, AWS_KEY, PEM):
            assert secret[4:12] not in finding.detail
            assert secret not in finding.detail
    assert outcome.state.category_counts == {
        OPENAI_API_KEY: 1,
        AWS_ACCESS_KEY_ID: 1,
        PRIVATE_KEY: 1,
    }


def test_blocked_stays_blocked_until_a_full_rescore(engine: SafetyEngine) -> None:
    first = engine.classify("acme", "c", Mode.INCREMENTAL, [msg("user", "fuck you asshole", "x")])
    assert first.state.verdict is Verdict.BLOCK
    assert [f.category for f in first.assessment.findings] == [PROFANITY]
    later = engine.classify("acme", "c", Mode.INCREMENTAL, coding_turns("n"))
    assert later.state.verdict is Verdict.BLOCK
    assert later.assessment.verdict is Verdict.ALLOW  # this call's items alone
    assert later.assessment.findings == ()
    assert later.state.items_seen == 1 + len(coding_turns("n"))
    # FULL replaces the state with what the items given amount to.
    rescored = engine.classify("acme", "c", Mode.FULL, coding_turns("n"))
    assert rescored.state.verdict is Verdict.ALLOW
    assert rescored.state.items_seen == len(coding_turns("n"))
    again = engine.classify("acme", "c", Mode.INCREMENTAL, [])
    assert again.state.verdict is Verdict.ALLOW
    assert again.items_scored == 0


def test_unknown_conversation_starts_empty_and_tenants_are_isolated(engine: SafetyEngine) -> None:
    blocked = engine.classify("acme", "shared-id", Mode.INCREMENTAL, [msg("user", PEM, "k")])
    assert blocked.state.verdict is Verdict.BLOCK
    other = engine.classify("globex", "shared-id", Mode.INCREMENTAL, [msg("user", "hello", "h")])
    assert other.state.verdict is Verdict.ALLOW
    assert other.state.items_seen == 1
    same = engine.classify("acme", "shared-id", Mode.INCREMENTAL, [msg("user", "hello", "h")])
    assert same.state.verdict is Verdict.BLOCK
    assert same.state.items_seen == 2


def test_full_without_conversation_id_keeps_no_state(engine: SafetyEngine) -> None:
    outcome = engine.classify("acme", "", Mode.FULL, [msg("user", "fuck you asshole", "x")])
    assert outcome.state.verdict is Verdict.BLOCK
    assert len(engine.store) == 0
    with pytest.raises(InvalidRequest, match="conversation_id"):
        engine.classify("acme", "", Mode.INCREMENTAL, [msg("user", "hi", "x")])


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        (Item(kind=Item.KIND_UNSPECIFIED, id="u1"), "items[0] (id 'u1'): unknown item kind 0"),
        (Item(kind=Item.MESSAGE, role="robot", text="hi"), "unknown message role 'robot'"),
    ],
)
def test_invalid_items(engine: SafetyEngine, item: Item, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as excinfo:
        engine.classify("acme", "c", Mode.FULL, [item])
    assert fragment in str(excinfo.value)


def test_state_is_bounded_lru(classifier: ProfanityClassifier) -> None:
    engine = SafetyEngine(classifier, Thresholds(), ConversationStore(2))
    for conversation in ("one", "two"):
        engine.classify("acme", conversation, Mode.INCREMENTAL, [msg("user", PEM, "k")])
    engine.classify("acme", "one", Mode.INCREMENTAL, [])  # touch: "two" is now the oldest
    engine.classify("acme", "three", Mode.INCREMENTAL, [msg("user", "hi", "h")])
    assert len(engine.store) == 2
    assert ("acme", "one") in engine.store and ("acme", "two") not in engine.store
    forgotten = engine.classify("acme", "two", Mode.INCREMENTAL, [])
    assert forgotten.state.verdict is Verdict.ALLOW and forgotten.state.items_seen == 0


# --- pure policy rules, on hand-made evidence -------------------------------------------


def evidence(
    kind: str, role: str = "", score: float = 0.0, detections: tuple[Detection, ...] = ()
) -> ItemEvidence:
    return ItemEvidence("i", kind, role, TextScore(score, 1, Chunk(0, "x")), detections)


KEY = (Detection(PRIVATE_KEY, 0, 1700, "RSA private key block"),)
AWS = (Detection(AWS_ACCESS_KEY_ID, 5, 20, "AKIA…"),)
TH = Thresholds(flag=0.8, block=0.98)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (evidence(MESSAGE, "user", 0.98), Verdict.BLOCK),  # thresholds are inclusive
        (evidence(MESSAGE, "user", 0.9799), Verdict.FLAG),
        (evidence(MESSAGE, "user", 0.8), Verdict.FLAG),
        (evidence(MESSAGE, "user", 0.7999), Verdict.ALLOW),
        (evidence(MESSAGE, "developer", 0.999), Verdict.FLAG),  # only user text blocks on score
        (evidence(MESSAGE, "assistant", 1.0), Verdict.FLAG),
        (evidence(FUNCTION_CALL_OUTPUT, "", 1.0), Verdict.FLAG),
        (evidence(MESSAGE, "user", 0.0, KEY), Verdict.BLOCK),
        (evidence(MESSAGE, "developer", 0.0, KEY), Verdict.BLOCK),
        (evidence(MESSAGE, "system", 0.0, KEY), Verdict.BLOCK),
        (evidence(MESSAGE, "assistant", 0.0, KEY), Verdict.FLAG),
        (evidence(FUNCTION_CALL, "", 0.0, KEY), Verdict.FLAG),
        (evidence(FUNCTION_CALL_OUTPUT, "", 0.0, KEY), Verdict.FLAG),
        (evidence(MESSAGE, "user", 0.0, AWS), Verdict.FLAG),  # other credentials only flag
        (evidence(MESSAGE, "user", 0.1), Verdict.ALLOW),
    ],
)
def test_item_verdict(item: ItemEvidence, expected: Verdict) -> None:
    assert item_verdict(item, TH) is expected


def test_assess_groups_findings_per_item_and_category() -> None:
    many = tuple(Detection(AWS_ACCESS_KEY_ID, 10 * i, 20, "AKIA…") for i in range(3))
    result = assess(
        [evidence(MESSAGE, "user", 0.85), evidence(FUNCTION_CALL_OUTPUT, "", 0.2, many)], TH
    )
    assert result.verdict is Verdict.FLAG
    assert result.max_score == 0.85
    assert [(f.category, f.score) for f in result.findings] == [
        (PROFANITY, 0.85),
        (AWS_ACCESS_KEY_ID, 1.0),
    ]
    assert result.findings[1].detail == "3 matches, first: AKIA… (20 chars) at offset 0"
    assert result.category_counts == {PROFANITY: 1, AWS_ACCESS_KEY_ID: 1}
    empty = assess([], TH)
    assert (empty.verdict, empty.max_score, empty.findings) == (Verdict.ALLOW, 0.0, ())


def test_thresholds_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Thresholds.from_settings(SafetySettings()) == Thresholds(flag=0.8, block=0.98)
    monkeypatch.setenv("TURNPIKE_SAFETY_FLAG_THRESHOLD", "0.5")
    monkeypatch.setenv("TURNPIKE_SAFETY_BLOCK_THRESHOLD", "0.9")
    monkeypatch.setenv("TURNPIKE_SAFETY_STATE_MAX_CONVERSATIONS", "7")
    settings = SafetySettings()
    assert Thresholds.from_settings(settings) == Thresholds(flag=0.5, block=0.9)
    assert settings.state_max_conversations == 7
    with pytest.raises(ValueError, match="flag <= block"):
        Thresholds(flag=0.9, block=0.5)


# --- chunked scoring ---------------------------------------------------------------------


def test_chunks_cover_the_text_in_whole_lines() -> None:
    text = SOURCE + "\n" + "word " * 300 + "\n" + "x" * 700
    chunks = chunk_text(text, min_chars=100, max_chars=256)
    assert "".join(c.text for c in chunks) == text  # every chunk here has a letter
    position = 0
    for chunk in chunks:
        assert chunk.start == position and text[chunk.start :].startswith(chunk.text)
        position += len(chunk.text)
        assert len(chunk.text) <= 256 + 100  # a short tail may join the last chunk
    # Long runs of words are cut between words, not inside them.
    for left, right in itertools.pairwise(chunks):
        assert not (left.text[-1:].isalpha() and right.text[:1].isalpha()) or "xx" in right.text
    assert chunk_text("") == [] and chunk_text("  \n--- 123 ---\n") == []


def test_one_profane_sentence_is_not_diluted_by_a_long_file(
    classifier: ProfanityClassifier,
) -> None:
    text = SOURCE + "\n# " + PROFANE + "\n" + SOURCE
    chunked, clean = classifier.score_texts([text, SOURCE + SOURCE])
    assert chunked.score >= 0.8
    assert clean.score < 0.5
    assert chunked.worst is not None and PROFANE in chunked.worst.text
    # The same text as one piece: the sentence drowns in the code around it.
    (whole,) = ProfanityClassifier(10**9, 10**9).score_texts([text])
    assert whole.chunks == 1
    assert whole.score < 0.5


def test_fused_model_gives_the_library_scores():
    """The fast path is an exact re-arrangement of the shipped model, not another model."""
    from support.paths import REPO_ROOT

    from turnpike.safety.classifier import ProfanityClassifier, chunk_text

    classifier = ProfanityClassifier()
    root = REPO_ROOT / "src"
    texts = [p.read_text() for p in sorted(root.rglob("*.py"))[:40]]
    texts += ["you are a fucking idiot", "have a nice day", "shut up, moron", ""]
    chunks = [c.text for text in texts for c in chunk_text(text)]
    library = classifier._predict_prob(chunks)
    fused = classifier._fused(chunks)
    assert len(chunks) > 100
    assert max(abs(a - b) for a, b in zip(library, fused, strict=True)) < 1e-9
    slow = classifier.score_texts(texts)
    fast = classifier.score_texts(texts, fast=True)
    assert [round(s.score, 9) for s in slow] == [round(f.score, 9) for f in fast]


@pytest.mark.parametrize(
    "texts",
    [
        ["fuck"],  # one short text: the common call
        ["shit shit shit shit happens", "you idiot, you IDIOT", "Idiot."],  # repeated terms
        ["", "the and of it", "zzqx 12345 ___", "have a nice day"],  # nothing known, or little
        [],
    ],
    ids=["one", "repeats", "unknown-terms", "empty-batch"],
)
def test_fused_model_edge_cases_give_the_library_scores(
    classifier: ProfanityClassifier, texts: list[str]
) -> None:
    fused = list(classifier._fused(texts))
    library = list(classifier._predict_prob(texts)) if texts else []
    assert len(fused) == len(texts)
    assert all(abs(a - b) < 1e-9 for a, b in zip(library, fused, strict=True))


def test_fusing_refuses_another_kind_of_vectorizer() -> None:
    import copy

    from profanity_check.profanity_check import model, vectorizer

    from turnpike.safety.classifier import FusedCalibratedLinear

    for change in ({"sublinear_tf": True}, {"norm": "l1"}, {"binary": True}):
        other = copy.deepcopy(vectorizer).set_params(**change)
        with pytest.raises(ValueError, match="can be fused"):
            FusedCalibratedLinear(other, model)


def test_fast_path_scores_each_distinct_text_once_with_the_same_result():
    from turnpike.conversation.v1.conversation_pb2 import Item
    from turnpike.safety.classifier import ProfanityClassifier
    from turnpike.safety.engine import SafetyEngine
    from turnpike.safety.policy import Thresholds
    from turnpike.safety.state import ConversationStore

    engine = SafetyEngine(ProfanityClassifier(), Thresholds(), ConversationStore(10))
    items = [
        Item(kind=Item.MESSAGE, id="m1", role="user", text="you are a fucking idiot"),
        Item(kind=Item.FUNCTION_CALL_OUTPUT, id="o1", call_id="c", text="AKIAIOSFODNN7EXAMPLE"),
        Item(kind=Item.MESSAGE, id="m2", role="user", text="thanks, have a nice day"),
    ]
    library = engine.analyze(items)
    first = engine.analyze(items, fast=True)
    assert engine.cache.misses == 3 and engine.cache.hits == 0
    again = engine.analyze(items, fast=True)
    assert engine.cache.hits == 3
    for a, b, c in zip(library, first, again, strict=True):
        assert abs(a.score.score - b.score.score) < 1e-9 and b == c
        assert a.detections == b.detections and a.item_id == b.item_id
