"""Sizes and durations: the one parser and formatter of each, exact (integers and fractions).

Sizes follow Slurm: ``K``, ``M``, ``G``, ``T`` (and ``KiB``...) are binary, ``KB``, ``MB``...
are decimal, ``B`` is bytes. A number without a unit is always an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

#: Size units in the groups messages list them: (spellings, what the group is).
_SIZE_GROUPS: tuple[tuple[tuple[tuple[str, int], ...], str], ...] = (
    ((("B", 1),), ""),
    ((("K", KIB), ("M", MIB), ("G", GIB), ("T", TIB)), "binary, as in Slurm"),
    ((("KiB", KIB), ("MiB", MIB), ("GiB", GIB), ("TiB", TIB)), ""),
    ((("KB", 1000), ("MB", 1000**2), ("GB", 1000**3), ("TB", 1000**4)), "decimal"),
)

#: Duration units: seconds and spellings (``second(s)`` stands for ``second`` and ``seconds``).
_DURATION_GROUPS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, ("s", "sec(s)", "second(s)")),
    (60, ("m", "min(s)", "minute(s)")),
    (3600, ("h", "hour(s)")),
    (86400, ("d", "day(s)")),
    (604800, ("w", "week(s)")),
)


def _spellings(shown: str) -> tuple[str, ...]:
    return (shown[:-3], shown[:-3] + "s") if shown.endswith("(s)") else (shown,)


def _either(items: list[str]) -> str:
    return ", ".join(items[:-1]) + f" or {items[-1]}" if len(items) > 1 else items[0]


#: Lower-case spelling -> bytes; case-insensitive lookups.
SIZE_UNITS: dict[str, int] = {
    name.lower(): factor for group, _ in _SIZE_GROUPS for name, factor in group
}
#: Lower-case spelling -> seconds.
DURATION_UNITS: dict[str, int] = {
    name: factor
    for factor, shown in _DURATION_GROUPS
    for spelling in shown
    for name in _spellings(spelling)
}
#: The size units as messages list them (every spelling of ``SIZE_UNITS``).
SIZE_UNITS_TEXT = _either(
    ["/".join(n for n, _ in group) + (f" ({what})" if what else "") for group, what in _SIZE_GROUPS]
)
#: The duration units as messages list them (every spelling of ``DURATION_UNITS``).
DURATION_UNITS_TEXT = _either(["/".join(shown) for _, shown in _DURATION_GROUPS])
#: The size units one per item, for a parser's "expected one of".
SIZE_UNITS_LIST = _either([n for group, _ in _SIZE_GROUPS for n, _ in group])
#: The short duration units, then the words, for a parser's "expected one of".
DURATION_UNITS_LIST = (
    _either([shown[0] for _, shown in _DURATION_GROUPS])
    + f" (or {', '.join(_spellings(shown[1])[0] for _, shown in _DURATION_GROUPS)})"
)

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_QUANTITY_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")
_COMPOUND_DURATION_RE = re.compile(rf"^\s*(?:{_NUMBER}\s*[A-Za-z]+\s*){{2,}}$")
_DURATION_PART_RE = re.compile(rf"{_NUMBER}\s*([A-Za-z]+)")


class UnitError(ValueError):
    """A size or duration cannot be read. ``str()`` is a whole message; the subclass and its
    fields say what was wrong (``what``: ``"size"`` or ``"duration"``, ``value`` as given), so
    that a front end with its own positions and words (the requirement parser, the remote
    file readers) can say it its way."""

    def __init__(self, message: str, *, what: str = "", value: object = None) -> None:
        super().__init__(message)
        self.what = what
        self.value = value


class NotAQuantity(UnitError):
    """Not a number with a unit at all (or a value of another type)."""


class NoUnit(UnitError):
    """A bare number; ``number`` as written, ``part`` its index in a duration of several parts."""

    def __init__(
        self, message: str, *, what: str, value: object, number: str, part: int = 0
    ) -> None:
        super().__init__(message, what=what, value=value)
        self.number = number
        self.part = part


class UnknownUnit(UnitError):
    """``unit`` is in no table; ``part`` is its index in a duration of several parts."""

    def __init__(self, message: str, *, what: str, value: object, unit: str, part: int) -> None:
        super().__init__(message, what=what, value=value)
        self.unit = unit
        self.part = part


class UnitOrder(UnitError):
    """In a duration of several parts, part ``part`` (unit ``unit``) is not smaller than the
    one before."""

    def __init__(self, message: str, *, what: str, value: object, unit: str, part: int) -> None:
        super().__init__(message, what=what, value=value)
        self.unit = unit
        self.part = part


class SeveralUnits(UnitError):
    """A duration of several parts where one unit is asked for; ``seconds`` is their sum."""

    def __init__(self, message: str, *, what: str, value: object, seconds: int) -> None:
        super().__init__(message, what=what, value=value)
        self.seconds = seconds


class Negative(UnitError):
    """A negative number of seconds."""


def quantity(number: str, factor: int) -> int:
    """``number`` (decimal text) times ``factor``, rounded up to a whole unit, exactly."""
    if "." not in number:
        return int(number) * factor
    return math.ceil(Fraction(number) * factor)


class _Kind:
    """What differs between sizes and durations: the table and the words of the messages."""

    def __init__(self, what: str, table: dict[str, int], units: str, examples: str) -> None:
        self.what = what
        self.table = table
        self.units = units
        self.example, self.examples = examples.split(" | ")

    def without_unit(self, shown: str, number: str, value: object, part: int = 0) -> NoUnit:
        if self.what == "size":
            advice = f"write a size such as {number}G (binary, as in Slurm)"
        else:
            advice = f"a duration needs a unit ({number}s, {number}m, {number}h...)"
        message = f"{shown} has no unit; {advice}"
        return NoUnit(message, what=self.what, value=value, number=number, part=part)

    def unknown(self, unit: str, value: object, part: int = 0) -> UnknownUnit:
        return UnknownUnit(
            f"unknown {self.what} unit {unit!r}; use {self.units}",
            what=self.what,
            value=value,
            unit=unit,
            part=part,
        )

    def factor(self, number: str, unit: str | None, value: object, part: int = 0) -> int:
        if not unit:
            raise self.without_unit(repr(number), number, value, part)
        factor = self.table.get(unit.lower())
        if factor is None:
            raise self.unknown(unit, value, part)
        return factor

    def parse(self, text: object) -> int:
        """The value of one number and unit; a bare number is an error."""
        what = self.what
        if isinstance(text, bool):
            message = f"{text!r} is not a {what}; write a {what} such as {self.example}"
            raise NotAQuantity(message, what=what, value=text)
        if isinstance(text, (int, float)):
            raise self.without_unit(str(text), str(text), text)
        m = _QUANTITY_RE.match(str(text))
        if not m:
            if self is _DURATION and _COMPOUND_DURATION_RE.match(str(text)):
                return duration_of(_DURATION_PART_RE.findall(str(text)), str(text))
            message = f"{text!r} is not a {what}; write a number and a unit such as {self.examples}"
            raise NotAQuantity(message, what=what, value=text)
        number, unit = m.groups()
        if not unit:
            raise self.without_unit(repr(str(text).strip()), number, text)
        return quantity(number, self.factor(number, unit, text))


_SIZE = _Kind("size", SIZE_UNITS, SIZE_UNITS_TEXT, "16G | 16G or 512M")
_DURATION = _Kind("duration", DURATION_UNITS, DURATION_UNITS_TEXT, "4h | 4h or 2 days")


def size_from(number: str, unit: str | None) -> int:
    """Bytes for ``number`` in ``unit`` (case-insensitive), rounded up to a whole byte."""
    return quantity(number, _SIZE.factor(number, unit, unit or number))


def parse_size(text: str | int) -> int:
    """Parse ``"24G"``, ``"1.5 GiB"``, ``"400MB"`` to bytes; a bare number is an error."""
    return _SIZE.parse(text)


def duration_from(number: str, unit: str | None) -> int:
    """Seconds for ``number`` in ``unit``, rounded up to a whole second."""
    return quantity(number, _DURATION.factor(number, unit, unit or number))


def duration_of(parts: Iterable[tuple[str, str | None]], text: str = "") -> int:
    """Seconds of a duration given as (number, unit) parts (``1h30m``: units decreasing),
    summed exactly and rounded up to a whole second; ``text`` is what messages quote."""
    total: int | Fraction = 0
    previous = 0
    for i, (number, unit) in enumerate(parts):
        factor = _DURATION.factor(number, unit, text or unit or number, i)
        if previous and factor >= previous:
            raise UnitOrder(
                f"{text.strip()!r}: in a duration of several parts, units must decrease (1h30m)",
                what="duration",
                value=text,
                unit=str(unit),
                part=i,
            )
        previous = factor
        total += Fraction(number) * factor if "." in number else int(number) * factor
    return math.ceil(total)


def parse_duration(text: str | int | float) -> int:
    """Parse ``"4 days"``, ``"1.5h"``, ``"90 minutes"``, ``"1h30m"`` to seconds; a bare number
    is an error."""
    return _DURATION.parse(text)


def parse_seconds(value: object, *, bare: str = "seconds", several: bool = True) -> int | float:
    """Seconds of a duration setting: text with a unit (``"30s"``, ``"1h30m"``) or, with
    ``bare="seconds"``, a number of seconds, returned as given (``0.5`` stays ``0.5``; a
    negative one is ``Negative``). ``bare="error"`` refuses a bare number (``NoUnit``), and
    ``several=False`` a duration of several parts (``SeveralUnits``, with their sum)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if bare == "error":
            raise _DURATION.without_unit(str(value), str(value), value)
        if value < 0:
            raise Negative(f"{value} is negative", what="duration", value=value)
        return value
    if not several and isinstance(value, str) and _COMPOUND_DURATION_RE.match(value):
        seconds = sum(duration_from(n, u) for n, u in _DURATION_PART_RE.findall(value))
        raise SeveralUnits(
            f"{value!r} has several units; write one, such as {duration_text(seconds)}",
            what="duration",
            value=value,
            seconds=seconds,
        )
    return _DURATION.parse(value)


