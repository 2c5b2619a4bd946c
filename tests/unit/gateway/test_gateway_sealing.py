"""The server-key AEAD (turnpike.gateway.sealed.sealing) and the compaction policy on its own: a blob
opens only for the tenant and purpose it was sealed for, unchanged; the compacted list
is one compaction item that expands back to exactly the history; a compaction_trigger
is taken only as the final input item."""

from __future__ import annotations

import base64

import pytest

from turnpike.config import ConfigError, GatewaySettings
from turnpike.gateway.protocol.compaction_trigger import take_trigger
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.items import normalize_input
from turnpike.gateway.sealed import compaction
from turnpike.gateway.sealed.sealing import Sealer, SealError

KEY = base64.b64encode(bytes(range(32))).decode()


def test_seal_opens_for_its_tenant_and_purpose_only():
    sealer = Sealer.from_setting(KEY)
    blob = sealer.seal(b"secret", "alice", "compaction")
    assert blob.startswith("tp1.") and b"secret" not in blob.encode()
    assert sealer.open(blob, "alice", "compaction") == b"secret"
    # The same key, configured in another process, opens it too.
    assert Sealer.from_setting(KEY).open(blob, "alice", "compaction") == b"secret"
    for tenant, purpose in (("bob", "compaction"), ("alice", "reasoning")):
        with pytest.raises(SealError):
            sealer.open(blob, tenant, purpose)


def test_changed_or_malformed_blobs_do_not_open():
    sealer = Sealer.from_setting(KEY)
    blob = sealer.seal(b"secret", "alice", "compaction")
    i = len(blob) // 2
    tampered = blob[:i] + ("A" if blob[i] != "A" else "B") + blob[i + 1 :]
    for bad in (tampered, "tp2." + blob[4:], blob[:20], "tp1.!!!", "", blob + "AAAA"):
        with pytest.raises(SealError):
            sealer.open(bad, "alice", "compaction")
    # Another key (a generated one) does not open it either.
    with pytest.raises(SealError):
        Sealer.from_setting("").open(blob, "alice", "compaction")


def test_a_generated_key_warns(caplog):
    with caplog.at_level("WARNING"):
        Sealer.from_setting("")
    assert "will not open after a restart" in caplog.text


@pytest.mark.parametrize("value", ["not base64!", base64.b64encode(b"short").decode()])
def test_a_bad_server_key_is_refused_at_start(monkeypatch, value):
    monkeypatch.setenv("TURNPIKE_SERVER_KEY", value)
    with pytest.raises(ConfigError, match="TURNPIKE_SERVER_KEY"):
        GatewaySettings()


def _msg(role: str, text: str) -> dict:
    return {"id": f"msg_{text}", "type": "message", "role": role, "content": text}


def test_compaction_is_one_item_and_expands_exactly():
    sealer = Sealer.from_setting(KEY)
    items = [
        _msg("developer", "rules"),
        _msg("user", "u1"),
        _msg("assistant", "a1"),
        _msg("user", "u2"),
        _msg("assistant", "a2"),
        _msg("user", "u3"),
        _msg("assistant", "a3"),
    ]
    compacted = compaction.compact(sealer, "alice", items)
    assert [item["type"] for item in compacted] == ["compaction"]
    assert compaction.expand(sealer, "alice", compacted) == items
    # However short the history: still exactly one compaction item.
    for short in (items[5:], []):
        [one] = compaction.compact(sealer, "alice", short)
        assert compaction.expand(sealer, "alice", [one]) == short
    with pytest.raises(ApiError) as err:
        compaction.expand(sealer, "bob", [_msg("user", "hi"), *compacted])
    assert err.value.status == 400
    assert err.value.param == "input[1].encrypted_content"


def test_a_compaction_item_replaces_the_items_before_it():
    sealer = Sealer.from_setting(KEY)
    items = [_msg("user", f"u{i}") for i in range(5)]
    compacted = compaction.compact(sealer, "alice", items)
    # Sent back with what it replaced before it, or not: the same history.
    assert compaction.expand(sealer, "alice", [*items[:3], *compacted]) == items
    # An earlier compaction item must still open.
    forged = {"id": "cmp_x", "type": "compaction", "encrypted_content": "tp1.AAAA"}
    with pytest.raises(ApiError) as err:
        compaction.expand(sealer, "alice", [forged, *compacted])
    assert err.value.param == "input[0].encrypted_content"


def test_a_compaction_trigger_is_taken_as_the_final_input_item_only():
    trigger = {"type": "compaction_trigger", "id": "ct_1"}
    items = normalize_input([{"role": "user", "content": "hi"}, trigger], triggers=True)
    kept, now = take_trigger(items)
    assert now and kept == items[:1]
    assert take_trigger(kept) == (kept, False)
    with pytest.raises(ApiError) as err:
        take_trigger(normalize_input([trigger, *kept], triggers=True))
    assert (err.value.status, err.value.param, err.value.code) == (
        400,
        "input[0].type",
        "invalid_value",
    )
    # Elsewhere (a conversation's items) it is an unsupported item type.
    with pytest.raises(ApiError) as err:
        normalize_input([trigger], "items")
    assert (err.value.param, err.value.code) == ("items[0].type", "unsupported_item_type")
