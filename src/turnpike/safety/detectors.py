"""Credential detectors: regular expressions for secrets that should not travel in a prompt.

A detection never carries the secret: only its category, where it is, how long it is, and a
redacted hint (the first 4 characters, which for these formats are mostly the public prefix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPENAI_API_KEY = "credential.openai_api_key"
AWS_ACCESS_KEY_ID = "credential.aws_access_key_id"
GITHUB_TOKEN = "credential.github_token"
SLACK_TOKEN = "credential.slack_token"
PRIVATE_KEY = "credential.private_key"
JWT = "credential.jwt"

# Tokens are bounded by characters that cannot be part of them, so "risk-..." or a longer
# identifier that merely contains "AKIA" does not match. Each pattern comes with literals of
# which every match contains one: a text holding none of them is not scanned by that pattern
# (a substring search costs a fraction of a regex scan, and most texts hold no secret).
_PATTERNS: list[tuple[str, tuple[str, ...], re.Pattern[str]]] = [
    (
        # Legacy "sk-" + 48 characters and the newer project/service-account/admin keys.
        OPENAI_API_KEY,
        ("sk-",),
        re.compile(r"(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}"),
    ),
    (
        AWS_ACCESS_KEY_ID,
        ("AKIA", "ASIA"),
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ),
    (
        GITHUB_TOKEN,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{50,})"),
    ),
    (
        SLACK_TOKEN,
        ("xox", "xapp-"),
        re.compile(r"(?<![A-Za-z0-9-])(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})"),
    ),
    (
        # A PEM (or PGP armoured) private key: the BEGIN line followed by key material, so
        # merely naming the header in prose does not count; a truncated key still does.
        PRIVATE_KEY,
        ("-----BEGIN ",),
        re.compile(
            r"-----BEGIN (?P<kind>[A-Z0-9 ]*?)PRIVATE KEY(?: BLOCK)?-----"
            r"\s*(?:[A-Za-z-]+:[^\n]*\n\s*)*"  # optional armour headers (Proc-Type: ...)
            r"[A-Za-z0-9+/=]{40,}"
            r"(?:[A-Za-z0-9+/=\s]*-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)?"
        ),
    ),
    (
        # Header and payload are base64url JSON objects, so both start with "eyJ".
        JWT,
        ("eyJ",),
        re.compile(
            r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"
        ),
    ),
]

CATEGORIES = tuple(category for category, _, _ in _PATTERNS)


@dataclass(frozen=True)
class Detection:
    category: str
    start: int  # character offset in the scanned text
    length: int
    hint: str  # redacted: never the secret itself

    def describe(self) -> str:
        return f"{self.hint} ({self.length} chars) at offset {self.start}"


def _hint(category: str, match: re.Match[str]) -> str:
    if category == PRIVATE_KEY:
        kind = (match.group("kind") or "").strip()
        return f"{kind} private key block" if kind else "private key block"
    return match.group(0)[:4] + "…"


def _has_letter_and_digit(secret: str) -> bool:
    return any(c.isdigit() for c in secret) and any(c.isalpha() for c in secret)


def detect_credentials(text: str) -> list[Detection]:
    """Every credential in ``text``, in order of position."""
    found: list[Detection] = []
    for category, literals, pattern in _PATTERNS:
        if not any(literal in text for literal in literals):
            continue
        for match in pattern.finditer(text):
            # Generated secrets mix letters and digits; long prose slugs ("sk-...") do not.
            if category == OPENAI_API_KEY and not _has_letter_and_digit(match.group(0)[3:]):
                continue
            found.append(
                Detection(category, match.start(), len(match.group(0)), _hint(category, match))
            )
    found.sort(key=lambda d: d.start)
    return found
