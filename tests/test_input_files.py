"""``input_file`` parts with inline ``file_data`` (gateway.input_files): text files and
PDFs become text in the prompt, under the file's name; every bad file is a 400 naming
``input[i].content[j].file_data`` (or the field the server does not serve)."""

from __future__ import annotations

import base64
import io

import pytest
from gateway import input_files
from gateway.errors import ApiError
from gateway.items import to_proto
from gateway.request import parse_create
from pypdf import PdfReader, PdfWriter
from support.pdf import minimal_pdf

PDF_TEXT = "Quarterly report: revenue grew by 12 percent"


def data_url(mime: str, payload: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(payload).decode()}"


def body_with(part: dict, *, before: tuple = ()) -> dict:
    content = [*before, part, {"type": "input_text", "text": "Summarise the file."}]
    return {"model": "m", "input": [{"role": "user", "content": content}]}


def parse(part: dict, **kw):
    return parse_create(body_with(part, **kw), default_model="m")


def refused(part: dict, **kw) -> ApiError:
    with pytest.raises(ApiError) as err:
        parse(part, **kw)
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


def test_a_pdf_has_its_text_extracted() -> None:
    pdf = minimal_pdf(PDF_TEXT, "Page two: costs fell")
    part = {
        "type": "input_file",
        "filename": "report.pdf",
        "file_data": data_url("application/pdf", pdf),
    }
    text = parse(part).input_items[0]["content"][0]["text"]
    assert PDF_TEXT in text and "Page two: costs fell" in text


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
def test_a_bad_file_is_a_400_naming_its_file_data(file_data, filename, code) -> None:
    part = {"type": "input_file", "filename": filename, "file_data": file_data}
    err = refused(part, before=BEFORE)
    assert (err.param, err.code) == (PARAM, code)


def test_an_encrypted_pdf_is_refused() -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(minimal_pdf(PDF_TEXT))))
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    part = {
        "type": "input_file",
        "filename": "locked.pdf",
        "file_data": data_url("application/pdf", out.getvalue()),
    }
    err = refused(part, before=BEFORE)
    assert (err.param, err.code) == (PARAM, "invalid_file")
    assert "encrypted" in err.message


def test_files_over_the_bounds_are_refused(monkeypatch) -> None:
    monkeypatch.setattr(input_files, "MAX_FILE_BYTES", 100)
    part = {
        "type": "input_file",
        "filename": "a.txt",
        "file_data": data_url("text/plain", b"x" * 101),
    }
    assert (refused(part).param, refused(part).code) == (
        "input[0].content[0].file_data",
        "file_too_large",
    )
    monkeypatch.setattr(input_files, "MAX_FILE_BYTES", 4096)
    monkeypatch.setattr(input_files, "MAX_TEXT_CHARS", 10)
    part = {
        "type": "input_file",
        "filename": "a.pdf",
        "file_data": data_url("application/pdf", minimal_pdf(PDF_TEXT)),
    }
    assert refused(part).code == "file_too_large"


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
def test_file_ids_urls_and_missing_data_are_400s_naming_the_field(part, param, code) -> None:
    err = refused(part, before=BEFORE)
    assert err.param == f"input[0].content[1].{param}"
    if code != "invalid_type":
        assert err.code == code
