"""Defects the gRPC fuzzer (test_fuzz_grpc) found, each reproduced on the stack's real
services: a request message that does not parse is INVALID_ARGUMENT on every method
(grpcio alone answers INTERNAL, or UNKNOWN with a logged traceback on a streaming
method), and imageres' legacy hop refuses a worker address that is none at once instead
of waiting out the caller's deadline on it."""

from __future__ import annotations

import time

import grpc
import pytest

from turnpike.imageres.v1 import imageres_pb2
from turnpike.inference.v1 import inference_pb2

pytestmark = pytest.mark.stack

GARBAGE = b"\xff\xff\xff\xff"  # field 31, wire type 7: no message parses from it


def _status(address: str, path: str, request: bytes, streaming: bool) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        try:
            if streaming:
                list(channel.unary_stream(path)(request, timeout=10))
            else:
                channel.unary_unary(path)(request, timeout=10)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("service", "path", "streaming"),
    [
        ("worker", "/turnpike.inference.v1.Inference/Generate", True),
        ("worker", "/turnpike.inference.v1.Inference/GenerateBatched", True),
        ("tokenizer", "/turnpike.tokenizer.v1.Tokenizer/CountText", False),
        ("safety", "/turnpike.safety.v1.Safety/Classify", False),
        ("imageres", "/turnpike.imageres.v1.ImageResolver/ProxyGenerate", True),
    ],
)
def test_a_request_that_does_not_parse_is_invalid_argument(stack, service, path, streaming):
    address = next(iter(stack.workers.values())) if service == "worker" else getattr(stack, service)
    assert _status(address, path, GARBAGE, streaming) is grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("address", ["not an address", "ñ", "127.0.0.1", "host:0", "host:99999"])
def test_proxy_generate_refuses_a_worker_address_that_is_none(stack, address):
    request = imageres_pb2.ProxyGenerateRequest(
        worker_address=address, request=inference_pb2.GenerateRequest(model="turnpike-sim")
    )
    started = time.monotonic()
    status = _status(
        stack.imageres,
        "/turnpike.imageres.v1.ImageResolver/ProxyGenerate",
        request.SerializeToString(),
        streaming=True,
    )
    assert status is grpc.StatusCode.INVALID_ARGUMENT
    assert time.monotonic() - started < 5
