"""What the monitor page shows, computed from state records: pure functions, no I/O.

A job is one *row* (a JSON object the page renders and sorts; times in epoch seconds), an
experiment one *summary* (counts per state, last activity, time spent so far), and the timeline
summary answers "was it the queue or my code?": queue wait against run time per launcher group
and Slurm partition.

An attempt spends its time in three phases: **waiting** (held locally: from the attempt's first
record to its submission), **pending** (in the scheduler's queue: submitted to started) and
**running** (started to ended). A phase still under way ends at ``now``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..jobs.record import StateRecord, iso_epoch
from ..jobs.state import JobState

#: The order in which states are listed (the ``JobState`` order: unfinished first).
STATE_ORDER = tuple(s.value for s in JobState)

#: Keys of a row, in the order of ``rows_payload``'s columns.
COLUMNS = (
    "key",
    "task_id",
    "name",
    "state",
    "kind",
    "group",
    "partition",
    "native_id",
    "attempt",
    "waiting_since",
    "submitted",
    "started",
    "ended",
    "reason",
    "changed",
    "exit_code",
    "prev",
    "after",
)


def _epoch(text: Any) -> int | None:
    """Whole epoch seconds of a record's ISO-8601 time (None when absent or unreadable)."""
    value = iso_epoch(text) if isinstance(text, str) else None
    return None if value is None else int(value)


def partition_of(options: Any) -> str | None:
    """The partition among a record's sbatch options (``--partition=P``, ``-p P``), if any."""
    if not isinstance(options, (list, tuple)):
        return None
    items = [str(o) for o in options]
    for i, opt in enumerate(items):
        if opt.startswith("--partition="):
            return opt.split("=", 1)[1]
        if opt.startswith("-p") and len(opt) > 2:
            return opt[2:]
        if opt in ("-p", "--partition") and i + 1 < len(items):
            return items[i + 1]
    return None


def attempt_start(record: StateRecord) -> int | None:
    """When the current attempt was first recorded (its ``created`` / ``attempt N`` history
    entry); the oldest history entry, or the submission, when the history no longer has it."""
    marks = ("created", f"attempt {record.attempt}")
    found = None
    for when, state, detail in record.history:
        if state == JobState.WAITING.value and detail in marks:
            found = when
    if found is None and record.history:
        found = record.history[0][0]
    return _epoch(found) if found is not None else _epoch(record.submitted_at)


def dependencies(record: StateRecord) -> list[str]:
    """Keys (``NAME/DIGEST``) of the jobs this one runs after: none until jobs can depend on
    each other; the page shows the edges only when there are some."""
    return []


def job_row(key: str, record: StateRecord) -> dict[str, Any]:
    """The row of one job (``key`` is ``NAME/DIGEST`` under the experiment's ``jobs/``)."""
    launcher = record.launcher if isinstance(record.launcher, Mapping) else {}
    prev = [
        [
            a.get("attempt"),
            _epoch(a.get("submitted_at")),
            _epoch(a.get("started_at")),
            _epoch(a.get("ended_at")),
            a.get("state"),
        ]
        for a in record.attempts
    ]
    return {
        "key": key,
        "task_id": record.task_id or key.replace("/", "-"),
        "name": key.split("/", 1)[0],
        "state": record.state.value,
        "kind": launcher.get("kind"),
        "group": launcher.get("group"),
        "partition": partition_of(launcher.get("options")),
        "native_id": record.native_id,
        "attempt": record.attempt,
        "waiting_since": attempt_start(record),
        "submitted": _epoch(record.submitted_at),
        "started": _epoch(record.started_at),
        "ended": _epoch(record.ended_at),
        "reason": record.reason,
        "changed": _epoch(record.history[-1][0]) if record.history else None,
        "exit_code": record.exit_code,
        "prev": prev,
        "after": dependencies(record),
    }


def unreadable_row(key: str, message: str) -> dict[str, Any]:
    """The row of a job directory whose ``state.json`` cannot be read (shown, not hidden)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(key=key, task_id=key.replace("/", "-"), name=key.split("/", 1)[0])
    row.update(state="UNREADABLE", reason=message, prev=[], after=[])
    return row


def is_final(state: str) -> bool:
    """Whether a row's state is final (an unreadable record counts as final: nothing follows)."""
    try:
        return JobState.parse(state).is_final
    except ValueError:
        return True


