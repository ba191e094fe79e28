"""State updates: the change an executor asks a job to record (``StateUpdate``), and the final
update that a ``job.rc`` implies (``update_for_rc``). Pure values and functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .record import RcRecord
from .state import JobState


@attrs.frozen
class StateUpdate:
    """A change to apply to a job's record; ``None`` fields are left unchanged.

    ``detail`` goes to the history entry. ``extra`` is merged into the record's extra keys.
    """

    state: JobState | None = None
    detail: str = ""
    reason: str | None = None
    native_id: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    slurm_state: str | None = None
    job_name: str | None = None
    cluster: str | None = None
    submitted_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    extra: Mapping[str, Any] | None = None

    def changes(self) -> dict[str, Any]:
        """The record fields this update sets (state and detail excluded)."""
        out = {}
        for f in attrs.fields(StateUpdate):
            if f.name in ("state", "detail"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value
        return out


def update_for_rc(
    rc: RcRecord | None, *, attempt: int | None, cancelled: bool = False
) -> StateUpdate | None:
    """The final update ``rc`` (the job's ``job.rc``) implies for attempt ``attempt``, or None
    when there is none yet: the one rule turning an exit record into a final state, for every
    kind (docs/design/runtime.md §5).

    rc 0 and no signal: COMPLETED, the reason cleared; ended by a signal after a cancel
    (``cancelled``): CANCELLED; else FAILED with code/signal (a job that failed on its own
    before the cancel reached it stays FAILED). The rc's start and end times are recorded. An
    rc of another attempt (stale file) is ignored; ``attempt=None``: the caller already knows
    the rc is the current attempt's (a remote run directory, a matching job id).
    """
    if rc is None:
        return None
    if attempt is not None and rc.attempt is not None and rc.attempt != attempt:
        return None
    if rc.success:
        state, reason = JobState.COMPLETED, ""
    elif cancelled and rc.signalled:
        state, reason = JobState.CANCELLED, "cancelled on request"
    else:
        state = JobState.FAILED
        reason = f"killed by signal {rc.signal}" if rc.signal else f"exit code {rc.rc}"
        if rc.step:
            reason += f" in environment step {rc.step}"
    return StateUpdate(
        state=state,
        detail="job.rc",
        reason=reason,
        exit_code=rc.rc,
        signal=rc.signal,
        started_at=rc.start,
        ended_at=rc.end,
    )


__all__ = ["StateUpdate", "update_for_rc"]
