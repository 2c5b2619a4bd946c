"""The container stack through whichever Compose this machine has: ``make up``, ``make
down``, ``make ps``, ``make logs``; the container tests drive a stack with it too.

Compose is ``docker compose`` (v2) when that answers, else ``docker-compose`` (1.29+).
v1 cannot wait for health (``up --wait`` is v2 only), so ``up`` starts the stack detached
and then polls every container's health itself, printing progress, until all are
healthy, one has failed, or the time is up.

Profiles: ``jaeger`` is enabled when JAEGER_IMAGE exists locally (``make up`` says
plainly when it does not); ``PROFILES`` (e.g. ``PROFILES=redis``) adds others.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "compose.yaml"
ENV_FILE = REPO / ".env"
ALL_PROFILES = ("jaeger", "redis", "llamacpp")
UP_TIMEOUT_S = 180.0
POLL_S = 0.5


class ComposeError(RuntimeError):
    pass


def compose_command() -> list[str]:
    """``docker compose`` if the v2 plugin answers, else ``docker-compose``."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise ComposeError("no Compose here: neither `docker compose` nor `docker-compose` runs")


def compose_version(command: Sequence[str]) -> str:
    out = subprocess.run([*command, "version"], capture_output=True, text=True)
    return (out.stdout.strip().splitlines() or ["unknown"])[0]


