"""``python -m turnpike.devstack`` (``make run``): the whole stack in the foreground.

Starts every service, prints where things are, then waits. Ctrl-C or SIGTERM stops
every process it started and exits 0; a service that dies is reported with the end of
its log, the rest are stopped, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from turnpike.catalogue import GATEWAY, SAFETY, WORKER, loopback_workers
from turnpike.config import default_state_dir
from turnpike.devstack.layout import ServiceSpec, StackConfig, default_services
from turnpike.devstack.llamacpp import CONTAINER_PORT, LlamaServer, LlamaServerError
from turnpike.devstack.supervisor import LocalStack, StackError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m turnpike.devstack",
        description="Run the Turnpike stack as local processes on loopback.",
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=default_state_dir(),
        help="folder for logs, the billing ledger and the vocabulary "
        "(default: var/ at the top of the checkout)",
    )
    parser.add_argument(
        "--gateway-port",
        type=int,
        help=f"gateway HTTP port (default {GATEWAY.port}, plus --port-base)",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=0,
        metavar="N",
        help="add N to every default port, to run beside another stack (e.g. 1000: "
        f"gateway {GATEWAY.port + 1000}, safety {SAFETY.port + 1000}, "
        f"workers {WORKER.port + 1000}...)",
    )
    parser.add_argument("--workers", type=int, default=2, help="inference workers (default 2)")
    parser.add_argument(
        "--llamacpp",
        action="store_true",
        help="also run llama.cpp's server with Gemma 3 270M (the image `make image-llamacpp` "
        f"builds) on port {CONTAINER_PORT} (plus --port-base), served as the model "
        "self-hosted beside the simulator",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def config_from_args(
    args: argparse.Namespace, extra_env: dict[str, str] | None = None
) -> StackConfig:
    config = StackConfig(
        state_dir=args.state, workers=loopback_workers(args.workers), extra_env=extra_env or {}
    ).shifted(args.port_base)
    if args.gateway_port is not None:
        config = config.with_ports(gateway=args.gateway_port)
    return config


def banner(stack: LocalStack, llama: LlamaServer | None = None) -> str:
    ep = stack.endpoints
    cwd = Path.cwd()

    def shown(path: Path) -> str:
        return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)

    # The gateway (what users talk to) first, then the backends in start order.
    ordered = sorted(stack.services, key=lambda spec: spec.kind != "http")
    rows = [("service", "address", "metrics", "log")]
    rows += [
        (
            spec.name,
            stack.config.address(spec.port),
            f"{ep.metrics[spec.name]}/metrics",
            shown(stack.log_path(spec.name)),
        )
        for spec in ordered
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    table = "\n".join(
        f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows
    )
    body = '{"model":"turnpike-sim","input":"Say hello"}'
    curl = (
        f"curl -s {ep.base_url}/responses -H 'Authorization: Bearer {ep.api_key}' "
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )
    return "\n".join(
        [
            f"Turnpike is ready ({stack.ready_after_s:.1f} s).",
            "",
            table,
            "",
            f"  API        {ep.base_url}",
            f"  WebSocket  {ep.ws_url}",
            f"  dashboard  http://{ep.gateway}/dashboard",
            f"  API key    {ep.api_key or 'one of the tenants file (its keys are not shown)'}",
            f"  try        {curl}",
            f'  SDK        OpenAI(base_url="{ep.base_url}", api_key="{ep.api_key}")',
            f"  state      {shown(ep.state_dir)} (logs in {shown(ep.log_dir)})",
            *(
                [
                    f"  real model self-hosted: llama.cpp's server at {llama.base_url} ({llama.image})"
                ]
                if llama
                else []
            ),
            "",
            "Ctrl-C stops everything.",
        ]
    )


def main(
    argv: list[str] | None = None,
    services: Callable[[StackConfig], list[ServiceSpec]] = default_services,
) -> int:
    """``services`` builds the process list from the configuration (tests swap in
    stand-ins)."""
    args = parse_args(argv)
    llama = LlamaServer(port=CONTAINER_PORT + args.port_base) if args.llamacpp else None
    config = config_from_args(args, llama.worker_env() if llama else None)
    stack = LocalStack(config, services(config))
    stopping = False

    def interrupt(signum: int, frame: object) -> None:
        # Once stopping, further signals must not cut the orderly shutdown short.
        if not stopping:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    print(f"Starting Turnpike ({len(stack.services)} processes)...", flush=True)
    try:
        if llama:
            print(f"Starting llama.cpp's server ({llama.image})...", flush=True)
            llama.start()
        stack.start()
        print(banner(stack, llama), flush=True)
        while True:
            gone = stack.exited()
            if gone:
                for proc in gone:
                    print(f"\n{proc.describe('while running')}", file=sys.stderr)
                print("\nStopping the rest.", file=sys.stderr, flush=True)
                return 1
            # Liveness check cadence; signals interrupt this at once.
            time.sleep(0.5)
    except (StackError, LlamaServerError) as exc:
        print(f"\nTurnpike did not start: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nStopping...", flush=True)
        return 0
    finally:
        stopping = True
        stack.stop()
        if llama:
            llama.stop()
        print("Stopped.", flush=True)


if __name__ == "__main__":
    sys.exit(main())
