"""Executors: the I/O side of a launcher kind (submit, poll, cancel).

Design note (read this before writing an executor)
-------------------------------------------------
* A *launcher* is a frozen value (where, with which options). An *executor* does the I/O for a
  launcher kind. ``launchers.registry.executor_for(launcher)`` returns ONE executor instance per
  ``(kind, connector, cluster)`` per process, created by the module registered for the kind
  (``KIND_MODULES``), which must define ``create_executor(launcher) -> Executor`` and may
  define ``executor_key(launcher) -> tuple`` (default ``(kind, connector, cluster)``).
* Every executor coroutine runs on the single background loop (``launchers.runtime.loop``). User
  threads never await; they call ``Job`` methods, which schedule work on the loop.
* A ``Job`` (``launchers.jobs.job``) owns the in-memory ``StateRecord`` and is the only writer of
  ``state.json``. Executors change a job only through ``job.apply(StateUpdate(...))`` (thread-safe;
  writes the record atomically and wakes waiters) or ``job.begin_attempt(cause)`` (archives the
  outputs to ``attempts/N/`` and starts attempt N+1 in ``WAITING``; used by requeue fallbacks).
* Life of a submission: ``task.submit`` records the job (``WAITING``, params.json written) under
  the directory's ``.lock`` and calls ``executor.enqueue(job)``. On the loop, ``enqueue`` adds the
  job to the executor's ``Tracker`` and awaits ``executor.submit(job)``, which must: render and
  write ``job.sh`` for ``job.attempt``; record ``SUBMITTING`` (with ``job_name``) BEFORE the
  scheduler call; then record ``PENDING``/``RUNNING`` with ``native_id`` (or keep ``WAITING``
  with a reason while held locally, or ``FAILED`` with the scheduler's message).
  An exception escaping ``submit`` marks the job ``FAILED`` with the error as reason.
* A job re-attached in ``SUBMITTING`` (a crash between record and reply) goes to
  ``executor.reconcile(job)`` instead: adopt the id found by name, or submit if none.
* Tracking: the executor's ``Tracker`` (``launchers.runtime.tracker``) calls ``poll(jobs)`` ONCE
  per cycle with every unfinished tracked job that has a ``native_id``; ``poll`` returns the
  changes as ``{job: StateUpdate}`` and must raise (any exception) on a failed query: the
  tracker then changes nothing, logs the outage once, and backs off. Interval: ``poll_min``
  after a change, x1.5 per quiet cycle up to ``poll_max``. When ``fast_interval`` is set,
  ``fast_poll(jobs)`` (cheap, e.g. reading ``job.rc``) also runs at that period.
* ``validate(launcher, task)`` runs synchronously in ``task.submit`` before anything is
  recorded: raise a ``LaunchersError`` for a job that could never run (e.g. n > N tokens).
* Jobs known only from disk (``launchers cancel``): the kind's module may define
  ``executor_from_record(launcher_info, record)``; ``executor_for_record(record)`` uses it.
* Several processes may follow one job: the one that recorded it (``owner`` in the record)
  submits; others are observers until it is submitted. Before a final state is written, the
  ``Job`` re-reads ``state.json``: a final state recorded elsewhere wins, and a
  ``cancel_requested`` mark turns a failure into ``CANCELLED``.
* Cancel: ``job.cancel()`` marks ``job.cancel_requested`` and queues the job in its tracker;
  each cycle the tracker makes ONE ``cancel(jobs)`` call with every queued job. A job still
  ``WAITING`` in the executor must be dropped by ``cancel`` and reported ``CANCELLED`` at once.
  Otherwise the state becomes ``CANCELLED`` when the scheduler or ``job.rc`` says so.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import LaunchersError
from ..jobs.record import read_rc
from ..jobs.state import JobState
from ..jobs.update import StateUpdate, update_for_rc
from .loop import background, call_soon
from .tracker import Tracker

if TYPE_CHECKING:
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

log = logging.getLogger("launchers.jobs")


class Executor(abc.ABC):
    """Runs jobs for one launcher kind on one (connector, cluster); see the module docstring."""

    #: Launcher kind served ("local", "slurm", ...).
    kind: str = ""
    #: Shortest and longest interval between two ``poll`` cycles, in seconds.
    poll_min: float = 2.0
    poll_max: float = 60.0
    #: Period of ``fast_poll`` in seconds, or None for no fast checks.
    fast_interval: float | None = None
    #: Whether the scheduler can hold a dependent on a job of this same executor itself
    #: (Slurm's ``--dependency``, docs/design/runtime.md §15); else dependents wait in the client.
    native_dependencies: bool = False
    #: ``time.monotonic()`` when the last submission ended: the tracker defers polls in bursts
    last_submitted: float = float("-inf")

    def __init__(self, key: Hashable = ()) -> None:
        self.key = key
        self._tracker: Tracker | None = None

    @property
    def tracker(self) -> Tracker:
        """This executor's tracker (one poll loop for all its jobs), created on first use."""
        if self._tracker is None:
            self._tracker = Tracker(self)
        return self._tracker

    # -- called by the jobs layer -------------------------------------------------------------

    def enqueue(self, job: JobHandle, *, reconcile: bool = False) -> None:
        """Thread-safe: track ``job`` and start its submission (or reconciliation) on the loop."""
        call_soon(self._begin, job, reconcile)

    def track(self, job: JobHandle) -> None:
        """Thread-safe: follow an already submitted job (re-attach)."""
        call_soon(self.tracker.add, job)

    def _begin(self, job: JobHandle, reconcile: bool) -> None:
        self.tracker.add(job)
        background(self._submit_guarded(job, reconcile))

    async def _submit_guarded(self, job: JobHandle, reconcile: bool) -> None:
        try:
            if reconcile:
                await self.reconcile(job)
            else:
                await self.submit(job)
        except Exception as e:  # a bug or an unexpected refusal must not leave the job hanging
            log.error(
                "submission of %s failed: %s",
                job.task_id,
                e,
                exc_info=not isinstance(e, LaunchersError),
            )
            job.apply(
                StateUpdate(
                    state=JobState.FAILED,
                    detail="submission error",
                    reason=str(e) or type(e).__name__,
                )
            )
        finally:
            self.last_submitted = time.monotonic()
            self.tracker.wake()

    # -- to implement ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def submit(self, job: JobHandle) -> None:
        """Submit attempt ``job.attempt`` (record is WAITING); see the module docstring."""

    @abc.abstractmethod
    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """One status query for all ``jobs``; the changes found. Raise on a failed query."""

    @abc.abstractmethod
    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        """Cancel all ``jobs`` with as few scheduler calls as possible (one for Slurm)."""

    def validate(self, launcher: Launcher, task: Task) -> None:  # noqa: B027 - optional hook
        """Synchronous checks at ``task.submit`` time, before anything is recorded; raise a
        ``LaunchersError`` for a job that could never run here (default: none)."""

    async def fast_poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """Cheap checks every ``fast_interval`` seconds (default: none)."""
        return {}

    async def reconcile(self, job: JobHandle) -> None:
        """Settle a job found in SUBMITTING after a crash. Default: submit it again."""
        await self.submit(job)

    def owns_waiting(self, job: JobHandle) -> bool:
        """True when the executor holds ``job`` locally (WAITING) and will submit it itself."""
        return False

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections (end of process or tests)."""


def update_from_rc(job: JobHandle, *, cancelled: bool = False) -> StateUpdate | None:
    """The final update the job's ``job.rc`` implies for its attempt (``update_for_rc``), or
    None when there is none yet; ``cancelled`` or the job's own cancel request make a signal
    read as CANCELLED."""
    return update_for_rc(
        read_rc(job.directory),
        attempt=job.attempt,
        cancelled=cancelled or job.cancel_requested,
    )


__all__ = ["Executor", "update_from_rc"]
