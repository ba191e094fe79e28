"""The generic poll loop (docs/design/runtime.md §5): one per executor, one ``poll`` per cycle for all
its unfinished jobs, an adaptive interval, and failed queries that never fail a job.

Interval: ``executor.poll_min`` after a submission or a state change, then x1.5 per quiet cycle
up to ``executor.poll_max``; during an outage it backs off to ``poll_max``. ``fast_poll`` runs
every ``executor.fast_interval`` seconds when set. Cancels requested within a cycle become one
``executor.cancel(jobs)`` call. Runs on the background loop (``launchers.runtime.loop``); the
updates found are recorded (``state.json``, fsynced) in a thread of the tracker's own, so that a
slow disk never holds up the loop, where submissions run, and no shared pool can delay them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..jobs.state import JobState
from .loop import call_soon

if TYPE_CHECKING:
    from ..jobs.update import StateUpdate
    from ..protocols import JobHandle
    from .executor import Executor

log = logging.getLogger("launchers.jobs")

BACKOFF = 1.5
#: While submissions keep completing (the last one at most ``BURST_GAP`` s ago) polls wait, at
#: most ``BURST_MAX`` s after the previous one: a burst of sbatch calls is not slowed down by the
#: status checks and record writes of its first jobs, which are read right after it.
BURST_GAP = 0.5
BURST_MAX = 5.0
DEFAULT_POLL_TIMEOUT = 30.0
#: Cancel requests are gathered into one ``executor.cancel`` call until none came for
#: ``CANCEL_GATHER`` s (``xp.cancel()`` records each request, fsynced, one after the other),
#: for at most ``CANCEL_GATHER_MAX`` s after the first.
CANCEL_GATHER = 0.1
CANCEL_GATHER_MAX = 2.0


class Tracker:
    """Follows every job of one executor until it is final."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.jobs: dict[int, JobHandle] = {}
        self._cancels: dict[int, JobHandle] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self.interval = executor.poll_min
        self._outage_since: float | None = None
        self._poll_now = False
        self._cancel_due = 0.0
        self._cancel_first = 0.0
        #: Number of ``poll`` calls made (for tests and benchmarks).
        self.cycles = 0
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None

    # -- called in the loop thread --------------------------------------------------------------

    def add(self, job: JobHandle) -> None:
        """Follow ``job`` (loop thread); restarts the fast interval."""
        self.jobs[id(job)] = job
        self.interval = self.executor.poll_min
        self._ensure_running()
        self.wake()

    def wake(self, *, poll_now: bool = False) -> None:
        """Run a cycle soon (loop thread): a submission or a cancel happened. ``poll_now``
        also makes that cycle query the executor at once (e.g. a local child just exited)."""
        self.interval = self.executor.poll_min
        if poll_now:
            self._poll_now = True
        if self._wake is not None:
            self._wake.set()

    def _add_cancel(self, job: JobHandle) -> None:
        first = not self._cancels
        now = time.monotonic()
        if first:
            self._cancel_first = now
        self._cancel_due = min(self._cancel_first + CANCEL_GATHER_MAX, now + CANCEL_GATHER)
        self._cancels[id(job)] = job
        self.jobs.setdefault(id(job), job)
        self._ensure_running()
        if first:
            # gather the cancels requested meanwhile (xp.cancel(), a CLI list) into one call
            asyncio.get_running_loop().call_later(CANCEL_GATHER, self._wake_for_cancel)

    def _wake_for_cancel(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    # -- thread-safe -----------------------------------------------------------------------------

    def request_cancel(self, job: JobHandle) -> None:
        """Queue ``job`` for the next cycle's single cancel call (any thread)."""
        call_soon(self._add_cancel, job)

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        last_full = last_fast = float("-inf")
        started = time.monotonic()
        while True:
            for key, job in list(self.jobs.items()):
                if job.state.is_final and key not in self._cancels:
                    del self.jobs[key]
            if not self.jobs and not self._cancels:
                self._task = None
                return
            while self._cancels and (left := self._cancel_due - time.monotonic()) > 0:
                await asyncio.sleep(left)  # later requests move the due time
            changed = False
            if self._cancels and time.monotonic() >= self._cancel_due:
                await self._send_cancels()
            changed |= self._check_observers()
            if not self._poll_now and not self._cancels:
                now = time.monotonic()
                quiet_for = now - self.executor.last_submitted
                if quiet_for < BURST_GAP and now - max(last_full, last_fast, started) < BURST_MAX:
                    await self._sleep(
                        min(
                            BURST_GAP - quiet_for,
                            max(last_full, last_fast, started) + BURST_MAX - now,
                        )
                    )
                    continue
            tracked = [
                j
                for j in self.jobs.values()
                if j.native_id and not j.observer and not j.state.is_final
            ]
            fast = self.executor.fast_interval
            now = time.monotonic()
            # at most once per fast interval: a burst of submissions wakes the loop once per job,
            # and checking every tracked job each time would cost n^2 file checks
            if fast is not None and tracked and (self._poll_now or now - last_fast >= fast - 0.01):
                last_fast = now
                changed |= await self._apply(self.executor.fast_poll, tracked, quiet=True)
                now = time.monotonic()
            if self._poll_now or now - last_full >= self.interval - 0.01:
                self._poll_now = False
                last_full = (
                    now  # also without tracked jobs: observers and waiting jobs need no spin
                )
                if tracked:
                    tracked = [j for j in tracked if not j.state.is_final]
                    ok_before = self._outage_since is None
                    changed |= await self._apply(self.executor.poll, tracked, quiet=False)
                    self.cycles += 1
                    if self._outage_since is not None:
                        self.interval = self.executor.poll_max
                    elif changed or not ok_before:
                        self.interval = self.executor.poll_min
                    else:
                        self.interval = min(self.interval * BACKOFF, self.executor.poll_max)
            elif changed:
                self.interval = self.executor.poll_min
            next_full = last_full + self.interval
            delay = max(0.0, next_full - time.monotonic())
            if fast is not None:
                delay = min(
                    delay, max(0.0, last_fast + fast - time.monotonic()) if tracked else fast
                )
            await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        """Until ``delay`` s have passed (at least 50 ms) or ``wake()`` is called."""
        assert self._wake is not None
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=max(delay, 0.05))
        except asyncio.TimeoutError:
            pass

    async def _apply(self, query: object, jobs: Sequence[JobHandle], *, quiet: bool) -> bool:
        timeout = float(getattr(self.executor, "poll_timeout", DEFAULT_POLL_TIMEOUT))
        try:
            updates: Mapping[JobHandle, StateUpdate] = await asyncio.wait_for(query(jobs), timeout)  # type: ignore[operator]
        except Exception as e:
            if quiet:
                log.debug("fast status check failed: %s", e)
                return False
            if self._outage_since is None:
                self._outage_since = time.monotonic()
                what = (
                    f"no answer in {timeout:.0f} s"
                    if isinstance(e, asyncio.TimeoutError)
                    else str(e)
                )
                log.warning(
                    "status query for %s jobs failed (no state changed): %s",
                    self.executor.kind,
                    what,
                )
            return False
        if not quiet and self._outage_since is not None:
            log.warning("status recovered after %.0f s", time.monotonic() - self._outage_since)
            self._outage_since = None
        if not updates:
            return False
        if self._writer is None:
            self._writer = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="launchers-records"
            )
        return await asyncio.get_running_loop().run_in_executor(self._writer, _record, updates)

    async def _send_cancels(self) -> None:
        batch = [j for j in self._cancels.values() if not j.state.is_final]
        self._cancels.clear()
        if not batch:
            return
        try:
            await self.executor.cancel(batch)
        except Exception as e:
            log.error("cancel of %d job(s) failed: %s", len(batch), e)

    def _check_observers(self) -> bool:
        changed = False
        for job in [j for j in self.jobs.values() if j.observer]:
            changed |= job.refresh()
            if job.state not in (JobState.WAITING, JobState.SUBMITTING):
                job.observer = job.state.is_final
                continue
            try:
                action = job.take_over()
            except Exception as e:
                log.error("%s: cannot take over the submission: %s", job.task_id, e)
                continue
            if action is not None:
                self.executor.enqueue(job, reconcile=action == "reconcile")
                changed = True
        return changed


def _record(updates: Mapping[JobHandle, StateUpdate]) -> bool:
    """Apply ``updates`` (the tracker's writer thread); True when a state changed."""
    changed = False
    for job, update in updates.items():
        try:
            changed |= job.apply(update)
        except Exception as e:  # one bad update (e.g. a disk error) must not stop the others
            log.error("%s: could not record %s: %s", job.task_id, update.state, e)
    return changed
