"""The safety policy: evidence about items -> verdict and findings. Pure, no I/O.

Evidence for one item is its classifier score (profanity model, max over the item's chunks) and
the credentials found in its text. Each item gets a verdict:

- BLOCK if the item is a **user** message whose score is at or above the block threshold, or a
  user, developer or system message (text the caller sends as input or instructions) that
  contains a private key.
- FLAG if its score is at or above the flag threshold, whoever wrote it (assistant messages,
  function calls and tool outputs included), or if any credential is found in it. Credentials
  in tool outputs and model output only flag: an agent that reads a ``.env`` file must not be
  blocked, but the conversation is marked for review.
- ALLOW otherwise.

A conversation's verdict is the most severe verdict of its items, and its max_score the highest
item score. Both are maxima, so they fold: feeding a conversation item by item (INCREMENTAL)
reaches the same verdict and max_score as scoring it whole (FULL). Thresholds are compared with
``>=``. max_score is the classifier's score only; detectors are exact matches, and their
findings carry a score of 1.0.

Findings are reported per item and category: ``profanity`` when the score reaches the flag
threshold, and ``credential.<kind>`` with the number of matches and a redacted hint of the first
(never the secret).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from turnpike.config import SafetySettings
from turnpike.safety.classifier import TextScore
from turnpike.safety.detectors import PRIVATE_KEY, Detection

PROFANITY = "profanity"

# Message roles whose text the caller writes; an item of another kind is model or tool output.
CALLER_ROLES = frozenset({"user", "developer", "system"})
MESSAGE_ROLES = CALLER_ROLES | {"assistant"}

MESSAGE = "message"
FUNCTION_CALL = "function_call"
FUNCTION_CALL_OUTPUT = "function_call_output"


class Verdict(IntEnum):
    """Ordered by severity; values match turnpike.safety.v1.Verdict."""

    ALLOW = 1
    FLAG = 2
    BLOCK = 3


@dataclass(frozen=True)
class Thresholds:
    flag: float = 0.8
    block: float = 0.98

    def __post_init__(self) -> None:
        if not 0.0 <= self.flag <= self.block:
            raise ValueError(
                f"safety thresholds need 0 <= flag <= block, got flag={self.flag} "
                f"block={self.block}"
            )

    @classmethod
    def from_settings(cls, settings: SafetySettings) -> Thresholds:
        return cls(flag=settings.flag_threshold, block=settings.block_threshold)


@dataclass(frozen=True)
class ItemEvidence:
    item_id: str
    kind: str  # MESSAGE, FUNCTION_CALL or FUNCTION_CALL_OUTPUT
    role: str  # for messages
    score: TextScore
    detections: tuple[Detection, ...] = ()

    @property
    def from_caller(self) -> bool:
        return self.kind == MESSAGE and self.role in CALLER_ROLES


@dataclass(frozen=True)
class Finding:
    category: str
    score: float
    item_id: str
    detail: str


@dataclass(frozen=True)
class Assessment:
    """What a set of items amounts to on its own."""

    verdict: Verdict
    max_score: float
    findings: tuple[Finding, ...]
    category_counts: dict[str, int] = field(default_factory=dict)  # findings per category


def item_verdict(evidence: ItemEvidence, thresholds: Thresholds) -> Verdict:
    score = evidence.score.score
    if evidence.kind == MESSAGE and evidence.role == "user" and score >= thresholds.block:
        return Verdict.BLOCK
    if evidence.from_caller and any(d.category == PRIVATE_KEY for d in evidence.detections):
        return Verdict.BLOCK
    if score >= thresholds.flag or evidence.detections:
        return Verdict.FLAG
    return Verdict.ALLOW


def item_findings(evidence: ItemEvidence, thresholds: Thresholds) -> list[Finding]:
    findings: list[Finding] = []
    score = evidence.score
    if score.score >= thresholds.flag:
        where = ""
        if score.worst is not None and score.chunks > 1:
            end = score.worst.start + len(score.worst.text)
            where = f", worst chunk at chars {score.worst.start}-{end} of {score.chunks} chunks"
        findings.append(
            Finding(
                PROFANITY,
                score.score,
                evidence.item_id,
                f"classifier score {score.score:.3f}{where}",
            )
        )
    by_category: dict[str, list[Detection]] = {}
    for detection in evidence.detections:
        by_category.setdefault(detection.category, []).append(detection)
    for category, detections in by_category.items():
        first = detections[0]
        count = f"{len(detections)} matches, first: " if len(detections) > 1 else ""
        findings.append(Finding(category, 1.0, evidence.item_id, count + first.describe()))
    return findings


def assess(evidence: Sequence[ItemEvidence], thresholds: Thresholds) -> Assessment:
    verdict = Verdict.ALLOW
    max_score = 0.0
    findings: list[Finding] = []
    for item in evidence:
        verdict = max(verdict, item_verdict(item, thresholds))
        max_score = max(max_score, item.score.score)
        findings += item_findings(item, thresholds)
    counts = Counter(f.category for f in findings)
    return Assessment(verdict, max_score, tuple(findings), dict(counts))
