"""The one POSIX shell quoting function of job scripts (docs/design/runtime.md §3). Pure."""

from __future__ import annotations

from ..errors import ScriptError


def sh_quote(value: str, *, what: str = "value") -> str:
    """POSIX single quotes, always (``'it'\\''s'``); a NUL is a ``ScriptError``."""
    if "\0" in value:
        raise ScriptError(f"{what} contains a NUL character, which no command can receive")
    return "'" + value.replace("'", "'\\''") + "'"


__all__ = ["sh_quote"]
