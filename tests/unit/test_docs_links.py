"""The documentation's links resolve: every relative link in README.md, docs/**/*.md and
bench/*.md names a file or folder of this repository (the part before any `#anchor`), and
no link leaves the repository (no `../shared/`, no absolute path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "bench").glob("*.md")])
# [text](target) and ![alt](target), the target up to the first space or closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:")


def links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text()))
    return LINK.findall(text)


def test_the_documents_are_found() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in DOCS}
    assert {"README.md", "docs/api.md", "docs/scaling.md", "bench/README.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path.startswith("/"):
            broken.append(f"{target}: an absolute path")
            continue
        resolved = (doc.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_document_points_outside_the_repository(doc: Path) -> None:
    assert "../shared/" not in doc.read_text()


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "[a](b.md) ![c](img/d.png#x) `[not](a-link.md)`\n```\n[nor](this.md)\n```\n[web](https://e.com)"
    )
    assert links(doc) == ["b.md", "img/d.png#x", "https://e.com"]
