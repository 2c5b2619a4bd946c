"""Hostile PDFs, small on the wire and expensive to read, as a probe sent them to the
gateway (issue 19). Shared by tests/stack/test_pdf_extraction.py and bench/pdf_extraction.py.

- ``flate_bomb``: pages sharing one FlateDecode content stream that inflates a
  thousand-fold (71 KB on the wire, 74 MB of content).
- ``xobject_fanout``: form XObjects that each draw the next one ``fan`` times, ``depth``
  levels deep (2 KB; ``fan ** depth`` draws of the last one).
- ``many_pages``: 100 pages within every bound on size and pages, each with a content
  stream of half a megabyte of operators that show nothing (170 KB in all): tiny
  filled rectangles (slow in PDFium) and empty strings (slow in pypdf).
- ``warning_flood``: thousands of dictionaries with a key twice, each a warning for a
  lenient reader (450 KB).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from support.pdf import stream_object, write_pdf

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _pages(page_dicts: list[bytes], first: int) -> list[bytes]:
    """The catalog and page tree over pages numbered from ``first``."""
    kids = " ".join(f"{first + i} 0 R" for i in range(len(page_dicts))).encode()
    return [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_dicts)),
        *page_dicts,
    ]


def _page(contents: int, resources: bytes = b"<< /Font << /F1 3 0 R >> >>") -> bytes:
    return (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
        b"/Resources %s >>" % (contents, resources)
    )


def _deflated(data: bytes) -> bytes:
    return stream_object(zlib.compress(data, 9), "/Filter /FlateDecode ")


def flate_bomb(pages: int = 8, inflated_bytes: int = 74_000_000) -> bytes:
    """``pages`` pages sharing one content stream: a line of text, then whitespace up
    to ``inflated_bytes`` (deflate packs it about a thousand to one)."""
    head = b"BT /F1 12 Tf 72 720 Td (flate bomb) Tj ET\n"
    content = head + b" " * (inflated_bytes - len(head))
    stream = 4 + pages
    objects = _pages([_page(stream)] * pages, first=4)
    objects.insert(2, FONT)  # object 3
    objects.append(_deflated(content))
    return write_pdf(objects)


def xobject_fanout(depth: int = 12, fan: int = 4) -> bytes:
    """One page drawing form X0, X(i) drawing X(i+1) ``fan`` times, the last showing
    one letter: ``fan ** depth`` letters from about 2 KB."""
    first_form = 5  # 1 catalog, 2 pages, 3 font, 4 page; forms from 5, then the content
    content_obj = first_form + depth + 1
    objects = _pages([_page(content_obj, b"<< /XObject << /X0 %d 0 R >> >>" % first_form)], 4)
    objects.insert(2, FONT)
    for level in range(depth + 1):
        if level == depth:
            body = b"BT /F1 1 Tf 0 0 Td (a) Tj ET"
            resources = b"<< /Font << /F1 3 0 R >> >>"
        else:
            body = b" ".join([b"/X Do"] * fan)
            resources = b"<< /XObject << /X %d 0 R >> >>" % (first_form + level + 1)
        objects.append(
            stream_object(
                body,
                f"/Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources {resources.decode()} ",
            )
        )
    objects.append(stream_object(b"/X0 Do"))
    return write_pdf(objects)


def many_pages(pages: int = 100, operators_bytes: int = 500_000) -> bytes:
    """``pages`` pages, each with a content stream of its own: ``operators_bytes`` of
    a filled rectangle and a text object showing an empty string (no text comes out),
    deflated to under 2 KB."""
    unit = b"0 0 1 1 re f BT /F1 1 Tf () Tj ET\n"
    content = unit * (operators_bytes // len(unit))
    first_stream = 4 + pages
    objects = _pages([_page(first_stream + i) for i in range(pages)], first=4)
    objects.insert(2, FONT)
    objects.extend(_deflated(content) for _ in range(pages))
    return write_pdf(objects)


def warning_flood(dictionaries: int = 11_000) -> bytes:
    """A page whose dictionary holds ``dictionaries`` small dictionaries, each with a
    key twice (a lenient reader warns about every one), nested a few levels each."""
    one = b"<< /A << /K 1 /K 2 >> /B << /K 1 /K 2 >> >>"
    junk = b"[" + b" ".join([one] * (dictionaries // 2)) + b"]"
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
        b"/Resources << /Font << /F1 3 0 R >> >> /Junk %s >>" % junk
    )
    objects = _pages([page], first=4)
    objects.insert(2, FONT)
    objects.append(stream_object(b"BT /F1 12 Tf 72 720 Td (warning flood) Tj ET"))
    return write_pdf(objects)


BOMBS: dict[str, Callable[[], bytes]] = {
    "flate_bomb": flate_bomb,
    "xobject_fanout": xobject_fanout,
    "many_pages": many_pages,
    "warning_flood": warning_flood,
}