def read_env(path: Path = ENV_FILE, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The .env settings, each overridden by the same variable in the environment (as
    Compose does)."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return {key: environ.get(key, value) for key, value in values.items()}


def image_exists(name: str) -> bool:
    probe = subprocess.run(["docker", "image", "inspect", name], capture_output=True)
    return probe.returncode == 0


@dataclass(frozen=True)
class ContainerState:
    service: str
    name: str
    status: str  # created | running | exited | ...
    health: str  # starting | healthy | unhealthy | "" (no health check)
    exit_code: int

    @property
    def healthy(self) -> bool:
        return self.status == "running" and self.health in ("healthy", "")

    @property
    def failed(self) -> bool:
        return self.status in ("exited", "dead") or self.health == "unhealthy"


@dataclass
class Compose:
    """One Compose project of compose.yaml. ``env`` overrides .env (and the caller's
    environment) for every command."""

    project: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    profiles: Sequence[str] = ()
    command: list[str] = field(default_factory=compose_command)
    quiet: bool = False  # keep Compose's own output (shown when a command fails)

    def __post_init__(self) -> None:
        settings = read_env(environ={**os.environ, **self.env})
        self.project = self.project or settings.get("COMPOSE_PROJECT_NAME", "turnpike")
        self.settings = settings

    # -- commands -------------------------------------------------------------------------

    def base(self, profiles: Iterable[str] | None = None) -> list[str]:
        args = [*self.command, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
        args += ["-p", str(self.project)]
        for profile in self.profiles if profiles is None else profiles:
            args += ["--profile", profile]
        return args

    def process_env(self) -> dict[str, str]:
        env = {**os.environ, **self.env, "COMPOSE_PROJECT_NAME": str(self.project)}
        if "redis" in self.profiles and not env.get("TURNPIKE_REDIS_URL"):
            # The optional tier is one flag away: with its profile, the gateway uses it.
            env["TURNPIKE_REDIS_URL"] = f"redis://redis:{self.settings['REDIS_PORT']}/0"
        if "llamacpp" in self.profiles and not env.get("TURNPIKE_OPENAI_COMPAT_BASE_URL"):
            # The real model is one flag away too: the workers' OpenAI-compatible backend.
            env["TURNPIKE_OPENAI_COMPAT_BASE_URL"] = "http://llamacpp:8089/v1"
            if not env.get("TURNPIKE_OPENAI_COMPAT_MODEL"):
                env["TURNPIKE_OPENAI_COMPAT_MODEL"] = "gemma-3-270m"  # its --alias
            # Its template makes no tool calls: a required one is asked as JSON.
            env.setdefault("TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON", "true")
            # Its prefill on CPU is long (16k tokens at a few hundred a second): the
            # gateway waits longer for a silent worker.
            env.setdefault("TURNPIKE_WORKER_SILENCE_TIMEOUT_S", "180")
        return env

    def run(
        self, *args: str, profiles: Iterable[str] | None = None, capture: bool = False
    ) -> subprocess.CompletedProcess:
        capture = capture or self.quiet
        done = subprocess.run(
            [*self.base(profiles), *args],
            cwd=REPO,
            env=self.process_env(),
            capture_output=capture,
            text=True,
        )
        if done.returncode != 0:
            detail = f"\n{done.stderr.strip()}" if capture else ""
            raise ComposeError(
                f"`{' '.join(args)}` failed with exit code {done.returncode}{detail}"
            )
        return done

    def up(self, timeout_s: float = UP_TIMEOUT_S, progress: bool = True) -> float:
        """Start detached and wait until every container is healthy; the seconds taken."""
        begin = time.monotonic()
        self.run("up", "--detach", "--remove-orphans")
        return self.wait_healthy(timeout_s, begin=begin, progress=progress)

    def down(self, volumes: bool = False) -> None:
        args = ["down", "--remove-orphans"] + (["--volumes"] if volumes else [])
        # Every profile, so containers of an optional service go too.
        self.run(*args, profiles=ALL_PROFILES)

    # -- inspection -------------------------------------------------------------------------

    def container_ids(self, service: str | None = None, all_states: bool = True) -> list[str]:
        args = [
            "docker",
            "ps",
            "-q",
            "--filter",
            f"label=com.docker.compose.project={self.project}",
        ]
        if all_states:
            args.append("-a")
        if service:
            args += ["--filter", f"label=com.docker.compose.service={service}"]
        out = subprocess.run(args, capture_output=True, text=True, check=True)
        return out.stdout.split()

    def container_id(self, service: str) -> str:
        ids = self.container_ids(service)
        if len(ids) != 1:
            raise ComposeError(f"expected one container of {service}, found {len(ids)}")
        return ids[0]

    def states(self) -> list[ContainerState]:
        ids = self.container_ids()
        if not ids:
            return []
        out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True)
        states = []
        for info in json.loads(out.stdout or "[]"):
            state = info["State"]
            states.append(
                ContainerState(
                    service=info["Config"]["Labels"].get("com.docker.compose.service", "?"),
                    name=info["Name"].lstrip("/"),
                    status=state["Status"],
                    health=(state.get("Health") or {}).get("Status", ""),
                    exit_code=state.get("ExitCode", 0),
                )
            )
        return sorted(states, key=lambda s: s.service)

    def wait_healthy(
        self,
        timeout_s: float = UP_TIMEOUT_S,
        services: Iterable[str] | None = None,
        begin: float | None = None,
        progress: bool = False,
    ) -> float:
        """Poll until every container (or those of ``services``) is healthy."""
        begin = time.monotonic() if begin is None else begin
        wanted = set(services) if services is not None else None
        last_report = ""
        while True:
            states = [s for s in self.states() if wanted is None or s.service in wanted]
            elapsed = time.monotonic() - begin
            ready = [s for s in states if s.healthy]
            if (
                states
                and len(ready) == len(states)
                and (wanted is None or wanted <= {s.service for s in states})
            ):
                return elapsed
            if failed := [s for s in states if s.failed]:
                raise ComposeError(self._failure("failed", failed))
            if elapsed > timeout_s:
                raise ComposeError(
                    self._failure(
                        f"not healthy after {timeout_s:g} s", [s for s in states if not s.healthy]
                    )
                )
            report = f"{len(ready)}/{len(states)} healthy" + (
                f"; waiting for {', '.join(s.service for s in states if not s.healthy)}"
                if states
                else ""
            )
            if progress and report != last_report:
                print(f"[up] {elapsed:5.1f} s  {report}", flush=True)
                last_report = report
            time.sleep(POLL_S)

    def _failure(self, what: str, states: list[ContainerState]) -> str:
        lines = [f"{self.project}: {what}:"]
        for state in states:
            lines.append(
                f"  {state.service} ({state.name}): {state.status} {state.health} exit={state.exit_code}"
            )
            logs = subprocess.run(
                ["docker", "logs", "--tail", "15", state.name], capture_output=True, text=True
            )
            lines += ["    " + line for line in (logs.stdout + logs.stderr).splitlines()[-15:]]
        return "\n".join(lines)


# -- make targets ----------------------------------------------------------------------------


def stack_for_make() -> Compose:
    extra = [p for p in os.environ.get("PROFILES", "").replace(",", " ").split() if p]
    return Compose(profiles=extra)


def cmd_up(_: argparse.Namespace) -> int:
    compose = stack_for_make()
    settings = compose.settings
    jaeger = settings["JAEGER_IMAGE"]
    profiles = list(compose.profiles)
    if image_exists(jaeger):
        profiles.append("jaeger")
    else:
        print(
            f"[up] Jaeger: image {jaeger} is not on this machine (and cannot be built from "
            "Debian packages), so the stack runs WITHOUT Jaeger. Every service still exports "
            f"its traces over OTLP to {settings['OTEL_EXPORTER_OTLP_ENDPOINT']}: load the image "
            "(docker load) and `make up` again, or set OTEL_EXPORTER_OTLP_ENDPOINT in .env to "
            "your collector.",
            flush=True,
        )
    compose.profiles = sorted(set(profiles))
    print(
        f"[up] {compose_version(compose.command)}; project {compose.project}; profiles: "
        f"{', '.join(compose.profiles) or 'none'}",
        flush=True,
    )
    try:
        elapsed = compose.up(progress=True)
    except ComposeError as err:
        print(f"[up] {err}", file=sys.stderr)
        return 1
    address = f"http://{settings['PUBLISH_ADDRESS']}:{settings['GATEWAY_PUBLISHED_PORT']}"
    print(f"[up] every container healthy after {elapsed:.1f} s")
    keys = settings.get("TURNPIKE_API_KEYS", "")
    key = keys.split(":")[0] if keys else "one of the tenants file"
    print(f"[up] API: {address}/v1 (key {key})")
    prometheus = f"http://{settings['PUBLISH_ADDRESS']}:{settings['PROMETHEUS_PUBLISHED_PORT']}"
    print(f"[up] Prometheus: {prometheus} (UI; HTTP API under /api/v1)")
    if "jaeger" in compose.profiles:
        print(
            f"[up] Jaeger UI: http://{settings['PUBLISH_ADDRESS']}:{settings['JAEGER_UI_PUBLISHED_PORT']}"
        )
    print("[up] `make ps`, `make logs`, `make down`")
    return 0


def cmd_down(_: argparse.Namespace) -> int:
    stack_for_make().down()
    return 0


def cmd_ps(_: argparse.Namespace) -> int:
    stack_for_make().run("ps", profiles=ALL_PROFILES)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    flags = ["--tail", str(args.tail)] + (["--follow"] if args.follow else [])
    try:
        stack_for_make().run("logs", *flags, *args.services, profiles=ALL_PROFILES)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start the stack and wait until healthy").set_defaults(
        run=cmd_up
    )
    commands.add_parser("down", help="remove the stack (the ledger volume stays)").set_defaults(
        run=cmd_down
    )
    commands.add_parser("ps", help="the stack's containers").set_defaults(run=cmd_ps)
    logs = commands.add_parser("logs", help="the stack's logs")
    logs.add_argument("services", nargs="*")
    logs.add_argument("--tail", type=int, default=200)
    logs.add_argument("--follow", action="store_true")
    logs.set_defaults(run=cmd_logs)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except ComposeError as err:
        print(f"[compose] {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
