"""The safety service's metrics (docs/observability.md, "Backend metrics").

The classifier has one category (profanity), so its scores carry no label; the credential
detectors are exact matches, not scores, and are not observed here.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from turnpike.safety.policy import Verdict

# Every 0.05 from 0.05 to 1.0: the flag threshold (0.8) is a bucket boundary.
SCORE_BUCKETS = tuple(round(0.05 * step, 2) for step in range(1, 21))

SCORES = Histogram(
    "turnpike_safety_score",
    "Classifier score of each text the model scored (the maximum over the text's chunks); "
    "texts taken from the score cache or with nothing to score are not observed.",
    buckets=SCORE_BUCKETS,
)
TEXTS_SCORED = Counter(
    "turnpike_safety_texts_scored",
    "Texts of classified items, by where their score came from: model (the classifier ran), "
    "cache (the score cache held the text, fast path only) or prefilter (no letter in the "
    "text: scored 0 without the model).",
    ["source"],
)
DECISIONS = Counter(
    "turnpike_safety_decisions",
    "Classify answers by verdict (the conversation's verdict after the call): allow, flag "
    "(served, marked for review) or block (refused).",
    ["verdict"],
)

SCORED_BY_MODEL = TEXTS_SCORED.labels("model")
SCORED_FROM_CACHE = TEXTS_SCORED.labels("cache")
SCORED_BY_PREFILTER = TEXTS_SCORED.labels("prefilter")
DECISION_OF = {verdict: DECISIONS.labels(verdict.name.lower()) for verdict in Verdict}


def count_texts(by_model: int, by_prefilter: int, from_cache: int) -> None:
    """The texts of one call by source (a zero costs nothing: most calls lack a source)."""
    if by_model:
        SCORED_BY_MODEL.inc(by_model)
    if by_prefilter:
        SCORED_BY_PREFILTER.inc(by_prefilter)
    if from_cache:
        SCORED_FROM_CACHE.inc(from_cache)
