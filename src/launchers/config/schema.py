"""JSON Schema (Draft 2020-12) of ``launchers.yaml``, generated from ``config/keys.py``.

Editors use it for completion and early checks; the loader stays the authority (it also checks
what a schema cannot: QoS and token names, connectors, regex groups, ``mem_per_cpu``).
"""

from __future__ import annotations

from typing import Any

from launchers.config.keys import (
    ALIASES,
    FORBIDDEN,
    OWNED_SBATCH_OPTIONS,
    SBATCH_OPTIONS,
    SECTIONS,
    Key,
)
from launchers.units import DURATION_UNITS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


SIZE_PATTERN = rf"^\s*{_NUMBER}\s*([bB]|[kKmMgGtT]([iI]?[bB])?)\s*$"
DURATION_PATTERN = (
    rf"^\s*{_NUMBER}\s*("
    + "|".join(_any_case(u) for u in sorted(DURATION_UNITS, key=len, reverse=True))
    + r")\s*$"
)
_ENV_NAME = "^[A-Za-z_][A-Za-z0-9_]*$"


def _value(key: Key) -> dict[str, Any]:
    """The schema of one key's value (without its description)."""
    kind = key.kind
    if kind == "int":
        out: dict[str, Any] = {"type": "integer"}
        if key.minimum is not None:
            out["minimum"] = key.minimum
        return out
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "str":
        return {"type": ["string", "integer"]}
    if kind == "size":
        return {"type": "string", "pattern": SIZE_PATTERN}
    if kind == "duration":
        return {"type": "string", "pattern": DURATION_PATTERN}
    if kind == "seconds":
        return {
            "anyOf": [
                {"type": "string", "pattern": DURATION_PATTERN},
                {"type": "number", "minimum": 0},
            ]
        }
    if kind == "ratio":
        return {"type": "number", "minimum": 0, "maximum": 1}
    if kind in ("strings", "regexes"):
        return {"type": "array", "items": {"type": ["string", "integer"]}}
    if kind == "paths":
        return {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    if kind == "enum":
        values: list[Any] = list(key.choices)
        if "yes" in key.choices:
            values += [True, False]  # YAML 1.1 reads yes/no as booleans
        values += [key.prefix + c for c in key.choices if key.prefix]
        return {"enum": values}
    if kind == "tokens":
        return {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}}
    if kind == "env":
        return {
            "type": "object",
            "propertyNames": {"pattern": _ENV_NAME},
            "additionalProperties": {"type": ["string", "number"]},
        }
    if kind == "sbatch":
        return {
            "type": "object",
            "propertyNames": {"enum": sorted(SBATCH_OPTIONS - OWNED_SBATCH_OPTIONS)},
            "additionalProperties": {"anyOf": [{"type": ["string", "number"]}, {"const": True}]},
        }
    if kind == "slots":
        return {"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}]}
    if kind == "section":
        return {"$ref": f"#/$defs/{key.section}"}
    if kind == "map":
        return {
            "type": ["object", "null"],
            "additionalProperties": {"$ref": f"#/$defs/{key.section}"},
        }
    if kind == "list":
        return {"type": ["array", "null"], "items": {"$ref": f"#/$defs/{key.section}"}}
    return {"type": "object"}  # any: validated by its own module


def _property(key: Key) -> dict[str, Any]:
    value = _value(key)
    if not key.required and key.kind not in ("map", "list"):
        value = {"anyOf": [value, {"type": "null"}]}
    value["description"] = key.doc
    if key.default is not None and key.default not in ((), {}):
        value["default"] = key.default
    return value


def _section(name: str) -> dict[str, Any]:
    table = SECTIONS[name]
    props: dict[str, Any] = {k: _property(v) for k, v in table.items()}
    for alias, target in ALIASES.get(name, {}).items():
        props[alias] = {**_property(table[target]), "deprecated": True}
        props[alias]["description"] = f"older spelling of {target}"
    for forbidden in FORBIDDEN.get(name, {}):
        props[forbidden] = False
    out: dict[str, Any] = {
        "type": ["object", "null"],
        "properties": props,
        "additionalProperties": False,
    }
    required = [k for k, v in table.items() if v.required]
    if required:
        out["type"] = "object"
        out["required"] = required
    return out


def _reachable(name: str, seen: dict[str, None]) -> None:
    if name in seen:
        return
    seen[name] = None
    for key in SECTIONS[name].values():
        if key.section:
            _reachable(key.section, seen)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``launchers.yaml`` (a new dict at each call)."""
    names: dict[str, None] = {}
    _reachable("top", names)
    defs = {name: _section(name) for name in names if name != "top"}
    root = _section("top")
    return {
        "$schema": DRAFT,
        "title": "launchers.yaml",
        "description": (
            "Where jobs may run: local machines, Slurm clusters, UNICORE and firecREST sites, "
            "with SSH connectors and counter tokens."
        ),
        **root,
        "$defs": defs,
    }


__all__ = ["DURATION_PATTERN", "SIZE_PATTERN", "json_schema"]
