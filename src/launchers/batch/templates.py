"""hpc_batch templates (batching.md §4): ``<<name>>`` placeholders filled with values quoted for
their place in the shell script: outside quotes a POSIX single-quoted word, inside double quotes
with ``\\ " $ ` `` escaped, inside single quotes by closing and reopening them.

Unknown names are errors; ``<<...>>`` never survives into a script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from ..errors import ScriptError

NAME = re.compile(r"<<([A-Za-z_][A-Za-z0-9_]*)>>")
SCRIPT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")

OUTSIDE, SINGLE, DOUBLE = "outside", "single", "double"


class TemplateError(ScriptError):
    """A template cannot be rendered for one job (unknown name, unusable value)."""


def value_text(name: str, value: Any) -> str:
    """The text of a value: strings as they are, numbers and booleans as YAML writes them."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, (bool, int, float)):
        text = yaml.safe_dump(value, default_flow_style=True).strip()
        if text.endswith("\n..."):
            text = text[: -len("\n...")]
        text = text.removesuffix("...").strip()
    else:
        raise TemplateError(f"template value {name!r} is a {type(value).__name__}; only strings, numbers and booleans can be substituted")
    if "\0" in text:
        raise TemplateError(f"template value {name!r} contains a NUL character")
    return text


def quote(text: str, context: str) -> str:
    """``text`` quoted for its place: outside quotes, inside double quotes, inside single quotes."""
    if context == DOUBLE:
        return "".join("\\" + c if c in '\\"$`' else c for c in text)
    if context == SINGLE:
        return text.replace("'", "'\\''")
    return "'" + text.replace("'", "'\\''") + "'"


def contexts(template: str) -> list[tuple[int, int, str, str]]:
    """Every placeholder as ``(start, end, name, context)``, scanning the shell quoting."""
    out = []
    state = OUTSIDE
    i = 0
    n = len(template)
    while i < n:
        c = template[i]
        if c == "<" and template.startswith("<<", i):
            m = NAME.match(template, i)
            if m:
                out.append((m.start(), m.end(), m.group(1), state))
                i = m.end()
                continue
        if state == OUTSIDE:
            if c == "\\":
                i += 2
                continue
            if c == "'":
                state = SINGLE
            elif c == '"':
                state = DOUBLE
        elif state == SINGLE:
            if c == "'":
                state = OUTSIDE
        else:  # DOUBLE
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state = OUTSIDE
        i += 1
    return out


def render(template: str, values: Mapping[str, Any], *, where: str = "template") -> str:
    """Fill every ``<<name>>`` of ``template``; ``TemplateError`` naming an unknown name."""
    parts = []
    last = 0
    for start, end, name, context in contexts(template):
        if name not in values:
            raise TemplateError(f"{where}: unknown placeholder <<{name}>> (known: {', '.join(sorted(values))})")
        parts.append(template[last:start])
        parts.append(quote(value_text(name, values[name]), context))
        last = end
    parts.append(template[last:])
    return "".join(parts)


__all__ = ["SCRIPT_NAME", "TemplateError", "contexts", "quote", "render", "value_text"]
