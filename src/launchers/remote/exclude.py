"""``Exclude`` patterns of a Compute Backend Config (docs/design/sites.md §1.3) and the upload walk.

Patterns are gitignore-like and matched against POSIX paths relative to the project directory.
Pure matching (``ExcludeRules``) is separate from the directory walk (``collect_uploads``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

import attrs

from ..errors import ConfigurationError


class PatternError(ConfigurationError):
    """An ``Exclude`` pattern cannot be used; the loader adds the file position."""


def _component_regex(component: str, pattern: str) -> str:
    """Regex for one path component: ``*``, ``?`` and ``[...]`` never cross a ``/``."""
    out: list[str] = []
    i, n = 0, len(component)
    while i < n:
        c = component[i]
        if c == "*":
            while i < n and component[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and component[j] in "!^":
                j += 1
            if j < n and component[j] == "]":
                j += 1
            while j < n and component[j] != "]":
                j += 1
            if j >= n:
                raise PatternError(f"pattern {pattern!r} has an unclosed '['")
            body = component[i + 1 : j]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            body = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            out.append(f"[^/{body}]" if negate else f"[{body}]")
            i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(component[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@attrs.frozen
class ExcludePattern:
    """One compiled pattern: the text as written, its position in the list, how it matches."""

    text: str
    index: int
    negated: bool
    dir_only: bool
    anchored: bool
    regex: re.Pattern[str] = attrs.field(eq=False, repr=False)

    def matches(self, relpath: str, is_dir: bool) -> bool:
        """Whether this pattern (ignoring ``!``) matches ``relpath`` (POSIX, no leading ``/``)."""
        if self.dir_only and not is_dir:
            return False
        target = relpath if self.anchored else relpath.rsplit("/", 1)[-1]
        return self.regex.fullmatch(target) is not None


def compile_pattern(text: str, index: int = 0) -> ExcludePattern:
    """Compile one pattern by rules 1-5 of docs/design/sites.md §1.3; an empty pattern is an error."""
    if not isinstance(text, str):
        raise PatternError(f"a pattern must be a string, not {type(text).__name__}")
    body = text
    negated = body.startswith("!")
    if negated:
        body = body[1:]
    dir_only = body.endswith("/")
    body = body.rstrip("/") if dir_only else body
    if not body.strip("/") or body.strip() == "":
        raise PatternError(
            "an empty pattern matches nothing; remove it"
            if not text
            else f"pattern {text!r} has no name to match"
        )
    anchored = "/" in body
    body = body.lstrip("/")
    if not anchored:
        regex = _component_regex(body, text)
        return ExcludePattern(text, index, negated, dir_only, False, re.compile(regex))
    parts = body.split("/")
    if any(p == "" for p in parts):
        raise PatternError(f"pattern {text!r} has an empty path component ('//')")
    out = ""
    last = len(parts) - 1
    for k, part in enumerate(parts):
        if part == "**":
            if k == 0 and k == last:
                out += "[^/]+(?:/[^/]+)*"
            elif k == last:
                out += "(?:/[^/]+)+"  # a trailing /** matches everything inside, not the directory
            elif k == 0:
                out += "(?:[^/]+/)*"
            else:
                out += "(?:/[^/]+)*"
            continue
        leading_stars = k == 1 and parts[0] == "**"
        out += ("/" if k > 0 and not leading_stars else "") + _component_regex(part, text)
    return ExcludePattern(text, index, negated, dir_only, True, re.compile(out))


@attrs.frozen
class Verdict:
    """The decision for one path: excluded or not, and by which pattern (None: no pattern)."""

    excluded: bool
    pattern: ExcludePattern | None = None


@attrs.frozen
class ExcludeRules:
    """An ordered list of patterns; the last matching one decides (gitignore's rule)."""

    patterns: tuple[ExcludePattern, ...] = ()

    @classmethod
    def compile(cls, texts: Iterable[str]) -> ExcludeRules:
        """Compile every pattern, in order; raises ``PatternError`` for the first bad one."""
        return cls(tuple(compile_pattern(t, i) for i, t in enumerate(texts)))

    def decide(self, relpath: str, is_dir: bool) -> Verdict:
        """Verdict for ``relpath`` itself (the caller handles excluded parent directories)."""
        verdict = Verdict(False)
        for p in self.patterns:
            if p.matches(relpath, is_dir):
                verdict = Verdict(not p.negated, p)
        return verdict

    def is_excluded(self, relpath: str, is_dir: bool = False) -> bool:
        """Whether ``relpath`` is excluded, either itself or through an excluded parent."""
        parts = relpath.split("/")
        for k in range(1, len(parts)):
            if self.decide("/".join(parts[:k]), True).excluded:
                return True
        return self.decide(relpath, is_dir).excluded


@attrs.frozen
class Upload:
    """One file to send: its local path (a link's target) and its POSIX path in the run directory."""

    local: Path
    relpath: str
    size: int
    note: str = ""  # e.g. "Apptainer image, uploaded even though Exclude matches it"


@attrs.frozen
class Exclusion:
    """A path left out, with the pattern that matched (directories end with ``/``)."""

    relpath: str
    pattern: str


@attrs.frozen
class UploadSet:
    """What a run sends and what it leaves out, in path order."""

    uploads: tuple[Upload, ...]
    excluded: tuple[Exclusion, ...]

    @cached_property
    def paths(self) -> frozenset[str]:
        """Every uploaded relative path and each of its parent directories."""
        out: set[str] = set()
        for u in self.uploads:
            parts = u.relpath.split("/")
            for k in range(1, len(parts) + 1):
                out.add("/".join(parts[:k]))
        return frozenset(out)

    @property
    def total_size(self) -> int:
        return sum(u.size for u in self.uploads)


def collect_uploads(project_dir: Path, rules: ExcludeRules) -> UploadSet:
    """Walk ``project_dir``: files not excluded are uploads; a symlink is sent as its target.

    A symlink to a directory, or a dangling one, that is not excluded is a ``ConfigurationError``.
    """
    root = Path(project_dir)
    if not root.is_dir():
        raise ConfigurationError(
            f"project directory {str(root)!r} does not exist or is not a directory"
        )
    uploads: list[Upload] = []
    excluded: list[Exclusion] = []
    problems: list[str] = []

    def walk(directory: Path, prefix: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as e:
            problems.append(f"{directory}: cannot list: {e.strerror}")
            return
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_link:
                target_is_dir = os.path.isdir(entry.path)
                verdict = rules.decide(rel, target_is_dir)
                if verdict.excluded:
                    excluded.append(Exclusion(rel + ("/" if target_is_dir else ""), _text(verdict)))
                    continue
                if not os.path.exists(entry.path):
                    problems.append(
                        f"{rel}: symbolic link to {os.readlink(entry.path)!r}, which does not exist; "
                        "remove it or add it to Exclude"
                    )
                    continue
                if target_is_dir:
                    problems.append(
                        f"{rel}: symbolic link to a directory ({os.readlink(entry.path)!r}); "
                        "links are uploaded as their target file only: add it to Exclude or copy the directory"
                    )
                    continue
                uploads.append(
                    Upload(Path(os.path.realpath(entry.path)), rel, os.stat(entry.path).st_size)
                )
                continue
            verdict = rules.decide(rel, is_dir)
            if verdict.excluded:
                excluded.append(Exclusion(rel + ("/" if is_dir else ""), _text(verdict)))
                continue
            if is_dir:
                walk(Path(entry.path), rel + "/")
            elif entry.is_file(follow_symlinks=False):
                uploads.append(
                    Upload(Path(entry.path), rel, entry.stat(follow_symlinks=False).st_size)
                )
            else:
                problems.append(
                    f"{rel}: not a regular file (a socket, FIFO or device); add it to Exclude"
                )

    walk(root, "")
    if problems:
        raise ConfigurationError(
            "cannot upload the project", problems=[f"{root}/{p}" for p in problems]
        )
    return UploadSet(tuple(uploads), tuple(excluded))


def _text(verdict: Verdict) -> str:
    return verdict.pattern.text if verdict.pattern is not None else ""


def describe_exclusions(excluded: Sequence[Exclusion]) -> list[str]:
    """One line per excluded path naming the pattern, for ``--dry-run``."""
    return [f"{e.relpath}  (excluded by pattern {e.pattern!r})" for e in excluded]
