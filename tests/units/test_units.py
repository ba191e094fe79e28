"""``launchers.units``: the one size and duration parser, its structured errors and the
formatters (docs/language.md, Sizes and Durations)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launchers.units import (
    DURATION_UNITS,
    DURATION_UNITS_TEXT,
    GIB,
    SIZE_UNITS,
    SIZE_UNITS_TEXT,
    Negative,
    NotAQuantity,
    NoUnit,
    SeveralUnits,
    UnitError,
    UnitOrder,
    UnknownUnit,
    duration_of,
    duration_text,
    parse_duration,
    parse_seconds,
    parse_size,
    quantity,
    size_text,
)


def test_the_unit_lists_of_the_messages_name_every_spelling_of_the_tables() -> None:
    assert SIZE_UNITS_TEXT == (
        "B, K/M/G/T (binary, as in Slurm), KiB/MiB/GiB/TiB or KB/MB/GB/TB (decimal)"
    )
    assert DURATION_UNITS_TEXT == (
        "s/sec(s)/second(s), m/min(s)/minute(s), h/hour(s), d/day(s) or w/week(s)"
    )
    words = set()
    for item in DURATION_UNITS_TEXT.replace(" or ", ", ").split(", "):
        for shown in item.split("/"):
            words |= {shown[:-3], shown[:-3] + "s"} if shown.endswith("(s)") else {shown}
    assert words == set(DURATION_UNITS)
    sizes = SIZE_UNITS_TEXT.replace(" (binary, as in Slurm)", "").replace(" (decimal)", "")
    items = sizes.replace(" or ", ", ").split(", ")
    assert {u.lower() for item in items for u in item.split("/")} == set(SIZE_UNITS)


@pytest.mark.parametrize(
    ("call", "value", "kind", "fields"),
    [
        (parse_size, 16, NoUnit, {"number": "16"}),
        (parse_size, " 16 ", NoUnit, {"number": "16"}),
        (parse_size, "4X", UnknownUnit, {"unit": "X", "part": 0}),
        (parse_size, "big", NotAQuantity, {}),
        (parse_size, True, NotAQuantity, {}),
        (parse_duration, 4, NoUnit, {"number": "4"}),
        (parse_duration, "4 parsecs", UnknownUnit, {"unit": "parsecs", "part": 0}),
        (parse_duration, "1h 2x", UnknownUnit, {"unit": "x", "part": 1}),
        (parse_duration, "30m1h", UnitOrder, {"unit": "h", "part": 1}),
        (parse_duration, "long", NotAQuantity, {}),
    ],
)
def test_errors_say_what_was_wrong(call, value, kind, fields) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kind) as info:
        call(value)
    assert isinstance(info.value, UnitError) and isinstance(info.value, ValueError)
    assert info.value.what == ("size" if call is parse_size else "duration")
    assert info.value.value == value
    for name, expected in fields.items():
        assert getattr(info.value, name) == expected


def test_messages() -> None:
    with pytest.raises(UnitError, match=r"^'16' has no unit; write a size such as 16G \(binary"):
        parse_size("16")
    with pytest.raises(UnitError, match=r"^1.5 has no unit; write a size such as 1.5G"):
        parse_size(1.5)  # type: ignore[arg-type]
    with pytest.raises(UnitError, match=r"^4 has no unit; a duration needs a unit \(4s, 4m, 4h"):
        parse_duration(4)
    with pytest.raises(UnitError, match=r"^unknown duration unit 'x'; use s/sec\(s\)/second"):
        parse_duration("4x")
    with pytest.raises(UnitError, match=r"units must decrease \(1h30m\)"):
        parse_duration("30m 1h")


def test_duration_of_parts_as_a_parser_reads_them() -> None:
    assert duration_of([("1", "h"), ("30", "m")]) == 5400
    assert duration_of([("1.5", "s")]) == 2
    with pytest.raises(NoUnit) as info:
        duration_of([("1", "h"), ("4", None)])
    assert info.value.number == "4"


def test_quantity_is_exact_and_rounds_up() -> None:
    assert quantity("24", GIB) == 24 * GIB
    assert quantity("1.3", GIB) == 1395864372
    assert quantity("0.001", 1) == 1


def test_parse_seconds() -> None:
    assert parse_seconds("2m") == 120
    assert parse_seconds(0.5) == 0.5  # a bare number of seconds, kept as given
    assert parse_seconds(90) == 90
    assert parse_seconds("1h30m") == 5400
    with pytest.raises(Negative):
        parse_seconds(-1)
    with pytest.raises(NoUnit) as info:
        parse_seconds(45, bare="error")
    assert info.value.number == "45"
    with pytest.raises(SeveralUnits) as several:
        parse_seconds("1h30m", several=False)
    assert several.value.seconds == 5400
    assert str(several.value) == "'1h30m' has several units; write one, such as 90m"
    with pytest.raises(NotAQuantity):
        parse_seconds(True)
    with pytest.raises(NotAQuantity):
        parse_seconds(None)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(3600, "1h"), (86400, "1d"), (7 * 86400, "7d"), (5400, "90m"), (61, "61s"), (0, "0s")],
)
def test_duration_text(seconds: int, text: str) -> None:
    assert duration_text(seconds) == text
    assert parse_duration(text) == seconds or seconds == 0


@given(st.integers(min_value=1, max_value=2**50))
def test_size_text_reads_back_exactly(nbytes: int) -> None:
    assert parse_size(size_text(nbytes)) == nbytes


@given(st.integers(min_value=1, max_value=10**8))
def test_duration_text_reads_back_exactly(seconds: int) -> None:
    assert parse_duration(duration_text(seconds)) == seconds
