"""Minimal PDFs, written by hand: one page per text, Helvetica, each text in a content
stream (what a PDF text extractor reads). pypdf writes PDFs but not text, so tests
build their documents here (and the hostile ones in ``support.pdf_bombs``)."""

from __future__ import annotations


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def stream_object(data: bytes, extra: str = "") -> bytes:
    """A stream object's body: its dictionary (``extra`` entries and the length), then
    the data."""
    return b"<< %s/Length %d >>\nstream\n%s\nendstream" % (extra.encode(), len(data), data)


def write_pdf(objects: list[bytes], *, xref: bool = True) -> bytes:
    """A PDF of ``objects`` (numbered from 1; the first is the catalog). Without
    ``xref`` the file has no cross-reference table and no ``startxref``: readers must
    find the objects by scanning, as they are expected to recover such files."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    if not xref:
        out += b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"
        return bytes(out)
    start = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        start,
    )
    return bytes(out)


def minimal_pdf(*pages: str, xref: bool = True) -> bytes:
    count = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(count))
    font = 3 + 2 * count
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
    ]
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({_escape(text)}) Tj ET".encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(stream_object(stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return write_pdf(objects, xref=xref)


# The Open Responses compliance suite's ``file-input`` case sends a one-page PDF written
# by hand, as here: objects and a trailer, but no cross-reference table and no
# ``startxref`` (upstream: openresponses/openresponses, src/lib/compliance-tests.ts).
# Readers are expected to recover such a file by scanning its objects.
COMPLIANCE_FIXTURE_TEXT = "Title: Open Responses File Input Fixture"
COMPLIANCE_FIXTURE = b"""%PDF-1.4
1 0 obj
<< /Type /Catalog /Pages 2 0 R >>
endobj
2 0 obj
<< /Type /Pages /Kids [3 0 R] /Count 1 >>
endobj
3 0 obj
<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>
endobj
4 0 obj
<< /Length 71 >>
stream
BT /F1 24 Tf 72 720 Td (Title: Open Responses File Input Fixture) Tj ET
endstream
endobj
5 0 obj
<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>
endobj
trailer
<< /Root 1 0 R >>
%%EOF
"""
