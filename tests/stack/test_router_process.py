"""The router as a real process, routing over two fake workers (health service only)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import grpc
import pytest
from support.fake_worker import fake_worker
from support.procs import free_port, service_env, start_service

from turnpike.grpc_client import wait_healthy
from turnpike.router.v1 import router_pb2, router_pb2_grpc


async def route(stub, key: str, exclude=()) -> router_pb2.RouteDecision:
    return await stub.Route(
        router_pb2.RouteRequest(
            model="turnpike-sim-65", affinity_key=key, prompt_tokens=10, exclude_workers=exclude
        ),
        timeout=5,
    )


async def wait_for(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while True:
        result = await predicate()
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.05)


def stop_process(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=8)


async def test_router_process_routes_fails_over_and_exits_cleanly() -> None:
    port_a, port_b, port = free_port(), free_port(), free_port()
    worker_a, worker_b = await fake_worker(port_a), await fake_worker(port_b)
    proc = start_service(
        "router",
        {
            "TURNPIKE_ROUTER_PORT": str(port),
            "TURNPIKE_WORKERS": f"wa=127.0.0.1:{port_a},wb=127.0.0.1:{port_b}",
            "TURNPIKE_ROUTER_HEALTH_INTERVAL_S": "0.2",
            "TURNPIKE_MODELS_FILE": "",
            "CEREBRAS_API_KEY": "",
        },
    )
    try:
        assert await wait_healthy(f"127.0.0.1:{port}", timeout=20)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = router_pb2_grpc.RouterStub(channel)

            listed = await stub.ListModels(router_pb2.ListModelsRequest(), timeout=5)
            assert [m.id for m in listed.models] == [
                "turnpike-sim",
                "turnpike-sim-65",
                "turnpike-sim-4000",
            ]
            resolved = await stub.ResolveModel(
                router_pb2.ResolveModelRequest(model="turnpike-sim-1000"), timeout=5
            )
            assert (resolved.id, resolved.tokens_per_second) == ("turnpike-sim", 1000)
            for name in ("nope", "gpt-oss-120b"):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.ResolveModel(router_pb2.ResolveModelRequest(model=name), timeout=5)
                assert info.value.code() == grpc.StatusCode.NOT_FOUND
                assert info.value.details() == (
                    f"The model '{name}' does not exist or you do not have access to it."
                )
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Route(router_pb2.RouteRequest(model="nope"), timeout=5)
            assert info.value.code() == grpc.StatusCode.NOT_FOUND

            # Both workers up (the router looks right away if it has not yet).
            first = {f"c{i}": await route(stub, f"c{i}") for i in range(4)}
            assert {d.worker_id for d in first.values()} == {"wa", "wb"}
            assert first["c0"].model.id == "turnpike-sim-65"
            assert all(not d.affinity_hit for d in first.values())
            again = await route(stub, "c0")
            assert again.affinity_hit and again.worker_id == first["c0"].worker_id
            addresses = {"wa": f"127.0.0.1:{port_a}", "wb": f"127.0.0.1:{port_b}"}
            assert all(d.worker_address == addresses[d.worker_id] for d in first.values())

            # The caller could not reach a worker: avoided on request.
            excluded = await route(stub, "c0", exclude=[first["c0"].worker_id])
            assert excluded.worker_id != first["c0"].worker_id

            # Worker a goes away: its conversations move to b after a health round.
            await worker_a.stop(0)

            async def all_on_b():
                decisions = [await route(stub, key) for key in first]
                return all(d.worker_id == "wb" for d in decisions)

            assert await wait_for(all_on_b)

            # Nothing up at all: UNAVAILABLE with a clear message.
            await worker_b.stop(0)

            async def unavailable():
                try:
                    await route(stub, "c9")
                except grpc.aio.AioRpcError as exc:
                    return exc
                return None

            error = await wait_for(unavailable)
            assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
            assert error.details() == "no healthy worker for model turnpike-sim-65"

            # A worker coming back is used again.
            worker_b = await fake_worker(port_b)

            async def routable():
                try:
                    return (await route(stub, "c9")).worker_id == "wb"
                except grpc.aio.AioRpcError:
                    return False

            assert await wait_for(routable)

        assert stop_process(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await worker_a.stop(0)
        await worker_b.stop(0)


def test_router_exits_with_clear_error_on_bad_models_file(tmp_path) -> None:
    bad = tmp_path / "models.json"
    bad.write_text('{"models": [{"id": "x"}]}')
    proc = subprocess.run(
        [sys.executable, "-m", "turnpike.router"],
        env=service_env({"TURNPIKE_MODELS_FILE": str(bad)}),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2
    assert "models[0] (x): missing field" in proc.stderr
    assert "Traceback" not in proc.stderr
