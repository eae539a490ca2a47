"""Every relative link of the documentation resolves: README.md, docs/**/*.md and the README.md of
each top-level folder.  A Markdown link ``[text](path#anchor)`` or image ``![alt](path)`` whose
target is a relative path must name an existing file or directory (relative to the linking
file); a link to a heading (``#anchor``, in the same file or another Markdown file) must match a
heading of that file, slugged as GitHub does.  Links inside fenced code blocks and inline code
are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("migrate", "routers", "crosstraffic", "probes", "analysis", "tests")

_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_files(repo: Path = REPO) -> list[Path]:
    """The Markdown files whose links are checked."""
    files = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    files += [repo / f / "README.md" for f in FOLDERS if (repo / f / "README.md").is_file()]
    return [f for f in files if f.is_file()]


def _prose_lines(text: str, strip_code: bool = True) -> list[str]:
    """The lines outside fenced code blocks (inline code removed unless ``strip_code`` is false)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(_INLINE_CODE.sub("", line) if strip_code else line)
    return out


def links(text: str) -> list[str]:
    """The link targets of a Markdown text (outside code)."""
    return [m.group(1) for line in _prose_lines(text) for m in _LINK.finditer(line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    """The heading anchors of a Markdown file (GitHub numbering of duplicates included)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(md.read_text(), strip_code=False):
        m = _HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(md: Path, repo: Path = REPO) -> list[str]:
    """The relative links of ``md`` that do not resolve, as 'file: target (why)'."""
    bad = []
    for target in links(md.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        where = f"{md.relative_to(repo)}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
            bad.append(f"{where} (no heading with anchor #{anchor})")
    return bad


def test_the_documentation_is_found():
    files = {f.relative_to(REPO).as_posix() for f in doc_files()}
    assert {"README.md", "docs/metrics.md", "docs/measurements/README.md"} <= files
    assert sum(len(links(f.read_text())) for f in doc_files()) > 100


@pytest.mark.parametrize("md", doc_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(md):
    assert broken_links(md) == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A title\n\n## `make x`: runs\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok](docs/a.md#make-x-runs) [ok](#top) [web](https://example.org/x)\n"
        "[gone](docs/missing.md) [bad anchor](docs/a.md#nope)\n"
        "`[not a link](nowhere.md)`\n```\n[in code](nowhere.md)\n```\n\n# Top\n"
    )
    assert broken_links(tmp_path / "README.md", tmp_path) == [
        "README.md: docs/missing.md (no such file)",
        "README.md: docs/a.md#nope (no heading with anchor #nope)",
    ]


def test_slug_follows_github():
    assert slug("`make nightly`: regression runs") == "make-nightly-regression-runs"
    assert slug("DRIVER=libvirt") == "driverlibvirt"
    assert slug("CRIU_HOST=vm") == "criu_hostvm"
    assert slug("Faults (`FAULT=...`, used by `make chaos`)") == "faults-fault-used-by-make-chaos"
    assert slug("Instruments' CPU") == "instruments-cpu"
