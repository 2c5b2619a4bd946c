"""``python -m bench.pdf_extraction`` (``make bench-pdf``): the PDF text libraries on the
files a probe sent the gateway (issue 19), and the gateway's bounded workers on the same.

Each PDF is read in a fresh process, stopped after ``--cap`` seconds: pypdf (what the
gateway used, in its event loop, with its old bounds: 100 pages, 200,000 characters),
pypdfium2 (PDFium, unbounded), and the gateway's pool (``turnpike.gateway.upstream.pdf_pool``: pypdfium2
in a worker under the default TURNPIKE_PDF_* limits). The files: the Open Responses
compliance fixture (no cross-reference table), an ordinary 100-page text PDF, and the
bombs of ``tests/support/pdf_bombs.py``. Per run: wall time, the peak resident memory of
the process that read the PDF, what came of it, and the lines it logged (warnings,
stderr). Results in ``bench/results/pdf-extraction.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import json
import logging
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the PDFs are the tests' (support.pdf_bombs)

from support import pdf_bombs  # noqa: E402
from support.pdf import COMPLIANCE_FIXTURE, minimal_pdf  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results"
READERS = ("pypdf", "pypdfium2", "gateway-pool")
OLD_MAX_PAGES, OLD_MAX_CHARS = 100, 200_000


def documents() -> dict[str, bytes]:
    ordinary = minimal_pdf(
        *[f"Page {i}: " + "lorem ipsum dolor sit amet " * 40 for i in range(100)]
    )
    return {
        "compliance fixture (no xref)": COMPLIANCE_FIXTURE,
        "100-page text PDF": ordinary,
        **{name.replace("_", " "): build() for name, build in pdf_bombs.BOMBS.items()},
    }


def _pypdf(payload: bytes) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(payload), strict=False)
    if len(reader.pages) > OLD_MAX_PAGES:
        return f"refused: {len(reader.pages)} pages"
    total = 0
    for page in reader.pages:
        total += len(page.extract_text() or "")
        if total > OLD_MAX_CHARS:
            return "refused: too many characters"
    return f"read: {total} characters"


def _pypdfium2(payload: bytes) -> str:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(payload)
    total = sum(len(document[i].get_textpage().get_text_range()) for i in range(len(document)))
    return f"read: {total} characters"


def _pool(payload: bytes) -> str:
    from turnpike.gateway.upstream.pdf_pool import PdfFailure, PdfPool

    async def run() -> str:
        pool = PdfPool()
        try:
            return f"read: {len(await pool.text(payload))} characters"
        except PdfFailure as failure:
            return f"refused: {failure.reason}"
        finally:
            await pool.close()

    return asyncio.run(run())


def forget_peak() -> None:
    """Start the peak resident memory afresh: a forked process inherits its parent's,
    which here holds every document (Linux: clear_refs 5 resets the high-water mark)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def one(reader: str, payload: bytes) -> dict[str, Any]:
    """Read one document in this process (the child's side)."""
    forget_peak()
    logged = [0]

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged[0] += 1

    logging.getLogger().addHandler(Count(logging.WARNING))
    read = {"pypdf": _pypdf, "pypdfium2": _pypdfium2, "gateway-pool": _pool}[reader]
    started = time.perf_counter()
    try:
        outcome = read(payload)
    except Exception as err:
        outcome = f"error: {type(err).__name__}: {str(err)[:80]}"
    seconds = time.perf_counter() - started
    own = peak_kib()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "seconds": round(seconds, 3),
        "peak_mib": round(max(own, workers) / 1024, 1),
        "outcome": outcome,
        "log_lines": logged[0],
    }


