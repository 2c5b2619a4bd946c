"""Sealing: opaque blobs only this server can open, bound to a tenant and a purpose.

AES-256-GCM (``cryptography``'s AEAD) with the server key (``TURNPIKE_SERVER_KEY``,
base64 of 32 bytes). The associated data is the purpose label and the tenant, so a
blob sealed for one tenant (or one purpose: compaction, encrypted reasoning) does not
open for another. A blob is ``tp1.`` + base64url(nonce + ciphertext and tag); the
version prefix lets a later format or key rotation coexist with this one.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turnpike.config import SERVER_KEY_BYTES, decode_server_key

log = logging.getLogger(__name__)

VERSION = "tp1."
NONCE_BYTES = 12


class SealError(ValueError):
    """A blob that this server did not seal for this tenant and purpose, or that was
    changed since (the caller turns it into a 400 naming the parameter)."""


class Sealer:
    def __init__(self, key: bytes) -> None:
        if len(key) != SERVER_KEY_BYTES:
            raise ValueError(f"a server key is {SERVER_KEY_BYTES} bytes")
        self._aead = AESGCM(key)

    @classmethod
    def from_setting(cls, text: str) -> Sealer:
        """The sealer for the configured key, or for a key made now (with a warning)."""
        if text:
            return cls(decode_server_key(text))
        log.warning(
            "TURNPIKE_SERVER_KEY is not set: using a key generated at start. Sealed items "
            "(compaction) will not open after a restart or on another gateway replica."
        )
        return cls.ephemeral()

    @classmethod
    def ephemeral(cls) -> Sealer:
        """A sealer with a key made now (tests, and the default of ``Resources``)."""
        return cls(AESGCM.generate_key(bit_length=SERVER_KEY_BYTES * 8))

    @staticmethod
    def _aad(tenant: str, purpose: str) -> bytes:
        return b"turnpike\x00" + purpose.encode() + b"\x00" + tenant.encode()

    def seal(self, plaintext: bytes, tenant: str, purpose: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, self._aad(tenant, purpose))
        return VERSION + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def open(self, blob: str, tenant: str, purpose: str) -> bytes:
        if not isinstance(blob, str) or not blob.startswith(VERSION):
            raise SealError("not a blob this server sealed (unknown version)")
        body = blob[len(VERSION) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise SealError("malformed (not base64url)") from None
        if len(raw) < NONCE_BYTES + 16:
            raise SealError("malformed (too short)")
        try:
            return self._aead.decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], self._aad(tenant, purpose)
            )
        except InvalidTag:
            raise SealError("changed, or sealed for another tenant or purpose") from None
