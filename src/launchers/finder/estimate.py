"""The ``earliest_start`` strategy: among the groups that can run an alternative, the one where
the job is expected to start first (docs/finder.md, "Strategies").

For each alternative in order, every group that can run it gives its launcher, as the search
does; when more than one does, each Slurm group's cluster is asked when the job would start
(``sbatch --test-only`` with the options found, through the group's connector, all at once,
each within a timeout); a local group starts now. The earliest wins; starts less than
:data:`TIE_SECONDS` apart are a tie, and ties go to the group that comes first in today's order
(weight, then file order). A group whose estimate failed (no answer in time, a refusal, a
UNICORE or firecREST site, which gives none) comes after every group with an estimate; when no
estimate is known, today's order decides. Answers are reused for ``estimate.cache`` seconds.
:func:`decide` is the pure decision; :func:`search_earliest` asks and decides.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..config.model import Group, LaunchersConfig, LocalGroup, SlurmGroup, UnicoreGroup
from ..hooks import services
from ..launcher import Launcher
from ..units import format_duration

if TYPE_CHECKING:
    pass

#: Estimates closer than this (seconds) are a tie: Slurm's backfill plans in steps of
#: ``bf_resolution``, 60 s by default.
TIE_SECONDS = 60.0


@attrs.frozen
class Estimate:
    """When a group's job would start (seconds since the epoch; None: unknown, see ``error``),
    where, and when it was asked (an answer is reused for ``estimate.cache`` seconds)."""

    start: float | None
    asked: float
    error: str | None = None
    partition: str | None = None
    nodes: str | None = None
    how: str = "sbatch --test-only"


def _delay(e: Estimate, now: float) -> float:
    assert e.start is not None
    return max(0.0, e.start - now)


def when(e: Estimate, now: float) -> str:
    """``now``, ``in 2h30m`` or ``unknown (why)``."""
    if e.start is None:
        return f"unknown ({e.error})"
    delay = round(_delay(e, now))
    if delay >= 600:  # Slurm plans in minutes: seconds would be noise
        delay = round(delay / 60) * 60
    return "now" if delay < 1 else f"in {format_duration(delay)}"


def _tied(estimates: Sequence[Estimate], now: float, tie: float) -> tuple[list[int], list[int]]:
    """``(tied with the earliest, later)`` among the known estimates, in today's order."""
    known = [i for i, e in enumerate(estimates) if e.start is not None]
    if not known:
        return [], []
    starts = {i: max(now, estimates[i].start or now) for i in known}
    earliest = min(starts.values())
    tied = [i for i in known if starts[i] - earliest <= tie]
    return tied, [i for i in known if i not in tied]


def decide(estimates: Sequence[Estimate], now: float, tie: float = TIE_SECONDS) -> int:
    """The index of the winner among candidates given in today's order (pure): the earliest
    known start, ties (within ``tie`` seconds of the earliest) to the first in today's order;
    unknown estimates come after known ones; none known: the first."""
    tied, _ = _tied(estimates, now, tie)
    return tied[0] if tied else 0


def reason(
    estimates: Sequence[Estimate], labels: Sequence[str], now: float, tie: float = TIE_SECONDS
) -> str:
    """Why :func:`decide` chose its winner, in words (``--explain``)."""
    tied, later = _tied(estimates, now, tie)
    if not tied:
        return "no start estimate is known: today's order decides"
    text = f"it starts first ({when(estimates[tied[0]], now)})"
    if later:
        text += "; later: " + ", ".join(f"{labels[i]} {when(estimates[i], now)}" for i in later)
    if len(tied) > 1:
        text += (
            f"; tied with it (less than {format_duration(int(tie))} apart) but later in "
            "today's order: " + ", ".join(labels[i] for i in tied[1:])
        )
    unknown = [i for i, e in enumerate(estimates) if e.start is None]
    if unknown:
        text += "; unknown: " + ", ".join(labels[i] for i in unknown)
    return text


# ---------------------------------------------------------------------------------- cache

_cache: dict[Any, Estimate] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every estimate (the next search asks the clusters again)."""
    with _lock:
        _cache.clear()


def _key(group: SlurmGroup, config: LaunchersConfig, args: Sequence[str]) -> Any:
    where: Any = (
        ("local", os.environ.get("SLURM_CONF", ""), os.environ.get("PATH", ""))
        if group.connector == "local"
        else (group.connector, str(config.path))
    )
    return (where, group.path, tuple(args))


def _cached(key: Any, now: float, keep: float) -> Estimate | None:
    with _lock:
        found = _cache.get(key)
    if found is None or now - found.asked > keep:
        return None
    return found


def _remember(key: Any, estimate: Estimate) -> None:
    with _lock:
        if len(_cache) > 4096:
            now = time.time()
            for k in [k for k, v in _cache.items() if now - v.asked > 600]:
                del _cache[k]
        _cache[key] = estimate


# ---------------------------------------------------------------------------------- asking


def _args(launcher: Launcher) -> list[str] | None:
    sbatch_args = getattr(launcher, "sbatch_args", None)
    return None if sbatch_args is None else list(sbatch_args())


def estimate_all(
    found: Sequence[tuple[Group, Launcher]], config: LaunchersConfig, now: float
) -> list[Estimate]:
    """One estimate per candidate: local groups now, Slurm groups by ``sbatch --test-only``
    (cached, else asked all at once), others unknown."""
    out: list[Estimate | None] = [None] * len(found)
    asks: list[tuple[int, Any, Any, list[str]]] = []
    for i, (group, launcher) in enumerate(found):
        if isinstance(group, LocalGroup):
            out[i] = Estimate(now, now, how="a local group runs the job at once")
            continue
        if isinstance(group, UnicoreGroup) or group.kind != "slurm":
            out[i] = Estimate(None, now, error=f"a {group.kind} site gives no start estimate")
            continue
        args = _args(launcher)
        if args is None:  # pragma: no cover - a Slurm launcher always has sbatch arguments
            out[i] = Estimate(None, now, error="no sbatch arguments")
            continue
        key = _key(group, config, args)
        hit = _cached(key, now, config.estimate_cache)
        if hit is not None:
            out[i] = hit
            continue
        asks.append((i, group, key, args))
    if asks:
        answers = services().estimate_starts([(group, args) for _, group, _, args in asks], config)
        for (i, _, key, _), answer in zip(asks, answers, strict=True):
            estimate = Estimate(
                answer.start, answer.asked, answer.error, answer.partition, answer.nodes
            )
            _remember(key, estimate)
            out[i] = estimate
    return [e for e in out if e is not None]


# ---------------------------------------------------------------------------------- search


def group_label(group: Group) -> str:
    return f"{group.kind} group {group.label}"
