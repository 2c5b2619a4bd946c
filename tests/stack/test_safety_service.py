"""The safety service as a real process over gRPC: full and incremental classification,
tenant isolation, errors, concurrent calls, clean stop."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from support.procs import free_port, start_service

from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.grpc_client import insecure_channel, wait_healthy
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc

SERVICE = "turnpike.safety.v1.Safety"

AWS_KEY = "AKIA" + "Q3EXAMPLE7KEY2ID"  # assembled: nothing here looks like a real secret


def msg(role: str, text: str, item_id: str = "") -> Item:
    return Item(kind=Item.MESSAGE, id=item_id, role=role, text=text)


CONVERSATION = [
    msg("developer", "You are a helpful coding agent.", "m0"),
    msg("user", "Please read the config and tell me what is wrong.", "m1"),
    Item(kind=Item.FUNCTION_CALL, id="f1", name="read_file", arguments='{"path": ".env"}'),
    Item(kind=Item.FUNCTION_CALL_OUTPUT, id="o1", name="read_file", text=f"AWS_KEY={AWS_KEY}\n"),
    msg("assistant", "Your .env holds an AWS key; keep it out of the repository.", "m2"),
    msg("user", "Thanks, that was really helpful!", "m3"),
]


class Safety:
    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    async def start(self) -> None:
        self.proc = start_service(
            "safety",
            {
                "TURNPIKE_SAFETY_PORT": str(self.port),
                "TURNPIKE_SAFETY_STATE_MAX_CONVERSATIONS": "50",
            },
        )
        if not await wait_healthy(self.address, timeout=30.0, service=SERVICE):
            self.kill()
            pytest.fail("safety did not become healthy")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def safety() -> Iterator[Safety]:
    svc = Safety()
    yield svc
    svc.kill()


@pytest.fixture
async def stub(safety: Safety) -> AsyncIterator[safety_pb2_grpc.SafetyStub]:
    await safety.start()
    async with insecure_channel(safety.address) as channel:
        yield safety_pb2_grpc.SafetyStub(channel)


def request(
    mode: safety_pb2.Mode, items: list[Item], conversation_id: str = "conv", tenant: str = "acme"
) -> safety_pb2.ClassifyRequest:
    return safety_pb2.ClassifyRequest(
        tenant=tenant, conversation_id=conversation_id, mode=mode, items=items
    )


async def test_full_and_incremental_agree(stub: safety_pb2_grpc.SafetyStub) -> None:
    full = await stub.Classify(request(safety_pb2.FULL, CONVERSATION, "full"))
    assert full.verdict == safety_pb2.FLAG  # a credential in a tool output flags, not blocks
    assert full.items_scored == full.items_seen == len(CONVERSATION)
    assert [(f.category, f.item_id) for f in full.findings] == [
        ("credential.aws_access_key_id", "o1")
    ]
    assert AWS_KEY[4:] not in full.findings[0].detail

    verdicts = []
    for i, item in enumerate(CONVERSATION):
        step = await stub.Classify(request(safety_pb2.INCREMENTAL, [item], "incr"))
        assert step.items_scored == 1 and step.items_seen == i + 1
        verdicts.append(step.verdict)
    assert verdicts == [safety_pb2.ALLOW] * 3 + [safety_pb2.FLAG] * 3
    assert step.verdict == full.verdict
    assert step.max_score == pytest.approx(full.max_score, abs=1e-12)
    assert step.findings == []  # this call's item is clean; the state stays flagged


async def test_block_and_tenant_isolation(stub: safety_pb2_grpc.SafetyStub) -> None:
    blocked = await stub.Classify(
        request(safety_pb2.INCREMENTAL, [msg("user", "fuck you, asshole", "b1")], "shared")
    )
    assert blocked.verdict == safety_pb2.BLOCK
    assert blocked.max_score >= 0.98
    assert [f.category for f in blocked.findings] == ["profanity"]

    other_tenant = await stub.Classify(
        request(safety_pb2.INCREMENTAL, [msg("user", "hello")], "shared", tenant="globex")
    )
    assert other_tenant.verdict == safety_pb2.ALLOW and other_tenant.items_seen == 1
    same_tenant = await stub.Classify(
        request(safety_pb2.INCREMENTAL, [msg("user", "hello")], "shared")
    )
    assert same_tenant.verdict == safety_pb2.BLOCK and same_tenant.items_seen == 2


async def test_concurrent_calls(stub: safety_pb2_grpc.SafetyStub) -> None:
    calls = [stub.Classify(request(safety_pb2.FULL, CONVERSATION * 20, f"c{i}")) for i in range(16)]
    replies = await asyncio.gather(*calls)
    assert {r.verdict for r in replies} == {safety_pb2.FLAG}
    assert {r.items_seen for r in replies} == {len(CONVERSATION) * 20}

    # Concurrent increments of one conversation: none is lost.
    steps = [stub.Classify(request(safety_pb2.INCREMENTAL, [item], "one")) for item in CONVERSATION]
    await asyncio.gather(*steps)
    final = await stub.Classify(request(safety_pb2.INCREMENTAL, [], "one"))
    assert final.items_seen == len(CONVERSATION)
    assert final.verdict == safety_pb2.FLAG


INVALID = [
    (request(safety_pb2.MODE_UNSPECIFIED, []), "mode must be FULL or INCREMENTAL"),
    (request(safety_pb2.INCREMENTAL, [], conversation_id=""), "needs a conversation_id"),
    (request(safety_pb2.FULL, [Item(kind=Item.KIND_UNSPECIFIED)]), "unknown item kind"),
    (request(safety_pb2.FULL, [msg("narrator", "hi")]), "unknown message role"),
]


async def test_invalid_requests(stub: safety_pb2_grpc.SafetyStub) -> None:
    for req, fragment in INVALID:
        with pytest.raises(grpc.aio.AioRpcError) as excinfo:
            await stub.Classify(req)
        assert excinfo.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in (excinfo.value.details() or "")
    # Still serving afterwards.
    ok = await stub.Classify(request(safety_pb2.FULL, [msg("user", "hi")], ""))
    assert ok.verdict == safety_pb2.ALLOW


async def test_sigterm_exits_cleanly(safety: Safety) -> None:
    await safety.start()
    async with insecure_channel(safety.address) as channel:
        reply = await safety_pb2_grpc.SafetyStub(channel).Classify(
            request(safety_pb2.FULL, [msg("user", "hello there")], "")
        )
        assert reply.verdict == safety_pb2.ALLOW
    assert safety.proc is not None
    safety.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(safety.proc.wait, 10)
    assert code == 0
