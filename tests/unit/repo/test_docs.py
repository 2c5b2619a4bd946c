"""The documentation's links hold: every relative link and image in README.md and
docs/*.md reaches a file, and every anchor a heading (scripts/check_docs.py, `make docs`).
The checker itself is tested on small pages, so a check that passes everything fails here."""

from __future__ import annotations

from pathlib import Path

from support.paths import REPO_ROOT
from support.scripts import load_script

ROOT = REPO_ROOT

check_docs = load_script("check_docs", ROOT / "scripts" / "check_docs.py")


def test_every_link_and_anchor_of_the_docs_resolves():
    broken = check_docs.check(check_docs.documentation_pages())
    assert not broken, "broken links:\n" + "\n".join(map(str, broken))


def test_the_readme_stays_short_and_maps_every_page():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 260
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"the README's map misses docs/{page.name}"


def test_slugs_follow_github():
    assert check_docs.slug("Capacity: where a turn's CPU goes, before and after") == (
        "capacity-where-a-turns-cpu-goes-before-and-after"
    )
    assert check_docs.slug("The real Codex CLI: `make bench-codex`") == (
        "the-real-codex-cli-make-bench-codex"
    )
    assert check_docs.slug("Bugs that peers' users reported") == "bugs-that-peers-users-reported"
    assert check_docs.slug("**Bold** and [a link](x.md)") == "bold-and-a-link"
    assert check_docs.anchors("# Same\n## Same\n### Same\n") == {"same", "same-1", "same-2"}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_broken_files_and_anchors_are_found(tmp_path: Path):
    write(tmp_path, "docs/other.md", "# Other\n\n## A section\n")
    write(tmp_path, "docs/image.png", "")
    page = write(
        tmp_path,
        "docs/page.md",
        "# Page\n\n## Here\n\n"
        "[fine](other.md#a-section) [fine](#here) ![fine](image.png) [web](https://example.org)\n"
        "[missing file](gone.md)\n"
        "[missing heading](other.md#nowhere)\n"
        "![missing image](../bench/plot.png)\n"
        "[missing here](#there)\n",
    )
    broken = check_docs.check_page(page, tmp_path)
    assert [(b.line, b.target, b.reason) for b in broken] == [
        (6, "gone.md", "no such file"),
        (7, "other.md#nowhere", "no such heading"),
        (8, "../bench/plot.png", "no such file"),
        (9, "#there", "no such heading"),
    ]


def test_code_is_not_read_as_links_nor_headings(tmp_path: Path):
    page = write(
        tmp_path,
        "page.md",
        "# Page\n\n```toml\n# Not a heading\n[a](gone.md)\n```\n\n`[b](gone.md)` [c](#not-a-heading)\n",
    )
    broken = check_docs.check_page(page, tmp_path)
    assert [(b.target, b.reason) for b in broken] == [("#not-a-heading", "no such heading")]