def peak_kib() -> int:
    """This process's peak resident memory since ``forget_peak`` (getrusage's is not
    reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(reader: str, name: str, payload: bytes, cap: float) -> dict[str, Any]:
    """Run ``one`` in a fresh process (the PDF on its stdin), stopped after ``cap`` s."""
    command = [sys.executable, "-m", "bench.pdf_extraction", "--one", reader]
    size = len(payload)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, input=payload, capture_output=True, timeout=cap, cwd=REPO, check=False
        )
    except subprocess.TimeoutExpired as stopped:
        stderr = stopped.stderr or b""
        return {
            "reader": reader,
            "document": name,
            "bytes": size,
            "seconds": None,
            "peak_mib": None,
            "outcome": f"stopped after {cap:g} s",
            "log_lines": stderr.count(b"\n"),
        }
    lines = done.stdout.decode().strip().splitlines()
    result: dict[str, Any]
    if done.returncode != 0 or not lines:
        result = {
            "seconds": round(time.perf_counter() - started, 3),
            "peak_mib": None,
            "outcome": f"died (exit code {done.returncode})",
            "log_lines": 0,
        }
    else:
        result = json.loads(lines[-1])
    result["log_lines"] += done.stderr.count(b"\n")  # what it printed beside logging
    return {"reader": reader, "document": name, "bytes": size, **result}


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average {load} "
        "at the start (other jobs shared the machine)"
    )


def report(rows: list[dict[str, Any]], cap: float) -> str:
    from turnpike.gateway.upstream.pdf_pool import PdfPool

    limits = PdfPool().limits
    out = [
        "# PDF text extraction: pypdf, pypdfium2, and the gateway's bounded workers",
        "",
        f"{datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}; "
        "`make bench-pdf` (`python -m bench.pdf_extraction`).",
        f"Machine: {machine()}.",
        "",
        "Each PDF read once in a fresh process, stopped after "
        f"{cap:g} s. pypdf: as the gateway read PDFs before (in its event loop; 100 pages, "
        "200,000 characters). pypdfium2: PDFium, no bounds. gateway-pool: pypdfium2 in a "
        f"worker process of `turnpike.gateway.upstream.pdf_pool` under its default limits ({limits.cpu_s} "
        f"CPU seconds, {limits.timeout_s:g} s, {limits.memory_mb} MiB of address space, "
        f"{limits.max_pages} pages, {limits.max_chars:,} characters); its seconds include "
        "starting the worker (a fresh pool per run, about 0.2 s), and its one log line on a "
        "refusal is the gateway's own (a worker ended). Peak memory: the resident memory "
        "of the process that read the PDF (for the pool, its worker). Log lines: warnings "
        "logged and lines on stderr.",
        "",
        "Reading it: pypdf cannot read the compliance fixture (no cross-reference table) "
        "and takes over a minute on the flate bomb and the many pages; PDFium reads both in "
        "seconds and recovers the fixture, logs nothing, but has no bound of its own on "
        "form XObjects that fan out. In the gateway's workers every file ends within the "
        "limits, and the gateway's own process never reads a PDF.",
        "",
        "| document | KB | reader | seconds | peak MiB | outcome | log lines |",
        "| --- | ---: | --- | ---: | ---: | --- | ---: |",
    ]
    for row in rows:
        seconds = "-" if row["seconds"] is None else f"{row['seconds']:.2f}"
        peak = "-" if row["peak_mib"] is None else f"{row['peak_mib']:.0f}"
        out.append(
            f"| {row['document']} | {row['bytes'] / 1024:.1f} | {row['reader']} | {seconds} "
            f"| {peak} | {row['outcome']} | {row['log_lines']:,} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pdf_extraction")
    parser.add_argument("--cap", type=float, default=60.0, help="seconds per run at most")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="*", choices=READERS, default=list(READERS))
    parser.add_argument("--one", choices=READERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, sys.stdin.buffer.read())))
        return
    rows = []
    for name, payload in documents().items():
        for reader in args.only:
            row = measure(reader, name, payload, args.cap)
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdf-extraction.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "pdf-extraction.md").write_text(report(rows, args.cap))


if __name__ == "__main__":
    main()
