"""The decisions of the direct launcher (docs/jobs.md, "The direct launcher"), pure: the state of
a job from what a poll saw of its process and its ``job.rc`` (``decide_direct``), what crash
recovery makes of a job left in SUBMITTING (``decide_found``: adopt, final, lost or submit), and
the records the executor writes on the way. The executor (``local.executor``) observes, through
its processes and files, and records; nothing here reads a file or runs a command, so every
rule is tested in milliseconds (tests/local/test_local_decide.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..jobs.proc import ProcessId
from ..jobs.record import RcRecord
from ..jobs.state import JobState
from ..jobs.update import StateUpdate, update_for_rc

LOST_REASON = "ended without an exit record: SIGKILL, the OOM killer or a restart"
CANCELLED_REASON = "cancelled on request"

#: A job dropped from the queue before it started.
CANCELLED_WHILE_WAITING = StateUpdate(
    state=JobState.CANCELLED, detail="cancelled while waiting", reason=CANCELLED_REASON
)


@attrs.frozen
class Seen:
    """What one poll found of a started job.

    ``rc`` is its ``job.rc`` (the local copy, read after any copy home), ``alive`` whether its
    process (same pid, start time and boot id) still runs; None when the process was not looked
    at (over SSH, a ``job.rc`` found first ends the question)."""

    rc: RcRecord | None = None
    alive: bool | None = None


def decide_direct(
    seen: Seen,
    *,
    attempt: int,
    running: bool,
    cancel_requested: bool,
    kill_signal: int | None = None,
) -> StateUpdate | None:
    """The change ``seen`` means for attempt ``attempt`` of a job (``running``: recorded as
    RUNNING), or None.

    ``job.rc`` ends it (``update_for_rc``: COMPLETED, CANCELLED after a cancel, else FAILED);
    else a live process is RUNNING; else the job was killed after a cancel (CANCELLED, with
    ``kill_signal``, the signal that the processes record for such a kill) or is LOST."""
    update = update_for_rc(seen.rc, attempt=attempt, cancelled=cancel_requested)
    if update is not None:
        return update
    if seen.alive is None:
        return None
    if seen.alive:
        return None if running else StateUpdate(state=JobState.RUNNING)
    if cancel_requested:
        return StateUpdate(
            state=JobState.CANCELLED, detail="killed", reason=CANCELLED_REASON, signal=kill_signal
        )
    return StateUpdate(state=JobState.LOST, detail="no process, no job.rc", reason=LOST_REASON)


@attrs.frozen
class Adopt:
    """The job's process runs: follow it."""

    update: StateUpdate


@attrs.frozen
class Final:
    """The job ended: its ``job.rc`` says how."""

    update: StateUpdate


@attrs.frozen
class Lost:
    """The job started (its banner is in ``job.out``) and vanished without an exit record."""

    update: StateUpdate


@attrs.frozen
class Submit:
    """The job never started: submit it (never twice: only when nothing shows it started)."""


Found = Adopt | Final | Lost | Submit


def decide_found(
    process: ProcessId | None,
    rc: RcRecord | None,
    *,
    banner_seen: bool,
    attempt: int,
    cancel_requested: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Found:
    """What crash recovery makes of a job left in SUBMITTING: ``process`` is the one found
    started for it (``LAUNCHERS_JOB_DIR`` and attempt), ``rc`` its ``job.rc``, ``banner_seen``
    whether ``job.out`` shows this attempt started. ``extra`` goes into the adopted record
    (over SSH: the remote directory)."""
    if process is not None:
        return Adopt(
            StateUpdate(
                state=JobState.RUNNING,
                detail="adopted after a crash",
                native_id=str(process.pid),
                extra={"process": process.to_json(), **(extra or {})},
            )
        )
    update = update_for_rc(rc, attempt=attempt, cancelled=cancel_requested)
    if update is not None:
        return Final(update)
    if banner_seen:
        return Lost(
            StateUpdate(state=JobState.LOST, detail="found after a crash", reason=LOST_REASON)
        )
    return Submit()


def banner_seen(out: bytes, attempt: int) -> bool:
    """Whether ``out`` (the bytes of ``job.out``) shows that attempt ``attempt`` started."""
    return f"==== launchers: attempt {attempt}, ".encode() in out


def submitting(job_name: str | None, submitted_at: str) -> StateUpdate:
    """Recorded just before the process is started (so a crash then is reconciled)."""
    return StateUpdate(
        state=JobState.SUBMITTING, job_name=job_name, submitted_at=submitted_at, reason=""
    )


def started(process: ProcessId) -> StateUpdate:
    """Recorded once the process runs: its pid is the job's native id."""
    return StateUpdate(
        state=JobState.RUNNING,
        detail=f"pid {process.pid}",
        native_id=str(process.pid),
        reason="",
        extra={"process": process.to_json()},
    )


def start_failed(error: BaseException) -> StateUpdate:
    """The process could not be started."""
    return StateUpdate(state=JobState.FAILED, detail="start failed", reason=str(error))


def waiting_for_slot(running: int, limit: int) -> StateUpdate:
    """Queued behind the ``max_jobs`` running jobs of its group."""
    return StateUpdate(
        state=JobState.WAITING,
        reason=f"waiting for a free slot ({running} of {limit} jobs running)",
    )


__all__ = [
    "CANCELLED_REASON",
    "CANCELLED_WHILE_WAITING",
    "LOST_REASON",
    "Adopt",
    "Final",
    "Found",
    "Lost",
    "Seen",
    "Submit",
    "banner_seen",
    "decide_direct",
    "decide_found",
    "start_failed",
    "started",
    "submitting",
    "waiting_for_slot",
]
