"""Which backend serves a request: the name it carries, the simulator when it names none."""

from __future__ import annotations

import pytest

from turnpike.backend_names import BACKEND_NAMES, CEREBRAS, SIMULATOR
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.backends import Backends, InvalidRequestError, UnavailableBackend


class Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    async def generate(self, request):
        yield pb.GenerateEvent(error=pb.Error(code=self.name))


def request(backend: str = "") -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id="resp_b", model="any-model", backend=backend)


def test_the_named_backend_serves_and_no_name_means_the_simulator() -> None:
    sim, cerebras = Marker("sim"), Marker("cerebras")
    backends = Backends({SIMULATOR: sim, CEREBRAS: cerebras})
    assert backends.for_request(request()) is sim
    assert backends.for_request(request(SIMULATOR)) is sim
    assert backends.for_request(request(CEREBRAS)) is cerebras
    # The model id plays no part: only the backend name does.
    assert backends.for_request(pb.GenerateRequest(model="gpt-oss-120b")) is sim


def test_an_unknown_name_is_an_invalid_request() -> None:
    backends = Backends({SIMULATOR: Marker("sim")})
    with pytest.raises(InvalidRequestError, match="unknown backend 'tpu'") as info:
        backends.for_request(request("tpu"))
    for name in BACKEND_NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("name", [n for n in BACKEND_NAMES if n != SIMULATOR])
async def test_a_known_backend_this_worker_lacks_is_unavailable(name: str) -> None:
    unconfigured = Backends({SIMULATOR: Marker("sim")}).for_request(request(name))
    assert isinstance(unconfigured, UnavailableBackend)
    [event] = [e async for e in unconfigured.generate(request(name))]
    assert event.error.code == "backend_unavailable" and not event.error.retryable
    assert name in event.error.message


def test_the_simulator_is_required() -> None:
    with pytest.raises(ValueError, match="simulator"):
        Backends({CEREBRAS: Marker("cerebras")})
