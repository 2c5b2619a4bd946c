"""The tokenizer's metrics (docs/observability.md, "Backend metrics"): what it renders, by mode.

``full`` is ``Render`` (a whole conversation: instructions, tools, every item); ``append``
is ``RenderAppend`` (only the items after a prefix the caller has cached).
"""

from __future__ import annotations

from prometheus_client import Counter

TOKENS_RENDERED = Counter(
    "turnpike_tokenizer_tokens_rendered",
    "Tokens rendered, by mode: full (Render, the whole conversation) or append (RenderAppend, "
    "only the items after a cached prefix).",
    ["mode"],
)
RENDERS = Counter(
    "turnpike_tokenizer_renders",
    "Renders that succeeded, by mode: full (Render) or append (RenderAppend).",
    ["mode"],
)


class RenderCounters:
    """Both counters of one mode, labels bound once."""

    def __init__(self, mode: str) -> None:
        self._renders = RENDERS.labels(mode)
        self._tokens = TOKENS_RENDERED.labels(mode)

    def record(self, tokens: int) -> None:
        self._renders.inc()
        self._tokens.inc(tokens)


FULL = RenderCounters("full")
APPEND = RenderCounters("append")
