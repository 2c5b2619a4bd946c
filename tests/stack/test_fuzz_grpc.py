"""Fuzzing the backend services' gRPC inputs (hypothesis): every method of safety,
tokenizer, router, worker, billing and imageres, each sent generated messages (any subset
of fields, unknown enum numbers, extreme numbers), oversized histories (a repeated field
with thousands of elements) and garbage bytes as the request message. The property: the
call ends with a status (a reply or an error code) within its deadline, never a hang;
the service stays alive and answers its next call (its health check); a malformed
message is never UNKNOWN (an unhandled exception in the servicer) nor INTERNAL; and the
stack services' logs gain no ERROR and no traceback.

Safety, tokenizer, worker and imageres are the session stack's; router and billing run
as processes of their own (random usage must not reach the session's ledger, nor random
routes its router's state). ``FUZZ_EXAMPLES`` examples per method (8 by default)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.procs import free_port, start_service
from support.proto_strategies import messages

from turnpike.billing.v1 import billing_pb2
from turnpike.imageres.v1 import imageres_pb2
from turnpike.inference.v1 import inference_pb2
from turnpike.router.v1 import router_pb2
from turnpike.safety.v1 import safety_pb2
from turnpike.tokenizer.v1 import tokenizer_pb2

pytestmark = pytest.mark.stack

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))
DEADLINE_S = 10.0
# A streamed reply is read this far: the stream answers, and is then cancelled.
STREAM_READ = 20
PROTOS: dict[str, ModuleType] = {
    "safety": safety_pb2,
    "tokenizer": tokenizer_pb2,
    "router": router_pb2,
    "worker": inference_pb2,
    "billing": billing_pb2,
    "imageres": imageres_pb2,
}


@dataclass(frozen=True)
class Method:
    service: str  # safety, tokenizer...
    descriptor: MethodDescriptor

    @property
    def path(self) -> str:
        return f"/{self.descriptor.containing_service.full_name}/{self.descriptor.name}"

    def __str__(self) -> str:
        return f"{self.service}:{self.descriptor.name}"


METHODS = [
    Method(name, method)
    for name, module in PROTOS.items()
    for svc in module.DESCRIPTOR.services_by_name.values()
    for method in svc.methods
]
FUZZ = settings(
    max_examples=EXAMPLES,
    # A failing example may take a whole deadline: shrinking would repeat it many times.
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)


def _wait_serving(address: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the service exited during startup"
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    pytest.fail(f"the service at {address} did not become ready")


@pytest.fixture(scope="module")
def services(stack, tmp_path_factory) -> Iterator[dict[str, str]]:
    """Where each service answers: the stack's, and a router and a billing of our own."""
    folder: Path = tmp_path_factory.mktemp("fuzz-grpc")
    own: dict[str, tuple[subprocess.Popen, str]] = {}
    for name, env in (
        ("router", {"TURNPIKE_WORKERS": ",".join(f"{w}={a}" for w, a in stack.workers.items())}),
        ("billing", {"TURNPIKE_BILLING_LEDGER": str(folder / "ledger.sqlite3")}),
    ):
        port = free_port()
        env = {f"TURNPIKE_{name.upper()}_PORT": str(port), **env}
        proc = start_service(name, env)
        own[name] = (proc, f"127.0.0.1:{port}")
    try:
        for proc, address in own.values():
            _wait_serving(address, proc)
        yield {
            "safety": stack.safety,
            "tokenizer": stack.tokenizer,
            "worker": next(iter(stack.workers.values())),
            "imageres": stack.imageres,
            **{name: address for name, (_, address) in own.items()},
        }
    finally:
        for proc, _ in own.values():
            proc.terminate()
            proc.wait(15)


SERVER_ERROR = re.compile(r"\bERROR\b|Traceback")


@pytest.fixture(autouse=True)
def no_server_errors(stack) -> Iterator[None]:
    """The stack services' logs gain no ERROR and no traceback during the test."""
    logs = {log: log.stat().st_size for log in Path(stack.log_dir).glob("*.log")}
    yield
    for log, size in logs.items():
        with log.open("rb") as file:
            file.seek(size)
            new = file.read().decode(errors="replace").splitlines()
        assert [line for line in new if SERVER_ERROR.search(line)] == [], log.name


def call(address: str, method: Method, request: bytes) -> grpc.StatusCode:
    """Send ``request`` (serialized, or garbage) to ``method``: the status it ends with."""
    with grpc.insecure_channel(address) as channel:
        try:
            if method.descriptor.server_streaming:
                stream = channel.unary_stream(method.path)(request, timeout=DEADLINE_S)
                for count, _ in enumerate(stream):
                    if count >= STREAM_READ:
                        stream.cancel()
                        return grpc.StatusCode.OK
            else:
                channel.unary_unary(method.path)(request, timeout=DEADLINE_S)
        except grpc.RpcError as err:
            return err.code()
        return grpc.StatusCode.OK


def assert_still_serving(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _fuzz(
    services: dict[str, str],
    method: Method,
    requests: st.SearchStrategy[bytes],
    examples: int = EXAMPLES,
) -> None:
    address = services[method.service]

    @settings(FUZZ, max_examples=examples)
    @given(request=requests)
    def send(request: bytes) -> None:
        status = call(address, method, request)
        assert status is not grpc.StatusCode.DEADLINE_EXCEEDED, f"{method} hung"
        assert status is not grpc.StatusCode.UNKNOWN, f"{method}: an unhandled exception"
        assert status is not grpc.StatusCode.INTERNAL, f"{method}: INTERNAL for its input"
        assert_still_serving(address)

    send()


def serialized(descriptor, oversized: bool = False) -> st.SearchStrategy[bytes]:
    return messages(descriptor, oversized=oversized).map(
        lambda message: message.SerializeToString()
    )


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_generated_messages(services: dict[str, str], method: Method) -> None:
    _fuzz(services, method, serialized(method.descriptor.input_type))


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_oversized_histories(services: dict[str, str], method: Method) -> None:
    # Each costs seconds (thousands of items rendered): a quarter of the examples.
    oversized = serialized(method.descriptor.input_type, oversized=True)
    _fuzz(services, method, oversized, examples=max(2, EXAMPLES // 4))


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_garbage_bytes(services: dict[str, str], method: Method) -> None:
    # What does not parse is INVALID_ARGUMENT (turnpike.grpc_malformed); what does is a
    # message like the generated ones.
    _fuzz(services, method, st.binary(min_size=1, max_size=512))
