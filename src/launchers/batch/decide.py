"""What a batch queue entry means for its job (pure): a ``done/`` entry's final state, a
claimed task's RUNNING update, a re-queued task's PENDING one (docs/design/pilots.md §3.2). The local
and the remote poll paths both build their updates here. Also what a queue's listings and
entries say (``Snapshot``, ``snapshot_of``, ``parse_entry``) and where a lost claim goes
(``lost_claims``, ``requeue_target``), for every transport."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from . import runner as R


def final_from_done(done: Mapping[str, Any]) -> StateUpdate:
    """The final update a ``done/`` entry says (an unknown or non-final state is FAILED)."""
    name = str(done.get("state") or "CANCELLED")
    try:
        state = JobState[name]
    except KeyError:
        state = JobState.FAILED
    if not state.is_final:
        state = JobState.FAILED
    reason = done.get("reason")
    if state is JobState.CANCELLED:
        reason = "cancelled on request"
    return StateUpdate(
        state=state,
        detail="batch done",
        reason=reason or "",
        exit_code=done.get("rc"),
        signal=done.get("signal"),
        started_at=done.get("start"),
        ended_at=done.get("end"),
        extra={
            "pilot": done.get("native_id"),
            "runner": done.get("runner"),
            "batch_attempt": done.get("attempt"),
        },
    )


def claimed(entry: Mapping[str, Any], pilot: str | None) -> StateUpdate:
    """RUNNING: a runner (of the pilot job ``pilot``) claimed the task (its ``running/`` entry)."""
    return StateUpdate(
        state=JobState.RUNNING,
        detail=f"claimed by runner {entry.get('runner')}",
        reason="",
        extra={
            "pilot": pilot,
            "runner": entry.get("runner"),
            "batch_attempt": entry.get("attempt"),
        },
    )


def requeued() -> StateUpdate:
    """PENDING again: the task's runner was lost and the task went back to the queue."""
    return StateUpdate(
        state=JobState.PENDING, detail="re-queued", reason="re-queued: its runner was lost"
    )


def pilot_refused(reason: str) -> StateUpdate:
    """FAILED: the pilot that would run the task was refused at submission."""
    return StateUpdate(state=JobState.FAILED, detail="pilot refused", reason=reason)


# -- what a queue's listings and entries say ---------------------------------------------------


@attrs.frozen
class Snapshot:
    """One scan of a queue: one listing per subdirectory."""

    pending: Mapping[str, str]  # task id -> pending file name
    running: frozenset[str]
    done: frozenset[str]
    cancel: frozenset[str]
    runners: frozenset[str]

    @property
    def oldest_seq(self) -> int | None:
        """The ``seq`` (submit time, ns) of the oldest pending entry."""
        seqs = [p[0] for p in (R.split_pending(n) for n in self.pending.values()) if p is not None]
        return min(seqs) if seqs else None


def parse_entry(data: bytes | str | None) -> dict[str, Any] | None:
    """A queue entry: the JSON object in ``data``, None when absent or incomplete (pure)."""
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def entry_names(names: Sequence[str]) -> list[str]:
    """Visible names of a listing (hidden temporaries and probes dropped), sorted (pure)."""
    return sorted(n for n in names if n and not n.startswith("."))


def snapshot_of(
    pending: Sequence[str], running: Sequence[str], done: Sequence[str], runners: Sequence[str] = ()
) -> Snapshot:
    """Three listings as a ``Snapshot`` (the cancel listing is not read over REST) (pure)."""
    pend: dict[str, str] = {}
    for name in pending:
        parsed = R.split_pending(name)
        if parsed is not None:
            pend[parsed[1]] = name

    def ids(names: Sequence[str]) -> frozenset[str]:
        return frozenset(n[:-5] for n in names if n.endswith(".json"))

    return Snapshot(
        pending=pend,
        running=ids(running),
        done=ids(done),
        cancel=frozenset(),
        runners=frozenset(runners),
    )


def lost_claims(
    running: Mapping[str, Mapping[str, Any]], final_runners: Sequence[str]
) -> list[str]:
    """Task ids claimed by a runner whose pilot is final (pure)."""
    finals = set(final_runners)
    return sorted(t for t, e in running.items() if str(e.get("runner")) in finals)


def requeue_target(task_id: str, entry: Mapping[str, Any], cancelled: bool) -> str:
    """Where a lost claim goes: ``done/<id>.json`` when its cancel was asked, else back to
    ``pending/<seq>-<id>.json`` with its attempt kept (pure)."""
    if cancelled:
        return f"{R.DONE}/{task_id}.json"
    return f"{R.PENDING}/{R.pending_name(int(entry.get('seq') or 0), task_id)}"