def mib_ceil(nbytes: int) -> int:
    """Bytes to MiB, rounded up (Slurm's ``--mem`` unit; never below the request)."""
    return -(-nbytes // MIB)


def slurm_time(seconds: int, *, days: bool = False) -> str:
    """``[D-]HH:MM:SS`` for sbatch ``--time``, rounded up to whole minutes (Slurm's unit);
    ``days``: always with the day (``0-01:30:00``), as the remote sites' job scripts write it."""
    minutes = -(-int(seconds) // 60)
    day, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if day or days:
        return f"{day}-{hours:02d}:{mins:02d}:00"
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


def duration_text(seconds: int) -> str:
    """A duration in the largest unit that divides it (``1h``, ``7d``, ``90m``, ``61s``): how
    files written for people (discover, convert) and suggestions show one."""
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % factor == 0:
            return f"{seconds // factor}{unit}"
    return f"{seconds}s"


def size_text(nbytes: int) -> str:
    """The shortest size text that parses back to exactly ``nbytes`` (``24GiB``, ``1.3GiB``,
    ``12345B``): how a requirement prints its memory."""
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= factor:
            for digits in range(4):
                scale = 10**digits
                whole = nbytes * scale // factor  # the decimal d = whole / scale <= nbytes / factor
                if whole * factor > (nbytes - 1) * scale:  # ceil(d * factor) == nbytes
                    text = f"{whole // scale}.{whole % scale:0{digits}d}" if digits else str(whole)
                    return text + unit
            break
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"
