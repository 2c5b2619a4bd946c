"""``input_file`` parts with inline ``file_data`` (turnpike.gateway.upstream.input_files): text files and
PDFs become text in the prompt, under the file's name; every bad file is a 400 naming
``input[i].content[j].file_data`` (or the field the server does not serve). A PDF's text
is read after parsing, by the PDF workers (``read_pdfs``; their bounds are
tests/stack/test_pdf_extraction.py's)."""

from __future__ import annotations

import base64
import io

import pytest
from pypdf import PdfReader, PdfWriter
from support.pdf import minimal_pdf

from turnpike.config import PdfSettings
from turnpike.gateway.protocol import input_files
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.items import to_proto
from turnpike.gateway.protocol.request import CreateRequest, parse_create
from turnpike.gateway.upstream.pdf_pool import PdfPool
from turnpike.gateway.upstream.pdf_text import read_pdfs

PDF_TEXT = "Quarterly report: revenue grew by 12 percent"


def data_url(mime: str, payload: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(payload).decode()}"


def body_with(part: dict, *, before: tuple = ()) -> dict:
    content = [*before, part, {"type": "input_text", "text": "Summarise the file."}]
    return {"model": "m", "input": [{"role": "user", "content": content}]}


@pytest.fixture
async def pool():
    pdf_pool = PdfPool(PdfSettings())
    yield pdf_pool
    await pdf_pool.close()


def parse(part: dict, **kw) -> CreateRequest:
    return parse_create(body_with(part, **kw), default_model="m")


async def read(part: dict, pool: PdfPool, **kw) -> CreateRequest:
    """Parsed, then its PDFs read: what the engine does before any stage."""
    request = parse(part, **kw)
    await read_pdfs(request.input_items, pool)
    return request


async def refused(part: dict, pool: PdfPool, **kw) -> ApiError:
    with pytest.raises(ApiError) as err:
        await read(part, pool, **kw)
    assert err.value.status == 400
    return err.value


@pytest.mark.parametrize(
    ("mime", "filename", "text"),
    [
        ("text/plain", "notes.txt", "plain notes\nsecond line"),
        ("text/markdown", "README.md", "# Title\n\n- a point"),
        ("text/csv", "data.csv", "city,temp\nParis,21"),
        ("application/json", "data.json", '{"k": "v"}'),
    ],
)
def test_a_text_file_becomes_text_in_the_prompt(mime, filename, text) -> None:
    part = {"type": "input_file", "filename": filename, "file_data": data_url(mime, text.encode())}
    request = parse(part)
    stored = request.input_items[0]["content"][0]
    assert stored == {"type": "input_file", "filename": filename, "text": text}
    (item,) = to_proto(request.input_items, {})
    assert item.text == f"[file: {filename}]\n{text}\nSummarise the file."


def test_bare_base64_takes_its_type_from_the_filename() -> None:
    part = {
        "type": "input_file",
        "filename": "notes.txt",
        "file_data": base64.b64encode(b"bare").decode(),
    }
    assert parse(part).input_items[0]["content"][0]["text"] == "bare"


async def test_a_pdf_has_its_text_extracted(pool) -> None:
    pdf = minimal_pdf(PDF_TEXT, "Page two: costs fell")
    part = {
        "type": "input_file",
        "filename": "report.pdf",
        "file_data": data_url("application/pdf", pdf),
    }
    pending = parse(part).input_items[0]["content"][0]
    assert input_files.PENDING in pending and "text" not in pending  # not read while parsing
    stored = (await read(part, pool)).input_items[0]["content"][0]
    assert stored == {"type": "input_file", "filename": "report.pdf", "text": stored["text"]}
    assert stored["text"] == f"{PDF_TEXT}\n\nPage two: costs fell"


