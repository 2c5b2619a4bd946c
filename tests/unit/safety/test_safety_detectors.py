"""Credential detectors: what they find, what they leave alone, and that they never leak.

The fake secrets are assembled at run time so this file holds nothing that looks like one."""

from __future__ import annotations

import time

import pytest

from turnpike.safety import detectors
from turnpike.safety.detectors import detect_credentials

B64 = "MIIEowIBAAKCAQEA7x9Jb2Fr7Yw0Zl6aQH3h5f1X2p8s9d0k3jL4m5n6o7p8q9r0s1t2u3v"

SECRETS = {
    detectors.OPENAI_API_KEY: [
        "sk-" + "a1B2c3D4e5F6g7H8i9J0" * 2 + "k1L2m3N4",
        "sk-" + "proj-" + "Ab3dEfGhIjKlMnOp_QrStUvWx-Yz0123456789abcdEFGH",
    ],
    detectors.AWS_ACCESS_KEY_ID: ["AKIA" + "Q3EXAMPLE7KEY2ID", "ASIA" + "Z9Y8X7W6V5U4T3S2"],
    detectors.GITHUB_TOKEN: [
        "ghp" + "_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
        "github" + "_pat_" + "11ABCDEFG0123456789_" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF",
    ],
    detectors.SLACK_TOKEN: ["xox" + "b-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrSt"],
    detectors.PRIVATE_KEY: [
        "-----BEGIN RSA PRIVATE KEY-----\n"
        + B64
        + "\n"
        + B64[:40]
        + "\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----\n" + B64 + "\n",  # truncated: no END line
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n",
        "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00FF\n\n"
        + B64
        + "\n-----END EC PRIVATE KEY-----",
    ],
    detectors.JWT: [
        "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
        ".eyJ" + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
        ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ],
}

CASES = [(category, secret) for category, secrets in SECRETS.items() for secret in secrets]


@pytest.mark.parametrize(("category", "secret"), CASES)
def test_finds_each_kind_with_position_and_redacted_hint(category: str, secret: str) -> None:
    prefix = "config dump:\nVALUE="
    text = prefix + secret + "\nother = 1\n"
    found = detect_credentials(text)
    assert [d.category for d in found] == [category]
    detection = found[0]
    assert detection.start == len(prefix)
    assert text[detection.start : detection.start + detection.length].startswith(secret[:10])
    # The hint never holds key material: no piece of 8 characters of it (for a PEM block, of
    # its base64 body; its BEGIN line is public and names the kind of key).
    described = detection.describe()
    assert f"({detection.length} chars) at offset {len(prefix)}" in described
    material = max(secret.splitlines(), key=len) if category == detectors.PRIVATE_KEY else secret
    for i in range(len(material) - 8):
        assert material[i : i + 8] not in described


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer sk-turnpike-dev",  # the development key: short
        "see sk-learn-is-not-a-key-but-a-long-slug-for-docs-here",  # no digits: a slug
        "risk-assessment-framework-document-version-2-final-draft-ok",
        "What does -----BEGIN RSA PRIVATE KEY----- mean at the top of a file?",
        "-----BEGIN PUBLIC KEY-----\n" + B64 + "\n-----END PUBLIC KEY-----",
        "AKIA" + "Q3EXAMPLE7KEY2IDX",  # 17 characters after the prefix: not an access key id
        "XAKIA" + "Q3EXAMPLE7KEY2ID",
        "ghp_short",
        "eyJhbGciOiJIUzI1NiJ9 is a base64 JSON header, not a token",
        "The quick brown fox jumps over the lazy dog. " * 20,
    ],
)
def test_leaves_ordinary_text_alone(text: str) -> None:
    assert detect_credentials(text) == []


def test_many_secrets_in_one_text_in_order() -> None:
    aws = SECRETS[detectors.AWS_ACCESS_KEY_ID][0]
    openai = SECRETS[detectors.OPENAI_API_KEY][0]
    pem = SECRETS[detectors.PRIVATE_KEY][0]
    text = f"OPENAI_API_KEY={openai}\nAWS_ACCESS_KEY_ID={aws}\n{pem}\nAWS2={aws}\n"
    found = detect_credentials(text)
    assert [d.category for d in found] == [
        detectors.OPENAI_API_KEY,
        detectors.AWS_ACCESS_KEY_ID,
        detectors.PRIVATE_KEY,
        detectors.AWS_ACCESS_KEY_ID,
    ]
    assert [d.start for d in found] == sorted(d.start for d in found)
    assert found[2].hint == "RSA private key block"
    # The whole PEM block is one detection, END line included.
    assert found[2].length == len(pem)


def test_adversarial_input_stays_linear() -> None:
    # An unterminated PEM body and long near-miss runs: a backtracking blow-up would take
    # minutes here; linear scanning takes milliseconds. The bound is deliberately generous.
    text = "-----BEGIN RSA PRIVATE KEY-----\n" + "A" * 200_000 + " sk-" + "a-" * 50_000
    started = time.monotonic()
    found = detect_credentials(text)
    assert time.monotonic() - started < 5.0
    assert [d.category for d in found] == [detectors.PRIVATE_KEY]


def test_every_match_holds_one_of_its_patterns_literals() -> None:
    # A pattern runs only on texts holding one of its literals: sound only if no match can
    # lack them. Checked on every case here, near misses and longer runs included.
    texts = [secret for _, secret in CASES]
    texts += ["x" + secret + "y" for secret in texts] + [" ".join(texts)]
    for category, literals, pattern in detectors._PATTERNS:
        for text in texts:
            for match in pattern.finditer(text):
                assert any(literal in match.group(0) for literal in literals), (category, text)
