"""An apply_patch input that the Codex CLI can apply (pure): a patch that adds one file.

The Codex CLI declares ``apply_patch`` as a custom tool whose Lark grammar (``*** Begin
Patch``, ``*** Add File: ``, ``*** Update File: ``, ...) accepts patches that update,
delete or move files, but only an added file applies to a workspace the simulator has
not seen. The file is the one the request names (a relative path such as ``notes.md``
or ``src/app.py``; never absolute, never with ``..``), else ``turnpike-notes.txt``; its
lines are the request's fenced code block, else its words.
"""

from __future__ import annotations

import re

from turnpike.worker.user_text import content_words, fenced_block

APPLY_PATCH_MARKERS = ("*** Begin Patch", "*** Add File: ")
DEFAULT_PATH = "turnpike-notes.txt"
MAX_LINES = 100
MAX_LINE_CHARS = 500
WORDS_PER_LINE = 8
MAX_WORD_LINES = 4

# A relative file path with an extension: not preceded by what would make it part of a
# URL, an address or an absolute path (``/``, ``:``, ``@``, ``.``, ``~``, a word char).
_FILE_PATH = re.compile(
    r"(?<![\w./\\:~@-])((?:[\w-][\w.-]*/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,9})(?![\w/\\-])"
)
_NOT_FILES = frozenset({"e.g", "i.e", "a.m", "p.m"})
_NOT_EXTENSIONS = frozenset({"com", "org", "net"})  # host names, not files
# Words of the request that ask for the file rather than fill it.
_INSTRUCTION_WORDS = frozenset(
    """create write add file named called containing contains patch apply new put save
    text content contents line lines""".split()
)


def looks_like_apply_patch(definition: str) -> bool:
    """Whether a Lark grammar is the Codex CLI's apply_patch one (or a variant)."""
    return all(marker in definition for marker in APPLY_PATCH_MARKERS)


def add_file_patch(user_text: str) -> str:
    path = file_path(user_text) or DEFAULT_PATH
    body = "".join(f"+{line}\n" for line in file_lines(user_text, path))
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


def file_path(user_text: str) -> str | None:
    """The first relative file path the request names, if any."""
    for match in _FILE_PATH.finditer(user_text):
        path = match.group(1)
        stem, _, extension = path.rpartition(".")
        if path.lower() in _NOT_FILES or extension.lower() in _NOT_EXTENSIONS:
            continue
        if ".." in path.split("/") or not stem:
            continue
        return path
    return None


def file_lines(user_text: str, path: str) -> list[str]:
    """The fenced code block's lines, else the request's words (less the path's and the
    instruction's), a few to a line."""
    fenced = fenced_block(user_text)
    if fenced is not None:
        lines = fenced.rstrip("\n").split("\n")
        return [line.rstrip("\r")[:MAX_LINE_CHARS] for line in lines[:MAX_LINES]]
    skipped = _INSTRUCTION_WORDS | {w.lower() for w in re.split(r"[\W_]+", path) if w}
    words = [w for w in content_words(user_text) if w.lower() not in skipped]
    if not words:
        return ["Notes written by the Turnpike simulator."]
    chunks = [words[i : i + WORDS_PER_LINE] for i in range(0, len(words), WORDS_PER_LINE)]
    return [" ".join(chunk) for chunk in chunks[:MAX_WORD_LINES]]
