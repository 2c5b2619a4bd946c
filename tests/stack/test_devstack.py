"""The local process launcher (``src/devstack``): environment wiring without
processes, then real processes with stand-in services (tests/support/standin_*.py)."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from support.standin_stack import SUPPORT_DIR, standin_services

from turnpike.catalogue import (
    BACKENDS,
    GATEWAY,
    IMAGERES,
    ROUTER,
    SAFETY,
    SERVICES,
    TOKENIZER,
    WORKER,
    service,
)
from turnpike.config import DEV_API_KEY
from turnpike.devstack.__main__ import config_from_args, parse_args
from turnpike.devstack.environment import build_env
from turnpike.devstack.layout import ServiceSpec, StackConfig, default_services
from turnpike.devstack.supervisor import LocalStack, StackError, check_ports_free

BACKEND_NAMES = [b.name for b in BACKENDS]
# make run's layout: one of each service, and a second worker on the next port.
DEFAULT_PORTS = {s.port for s in SERVICES} | {WORKER.port + 1}


def env_of(config: StackConfig, name: str, environ: dict[str, str] | None = None) -> dict:
    spec = next(s for s in default_services(config) if s.name == name)
    return build_env(config, spec, environ={} if environ is None else environ)


# -- configuration and environment, no processes -------------------------------------


def test_default_layout_wires_every_service_to_the_others(tmp_path: Path) -> None:
    config = StackConfig(state_dir=tmp_path)
    services = {s.name: s for s in default_services(config)}
    assert list(services) == [*BACKEND_NAMES, "worker-1", "worker-2", "gateway"]
    assert {s.port for s in services.values()} == DEFAULT_PORTS
    assert services["gateway"].kind == "http"
    assert all(s.kind == "grpc" for n, s in services.items() if n != "gateway")
    assert services["worker-2"].module == "turnpike.worker"

    router = env_of(config, "router")
    w1, w2 = WORKER.port, WORKER.port + 1
    assert router["TURNPIKE_WORKERS"] == f"worker-1=127.0.0.1:{w1},worker-2=127.0.0.1:{w2}"
    assert router["TURNPIKE_ROUTER_PORT"] == str(ROUTER.port)

    gateway = env_of(config, "gateway")
    assert gateway["TURNPIKE_GATEWAY_HOST"] == "127.0.0.1"
    assert gateway["TURNPIKE_GATEWAY_PORT"] == str(GATEWAY.port)
    for svc in ("SAFETY", "TOKENIZER", "ROUTER", "BILLING", "IMAGERES"):
        assert gateway[f"TURNPIKE_{svc}_ADDR"] == service(svc.lower()).loopback_address
    assert gateway["PYTHONUNBUFFERED"] == "1"

    billing = env_of(config, "billing")
    assert billing["TURNPIKE_BILLING_LEDGER"] == str(tmp_path / "billing" / "ledger.sqlite3")
    assert env_of(config, "tokenizer")["TURNPIKE_VOCAB_DIR"] == str(tmp_path / "vocab")

    worker2 = env_of(config, "worker-2")
    assert worker2["TURNPIKE_WORKER_ID"] == "worker-2"
    assert worker2["TURNPIKE_WORKER_PORT"] == str(w2)
    assert env_of(config, "worker-1")["TURNPIKE_WORKER_PORT"] == str(w1)


def test_environment_precedence_and_pass_through(tmp_path: Path) -> None:
    caller = {
        "PATH": "/bin",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
        "OTEL_SERVICE_NAME": "caller",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=dev",
        "TURNPIKE_DEFAULT_MODEL": "from-shell",
        "TURNPIKE_SAFETY_PORT": "1",  # the stack's wiring wins over the shell
    }
    extra = {"TURNPIKE_MAX_BODY_BYTES": "10", "TURNPIKE_WORKER_ID": "not-an-identity"}
    config = StackConfig(state_dir=tmp_path, extra_env=extra)
    worker = env_of(config, "worker-2", caller)
    assert worker["PATH"] == "/bin"
    assert worker["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4317"
    assert worker["OTEL_SERVICE_NAME"] == "worker"
    assert worker["OTEL_RESOURCE_ATTRIBUTES"] == (
        "deployment.environment=dev,service.instance.id=worker-2"
    )
    assert worker["TURNPIKE_DEFAULT_MODEL"] == "from-shell"
    assert worker["TURNPIKE_SAFETY_PORT"] == str(SAFETY.port)
    assert worker["TURNPIKE_MAX_BODY_BYTES"] == "10"
    assert worker["TURNPIKE_WORKER_ID"] == "worker-2"  # identity beats extra_env
    assert env_of(config, "gateway", caller)["OTEL_SERVICE_NAME"] == "gateway"

    sealed = StackConfig(state_dir=tmp_path, inherit_turnpike_env=False)
    env = env_of(sealed, "gateway", caller)
    assert "TURNPIKE_DEFAULT_MODEL" not in env
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4317"


def test_cli_options_shift_ports_and_size_the_worker_pool(tmp_path: Path) -> None:
    args = parse_args(["--state", str(tmp_path), "--port-base", "1000", "--workers", "3"])
    config = config_from_args(args)
    assert config.state_dir == tmp_path.resolve()
    assert config.gateway_port == GATEWAY.port + 1000
    assert config.port("safety") == SAFETY.port + 1000
    assert config.port("imageres") == IMAGERES.port + 1000
    w1 = WORKER.port + 1000
    assert config.workers == {"worker-1": w1, "worker-2": w1 + 1, "worker-3": w1 + 2}
    router = env_of(config, "router")
    assert router["TURNPIKE_WORKERS"] == (
        f"worker-1=127.0.0.1:{w1},worker-2=127.0.0.1:{w1 + 1},worker-3=127.0.0.1:{w1 + 2}"
    )
    assert [s.name for s in default_services(config)][-2:] == ["worker-3", "gateway"]

    config = config_from_args(parse_args(["--gateway-port", "8099"]))
    assert config.gateway_port == 8099
    assert config.port("safety") == SAFETY.port
    with pytest.raises(SystemExit):
        parse_args(["--workers", "0"])


def test_free_port_layout_avoids_the_defaults(tmp_path: Path) -> None:
    config = StackConfig.on_free_ports(state_dir=tmp_path)
    ports = set(config.ports().values())
    assert len(ports) == 8
    assert not ports & DEFAULT_PORTS


def test_a_private_stack_shares_nothing_with_make_run_or_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where new state folders go
    config = StackConfig.private(workers=1, extra_env={"TURNPIKE_MAX_BODY_BYTES": "10"})
    assert not set(config.ports().values()) & DEFAULT_PORTS
    assert config.state_dir.parent == tmp_path and not any(config.state_dir.iterdir())
    assert StackConfig.private().state_dir != config.state_dir
    shell = {"TURNPIKE_DEFAULT_MODEL": "from-shell", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}
    env = env_of(config, "gateway", shell)
    assert "TURNPIKE_DEFAULT_MODEL" not in env
    assert env["OTEL_SDK_DISABLED"] == "true" and env["TURNPIKE_MAX_BODY_BYTES"] == "10"
    traced = StackConfig.private(tmp_path, extra_env={"OTEL_SDK_DISABLED": "false"})
    assert env_of(traced, "gateway")["OTEL_SDK_DISABLED"] == "false"


def test_endpoints_name_every_address_and_the_keys(tmp_path: Path) -> None:
    keys = "sk-a:alice,sk-b:bob"
    config = StackConfig(
        state_dir=tmp_path, extra_env={"TURNPIKE_API_KEYS": keys}, inherit_turnpike_env=False
    )
    ep = LocalStack(config).endpoints
    gateway = GATEWAY.loopback_address
    assert ep.base_url == f"http://{gateway}/v1"
    assert ep.ws_url == f"ws://{gateway}/v1/responses"
    assert ep.ws_base_url == f"ws://{gateway}/v1"
    assert ep.api_key == "sk-a"
    assert ep.api_keys == {"alice": "sk-a", "bob": "sk-b"}
    assert ep.router == ROUTER.loopback_address
    w1, w2 = WORKER.port, WORKER.port + 1
    assert ep.workers == {"worker-1": f"127.0.0.1:{w1}", "worker-2": f"127.0.0.1:{w2}"}
    assert (ep.max_body_bytes, ep.max_frame_bytes) == (None, None)
    limited = {"TURNPIKE_MAX_BODY_BYTES": "1024", "TURNPIKE_MAX_FRAME_BYTES": "2048"}
    ep = LocalStack(replace(config, extra_env=limited)).endpoints
    assert (ep.max_body_bytes, ep.max_frame_bytes) == (1024, 2048)
    sealed = StackConfig(state_dir=tmp_path, inherit_turnpike_env=False)
    assert LocalStack(sealed).endpoints.api_key == DEV_API_KEY


def test_bad_layouts_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="share a port"):
        StackConfig(state_dir=tmp_path).with_ports(safety=TOKENIZER.port)
    with pytest.raises(ValueError, match="exactly"):
        StackConfig(state_dir=tmp_path).with_ports(cache=1)
    with pytest.raises(ValueError, match="unique"):
        LocalStack(
            StackConfig(state_dir=tmp_path),
            [ServiceSpec("a", "m", 1), ServiceSpec("a", "m", 2)],
        )


def test_a_busy_port_is_named_and_nothing_starts(tmp_path: Path) -> None:
    config = StackConfig.on_free_ports(state_dir=tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", config.port("router")))
        holder.listen()
        stack = LocalStack(config)
        with pytest.raises(StackError, match=rf"port {config.port('router')} \(router\)"):
            stack.start()
    assert stack.pids == {}
    assert not config.log_dir.exists()


# -- real processes with stand-ins ----------------------------------------------------


def standin_config(tmp_path: Path, **kwargs) -> StackConfig:
    kwargs.setdefault("stop_timeout_s", 5.0)
    return StackConfig.private(
        tmp_path,
        extra_env={"PYTHONPATH": str(SUPPORT_DIR)},
        startup_timeout_s=kwargs.pop("startup_timeout_s", 15.0),
        **kwargs,
    )


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for its reaper."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def child_pid(log: Path) -> int:
    line = next(ln for ln in log.read_text().splitlines() if "child pid" in ln)
    return int(line.rsplit(" ", 1)[1])


def test_start_waits_for_health_then_gateway_and_stop_leaves_nothing(tmp_path: Path) -> None:
    # stop_timeout_s short: worker-2 ignores SIGTERM, so stop() has to escalate.
    config = standin_config(tmp_path, stop_timeout_s=1.5)
    overrides = {"worker-2": {"STANDIN_IGNORE_SIGTERM": "1", "STANDIN_CHILD": "1"}}
    stack = LocalStack(config, standin_services(config, overrides))
    try:
        stack.start()
        # Every stand-in answered its first two probes "not ready"; start() returned, so
        # it kept polling: a third probe now finds everything ready.
        reply = httpx.get(f"http://{stack.endpoints.gateway}/readyz", trust_env=False)
        assert reply.status_code == 200
        for name in [*BACKEND_NAMES, "worker-1", "worker-2"]:
            assert "serving on" in stack.tail(name)
        state = httpx.get(f"http://{stack.endpoints.gateway}/state", trust_env=False).json()
        # The gateway started only once every backend was listening.
        assert len(state["backends_at_start"]) == 7
        assert all(state["backends_at_start"].values())
        assert state["env"]["TURNPIKE_ROUTER_ADDR"] == stack.endpoints.router
        assert state["env"]["OTEL_SERVICE_NAME"] == "standin_http"  # the module run
        assert state["env"]["OTEL_RESOURCE_ATTRIBUTES"] == "service.instance.id=gateway"
        assert stack.exited() == []
        assert stack.ready_after_s is not None and 0 < stack.ready_after_s < 15
        grandchild = child_pid(stack.log_path("worker-2"))
        pids = stack.pids
    finally:
        begin = time.monotonic()
        stack.stop()
        stop_took = time.monotonic() - begin
    assert stop_took < 8
    assert all(gone(pid) for pid in [*pids.values(), grandchild])
    assert stack.returncode("worker-2") == -signal.SIGKILL
    assert all(stack.returncode(n) == 0 for n in pids if n != "worker-2")
    assert "standin gateway: stopped" in stack.tail("gateway")
    stack.stop()  # idempotent


def test_a_crash_during_startup_is_named_with_its_log_and_the_rest_stopped(
    tmp_path: Path,
) -> None:
    config = standin_config(tmp_path)
    stack = LocalStack(config, standin_services(config, {"billing": {"STANDIN_CRASH": "1"}}))
    with pytest.raises(StackError) as caught:
        stack.start()
    message = str(caught.value)
    assert "billing (python -m standin_grpc) exited with code 3 during startup" in message
    assert "crashing on purpose" in message
    assert str(stack.log_path("billing")) in message
    assert "gateway" not in stack.pids  # never started
    assert all(gone(pid) for pid in stack.pids.values())


def test_a_service_that_never_becomes_ready_times_out_by_name(tmp_path: Path) -> None:
    # Long enough for the other stand-ins to start on a loaded 2-core machine (with 2 s,
    # safety was once still starting and was named too).
    config = standin_config(tmp_path, startup_timeout_s=6.0)
    stuck = {"tokenizer": {"STANDIN_NOT_SERVING_CHECKS": "1000000"}}
    stack = LocalStack(config, standin_services(config, stuck))
    begin = time.monotonic()
    with pytest.raises(StackError) as caught:
        stack.start()
    assert time.monotonic() - begin < 15
    message = str(caught.value)
    assert message.startswith("not ready after 6 s:")
    assert f"tokenizer on {config.address(config.port('tokenizer'))}" in message
    assert "never reported SERVING" in message
    assert "safety on" not in message
    assert all(gone(pid) for pid in stack.pids.values())


def test_a_process_that_dies_while_running_is_reported(tmp_path: Path) -> None:
    config = standin_config(tmp_path)
    with LocalStack(config, standin_services(config)) as stack:
        os.kill(stack.pids["worker-1"], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not stack.exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        [dead] = stack.exited()
        assert (dead.name, dead.module, dead.returncode) == ("worker-1", "standin_grpc", -9)
        assert "exited with code -9 while running" in dead.describe("while running")
        assert "serving on" in dead.tail
        pids = stack.pids
    assert all(gone(pid) for pid in pids.values())


# -- python -m turnpike.devstack ---------------------------------------------------------------


def free_port_base() -> int:
    """A --port-base that puts every backend port on a free one."""
    backends = [s.port for s in SERVICES if s.protocol == "grpc"]
    for base in range(1_013, 10_000, 131):
        try:
            check_ports_free("127.0.0.1", {str(p): p + base for p in backends})
        except StackError:
            continue
        return base
    raise AssertionError("no free port range")


class Cli:
    """``python -m turnpike.devstack`` over stand-ins, its stdout read line by line."""

    def __init__(self, tmp_path: Path, overrides: dict | None = None) -> None:
        self.state = tmp_path / "state"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TURNPIKE_")},
            "PYTHONPATH": os.pathsep.join([str(SUPPORT_DIR), os.environ.get("PYTHONPATH", "")]),
            "STANDIN_OVERRIDES": json.dumps(overrides or {}),
            "PYTHONUNBUFFERED": "1",
        }
        self.port_base = free_port_base()
        self.gateway_port = StackConfig.on_free_ports(state_dir=tmp_path).gateway_port
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "standin_stack", "--state", str(self.state)),
                *("--workers", "1", "--port-base", str(self.port_base)),
                *("--gateway-port", str(self.gateway_port)),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.seen: list[str] = []

    def _pump(self) -> None:
        assert self.proc.stdout is not None  # a pipe, asked for above
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.seen.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                break
            if text in self.seen[-1]:
                return "".join(self.seen)
        self.kill()
        raise AssertionError(f"no {text!r} in output:\n{''.join(self.seen)}")

    def service_pids(self) -> list[int]:
        pids = []
        for log in (self.state / "logs").glob("*.log"):
            for line in log.read_text().splitlines():
                if " pid " in line:
                    pids.append(int(line.split(" pid ")[1].split()[0]))
        return pids

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def test_cli_prints_where_things_are_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    try:
        out = cli.wait_for("Ctrl-C stops everything.")
        assert "Turnpike is ready" in out
        assert f"127.0.0.1:{SAFETY.port + cli.port_base}" in out
        assert f"http://127.0.0.1:{cli.gateway_port}/v1" in out
        assert str(cli.state / "logs" / "worker-1.log") in out
        assert "/v1" in out and "sk-turnpike-dev" in out and "curl -s" in out
        pids = cli.service_pids()
        assert len(pids) == 6  # five backends and one worker (the gateway logs no pid)
        cli.proc.send_signal(signal.SIGTERM)
        assert cli.proc.wait(timeout=15) == 0
    finally:
        cli.kill()
    assert all(gone(pid) for pid in pids)


def test_cli_reports_a_dead_service_and_exits_1(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    try:
        cli.wait_for("Ctrl-C stops everything.")
        pids = cli.service_pids()
        worker = next(
            int(ln.split(" pid ")[1].split()[0])
            for ln in (cli.state / "logs" / "worker-1.log").read_text().splitlines()
            if " pid " in ln
        )
        os.kill(worker, signal.SIGKILL)
        assert cli.proc.wait(timeout=15) == 1
        assert cli.proc.stderr is not None
        err = cli.proc.stderr.read()
        assert "worker-1 (python -m standin_grpc) exited with code -9 while running" in err
    finally:
        cli.kill()
    assert all(gone(pid) for pid in pids)
