"""Sizes and durations: the one parser and formatter of each, exact (integers and fractions).

Sizes follow Slurm: ``K``, ``M``, ``G``, ``T`` (and ``KiB``...) are binary, ``KB``, ``MB``...
are decimal, ``B`` is bytes. A number without a unit is always an error.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "k": KIB, "kib": KIB, "kb": 1000,
    "m": MIB, "mib": MIB, "mb": 1000**2,
    "g": GIB, "gib": GIB, "gb": 1000**3,
    "t": TIB, "tib": TIB, "tb": 1000**4,
}  # fmt: skip

DURATION_UNITS: dict[str, int] = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")
_DURATION_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")


class UnitError(ValueError):
    """A size or duration is malformed; callers wrap it with the position they know."""


def size_from(number: str, unit: str) -> int:
    """Bytes for ``number`` in ``unit`` (case-insensitive), rounded up to a whole byte."""
    factor = SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise UnitError(
            f"unknown size unit {unit!r}; use B, K/M/G/T (binary, as in Slurm), "
            "KiB/MiB/GiB/TiB or KB/MB/GB/TB (decimal)"
        )
    return math.ceil(Fraction(number) * factor)


def parse_size(text: str | int) -> int:
    """Parse ``"24G"``, ``"1.5 GiB"``, ``"400MB"`` to bytes; a bare number is an error."""
    if isinstance(text, bool):
        raise UnitError(f"{text!r} is not a size; write a size such as 16G")
    if isinstance(text, int):
        raise UnitError(f"{text} has no unit; write a size such as {text}G (binary, as in Slurm)")
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UnitError(f"{text!r} is not a size; write a number and a unit such as 16G or 512M")
    number, unit = m.groups()
    if not unit:
        raise UnitError(
            f"{text.strip()!r} has no unit; write a size such as {number}G (binary, as in Slurm)"
        )
    return size_from(number, unit)


def duration_from(number: str, unit: str) -> int:
    """Seconds for ``number`` in ``unit``, rounded up to a whole second."""
    factor = DURATION_UNITS.get(unit.lower())
    if factor is None:
        raise UnitError(
            f"unknown duration unit {unit!r}; use s, m/min, h/hour(s), d/day(s) or w/week(s)"
        )
    return math.ceil(Fraction(number) * factor)


def parse_duration(text: str | int | float) -> int:
    """Parse ``"4 days"``, ``"1.5h"``, ``"90 minutes"`` to seconds; a bare number is an error."""
    if isinstance(text, bool):
        raise UnitError(f"{text!r} is not a duration; write a duration such as 4h")
    if isinstance(text, (int, float)):
        raise UnitError(
            f"{text} has no unit; a duration needs a unit ({text}s, {text}m, {text}h...)"
        )
    m = _DURATION_RE.match(str(text))
    if not m:
        if _COMPOUND_DURATION_RE.match(str(text)):
            return _compound_duration(str(text))
        raise UnitError(
            f"{text!r} is not a duration; write a number and a unit such as 4h or 2 days"
        )
    number, unit = m.groups()
    if not unit:
        raise UnitError(
            f"{text.strip()!r} has no unit; a duration needs a unit ({number}s, {number}m, {number}h...)"
        )
    return duration_from(number, unit)


_COMPOUND_DURATION_RE = re.compile(rf"^\s*(?:{_NUMBER}\s*[A-Za-z]+\s*){{2,}}$")
_DURATION_PART_RE = re.compile(rf"{_NUMBER}\s*([A-Za-z]+)")


def _compound_duration(text: str) -> int:
    """Seconds for ``1h30m`` or ``1d 2h`` (the form ``format_duration`` writes): units decreasing."""
    total = Fraction(0)
    previous = 0
    for number, unit in _DURATION_PART_RE.findall(text):
        factor = DURATION_UNITS.get(unit.lower())
        if factor is None:
            raise UnitError(
                f"unknown duration unit {unit!r}; use s, m/min, h/hour(s), d/day(s) or w/week(s)"
            )
        if previous and factor >= previous:
            raise UnitError(
                f"{text.strip()!r}: in a duration of several parts, units must decrease (1h30m)"
            )
        previous = factor
        total += Fraction(number) * factor
    return math.ceil(total)


def mib_ceil(nbytes: int) -> int:
    """Bytes to MiB, rounded up (Slurm's ``--mem`` unit; never below the request)."""
    return -(-nbytes // MIB)


def slurm_time(seconds: int) -> str:
    """``[D-]HH:MM:SS`` for sbatch ``--time``, rounded up to whole minutes (Slurm's unit)."""
    minutes = -(-int(seconds) // 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:00"
    return f"{hours:02d}:{mins:02d}:00"


def parse_slurm_time(text: str) -> int | None:
    """Seconds from Slurm's time forms (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``);
    ``None`` for ``UNLIMITED``/``INFINITE``/``NONE``."""
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A", ""):
        return None
    days = 0
    if "-" in t:
        d, t = t.split("-", 1)
        days = int(d)
        parts = [int(p) for p in t.split(":")]
        while len(parts) < 3:
            parts.append(0)
        h, m, s = parts
    else:
        parts = [int(p) for p in t.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, (m, s) = 0, parts
        else:
            h, m, s = parts
    return ((days * 24 + h) * 60 + m) * 60 + s


def format_size(nbytes: int) -> str:
    """Human form using binary units, exact where possible (``24 GiB``, ``1.5 GiB``)."""
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= factor:
            value = Fraction(nbytes, factor)
            if value.denominator == 1:
                return f"{value.numerator} {unit}"
            return f"{float(value):.3g} {unit}"
    return f"{nbytes} B"


def format_duration(seconds: int) -> str:
    """Human form (``20h``, ``4d``, ``1h30m``, ``45s``)."""
    if seconds <= 0:
        return "0s"
    out = []
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        q, seconds = divmod(seconds, factor)
        if q:
            out.append(f"{q}{unit}")
    return "".join(out)
