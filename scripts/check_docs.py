"""Check the documentation offline: every relative link and image in README.md and
docs/*.md points to a file that exists, and every ``#anchor`` to a heading of its page.

Run through ``make docs``; ``tests/unit/repo/test_docs.py`` runs the same check, so a broken link
fails the suite. The pages are plain Markdown read as GitHub renders them: anchors follow
GitHub's heading slugs, and links inside code (fenced blocks, inline spans) are not links.
Only the standard library is used, so the check needs no virtual environment.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); the target ends at whitespace (an optional title
# follows) or at the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# What GitHub keeps of a heading's text: word characters, hyphens and spaces.
NOT_SLUG = re.compile(r"[^\w\- ]")


@dataclass(frozen=True)
class BrokenLink:
    page: Path
    line: int
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.target}: {self.reason}"


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def heading_text(markdown: str) -> str:
    """A heading's text as rendered: links by their text, code and emphasis unmarked."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (before de-duplication)."""
    return NOT_SLUG.sub("", heading_text(heading).strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page's headings make; a repeated slug gets -1, -2... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_targets(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and image outside code."""
    for number, line in prose_lines(text):
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def check_page(page: Path, root: Path = ROOT) -> list[BrokenLink]:
    text = page.read_text()
    broken: list[BrokenLink] = []
    for line, target in link_targets(text):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # an outside address: not checked offline
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = page.relative_to(root)
        if not resolved.exists():
            broken.append(BrokenLink(where, line, target, "no such file"))
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            broken.append(BrokenLink(where, line, target, "no such heading"))
    return broken


def documentation_pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def check(pages: Iterable[Path], root: Path = ROOT) -> list[BrokenLink]:
    return [broken for page in pages for broken in check_page(page, root)]


def main() -> int:
    pages = documentation_pages()
    broken = check(pages)
    for link in broken:
        print(link, file=sys.stderr)
    if broken:
        print(f"check_docs: {len(broken)} broken link(s)", file=sys.stderr)
        return 1
    print(f"check_docs: {len(pages)} pages, every link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