async def test_pdfs_in_tool_outputs_are_read_too(pool) -> None:
    part = {
        "type": "input_file",
        "filename": "r.pdf",
        "file_data": data_url("application/pdf", minimal_pdf(PDF_TEXT)),
    }
    body = {
        "model": "m",
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [part]},
        ],
    }
    request = parse_create(body, default_model="m")
    await read_pdfs(request.input_items, pool)
    assert request.input_items[1]["output"][0]["text"] == PDF_TEXT


def test_a_stored_file_part_is_taken_back_as_it_is() -> None:
    """A follow-up's history (or a client re-sending input_items) holds the canonical part."""
    canonical = {"type": "input_file", "filename": "a.txt", "text": "kept"}
    assert parse(canonical).input_items[0]["content"][0] == canonical


PARAM = "input[0].content[1].file_data"
BEFORE = ({"type": "input_text", "text": "Read this:"},)


@pytest.mark.parametrize(
    ("file_data", "filename", "code"),
    [
        ("data:text/plain;base64,@@not-base64@@", "a.txt", "invalid_value"),
        ("data:text/plain,plain-not-base64", "a.txt", "invalid_value"),
        (data_url("image/png", b"\x89PNG\r\n"), "a.png", "unsupported_file_type"),
        (data_url("text/plain", b"\xff\xfe\xfa not utf-8"), "a.txt", "invalid_value"),
        (
            data_url("application/pdf", b"%PDF-1.4 this is not really a pdf"),
            "a.pdf",
            "invalid_file",
        ),
        (base64.b64encode(b"x").decode(), "no-extension", "invalid_value"),
    ],
)
async def test_a_bad_file_is_a_400_naming_its_file_data(pool, file_data, filename, code) -> None:
    part = {"type": "input_file", "filename": filename, "file_data": file_data}
    err = await refused(part, pool, before=BEFORE)
    assert (err.param, err.code) == (PARAM, code)


async def test_an_encrypted_pdf_is_refused(pool) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(minimal_pdf(PDF_TEXT))))
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    part = {
        "type": "input_file",
        "filename": "locked.pdf",
        "file_data": data_url("application/pdf", out.getvalue()),
    }
    err = await refused(part, pool, before=BEFORE)
    assert (err.param, err.code) == (PARAM, "invalid_file")
    assert "encrypted" in err.message


async def test_files_over_the_bounds_are_refused(monkeypatch, pool) -> None:
    monkeypatch.setattr(input_files, "MAX_FILE_BYTES", 100)
    part = {
        "type": "input_file",
        "filename": "a.txt",
        "file_data": data_url("text/plain", b"x" * 101),
    }
    err = await refused(part, pool)
    assert (err.param, err.code) == ("input[0].content[0].file_data", "file_too_large")
    monkeypatch.setattr(input_files, "MAX_FILE_BYTES", 4096)
    monkeypatch.setattr(input_files, "MAX_TEXT_CHARS", 10)
    err = await refused(
        {"type": "input_file", "filename": "a.txt", "file_data": data_url("text/plain", b"x" * 11)},
        pool,
    )
    assert err.code == "file_too_large"
    part = {
        "type": "input_file",
        "filename": "a.pdf",
        "file_data": data_url("application/pdf", minimal_pdf(PDF_TEXT)),
    }
    small = PdfPool(PdfSettings(max_chars=10))
    try:
        assert (await refused(part, small)).code == "file_too_large"
    finally:
        await small.close()


@pytest.mark.parametrize(
    ("part", "param", "code"),
    [
        ({"type": "input_file", "file_id": "file-123"}, "file_id", "unsupported_parameter"),
        (
            {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            "file_url",
            "unsupported_parameter",
        ),
        ({"type": "input_file", "filename": "a.txt"}, "file_data", "missing_required_parameter"),
        ({"type": "input_file", "file_data": 5}, "file_data", "invalid_type"),
    ],
)
async def test_file_ids_urls_and_missing_data_are_400s_naming_the_field(
    pool, part, param, code
) -> None:
    err = await refused(part, pool, before=BEFORE)
    assert err.param == f"input[0].content[1].{param}"
    if code != "invalid_type":
        assert err.code == code