def rows_payload(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows as ``{"columns": [...], "rows": [[...], ...]}``: half the bytes of objects."""
    return {"columns": list(COLUMNS), "rows": [[r.get(c) for c in COLUMNS] for r in rows]}


# -- phases --------------------------------------------------------------------------------------


def _span(start: int | None, end: int | None, now: float) -> float:
    if start is None:
        return 0.0
    return max(0.0, (now if end is None else end) - start)


def phases(row: Mapping[str, Any], now: float) -> list[tuple[str, float, float]]:
    """``(phase, start, end)`` of every attempt of a row, oldest first; ``phase`` is
    ``waiting``, ``pending`` or ``running``. Earlier attempts have no waiting phase (their
    records keep only submission, start and end)."""
    out: list[tuple[str, float, float]] = []
    for _attempt, sub, sta, end, _state in row.get("prev") or ():
        if sub is not None:
            stop = sta if sta is not None else end
            if stop is not None:
                out.append(("pending", sub, max(sub, stop)))
        if sta is not None and end is not None:
            out.append(("running", sta, max(sta, end)))
    final = is_final(str(row.get("state")))
    end = row.get("ended")
    if final and end is None:
        end = row.get("changed")
    stop_all = float(end) if end is not None else now
    sub, sta, since = row.get("submitted"), row.get("started"), row.get("waiting_since")
    if since is not None:
        stop = sub if sub is not None else (sta if sta is not None else stop_all)
        if stop > since:
            out.append(("waiting", since, stop))
    if sub is not None:
        stop = sta if sta is not None else stop_all
        out.append(("pending", sub, max(sub, stop)))
    if sta is not None:
        out.append(("running", sta, max(sta, stop_all)))
    return out


# -- summaries -----------------------------------------------------------------------------------


@attrs.frozen
class Contribution:
    """What one row adds to its experiment's summary: its closed phases as sums, its open ones
    (under way: they grow with ``now``) by their start."""

    state: str
    final: bool
    first: float | None
    changed: float | None
    ended: float | None
    run_closed: float
    queue_closed: float
    running_since: tuple[float, ...]
    pending_since: tuple[float, ...]


def contribution(row: Mapping[str, Any]) -> Contribution:
    """The ``Contribution`` of one row (its phases with ``now`` left open)."""
    run = queue = 0.0
    running: list[float] = []
    pending: list[float] = []
    first: float | None = None
    for phase, start, end in phases(row, math.inf):
        first = start if first is None else min(first, start)
        if phase == "running":
            if end == math.inf:
                running.append(start)
            else:
                run += end - start
        elif phase == "pending":
            if end == math.inf:
                pending.append(start)
            else:
                queue += end - start
    state = str(row.get("state"))
    return Contribution(
        state=state,
        final=is_final(state),
        first=first,
        changed=row.get("changed"),
        ended=row.get("ended"),
        run_closed=run,
        queue_closed=queue,
        running_since=tuple(running),
        pending_since=tuple(pending),
    )


class Totals:
    """``experiment_summary`` kept up to date one row at a time: a change costs the work of
    that row, and a summary a pass over plain numbers (no phases recomputed), so that a burst
    of changes over 10,000 jobs stays cheap."""

    def __init__(self) -> None:
        self.parts: dict[str, Contribution] = {}
        self.counts: dict[str, int] = {}
        self.unfinished = 0
        self.run_closed = self.queue_closed = 0.0
        self.running_n = self.pending_n = 0
        self.running_sum = self.pending_sum = 0.0

    def _apply(self, c: Contribution, sign: int) -> None:
        self.counts[c.state] = self.counts.get(c.state, 0) + sign
        if not self.counts[c.state]:
            del self.counts[c.state]
        self.unfinished += sign * (not c.final)
        self.run_closed += sign * c.run_closed
        self.queue_closed += sign * c.queue_closed
        self.running_n += sign * len(c.running_since)
        self.running_sum += sign * sum(c.running_since)
        self.pending_n += sign * len(c.pending_since)
        self.pending_sum += sign * sum(c.pending_since)

    def set(self, key: str, row: Mapping[str, Any] | None) -> None:
        """Row ``key`` is now ``row`` (None: it is gone)."""
        old = self.parts.pop(key, None)
        if old is not None:
            self._apply(old, -1)
        if row is not None:
            new = self.parts[key] = contribution(row)
            self._apply(new, 1)

    def summary(self, now: float) -> dict[str, Any]:
        """Counts per state, last activity, and the time spent so far: ``elapsed`` (first
        record to the last end, or to now while a job is unfinished), ``run_time`` and
        ``queue_wait`` (every attempt's running and pending time added up)."""
        parts = self.parts.values()
        firsts = [c.first for c in parts if c.first is not None]
        changed = [c.changed for c in parts if c.changed is not None]
        ended = [c.ended for c in parts if c.ended is not None]
        first = min(firsts) if firsts else None
        last_end = max(ended) if ended else None
        stop = now if self.unfinished or last_end is None else last_end
        order = {s: i for i, s in enumerate(STATE_ORDER)}
        return {
            "total": len(self.parts),
            "unfinished": self.unfinished,
            "counts": dict(
                sorted(self.counts.items(), key=lambda kv: order.get(kv[0], len(order)))
            ),
            "first": first,
            "last_activity": max(changed) if changed else None,
            "elapsed": 0.0 if first is None else max(0.0, stop - first),
            "run_time": max(0.0, self.run_closed + self.running_n * now - self.running_sum),
            "queue_wait": max(0.0, self.queue_closed + self.pending_n * now - self.pending_sum),
        }


def experiment_summary(rows: Iterable[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """``Totals.summary`` of ``rows`` (see there)."""
    totals = Totals()
    for i, row in enumerate(rows):
        totals.set(str(row.get("key", i)), row)
    return totals.summary(now)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def wait_run_summary(rows: Iterable[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
    """Queue wait against run time per (launcher group, partition), largest total first.

    Each attempt counts: ``attempts`` that reached the scheduler, ``started`` among them;
    totals, medians and maxima in seconds of their pending and running phases (phases under way
    count up to ``now``); ``local_wait`` is the waiting phase before submission; ``queue_share``
    is queue wait / (queue wait + run time), the answer to "was it the queue or my code?"."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (str(row.get("group") or row.get("kind") or "-"), str(row.get("partition") or "-"))
        g = groups.setdefault(
            key, {"jobs": 0, "attempts": 0, "started": 0, "queue": [], "run": [], "local": 0.0}
        )
        g["jobs"] += 1
        pending_end: float | None = None
        for phase, start, end in phases(row, now):
            if phase == "waiting":
                g["local"] += end - start
            elif phase == "pending":
                g["attempts"] += 1
                g["queue"].append(end - start)
                pending_end = end
            else:
                if pending_end is None:  # started without a recorded submission
                    g["attempts"] += 1
                    g["queue"].append(0.0)
                g["started"] += 1
                g["run"].append(end - start)
                pending_end = None
    out = []
    for (group, partition), g in groups.items():
        queue_total, run_total = sum(g["queue"]), sum(g["run"])
        both = queue_total + run_total
        out.append(
            {
                "group": group,
                "partition": partition,
                "jobs": g["jobs"],
                "attempts": g["attempts"],
                "started": g["started"],
                "local_wait": g["local"],
                "queue_total": queue_total,
                "run_total": run_total,
                "queue_median": _median(g["queue"]),
                "run_median": _median(g["run"]),
                "queue_max": max(g["queue"], default=None),
                "run_max": max(g["run"], default=None),
                "queue_share": queue_total / both if both > 0 else None,
            }
        )
    out.sort(key=lambda d: (-(d["queue_total"] + d["run_total"]), d["group"], d["partition"]))
    return out


__all__ = [
    "COLUMNS",
    "STATE_ORDER",
    "Contribution",
    "Totals",
    "attempt_start",
    "contribution",
    "dependencies",
    "experiment_summary",
    "is_final",
    "job_row",
    "partition_of",
    "phases",
    "rows_payload",
    "unreadable_row",
    "wait_run_summary",
]
