"""A custom (freeform) tool call's input: it parses under the tool's grammar (checked
with lark and ``re.fullmatch``, independently of the module's own check), it is made
from the user's words, the Codex CLI's apply_patch input is a patch that applies, and
the bounds hold."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import lark
import pytest
from support.codex import codex_binary
from support.tools import APPLY_PATCH_GRAMMAR

from turnpike.worker.custom_input import MAX_DEFINITION_BYTES, custom_tool_input
from turnpike.worker.lark_grammar import load_lark_grammar
from turnpike.worker.patch_input import DEFAULT_PATH
from turnpike.worker.regex_nonempty import nonempty_regex

APPLY_PATCH = APPLY_PATCH_GRAMMAR  # the Codex CLI's, as its binary declares it
# Its variant with an execution environment's id.
APPLY_PATCH_WITH_ENVIRONMENT = (
    APPLY_PATCH.replace("start: begin_patch hunk+", "start: begin_patch environment_id? hunk+")
    + 'environment_id: "*** Environment ID: " filename LF\n'
)
PATCH_REQUESTS = {
    "Create notes.md with a shopping list: eggs, milk, bread": (
        "notes.md",
        ["shopping list eggs milk bread"],
    ),
    "Add `src/app.py`:\n```python\nprint('hi')\n\nx = 1\n```": (
        "src/app.py",
        ["print('hi')", "", "x = 1"],
    ),
    "Write /etc/passwd and ../../up.py, see https://example.com/a.py": (
        DEFAULT_PATH,
        ["etc passwd see https example com"],
    ),
    "": (DEFAULT_PATH, ["Notes written by the Turnpike simulator."]),
}


def lark_input(definition: str, user_text: str = "", seed: int = 7) -> str:
    return custom_tool_input("grammar", "lark", definition, user_text, seed)


def regex_input(pattern: str, user_text: str = "", seed: int = 7) -> str:
    return custom_tool_input("grammar", "regex", pattern, user_text, seed)


def apply_added_files(patch: str, root: Path) -> dict[Path, list[str]]:
    """A tiny apply_patch for Add File hunks, strict where Codex is: relative paths."""
    lines = patch.split("\n")
    assert lines[0] == "*** Begin Patch" and patch.endswith("*** End Patch\n")
    written: dict[Path, list[str]] = {}
    current: list[str] | None = None
    for line in lines[1:-2]:
        if line.startswith("*** Add File: "):
            relative = line.removeprefix("*** Add File: ")
            assert not Path(relative).is_absolute() and ".." not in Path(relative).parts
            current = written.setdefault(root / relative, [])
        else:
            assert current is not None and line.startswith("+"), line
            current.append(line[1:])
    for path, content in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{line}\n" for line in content))
    return written


@pytest.mark.parametrize("definition", [APPLY_PATCH, APPLY_PATCH_WITH_ENVIRONMENT])
@pytest.mark.parametrize("user_text", list(PATCH_REQUESTS))
def test_an_apply_patch_input_adds_the_named_file(definition, user_text, tmp_path):
    patch = lark_input(definition, user_text)
    assert load_lark_grammar(definition).parses(patch)
    path, lines = PATCH_REQUESTS[user_text]
    written = apply_added_files(patch, tmp_path)
    assert written == {tmp_path / path: lines}
    assert (tmp_path / path).read_text() == "".join(f"{line}\n" for line in lines)


@pytest.mark.skipif(codex_binary() is None, reason="openai-codex-cli-bin is not installed")
def test_the_codex_cli_applies_the_patch(tmp_path):
    user_text = "Add `src/app.py`:\n```python\nprint('hi')\n\nx = 1\n```"
    patch = lark_input(APPLY_PATCH, user_text)
    result = subprocess.run(
        [str(codex_binary()), "--codex-run-as-apply-patch", patch],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "src" / "app.py").read_text() == "print('hi')\n\nx = 1\n"


def test_the_checking_parser_accepts_what_codex_writes_and_refuses_the_rest():
    grammar = load_lark_grammar(APPLY_PATCH)
    update = "*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    x\n+    y\n \n*** End Patch"
    assert grammar.parses(update)
    assert grammar.parses("*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n")
    assert not grammar.parses("*** Begin Patch\n*** End Patch\n")  # no hunk
    assert not grammar.parses("*** Begin Patch\n*** Add File: a.md\n*** End Patch\n")
    assert not grammar.parses("*** Begin Patch\n*** Add File: a.md\nhi\n*** End Patch\n")


def test_a_grammar_is_loaded_once_per_definition():
    assert load_lark_grammar(APPLY_PATCH) is load_lark_grammar(APPLY_PATCH)


@pytest.mark.parametrize(
    ("user_text", "expected"),
    [
        ("please run `git status --short` now", "git status --short"),
        ("What's the weather in Oslo tomorrow?", "weather Oslo tomorrow"),
        ("", "hello"),
    ],
)
def test_a_text_input_is_the_quoted_command_or_the_words(user_text, expected):
    assert custom_tool_input("text", "", "", user_text, 1) == expected
    assert custom_tool_input("", "", "", user_text, 1) == expected


SMALL_GRAMMARS = {
    "alternatives": 'start: greeting " " NAME "!"\ngreeting: "hi" | "hello" | "good morning"\n'
    "NAME: /[A-Z][a-z]+/\n",
    "repetition": 'start: item+ ";" pair*\nitem: "a" | "b"\npair: "(" item item ")"\n',
    "optional": 'start: "x" "y"? ["z"] sign\nsign: ("+" | "-")?\n',
    "imports": 'start: WORD "=" NUMBER\n%import common.WORD\n%import common.NUMBER\n',
    "ignored space": 'start: "SELECT" NAME ("," NAME)* "FROM" NAME ["LIMIT" INT]\n'
    "%import common.CNAME -> NAME\n%import common.INT\n%import common.WS\n%ignore WS\n",
    "regex terminals": 'start: ID ":" HEX\nID: /[a-z]{3}-\\d{2}/\nHEX: /0x[0-9a-f]+/i\n',
    "recursion": 'start: expr\nexpr: expr "+" term | term\nterm: "(" expr ")" | /[0-9]+/\n',
}


@pytest.mark.parametrize("name", list(SMALL_GRAMMARS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lark_input_parses_under_its_grammar(name, seed):
    definition = SMALL_GRAMMARS[name]
    text = lark_input(definition, "Say hi to Oslo: users table, ticket abc 42", seed)
    lark.Lark(definition, parser="earley").parse(text)  # lark's own parser: raises if not


def test_a_lark_input_takes_the_users_words():
    definition = SMALL_GRAMMARS["alternatives"]
    assert lark_input(definition, "say hi to Oslo") == "hi Oslo!"
    sql = lark_input(SMALL_GRAMMARS["ignored space"], "count the users", seed=1)
    assert sql.startswith("SELECT ") and sql.split()[1] in {"count", "users"}
    assert re.fullmatch(
        r"(set|retries)=3", lark_input(SMALL_GRAMMARS["imports"], "set retries to 3")
    )


def test_the_same_seed_gives_the_same_input_and_seeds_vary_it():
    definition = SMALL_GRAMMARS["alternatives"]
    inputs = {lark_input(definition, "greet Paris", seed) for seed in range(12)}
    assert all(
        lark_input(definition, "greet Paris", 5) == lark_input(definition, "greet Paris", 5)
        for _ in range(3)
    )
    assert len(inputs) > 1 and all(text.endswith(" Paris!") for text in inputs)
    patch = lark_input(APPLY_PATCH, "Create notes.md", 3)
    assert patch == lark_input(APPLY_PATCH, "Create notes.md", 3)


def test_the_input_is_the_same_in_another_process():
    """Lark compiles rules through sets and dicts; nothing may depend on the hash seed."""
    cases = [(SMALL_GRAMMARS["repetition"], "a b"), (SMALL_GRAMMARS["alternatives"], "greet Oslo")]
    script = (
        "from turnpike.worker.custom_input import custom_tool_input as c\n"
        f"for definition, text in {cases!r}:\n"
        "    print(repr(c('grammar', 'lark', definition, text, 4)))\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert other == "".join(f"{lark_input(d, text, 4)!r}\n" for d, text in cases)


@pytest.mark.parametrize(
    ("pattern", "user_text", "expected"),
    [
        (r"[a-z]{3}-\d{2}", "ticket abc 42", "abc-42"),
        (r"(yes|no)", "answer no please", "no"),
        (r"(yes|no)", "", None),
        (r"\d{4}-\d{2}-\d{2}", "due 2024-03-01", "2024-03-01"),
        (r"[A-Z][a-z]+ [A-Z][a-z]+", "weather in New York", "New York"),
        (r"(?i)[^a]{2}x*", "", None),
        (r"(a)\1b", "", "aab"),
        (r"\S+@\S+", "mail bob@example.org", "bob@example.org"),
    ],
)
def test_a_regex_input_matches_in_full(pattern, user_text, expected):
    text = regex_input(pattern, user_text)
    assert re.fullmatch(pattern, text)
    if expected is not None:
        assert text == expected


def test_an_oversized_definition_is_refused():
    definition = 'start: "x"\n' + "// padding\n" * (MAX_DEFINITION_BYTES // 10)
    with pytest.raises(ValueError, match="over the limit"):
        lark_input(definition)
    with pytest.raises(ValueError, match="over the limit"):
        regex_input("x" * (MAX_DEFINITION_BYTES + 1))


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ('start: a\na: "x" a\n', "no finite sentence"),
        # 2**15 nodes: a smallest sentence over the derivation budget.
        (
            "start: a0\n" + "".join(f"a{i}: a{i + 1} a{i + 1}\n" for i in range(14)) + 'a14: "x"\n',
            "budget",
        ),
        ("start: (", "invalid lark grammar"),
        ('start: "a" b\nb: "x"\nb: "y"\n', "invalid lark grammar"),
        ('foo: "x"\n', "no rule named start"),
        ('start: "a"\n%import .local.X\n', "relative %import"),
        ('start: "a"\n%import nothere.X\n', "invalid lark grammar"),
        ("start: /[/\n", "invalid lark grammar"),
        ("start: X\n%declare X\n", "without a pattern"),
        ("start: /a{5000}/\n", "at least 5000 times"),
    ],
)
def test_a_grammar_without_a_usable_sentence_is_a_value_error(definition, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        lark_input(definition, "hi")


@pytest.mark.parametrize("pattern", ["[", "a{5000}", r"(?<=\d)x"])
def test_a_regex_without_a_usable_string_is_a_value_error(pattern):
    with pytest.raises(ValueError):
        regex_input(pattern)


def test_unknown_formats_and_syntaxes_are_value_errors():
    with pytest.raises(ValueError, match="format"):
        custom_tool_input("json", "", "", "hi", 1)
    with pytest.raises(ValueError, match="syntax"):
        custom_tool_input("grammar", "peg", "start", "hi", 1)


@pytest.mark.parametrize(
    "pattern",
    [
        r"(.*)",
        r"a?b*",
        r"(?:ab|)*c?",
        r"[^\n]*",
        r"(?i)a*b?",
        r"^a*",
        r"x{0,3}",
        r"(?:a*)*",
        r"(?=a)a*",
        r"a*(?!b)",
        r"(a|b\b)*",
        r"(a)?\1",
        r"\b",
        r"[^a-c\d.]*",
    ],
)
def test_the_nonempty_regex_matches_exactly_the_nonempty_matches(pattern):
    """By brute force over short strings: lark gets the same language (or, with None,
    a terminal that matches only the empty string)."""
    nonempty = nonempty_regex(pattern)
    strings = ["".join(p) for n in range(1, 4) for p in itertools.product("abcx1 \n.", repeat=n)]
    if nonempty is None:
        return
    assert not re.fullmatch(nonempty, "")
    for text in strings:
        assert bool(re.fullmatch(nonempty, text)) == bool(re.fullmatch(pattern, text)), text


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(a|aa)+c", r"(\w+\s?)+!"])
def test_a_backtracking_regex_cannot_stall_the_worker(pattern):
    """The request's words are tried against the tenant's regex: with Python's re, "a"
    x 28 against (a+)+b takes minutes, and the worker's event loop, every tenant's, with
    it. Matching a tenant's pattern has a time bound; the input is then written from the
    pattern itself."""
    import concurrent.futures

    words = "a" * 40 + " " + "a" * 60 + "x " * 10
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(custom_tool_input, "grammar", "regex", pattern, words, 0)
        text = answer.result(timeout=30)
    assert re.fullmatch(pattern, text)
