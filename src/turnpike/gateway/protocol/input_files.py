"""``input_file`` content parts with inline ``file_data``: the file's text, for the prompt.

``file_data`` is a data URL (``data:<mime>;base64,<data>``), or bare base64 whose type
the ``filename``'s extension tells. Text files (``text/*``, JSON, XML, YAML) are decoded
as UTF-8 while the request is parsed. A PDF is only checked and decoded then: it becomes
a pending part (``PENDING`` holds its bytes) until ``read_pdfs`` has its text extracted
by the PDF workers (``turnpike.gateway.upstream.pdf_text``), off the event loop and under
their limits, before anything renders the input. The canonical part keeps the file's name and its
text, not its bytes: the prompt renders the text under the name, and a follow-up never
decodes the file again. ``file_id`` and ``file_url`` need a Files API or fetching, which
this server does not have: both are refused naming the parameter.

Pure: no I/O. Reading a PDF's text is upstream's (``pdf_text.read_pdfs``).
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from dataclasses import dataclass
from typing import Any

from turnpike.gateway.protocol.errors import ApiError, invalid, invalid_type, require_str

# Bounds checked while parsing: a file's size, and a text file's characters. A PDF's
# pages and text are bounded by the workers (TURNPIKE_PDF_*), and a request's PDFs here.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TEXT_CHARS = 200_000
# Where a PDF's header may start (as PDF readers accept it): past it, not a PDF.
PDF_HEADER_WITHIN = 1024
TEXT_TYPES = (
    "application/json",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/x-ndjson",
)
PDF_TYPE = "application/pdf"
# The key of a part whose PDF is still to be read: never stored, never rendered.
PENDING = "pending_pdf"


@dataclass(frozen=True)
class PendingPdf:
    payload: bytes
    param: str  # input[i].content[j].file_data: what an error about it names


def normalize_file_part(raw: dict[str, Any], param: str) -> dict[str, Any]:
    """The canonical ``input_file`` part, ``{"type", "filename", "text"}``; for a PDF,
    ``{"type", "filename", PENDING}`` until ``read_pdfs``."""
    for key in ("file_id", "file_url"):
        if raw.get(key) is not None:
            raise invalid(
                f"'{param}.{key}' is not supported by this server (it has no Files API and "
                "fetches no URLs); send the file inline as 'file_data' with 'filename'.",
                f"{param}.{key}",
                "unsupported_parameter",
            )
    filename = raw.get("filename")
    if filename is not None and not isinstance(filename, str):
        raise invalid_type(f"{param}.filename", "a string")
    data = require_str(raw, "file_data", param, "a base64 data URL string")
    data_param = f"{param}.file_data"
    mime, payload = _split_data_url(data, filename, data_param)
    part: dict[str, Any] = {"type": "input_file", "filename": filename or "file"}
    if mime == PDF_TYPE:
        if b"%PDF-" not in payload[:PDF_HEADER_WITHIN]:
            raise unreadable(data_param)
        part[PENDING] = PendingPdf(payload, data_param)
    else:
        part["text"] = file_text(mime, payload, data_param)
    return part


def rendered(part: dict[str, Any]) -> str:
    """How a file appears in the prompt: its name, then its text."""
    if PENDING in part:
        raise RuntimeError("a PDF rendered before read_pdfs extracted its text")
    return f"[file: {part.get('filename') or 'file'}]\n{part.get('text', '')}"


def _split_data_url(data: str, filename: str | None, param: str) -> tuple[str, bytes]:
    if data.startswith("data:"):
        header, sep, body = data[5:].partition(",")
        fields = header.split(";")
        if not sep or "base64" not in fields[1:]:
            raise invalid(
                f"Invalid '{param}': expected a data URL 'data:<mime type>;base64,<data>'.",
                param,
                "invalid_value",
            )
        mime = fields[0].strip().lower()
    else:
        body = data
        guessed = mimetypes.guess_type(filename or "")[0]
        if guessed is None:
            raise invalid(
                f"Invalid '{param}': bare base64 needs a 'filename' with a known extension; "
                "or send a data URL 'data:<mime type>;base64,<data>'.",
                param,
                "invalid_value",
            )
        mime = guessed
    if len(body) > (MAX_FILE_BYTES * 4) // 3 + 4:
        raise _too_large(param)
    try:
        payload = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(
            f"Invalid '{param}': the data is not valid base64.", param, "invalid_value"
        ) from None
    if len(payload) > MAX_FILE_BYTES:
        raise _too_large(param)
    return mime, payload


def _too_large(param: str) -> ApiError:
    return invalid(
        f"Invalid '{param}': the file is over {MAX_FILE_BYTES // (1024 * 1024)} MiB.",
        param,
        "file_too_large",
    )


def unreadable(param: str) -> ApiError:
    return invalid(
        f"Invalid '{param}': the PDF could not be read (corrupt or not a PDF).",
        param,
        "invalid_file",
    )


def file_text(mime: str, payload: bytes, param: str) -> str:
    """A text file's text (a PDF's is the workers' to read)."""
    if mime.startswith("text/") or mime in TEXT_TYPES:
        try:
            text = payload.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise invalid(
                f"Invalid '{param}': a {mime} file must be UTF-8 text.", param, "invalid_value"
            ) from None
    else:
        raise invalid(
            f"Invalid '{param}': files of type '{mime}' are not supported; send text "
            "(text/*, JSON, XML, YAML) or a PDF.",
            param,
            "unsupported_file_type",
        )
    if len(text) > MAX_TEXT_CHARS:
        raise invalid(
            f"Invalid '{param}': the file's text is over {MAX_TEXT_CHARS} characters.",
            param,
            "file_too_large",
        )
    return text
