"""Exclude patterns (docs/design/sites.md §1.3): table, property and filesystem tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launchers.errors import ConfigurationError
from launchers.remote.exclude import ExcludeRules, PatternError, collect_uploads, compile_pattern

# (patterns, path, is_dir, excluded?)
TABLE = [
    # rule 2: no other slash -> a name at any depth
    (["*.csv"], "a.csv", False, True),
    (["*.csv"], "x/y/a.csv", False, True),
    (["data"], "data", True, True),
    (["data"], "data", False, True),
    (["data"], "src/data", True, True),
    (["data"], "src/data/x.txt", False, True),  # below an excluded directory (Mantik: nothing)
    (["data/"], "data", True, True),
    (["data/"], "data", False, False),  # rule 1: directories only
    (["data/"], "a/data/b.txt", False, True),
    # rule 3: anchored
    (["/data.csv"], "data.csv", False, True),
    (["/data.csv"], "x/data.csv", False, False),
    (["src/*.csv"], "src/a.csv", False, True),  # Mantik: nothing
    (["src/*.csv"], "x/src/a.csv", False, False),
    (["src/*.csv"], "src/sub/a.csv", False, False),
    (["src/data/"], "src/data/f", False, True),  # Mantik: nothing
    (["logs/*"], "logs/a.txt", False, True),  # Mantik: nothing
    # rule 4: wildcards
    (["*"], ".hidden", False, True),
    (["?.txt"], "a.txt", False, True),
    (["?.txt"], "ab.txt", False, False),
    (["[ab].txt"], "b.txt", False, True),
    (["[ab].txt"], "c.txt", False, False),
    (["[!ab].txt"], "c.txt", False, True),
    (["src/*"], "src/a/b.txt", False, True),  # src/a is excluded as a directory
    (["/a*"], "x/ab", False, False),
    (["**/*.png"], "a.png", False, True),
    (["**/*.png"], "a/b/c.png", False, True),
    (["logs/**"], "logs", True, False),
    (["logs/**"], "logs/a/b.txt", False, True),
    (["a/**/b"], "a/b", False, True),
    (["a/**/b"], "a/x/y/b", False, True),
    (["a/**/b"], "x/a/b", False, False),
    # rule 5: re-include
    (["*.csv", "!keep.csv"], "keep.csv", False, False),
    (["*.csv", "!keep.csv"], "x/drop.csv", False, True),
    (["logs/**", "!logs/keep.txt"], "logs/keep.txt", False, False),
    (["logs/", "!logs/keep.txt"], "logs/keep.txt", False, True),  # below an excluded directory
    (["!keep.csv", "*.csv"], "keep.csv", False, True),  # order matters
    # case-sensitive, # not special, no implicit patterns
    (["*.CSV"], "a.csv", False, False),
    (["#notes"], "#notes", False, True),
    ([], ".git/config", False, False),
]


@pytest.mark.parametrize(("patterns", "path", "is_dir", "excluded"), TABLE)
def test_table(patterns: list[str], path: str, is_dir: bool, excluded: bool) -> None:
    assert ExcludeRules.compile(patterns).is_excluded(path, is_dir) is excluded


@pytest.mark.parametrize("bad", ["", "!", "/", "a//b", "[ab"])
def test_bad_patterns(bad: str) -> None:
    with pytest.raises(PatternError):
        compile_pattern(bad)


_name = st.text(alphabet="abc.", min_size=1, max_size=3).filter(lambda s: s not in (".", ".."))
_path = st.lists(_name, min_size=1, max_size=4).map("/".join)


@settings(max_examples=200)
@given(_path, st.sampled_from(["a", "b", "ab", "a.c"]))
def test_plain_name_matches_any_component(path: str, name: str) -> None:
    rules = ExcludeRules.compile([name])
    assert rules.is_excluded(path) is (name in path.split("/"))
    assert ExcludeRules.compile([f"**/{name}"]).is_excluded(path) is rules.is_excluded(path)


@settings(max_examples=200)
@given(_path, _path)
def test_anchored_literal_matches_path_and_below(path: str, pattern: str) -> None:
    rules = ExcludeRules.compile(["/" + pattern])
    assert rules.is_excluded(path) is (path == pattern or path.startswith(pattern + "/"))


@settings(max_examples=200)
@given(_path, st.sampled_from(["*", "a*", "*.c", "?", "**/a", "a/**", "[ab]*", "a/*"]))
def test_pattern_then_negation_excludes_nothing(path: str, pattern: str) -> None:
    assert not ExcludeRules.compile([pattern, "!" + pattern]).is_excluded(path)


@settings(max_examples=200)
@given(_path)
def test_star_never_crosses_a_slash(path: str) -> None:
    assert ExcludeRules.compile(["/a*"]).decide(path, False).excluded is (
        "/" not in path and path.startswith("a")
    )


def _tree(root: Path, files: list[str]) -> None:
    for f in files:
        p = root / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f)


def test_collect_lists_uploads_and_reasons(tmp_path: Path) -> None:
    _tree(
        tmp_path, ["train.py", "data/a.csv", "src/b.csv", "src/c.py", "logs/x.txt", "logs/keep.txt"]
    )
    rules = ExcludeRules.compile(["data", "src/*.csv", "logs/**", "!logs/keep.txt"])
    got = collect_uploads(tmp_path, rules)
    assert [u.relpath for u in got.uploads] == ["logs/keep.txt", "src/c.py", "train.py"]
    assert {(e.relpath, e.pattern) for e in got.excluded} == {
        ("data/", "data"),
        ("src/b.csv", "src/*.csv"),
        ("logs/x.txt", "logs/**"),
    }
    assert "src" in got.paths and "src/c.py" in got.paths


def test_symlink_to_file_is_uploaded_as_target(tmp_path: Path) -> None:
    _tree(tmp_path, ["real.txt"])
    os.symlink("real.txt", tmp_path / "link.txt")
    got = collect_uploads(tmp_path, ExcludeRules())
    link = next(u for u in got.uploads if u.relpath == "link.txt")
    assert link.local == (tmp_path / "real.txt").resolve()


@pytest.mark.parametrize("target", ["missing.txt", "dir"])
def test_symlink_to_dir_or_dangling_is_an_error(tmp_path: Path, target: str) -> None:
    (tmp_path / "dir").mkdir()
    os.symlink(target, tmp_path / "bad")
    with pytest.raises(ConfigurationError, match=r"bad: symbolic link"):
        collect_uploads(tmp_path, ExcludeRules())
    # an excluded link is not uploaded, hence fine
    got = collect_uploads(tmp_path, ExcludeRules.compile(["bad"]))
    assert [e.relpath.rstrip("/") for e in got.excluded] == ["bad"]
