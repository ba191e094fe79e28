"""The problems of a configuration file, collected and raised together.

Every reader (``launchers.yaml`` and its sidecars in ``config.reader``/``config.loader``; the
Compute Backend Config, its ``Environment`` and ``Resources``, and MLproject files in
``launchers.remote``) adds each problem where it was written to one ``Problems`` and raises
once: one ``ConfigurationError`` whose lines are ``FILE:LINE:COLUMN: KEY.PATH: message``, in
file order, and whose ``file``/``line``/``column``/``key``/``reason`` are the first problem's
(docs/configuration.md, Errors).

The two families of files keep their own words, which tests and documentation quote:
``launchers.yaml`` describes a value with its text (``describe``: ``a string ('x')``) and
suggests with ``; did you mean 'x'?`` (``did_you_mean``); the remote files name the type alone
(``type_name``: ``a string``), suggest in parentheses, noting a difference of case only
(``suggest``), and show key paths as the keys are written (``key_path``). Pure; no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from launchers.config.keypath import join
from launchers.config.located import LDict, LList
from launchers.config.model import Position
from launchers.errors import ConfigurationError

# -- what a value is ---------------------------------------------------------------------------


#: YAML's types by their names in messages (bool before int: a boolean is an int in Python)
_TYPE_NAMES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (type(None), "null"),
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (Mapping, "a mapping"),
    (list, "a list"),
)


def type_name(value: Any) -> str:
    """A YAML-ish name of ``value``'s type (``a string``, ``null``), for the remote files."""
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def describe(value: Any) -> str:
    """``type_name`` with the value itself (``a string ('x')``, ``nothing (null)``), for
    ``launchers.yaml``."""
    if value is None:
        return "nothing (null)"
    name = type_name(value)
    if isinstance(value, bool):
        return f"{name} ({'true' if value else 'false'})"
    if isinstance(value, (int, float)):
        return f"{name} ({value})"
    if isinstance(value, str):
        short = value if len(value) <= 40 else value[:37] + "..."
        return f"{name} ({short!r})"
    if isinstance(value, (list, Mapping)):
        return name
    return f"a {name}"


# -- what was meant --------------------------------------------------------------------------


def did_you_mean(word: str, choices: Any) -> str:
    """``"; did you mean 'x'?"`` when a choice is close to ``word``, else ``""``
    (``launchers.yaml``)."""
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` when ``name`` is close to a known key (the same but for case,
    a close spelling, or the start of one), else ``""`` (the remote files)."""
    known = list(known)
    by_lower = {k.lower(): k for k in known}
    if name.lower() in by_lower:
        return f" (did you mean {by_lower[name.lower()]!r}? keys are case-sensitive)"
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    if not close and len(name) >= 3:
        close = [k for k in by_lower if k.startswith(name.lower())][:1]
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def unknown_key(key: Any, known: Iterable[str]) -> str:
    """``unknown key (did you mean 'X'?); known keys: A, B`` (the remote files)."""
    known = tuple(known)
    return f"unknown key{suggest(str(key), known)}; known keys: {', '.join(known)}"


def key_path(prefix: str, key: str | int) -> str:
    """``prefix.key`` (``prefix[i]`` for an index), the key as written (the remote files)."""
    return join(prefix, key, quote=False)


# -- where it was written --------------------------------------------------------------------

_NO_KEY = object()


class Loc:
    """Where a value was read, turned into a ``Position`` only when needed (cheap to make:
    the ``launchers.yaml`` reader makes one per value it converts)."""

    __slots__ = ("index", "key", "path", "src")

    def __init__(self, src: Any, path: str, key: Any = _NO_KEY, index: int | None = None) -> None:
        self.src = src
        self.path = path
        self.key = key
        self.index = index

    @property
    def position(self) -> Position:
        src = self.src
        if isinstance(src, Position):
            pos = src
        elif self.key is not _NO_KEY and isinstance(src, LDict):
            mark = src._values.get(self.key)
            if mark is not None:  # fast path: one Position, straight from the parser's mark
                return Position(src._file, mark.line + 1, mark.column + 1, self.path)
            pos = src.value_position(self.key)
        elif self.index is not None and isinstance(src, LList):
            if 0 <= self.index < len(src._items):
                mark = src._items[self.index]
                return Position(src._file, mark.line + 1, mark.column + 1, self.path)
            pos = src.item_position(self.index)
        else:
            p = getattr(src, "position", None)
            pos = p if isinstance(p, Position) else Position()
        return Position(file=pos.file, line=pos.line, column=pos.column, key=self.path)


def key_pos(mapping: Any, key: Any) -> Position | None:
    """Where ``key`` is written in a located mapping (None for plain data)."""
    f = getattr(mapping, "key_position", None)
    return f(key) if f is not None else getattr(mapping, "position", None)


def value_pos(mapping: Any, key: Any) -> Position | None:
    """Where the value of ``key`` starts in a located mapping."""
    f = getattr(mapping, "value_position", None)
    return f(key) if f is not None else getattr(mapping, "position", None)


def item_pos(seq: Any, index: int) -> Position | None:
    """Where item ``index`` starts in a located list."""
    f = getattr(seq, "item_position", None)
    return f(index) if f is not None else getattr(seq, "position", None)


def unknown_keys(
    mapping: Any, known: Iterable[str], prefix: str, problems: Problems, *, note: str = ""
) -> bool:
    """An ``unknown_key`` problem (``note`` appended) for each key of ``mapping`` that is not in
    ``known``, at the key (the remote files); True when every key is known."""
    known = tuple(known)
    ok = True
    for key in mapping:
        if key not in known:
            problems.add(
                key_pos(mapping, key), key_path(prefix, str(key)), unknown_key(key, known) + note
            )
            ok = False
    return ok


# -- the collector ---------------------------------------------------------------------------


class Problems:
    """The problems found in one file (``file``: where unpositioned ones are reported)."""

    def __init__(self, file: str | None) -> None:
        self.file = file
        self._errors: list[ConfigurationError] = []

    def add(self, where: Loc | Position | None, key: str, message: str) -> None:
        """Record ``message`` about ``key`` (a key path; ``""`` for the file) at ``where``."""
        pos = where.position if isinstance(where, Loc) else where
        if pos is None:
            pos = Position(file=self.file)
        file = pos.file if pos.file is not None else (self.file or "<config>")
        self._errors.append(
            ConfigurationError(
                message, file=file, line=pos.line, column=pos.column, key=key or None
            )
        )

    def __bool__(self) -> bool:
        return bool(self._errors)

    def _in_order(self) -> list[ConfigurationError]:
        return sorted(self._errors, key=lambda e: (e.file or "", e.line or 0, e.column or 0))

    @property
    def lines(self) -> list[str]:
        """Every problem as ``FILE:LINE:COLUMN: KEY.PATH: message``, in file order."""
        return [str(e) for e in self._in_order()]

    def raise_if_any(self) -> None:
        """Raise one ``ConfigurationError`` for all the problems, if there is any."""
        if not self._errors:
            return
        errors = self._in_order()
        first = errors[0]
        raise ConfigurationError(
            first.reason,
            file=first.file,
            line=first.line,
            column=first.column,
            key=first.key,
            problems=[str(e) for e in errors],
        )


__all__ = [
    "Loc",
    "Problems",
    "describe",
    "did_you_mean",
    "item_pos",
    "join",
    "key_path",
    "key_pos",
    "suggest",
    "type_name",
    "unknown_key",
    "unknown_keys",
    "value_pos",
]
