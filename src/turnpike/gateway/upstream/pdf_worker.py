"""A PDF text worker: ``python -m turnpike.gateway.upstream.pdf_worker`` (started by ``turnpike.gateway.upstream.pdf_pool``).

Reads PDFs from stdin and writes their text to stdout, one after another, with PDFium
(pypdfium2). A PDF can be built to be expensive to read (a deflate bomb, form XObjects
that fan out, pages of operators), so this runs in a process of its own, under limits
set before it reads anything: its address space (``RLIMIT_AS``), CPU seconds per PDF
(``RLIMIT_CPU``, moved up before each one; past it the kernel ends the process), no core
files, first in line for the OOM killer; the gateway kills it past a wall-clock deadline. Logging is off and stderr goes
nowhere, so a PDF cannot flood the gateway's log.

Once loaded it writes ``READY``, so the gateway starts a PDF's deadline only then: an
interpreter that starts slowly on a busy host is not a PDF that reads slowly.

Framing, both ways: an 8-byte big-endian length, then that many bytes. In: the PDF and
the most characters of text wanted (``!Q`` before the PDF). Out: JSON, ``{"text": ...}``
or ``{"error": "unreadable" | "encrypted" | "pages" | "chars", "pages": n}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import resource
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

LENGTH = struct.Struct("!Q")
READY = b"PDF-TEXT-WORKER-READY\n"


def limit_self(memory_bytes: int) -> None:
    """The limits that hold for the worker's whole life (CPU is set per PDF). Short of
    memory, the kernel kills a worker before the gateway (Linux: oom_score_adj)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


def limit_cpu(seconds: int) -> None:
    """``seconds`` more CPU seconds from now; RLIMIT_CPU counts the process's whole life."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + 1 + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def pdf_text(payload: bytes, max_pages: int, max_chars: int) -> dict[str, Any]:
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(payload)
    except pdfium.PdfiumError as err:
        locked = getattr(err, "err_code", None) in (
            pdfium.raw.FPDF_ERR_PASSWORD,
            pdfium.raw.FPDF_ERR_SECURITY,
        )
        return {"error": "encrypted" if locked else "unreadable"}
    try:
        pages = len(document)
        if pages > max_pages:
            return {"error": "pages", "pages": pages}
        texts, total = [], 0
        for index in range(pages):
            page = document[index]
            textpage = page.get_textpage()
            text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
            textpage.close()
            page.close()
            total += len(text)
            if total > max_chars:
                return {"error": "chars", "pages": pages}
            texts.append(text)
        return {"text": "\n\n".join(texts).strip()}
    except pdfium.PdfiumError:
        return {"error": "unreadable"}
    finally:
        document.close()


def _read(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    if len(data) < size:
        return None  # the gateway closed the pipe: stop
    return data


def serve(source: BinaryIO, sink: BinaryIO, cpu_s: int, max_pages: int) -> None:
    while (header := _read(source, LENGTH.size * 2)) is not None:
        max_chars, size = struct.unpack("!QQ", header)
        payload = _read(source, size)
        if payload is None:
            return
        limit_cpu(cpu_s)
        reply = json.dumps(pdf_text(payload, max_pages, max_chars), ensure_ascii=False).encode()
        sink.write(LENGTH.pack(len(reply)) + reply)
        sink.flush()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m turnpike.gateway.upstream.pdf_worker")
    parser.add_argument("--memory-bytes", type=int, required=True)
    parser.add_argument("--cpu-s", type=int, required=True)
    parser.add_argument("--max-pages", type=int, required=True)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    limit_self(args.memory_bytes)
    import pypdfium2  # noqa: F401  (loaded once, within the limits, before the first PDF)

    sys.stdout.buffer.write(READY)
    sys.stdout.buffer.flush()
    serve(sys.stdin.buffer, sys.stdout.buffer, args.cpu_s, args.max_pages)


if __name__ == "__main__":
    main()
