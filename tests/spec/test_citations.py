"""Citations resolve inside the repository (docs/design/README.md): every ``X.md`` a source file,
test, benchmark or doc names exists, every ``§N`` names a numbered heading of its page, and
nothing points outside the repository. Pure and fast: it only reads text files."""

from __future__ import annotations

import bisect
import re
from functools import cache
from pathlib import Path

import pytest

from paths import ROOT

DOCS = ROOT / "docs"
DESIGN = DOCS / "design"


def _ours(folder: Path, pattern: str) -> list[Path]:
    """The files of ``folder`` matching ``pattern``, outside hidden folders (the benchmarks'
    virtual environments, caches): only what the repository holds."""
    return sorted(
        p
        for p in folder.rglob(pattern)
        if not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


#: Where citations may appear: code, tests, benchmarks, examples and the documentation.
SCANNED = [
    *_ours(ROOT / "src", "*.py"),
    *_ours(ROOT / "tests", "*.py"),
    *_ours(ROOT / "tests", "*.sh"),
    *_ours(ROOT / "benchmarks", "*.py"),
    *_ours(ROOT / "examples", "*.py"),
    ROOT / "README.md",
    *_ours(DOCS, "*.md"),
]

_MD = re.compile(r"\w\.md\b")
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-")
#: A module docstring: the first string of the file, after comments and blank lines.
_DOCSTRING = re.compile(r'\A(?:\s|#[^\n]*)*[rRuU]?("""|\'\'\')(.*?)\1', re.DOTALL)
_SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
#: Between a page and its section: closing quotes/brackets, a comma, an opening parenthesis.
_LINK_GAP = re.compile(r"[`'\")\]*]*,?\s*\(?\s*")
#: Between two sections of one citation (``§4-§6``, ``§2, §3 and §5``).
_CHAIN_GAP = re.compile(r"\s*(?:,|;|/|-|–|and|or|to)?\s*")
_HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
#: Paths and names of documents that are not in the repository.
_OUTSIDE = [
    ("/work/", re.compile(r"/work/")),
    ("../shared", re.compile(r"\.\./shared|shared/spec")),
    ("slurm-runtime (the spec's name; cite docs/design/runtime.md)", re.compile(r"slurm-runtime")),
]


def _mentions(text: str) -> list[tuple[int, int, str]]:
    """Every ``X.md`` path in ``text``, with its span (found from the ``.md``, then backwards:
    a regex anchored at every word is ten times slower on the whole tree)."""
    out = []
    for m in _MD.finditer(text):
        start = m.start()
        while start > 0 and text[start - 1] in _PATH_CHARS:
            start -= 1
        out.append((start, m.end(), text[start : m.end()]))
    return out


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _resolve(name: str, source: Path) -> Path | None:
    """The file a mention in ``source`` names: ``docs/...`` from the root; in a doc page, a
    relative link from the page's folder; elsewhere a bare name is a page of ``docs/``."""
    candidates = [ROOT / name]
    if source.suffix == ".md":
        candidates.insert(0, source.parent / name)
    elif "/" not in name:
        candidates.append(DOCS / name)
    for candidate in candidates:
        if candidate.resolve().is_file():
            return candidate.resolve()
    return None


@cache
def _numbers(page: Path) -> frozenset[str]:
    """The section numbers of ``page``'s headings (``## 5. Status tracking`` gives ``5``)."""
    return frozenset(_HEADING.findall(_text(page)))


def _home(path: Path, text: str) -> Path | None:
    """The page a bare ``§N`` of ``path`` refers to: a doc page's own sections; in a Python
    file, the first ``docs/design`` page its module docstring names."""
    if path.suffix == ".md":
        return path
    docstring = _DOCSTRING.match(text) if path.suffix == ".py" else None
    for _, _, name in _mentions(docstring.group(2) if docstring else ""):
        if name.startswith("docs/design/"):
            return _resolve(name, path)
    return None


def _problems(path: Path) -> list[str]:
    text = _text(path)
    where = _rel(path)
    out: list[str] = []

    def line(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    for label, pattern in _OUTSIDE:
        for m in pattern.finditer(text):
            out.append(
                f"{where}:{line(m.start())}: names a document outside the repository ({label})"
            )
    pages: list[tuple[int, int, Path | None, str]] = []  # (start, end, resolved, name)
    for start, end, name in _mentions(text):
        found = _resolve(name, path)
        pages.append((start, end, found, name))
        if re.search(r"(?:^|/)spec/", name):
            out.append(f"{where}:{line(start)}: names a document outside the repository ({name})")
        elif found is None:
            out.append(f"{where}:{line(start)}: {name} is not a file of the repository")
    ends = [p[1] for p in pages]
    home = _home(path, text)
    previous: tuple[int, Path | None, str] | None = None  # end of the last citation, its page
    for m in _SECTION.finditer(text):
        number = m.group(1)
        page: Path | None = None
        name = ""
        last = bisect.bisect_right(ends, m.start()) - 1  # the nearest page mentioned before
        if last >= 0 and _LINK_GAP.fullmatch(text[ends[last] : m.start()]):
            _, _, page, name = pages[last]
        elif previous is not None and _CHAIN_GAP.fullmatch(text[previous[0] : m.start()]):
            _, page, name = previous
        elif home is not None:
            page, name = home, "the page named by the module docstring"
        else:
            out.append(
                f"{where}:{line(m.start())}: §{number} names no page (write docs/design/PAGE.md "
                f"§{number}, or name the page in the module docstring)"
            )
            previous = None
            continue
        previous = (m.end(), page, name)
        if page is not None and number not in _numbers(page):
            out.append(f"{where}:{line(m.start())}: {name} has no section numbered {number}")
    return out


def test_design_pages_exist() -> None:
    for page in ("README", "runtime", "matching", "pilots", "sites"):
        assert (DESIGN / f"{page}.md").is_file(), page


def test_design_pages_are_numbered() -> None:
    """runtime.md keeps sections 1 to 14, so that citations map one to one."""
    assert {str(n) for n in range(1, 15)} <= _numbers(DESIGN / "runtime.md")
    assert {str(n) for n in range(1, 8)} <= _numbers(DESIGN / "matching.md")
    assert {"1", "2", "3", "4", "5"} <= _numbers(DESIGN / "sites.md")
    assert {"1", "2", "3", "3.1", "3.7", "4", "5"} <= _numbers(DESIGN / "pilots.md")


@pytest.mark.parametrize("path", [p for p in SCANNED if p != Path(__file__).resolve()], ids=_rel)
def test_citations_resolve(path: Path) -> None:
    assert _problems(path) == []


def test_checker_catches_what_it_should(tmp_path: Path) -> None:
    """The checker itself: a missing page, a missing section, a bare § without a page, and an
    outside path are each reported; a chained and a docstring-homed § pass."""
    good = tmp_path / "good.py"
    good.write_text(
        '"""Rules (docs/design/runtime.md §4-§6)."""\n'
        "# docs/design/matching.md §5.3, §7 and bare §12\n"
    )
    assert _problems(good) == []
    bad = tmp_path / "bad.py"
    outside = "/wo" + "rk/shared/x"
    bad.write_text(
        f'"""No page."""\n# §3\n# docs/design/runtime.md §99\n# docs/nope.md\n# {outside}\n'
    )
    found = "\n".join(_problems(bad))
    assert "§3 names no page" in found
    assert "no section numbered 99" in found
    assert "docs/nope.md is not a file" in found
    assert "outside the repository" in found
