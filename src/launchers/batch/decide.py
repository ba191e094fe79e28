"""What a batch queue entry means for its job (pure): a ``done/`` entry's final state, a
claimed task's RUNNING update, a re-queued task's PENDING one (docs/design/batching.md §3.2). The local
and the remote poll paths both build their updates here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..jobs.state import JobState
from ..jobs.update import StateUpdate


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
