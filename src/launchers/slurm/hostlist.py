"""Expanding Slurm hostlists (``r01c[01-48],gpu[1,3-4]``) into host names (pure), for
partitions' ``Nodes=`` lists."""

from __future__ import annotations

import itertools
import re

#: Most names one hostlist may expand to (``n[0-99999999]`` is a typo, not a cluster).
MAX_HOSTLIST = 1_000_000


def _split_outside_brackets(value: str) -> list[str]:
    out: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(value):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append(value[start:i])
            start = i + 1
    out.append(value[start:])
    return [x.strip() for x in out if x.strip()]


def _range_names(spec: str) -> list[str]:
    """``01-03,7`` -> ``01 02 03 7``: zero padding as wide as each range's lower bound."""
    names: list[str] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {part.strip()!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"bad range {part.strip()!r} (decreasing)")
        if last - first >= MAX_HOSTLIST:
            raise ValueError(f"range {part.strip()!r} is too large")
        names.extend(str(i).zfill(len(lo)) for i in range(first, last + 1))
    return names


def expand_hostlist(value: str) -> tuple[str, ...]:
    """The host names of a Slurm hostlist (``r01c[01-48],gpu[1,3-4]``, ``rack[1-2]n[01-04]``);
    ``ValueError`` for an unreadable or too large one."""
    out: list[str] = []
    for item in _split_outside_brackets(value):
        pieces = re.split(r"\[([^\[\]]*)\]", item)
        if any(c in piece for piece in pieces[::2] for c in "[]"):
            raise ValueError(f"unbalanced brackets in {item!r}")
        ranges = [_range_names(spec) for spec in pieces[1::2]]
        count = 1
        for r in ranges:
            count *= len(r)
        if len(out) + count > MAX_HOSTLIST:
            raise ValueError(f"more than {MAX_HOSTLIST} names")
        for combo in itertools.product(*ranges):
            name = pieces[0]
            for k, part in enumerate(combo):
                name += part + pieces[2 * k + 2]
            out.append(name)
    return tuple(dict.fromkeys(out))
