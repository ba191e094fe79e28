"""Small helpers shared by the Compute Backend Config readers: collect positioned problems.

Every reader adds problems to one ``Problems`` and raises once, so a user sees all of them,
in file order, one line each as ``FILE:LINE:COLUMN: KEY.PATH: message``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ..config.model import Position
from ..errors import ConfigurationError


def key_path(prefix: str, key: str | int) -> str:
    """``prefix.key`` (or ``prefix[key]`` for an index); ``key`` alone at the top."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` when ``name`` is close to a known key, else an empty string."""
    known = list(known)
    by_lower = {k.lower(): k for k in known}
    if name.lower() in by_lower:
        return f" (did you mean {by_lower[name.lower()]!r}? keys are case-sensitive)"
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    if not close and len(name) >= 3:
        close = [k for k in by_lower if k.startswith(name.lower())][:1]
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def type_name(value: Any) -> str:
    """A YAML-ish name of ``value``'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


class Problems:
    """Problems found in one file; ``raise_if_any`` raises one ``ConfigurationError`` for all."""

    def __init__(self, file: str | None) -> None:
        self.file = file
        self._items: list[tuple[int, int, int, str]] = []

    def add(self, pos: Position | None, key: str, message: str) -> None:
        """Record ``message`` about ``key`` written at ``pos``."""
        pos = pos or Position(file=self.file)
        loc = pos.file if pos.file is not None else (self.file or "<config>")
        if pos.line is not None:
            loc += f":{pos.line}"
            if pos.column is not None:
                loc += f":{pos.column}"
        text = f"{loc}: {key}: {message}" if key else f"{loc}: {message}"
        self._items.append((pos.line or 0, pos.column or 0, len(self._items), text))

    def extend(self, error: ConfigurationError) -> None:
        """Take over the problems of another error (kept in its own order, sorted with ours)."""
        lines = error.problems or [str(error)]
        for text in lines:
            line, col = _line_col(text)
            self._items.append((line, col, len(self._items), text))

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def lines(self) -> list[str]:
        return [t for *_, t in sorted(self._items)]

    def raise_if_any(self) -> None:
        """Raise one ``ConfigurationError`` (first problem's line and column) if any was added."""
        if self._items:
            line, col, _, text = sorted(self._items)[0]
            raise ConfigurationError(
                text, file=self.file, line=line or None, column=col or None, problems=self.lines
            )


def _line_col(text: str) -> tuple[int, int]:
    parts = text.split(":", 3)
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return 0, 0


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


def container_pos(value: Any) -> Position | None:
    """The position of a located container."""
    pos = getattr(value, "position", None)
    return pos if isinstance(pos, Position) else None
