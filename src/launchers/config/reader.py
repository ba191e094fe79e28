"""Check one located YAML mapping against a key table (``config/keys.py``) and convert it.

Every problem is collected with its file, line, column and key path instead of stopping at the
first one, so ``launchers validate`` lists them all. Pure: works on values from
``config/located.py``; no I/O.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

import attrs

from launchers.config.keypath import join
from launchers.config.keys import (
    ALIASES,
    FORBIDDEN,
    KINDS,
    REGEX_GROUPS,
    SECTIONS,
    XPM_CLASSES,
    Key,
)
from launchers.config.located import LDict, LList
from launchers.config.model import Position
from launchers.config.problems import Loc, Problems, describe, did_you_mean
from launchers.errors import LaunchersError
from launchers.slurm.sbatch_options import check_sbatch_options
from launchers.units import Negative, UnitError, parse_duration, parse_seconds, parse_size

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Bad:
    """Marker for a value that had a problem (already reported)."""


BAD = Bad()


class Sec:
    """The converted keys of one mapping, with where they were read."""

    __slots__ = ("items", "loc", "locs", "path", "values")

    def __init__(self, path: str, loc: Loc) -> None:
        self.path = path
        self.loc = loc
        self.values: dict[str, Any] = {}
        self.locs: dict[str, Loc] = {}
        self.items: dict[str, LList] = {}

    @property
    def pos(self) -> Position:
        """Where the mapping starts, with its key path."""
        return self.loc.position

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def at(self, key: str) -> Position:
        """Where the value of ``key`` was written (the mapping's position if absent)."""
        loc = self.locs.get(key)
        return loc.position if loc is not None else self.pos

    def item_at(self, key: str, index: int) -> Position:
        """Where item ``index`` of the list under ``key`` was written."""
        items = self.items.get(key)
        if items is not None and 0 <= index < len(items):
            written = self.locs[key].path if key in self.locs else join(self.path, key)
            return attrs.evolve(items.item_position(index), key=f"{written}[{index}]")
        return self.at(key)


_XPM_VALUE_KINDS = ("size", "duration", "int")
_NUMBER_TEXT = re.compile(r"\s*[0-9]+(?:\.[0-9]*)?\s*\Z")


def _xpm_unknown_key(section: str, key: str, value: Any) -> str:
    """What experimaestro 1.5.7 did with an unknown key of this section (" (...)"), or ""."""
    cls = XPM_CLASSES.get(section)
    if cls is not None:
        shown = key if key.isprintable() and '"' not in key else repr(key)
        return f' (experimaestro 1.5.7 refused the whole file too: "{shown} is not a valid field for {cls}")'
    if section == "top" and value:
        return " (experimaestro 1.5.7 could not load such a file either: it failed with an AttributeError)"
    return ""


def _xpm_value_note(kind: str, raw: Any) -> str:
    """What experimaestro 1.5.7 did with this value of a size, duration or integer key."""
    if kind in ("size", "duration"):
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return 'experimaestro 1.5.7 refused the whole file too: "expected string or bytes-like object"'
        if isinstance(raw, str) and _NUMBER_TEXT.match(raw):
            unit = "bytes" if kind == "size" else "seconds"
            return f"experimaestro 1.5.7 read it as {raw.strip()} {unit}"
    elif kind == "int" and isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        return f"experimaestro 1.5.7 converted it to {int(raw)}"
    return ""


class Reader:
    """Collects problems while converting a located document, section by section."""

    def __init__(self, file: str | None) -> None:
        self.file = file
        self.problems = Problems(file)
        #: what experimaestro 1.5.7 did with the value being converted, added to its problems
        self.note = ""

    # -- problems -------------------------------------------------------------------------
    def problem(self, where: Loc | Position, key: str, message: str) -> Bad:
        """Record a problem (with what experimaestro did, while a note is set); ``BAD``."""
        if self.note:
            message = f"{message} ({self.note})"
        self.problems.add(where, key, message)
        return BAD

    def raise_if_any(self) -> None:
        """Raise one ``ConfigurationError`` listing every problem, in file order."""
        self.problems.raise_if_any()

    # -- sections -------------------------------------------------------------------------
    def section(self, value: Any, name: str, path: str, loc: Loc) -> Sec | Bad:
        """Check the mapping ``value`` against ``SECTIONS[name]`` and convert its values."""
        table = SECTIONS[name]
        sec = Sec(path=path, loc=loc)
        if value is None:
            return sec
        if not isinstance(value, dict):
            return self.problem(loc, path, f"expected a mapping, found {describe(value)}")
        aliases = ALIASES.get(name, {})
        forbidden = FORBIDDEN.get(name, {})
        seen: dict[str, str] = {}
        suggested: set[str] = set()  # a misspelled key already reported stands for these
        located = isinstance(value, LDict)
        for raw_key, raw in value.items():
            if not isinstance(raw_key, str):
                kpos = _key_position(value, raw_key, loc)
                self.problem(kpos, path, f"a key must be a name, found {describe(raw_key)}")
                continue
            kpath = join(path, raw_key)
            if raw_key in forbidden or raw_key in aliases or raw_key not in table:
                kpos = _key_position(value, raw_key, loc)
                if raw_key in forbidden:
                    self.problem(kpos, kpath, forbidden[raw_key])
                    continue
                key = aliases.get(raw_key, raw_key)
                if key not in table:
                    what = f"unknown key {raw_key!r}"
                    if name == "top":
                        what = (
                            f"unknown top-level key {raw_key!r} (launcher kinds: local, slurm, "
                            "unicore, firecrest; also connectors, tokens, strategy, estimate)"
                        )
                    hint = did_you_mean(raw_key, list(table))
                    if hint:
                        suggested.add(hint.split("'")[1])
                    self.problem(kpos, kpath, f"{what}{hint}{_xpm_unknown_key(name, raw_key, raw)}")
                    continue
                if key in seen:
                    self.problem(
                        kpos, kpath, f"{raw_key!r} and {seen[key]!r} are the same key; keep one"
                    )
                    continue
            else:
                key = raw_key
                if key in seen:  # an alias came first
                    kpos = _key_position(value, raw_key, loc)
                    self.problem(
                        kpos, kpath, f"{raw_key!r} and {seen[key]!r} are the same key; keep one"
                    )
                    continue
            seen[key] = raw_key
            vloc = Loc(value if located else loc.position, kpath, key=raw_key)
            sec.locs[key] = vloc
            spec = table[key]
            if raw is None and spec.kind not in _NULL_OK:
                if spec.required:
                    self.problem(vloc, kpath, f"{key!r} needs a value")
                continue
            if name in XPM_CLASSES and spec.kind in _XPM_VALUE_KINDS:
                self.note = _xpm_value_note(spec.kind, raw)
            try:
                converted = getattr(self, _METHODS[spec.kind])(spec, raw, kpath, vloc)
            finally:
                self.note = ""
            if converted is not BAD:
                sec.values[key] = converted
                if raw.__class__ is LList:
                    sec.items[key] = raw
        for key, spec in table.items():
            if spec.required and key not in seen and key not in suggested:
                self.problem(loc, path, f"missing required key {key!r}")
        return sec

    # -- values ---------------------------------------------------------------------------
    def value(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        """Convert one value according to its key's kind (``BAD`` after a problem)."""
        return getattr(self, _METHODS[spec.kind])(spec, raw, path, loc)

    def _v_int(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if raw.__class__ is not int:
            if isinstance(raw, int) and not isinstance(raw, bool):
                return int(raw)
            hint = ""
            if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
                hint = f"; write {raw.strip()} without quotes"
            return self.problem(loc, path, f"expected an integer, found {describe(raw)}{hint}")
        if spec.minimum is not None and raw < spec.minimum:
            return self.problem(loc, path, f"must be at least {spec.minimum}, found {raw}")
        return raw

    def _v_bool(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if not isinstance(raw, bool):
            return self.problem(loc, path, f"expected true or false, found {describe(raw)}")
        return raw

    def _v_str(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if isinstance(raw, str):
            return raw
        if isinstance(raw, int) and not isinstance(raw, bool):
            return str(raw)
        return self.problem(loc, path, f"expected a string, found {describe(raw)}")

    def _v_size(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if isinstance(raw, float):
            return self.problem(loc, path, f"{raw} has no unit; write a size such as {raw}G")
        if not isinstance(raw, (str, int)):
            return self.problem(loc, path, f"expected a size such as 16G, found {describe(raw)}")
        try:
            return _size(raw)
        except UnitError as e:
            return self.problem(loc, path, str(e))

    def _v_duration(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if not isinstance(raw, (str, int, float)):
            return self.problem(loc, path, f"expected a duration such as 4h, found {describe(raw)}")
        try:
            return _duration(raw)
        except UnitError as e:
            return self.problem(loc, path, str(e))

    def _v_seconds(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        """A timing setting: a duration with a unit, or a bare number of seconds."""
        if isinstance(raw, str):
            return self._v_duration(spec, raw, path, loc)
        try:
            return math.ceil(parse_seconds(raw))
        except Negative:
            return self.problem(loc, path, f"{raw} is negative; write a duration such as 30s")
        except UnitError:  # not a number
            return self.problem(
                loc, path, f"expected a duration such as 30s, found {describe(raw)}"
            )

    def _v_ratio(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        bad = f"expected a number between 0 and 1, found {describe(raw)}"
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            return self.problem(loc, path, bad)
        try:
            ratio = Fraction(str(raw).strip())
        except (ValueError, ZeroDivisionError):
            return self.problem(loc, path, bad)
        if not 0 <= ratio <= 1:
            return self.problem(loc, path, f"must be between 0 and 1, found {raw}")
        return ratio

    def _strings(self, raw: Any, path: str, loc: Loc) -> tuple[str, ...] | Bad:
        if isinstance(raw, str):
            return self.problem(loc, path, f"expected a list of strings; write [{raw}]")
        if not isinstance(raw, list):
            return self.problem(loc, path, f"expected a list of strings, found {describe(raw)}")
        if getattr(raw, "all_str", False):
            return tuple(raw)
        out: list[str] = []
        for i, item in enumerate(raw):
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, int) and not isinstance(item, bool):
                out.append(str(item))
            else:
                ipath = f"{path}[{i}]"
                self.problem(
                    Loc(raw, ipath, index=i), ipath, f"expected a string, found {describe(item)}"
                )
        return tuple(out) if len(out) == len(raw) else BAD

    def _v_strings(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        return self._strings(raw, path, loc)

    def _v_paths(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if isinstance(raw, str):
            return (raw,)
        return self._strings(raw, path, loc)

    def _v_regexes(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        items = self._strings(raw, path, loc)
        if isinstance(items, Bad):
            return BAD
        out: list[re.Pattern[str]] = []
        for i, text in enumerate(items):
            ipath = f"{path}[{i}]"
            iloc = Loc(raw, ipath, index=i)
            try:
                rx = re.compile(text)
            except re.error as e:
                self.problem(iloc, ipath, f"invalid regular expression {text!r}: {e}")
                continue
            extra = [g for g in rx.groupindex if g not in REGEX_GROUPS]
            if extra:
                self.problem(
                    iloc,
                    ipath,
                    f"unknown named group {extra[0]!r} (allowed: {', '.join(REGEX_GROUPS)})"
                    f"{did_you_mean(extra[0], REGEX_GROUPS)}",
                )
                continue
            out.append(rx)
        return tuple(out) if len(out) == len(items) else BAD

    def _v_enum(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if isinstance(raw, bool) and "yes" in spec.choices:
            return "yes" if raw else "no"  # YAML 1.1 reads yes/no as booleans
        if isinstance(raw, str):
            text = raw.strip().lower()
            if spec.prefix and text.startswith(spec.prefix.lower()):
                text = text[len(spec.prefix) :]
            for choice in spec.choices:
                if text == choice.lower():
                    return choice
        shown = repr(raw) if isinstance(raw, str) else describe(raw)
        hint = did_you_mean(raw, spec.choices) if isinstance(raw, str) else ""
        return self.problem(
            loc, path, f"expected one of {', '.join(spec.choices)}, found {shown}{hint}"
        )

    def _mapping(self, raw: Any, path: str, loc: Loc, what: str) -> bool:
        if not isinstance(raw, dict):
            self.problem(loc, path, f"expected a mapping {what}, found {describe(raw)}")
            return False
        return True

    def _named_items(self, raw: Any, path: str, loc: Loc) -> list[tuple[str, Any, Loc, Loc]]:
        """(name, value, key location, value location) of a mapping keyed by names."""
        out = []
        located = isinstance(raw, LDict)
        for k, v in raw.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                kpos = _key_position(raw, k, loc)
                self.problem(kpos, path, f"a name must be a string, found {describe(k)}")
                continue
            kpath = join(path, str(k))
            kloc = Loc(raw.key_position(k) if located else loc.position, kpath)
            out.append((str(k), v, kloc, Loc(raw if located else loc.position, kpath, key=k)))
        return out

    def _v_tokens(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if not self._mapping(raw, path, loc, "{NAME: COUNT}"):
            return BAD
        sec = Sec(path=path, loc=loc)
        count = Key("int", "", minimum=1)
        for name, value, _kloc, vloc in self._named_items(raw, path, loc):
            if isinstance(value, dict) and "tokens" in value:
                self.problem(
                    vloc,
                    vloc.path,
                    f"write {name}: COUNT here ({{tokens: N}} is tokens.yaml's form)",
                )
                continue
            n = self._v_int(count, value, vloc.path, vloc)
            if n is not BAD:
                sec.values[name] = n
                sec.locs[name] = vloc
        return sec

    def _v_env(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if not self._mapping(raw, path, loc, "{NAME: value}"):
            return BAD
        out: dict[str, str] = {}
        for name, value, kloc, vloc in self._named_items(raw, path, loc):
            kp = vloc.path
            if not ENV_NAME.match(name):
                self.problem(kloc, kp, f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
            elif isinstance(value, bool) or value is None:
                self.problem(
                    vloc,
                    kp,
                    f"expected a string or a number, found {describe(value)}; "
                    "quote it (YAML reads yes, no, on, off as booleans)",
                )
            elif isinstance(value, (str, int, float)):
                out[name] = str(value)
            else:
                self.problem(vloc, kp, f"expected a string or a number, found {describe(value)}")
        return out

    def _v_sbatch(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if not self._mapping(raw, path, loc, "{long-option: value}"):
            return BAD
        out: list[tuple[str, str | bool]] = []
        for name, value, kloc, vloc in self._named_items(raw, path, loc):
            kp = vloc.path
            if isinstance(value, str) and any(c in value for c in "\n\r\0"):
                self.problem(vloc, kp, "a value cannot contain a newline, carriage return or NUL")
                continue
            try:  # the Slurm runtime's own rules, so load and submit agree
                out.extend(check_sbatch_options([(name, value)], where=kp))
            except LaunchersError as e:
                msg = str(e)
                msg = msg[len(kp) + 2 :] if msg.startswith(kp + ": ") else msg
                self.problem(vloc if isinstance(value, (dict, list)) else kloc, kp, msg)
        return tuple(out)

    def _v_slots(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if isinstance(raw, str) and raw.strip().lower() == "auto":
            return "auto"
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
            return raw
        return self.problem(loc, path, f"expected auto or an integer >= 1, found {describe(raw)}")

    def _v_section(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        return self.section(raw, spec.section, path, loc)

    def _v_map(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if raw is None:
            return {}
        if not self._mapping(raw, path, loc, "{name: ...}"):
            return BAD
        out: dict[str, Sec] = {}
        for name, value, _kloc, vloc in self._named_items(raw, path, loc):
            sec = self.section(value, spec.section, vloc.path, vloc)
            if isinstance(sec, Sec):
                out[name] = sec
        return out

    def _v_list(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        if raw is None:
            return []
        if not isinstance(raw, list):
            hint = " (start each item with '- ')" if isinstance(raw, dict) else ""
            return self.problem(loc, path, f"expected a list, found {describe(raw)}{hint}")
        out: list[Sec] = []
        section = spec.section
        for i, item in enumerate(raw):
            ipath = f"{path}[{i}]"
            sec = self.section(item, section, ipath, Loc(raw, ipath, index=i))
            if isinstance(sec, Sec):
                out.append(sec)
        return out

    def _v_any(self, spec: Key, raw: Any, path: str, loc: Loc) -> Any:
        return raw


def _key_position(container: Any, key: Any, loc: Loc) -> Position:
    if isinstance(container, LDict):
        return container.key_position(key)
    return loc.position


_NULL_OK = frozenset({"map", "list", "any"})  # a null section means "not set"
_METHODS = {kind: f"_v_{kind}" for kind in KINDS}


def _is_zero(raw: object) -> bool:
    """A bare 0 means "none" in every unit (docs/design/matching.md §4: an explicit 0 does override)."""
    return (type(raw) is int and raw == 0) or (isinstance(raw, str) and raw.strip() == "0")


@lru_cache(maxsize=4096)
def _size(raw: str | int) -> int:
    return 0 if _is_zero(raw) else parse_size(raw)


@lru_cache(maxsize=4096)
def _duration(raw: str | int | float) -> int:
    return 0 if _is_zero(raw) else parse_duration(raw)
