"""Job states (docs/design/runtime.md §1): one vocabulary for every launcher kind."""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    """Where a job is in its life; ``COMPLETED`` is the only success among final states."""

    WAITING = "WAITING"  # held locally: tokens, a submit limit, a full local launcher
    SUBMITTING = "SUBMITTING"  # recorded, submission under way (reconciled after a crash)
    PENDING = "PENDING"  # accepted by the scheduler, not started
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    UNRUNNABLE = "UNRUNNABLE"  # fatal pending reason (docs/design/runtime.md §6)
    LOST = "LOST"  # no scheduler record and no exit record (docs/design/runtime.md §5)

    @property
    def is_final(self) -> bool:
        """True once the job can no longer change (it ended, one way or another)."""
        return self not in _NOT_FINAL

    @property
    def is_success(self) -> bool:
        """True only for ``COMPLETED``."""
        return self is JobState.COMPLETED

    @property
    def is_active(self) -> bool:
        """True while the scheduler (or a local process) holds the job: PENDING, RUNNING, SUSPENDED."""
        return self in (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)

    @classmethod
    def parse(cls, text: str) -> JobState:
        """The state named ``text`` (case-insensitive); ``ValueError`` for an unknown name."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown job state {text!r}") from None

    def __str__(self) -> str:
        return self.value


_NOT_FINAL = frozenset(
    {JobState.WAITING, JobState.SUBMITTING, JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED}
)

FINAL_STATES = frozenset(s for s in JobState if s.is_final)

__all__ = ["FINAL_STATES", "JobState"]
