"""The gateway's code on the images' own Python (Debian's 3.11.2), where it differs from a
newer 3.11: an API error from one of the stages that run together (safety away, the
tokenizer away) must reach the client as itself (a 503), not wrapped in an ExceptionGroup
(a 500), as ``raise`` inside ``except*`` did before Python 3.11.4. Found by the chaos test."""

from __future__ import annotations

from testcontainers.core.container import DockerContainer

PROBE = r"""
import asyncio, contextlib, sys
from types import SimpleNamespace
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.pipeline.stages.base import Concurrently

class Away:
    def __init__(self, name): self.name, self.output = name, name
    def applies(self, p): return True
    async def run(self, p, res):
        raise ApiError(503, f"The {self.name} service is unavailable; please retry.")
    def check(self, p): pass

p = SimpleNamespace(ctx=SimpleNamespace(stage=lambda name: contextlib.nullcontext()))
try:
    asyncio.run(Concurrently(Away("safety"), Away("tokenizer")).perform(p, None))
except Exception as err:
    print(sys.version.split()[0], type(err).__name__, getattr(err, "status", None))
"""


def test_a_stage_error_among_concurrent_stages_is_the_api_error(images):
    container = DockerContainer(images.service("gateway")).with_command(["python", "-c", PROBE])
    with container:
        wrapped = container.get_wrapped_container()
        status = wrapped.wait(timeout=60)
        output = wrapped.logs().decode()
    assert status["StatusCode"] == 0, output
    version, kind, code = output.strip().splitlines()[-1].split()
    assert (kind, code) == ("ApiError", "503"), f"on Python {version}: {output}"
