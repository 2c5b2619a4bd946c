"""``python -m bench.access_log_cost``: what the gateway's edge adds to each request for
the access log and the request count (``turnpike.gateway.observability.access_log``), measured in process, with
the line on and off, and the line written through the gateway's own logging set-up to a
real file. A ``bench-load`` run cannot resolve a few microseconds out of milliseconds of
noise per turn; this states the cost as CPU time per request beside that figure.

Writes ``bench/results/access-log-cost.md`` and ``.json``: the median of ``--repeats``
timings of ``--calls`` records each, per variant.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from turnpike.gateway.api.app import EdgeMiddleware
from turnpike.gateway.observability import access_log
from turnpike.gateway.tenancy.tenants import TenantDirectory

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results"


class _Gateway:
    keys = TenantDirectory.from_api_keys("sk-bench-key-000000000000:bench")


class _App:
    """What the edge reads of the app: ``app.state.gateway.keys``."""

    state = type("State", (), {"gateway": _Gateway()})()


ROUTE = type("Route", (), {"path": "/v1/responses"})()
SCOPE = {
    "type": "http",
    "app": _App(),
    "route": ROUTE,
    "headers": [
        (b"authorization", b"Bearer sk-bench-key-000000000000"),
        (b"content-type", b"application/json"),
        (b"user-agent", b"OpenAI/Python 3.51.0"),
    ],
}


def timed(calls: int, log_line: bool) -> float:
    """CPU µs per request of what the edge added for the access log: a new ``Access``
    and ``EdgeMiddleware.record`` (the route, the tenant, the count, the line)."""
    edge = EdgeMiddleware(app=None, log_lines=log_line)
    started = time.process_time()
    for _ in range(calls):
        access = access_log.Access("req_0123456789abcdef01234567", "http", "", "POST")
        access.status = 200
        edge.record(SCOPE, access)
    return (time.process_time() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        # The gateway's format (turnpike.gateway.__main__), to a real file.
        logging.basicConfig(
            filename=str(Path(folder) / "gateway.log"),
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        for log_line in (True, False):  # warm up both paths
            timed(1000, log_line)
        runs: dict[str, list[float]] = {"line on": [], "line off": []}
        for _ in range(args.repeats):  # alternated
            runs["line on"].append(timed(args.calls, True))
            runs["line off"].append(timed(args.calls, False))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "access-log-cost.json").write_text(
        json.dumps({"calls": args.calls, "repeats": args.repeats, "us_per_request": runs}, indent=1)
    )
    lines = [
        "# What the access log costs per request",
        "",
        f"`python -m bench.access_log_cost`: {args.repeats} alternated timings of "
        f"{args.calls:,} requests' edge records each (CPU time, in process; the line written "
        "through the gateway's logging format to a file).",
        "",
        "| variant | median µs per request | runs |",
        "| --- | ---: | --- |",
        *(
            f"| {name} | {medians[name]:.1f} | {', '.join(f'{v:.1f}' for v in runs[name])} |"
            for name in runs
        ),
        "",
        f"The line itself: {medians['line on'] - medians['line off']:.1f} µs per request.",
    ]
    (args.out / "access-log-cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
