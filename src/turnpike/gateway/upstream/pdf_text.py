"""The text of a request's PDF input files, read by the PDF workers.

Parsing left each PDF ``input_file`` part pending (``protocol.input_files.PENDING``);
``read_pdfs`` has the workers (``pdf_pool``) extract their text, off the event loop and
under their limits, before anything renders the input.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from turnpike.gateway.protocol.errors import ApiError, invalid
from turnpike.gateway.protocol.input_files import PENDING, PendingPdf, unreadable
from turnpike.gateway.upstream.pdf_pool import PdfFailure, PdfPool, PdfPoolBusy

# PDFs one request may hold: each is read in turn, in up to TURNPIKE_PDF_TIMEOUT_S.
MAX_PDFS_PER_REQUEST = 10


def _file_parts(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for item in items:
        if item.get("type") == "message":
            parts = item.get("content")
        elif item.get("type") in ("function_call_output", "custom_tool_call_output"):
            parts = item.get("output")
        else:
            continue
        if isinstance(parts, list):
            yield from (part for part in parts if part.get("type") == "input_file")


async def read_pdfs(items: list[dict[str, Any]], pool: PdfPool) -> None:
    """Give every pending PDF part of ``items`` its text, in place (the canonical part),
    or raise the client's error naming the PDF. One PDF after another: a request holds
    one worker at a time, and its PDFs share one budget of characters."""
    pending = [part for part in _file_parts(items) if PENDING in part]
    if not pending:
        return
    if len(pending) > MAX_PDFS_PER_REQUEST:
        param = pending[MAX_PDFS_PER_REQUEST][PENDING].param
        raise invalid(
            f"Invalid '{param}': a request may hold at most {MAX_PDFS_PER_REQUEST} PDF files.",
            param,
            "too_many_files",
        )
    budget = pool.limits.max_chars
    for part in pending:
        pdf: PendingPdf = part[PENDING]
        try:
            text = await pool.text(pdf.payload, budget)
        except PdfFailure as failure:
            first = budget == pool.limits.max_chars
            raise _refusal(failure, pdf.param, pool, first) from None
        except PdfPoolBusy:
            raise ApiError(
                503,
                "The server is overloaded: too many PDF files are being read. Retry shortly.",
                type="server_error",
                code="server_overloaded",
                param=pdf.param,
                headers={"retry-after": "1"},
            ) from None
        budget -= len(text)
        del part[PENDING]
        part["text"] = text


def _refusal(failure: PdfFailure, param: str, pool: PdfPool, first: bool) -> ApiError:
    limits = pool.limits
    reason = failure.reason
    if reason == "encrypted":
        message, code = "the PDF is encrypted; send it without a password.", "invalid_file"
    elif reason == "pages":
        message = f"the PDF has {failure.pages} pages, over {limits.max_pages}."
        code = "file_too_large"
    elif reason == "chars":
        whose = "the PDF's text is" if first else "the text of the request's PDFs is"
        message, code = f"{whose} over {limits.max_chars} characters.", "file_too_large"
    elif reason in ("deadline", "cpu", "crashed"):
        bound = {
            "deadline": f"{limits.timeout_s:g} seconds",
            "cpu": f"{limits.cpu_s} seconds of CPU",
            "crashed": f"{limits.memory_mb} MiB of memory",
        }[reason]
        message = (
            f"reading the PDF's text takes more than the {bound} a file may take "
            "(it may be built to be expensive to read)."
        )
        code = "file_too_complex"
    else:
        return unreadable(param)
    return invalid(f"Invalid '{param}': {message}", param, code)
