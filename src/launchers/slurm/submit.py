"""Submission (docs/slurm.md, "Submission"): staging, SUBMITTING recorded before sbatch, ONE
sbatch-with-retries routine for single jobs and array chunks, adoption by name after a
transient failure, submit limits (``SlotWaiters``), and what follows an accepted id."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal as signal_module
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Union

import attrs

from ..errors import ConnectorError, LaunchersError, SubmissionError
from ..jobs.record import epoch_iso, submitting_since
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.loop import blocking
from . import commands as C
from . import parse as P
from .script import render_script

if TYPE_CHECKING:
    from ..protocols import Clock, JobHandle
    from .cluster import SlurmCluster
    from .executor import SlurmExecutor
    from .settings import SlurmTuning

log = logging.getLogger("launchers.slurm")
#: retry jitter from a generator of our own: the global one is the user's (seeded runs)
_JITTER = random.Random()
#: Test hook: kill this process (SIGKILL) right after sbatch answers, before recording the id.
KILL_AFTER_SBATCH_ENV = "LAUNCHERS_TEST_KILL_AFTER_SBATCH"


# -- outcomes of sbatch_with_retries -------------------------------------------------------------


@attrs.frozen
class Accepted:
    """sbatch answered with an id (and the cluster, after ``;``)."""

    native_id: str
    cluster: str | None = None


@attrs.frozen
class Adopted:
    """sbatch failed in transit, but the job was found by name: it was accepted."""

    native_id: str


@attrs.frozen
class AtLimit:
    """Slurm refused the job for a submit limit: wait for room."""

    message: str


@attrs.frozen
class Refused:
    """Slurm refused the job for good."""

    message: str


@attrs.frozen
class GaveUp:
    """Transient failures until the retry deadline: ``message`` is the last one."""

    message: str


@attrs.frozen
class Cancelled:
    """A cancel was asked before sbatch ran."""


SbatchOutcome = Union[Accepted, Adopted, AtLimit, Refused, GaveUp, Cancelled]  # noqa: UP007


class Backoff:
    """A pause shared by the submissions of one executor after a transient sbatch failure."""

    def __init__(self) -> None:
        self.until = 0.0


async def sbatch_with_retries(
    cluster: SlurmCluster,
    semaphore: asyncio.Semaphore,
    *,
    script: str,
    cwd: str,
    lookup: Callable[[], Awaitable[Adopted | None]],
    tuning: SlurmTuning,
    clock: Clock,
    cancelled: Callable[[], bool] = lambda: False,
    backoff: Backoff | None = None,
    label: str | None = None,
) -> SbatchOutcome:
    """``sbatch --parsable SCRIPT`` in ``cwd`` until it is answered for good. A transient
    failure (the controller unreachable, a transport error) may hide an accepted job: it is
    looked for by name (``lookup``) before the next try, after ``retry_first`` seconds,
    doubling, until ``retry_total`` (``GaveUp``). ``cancelled`` is asked before every try;
    ``backoff`` is waited for and extended after failures; ``label`` names the job in the log.
    A zero exit without an id raises ``SubmissionError``."""
    deadline = clock.monotonic() + tuning.retry_total
    delay = tuning.retry_first
    while True:
        if backoff is not None:
            wait = backoff.until - clock.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        # first pass: nothing ran yet; later passes: the lookup by name found nothing
        if cancelled():
            return Cancelled()
        try:
            async with semaphore:
                res = await cluster.run(
                    C.sbatch_argv(script, cluster.name),
                    timeout=tuning.sbatch_timeout,
                    cwd=cwd,
                    clean_env=True,
                )
            if res.returncode == 0:
                return Accepted(*P.parse_sbatch_id(res.stdout, res.stderr))
            message = P.sbatch_message(res.stdout, res.stderr)
            kind = P.classify_sbatch_error(message)
        except ConnectorError as e:
            message, kind = str(e), P.TRANSIENT
        if kind == P.SUBMIT_LIMIT:
            return AtLimit(message)
        if kind == P.REJECTED:
            return Refused(message)
        # transient: the submission may have been accepted; look for it by name first
        with contextlib.suppress(Exception):
            found = await lookup()
            if found is not None:
                return found
        if clock.monotonic() + delay > deadline:
            return GaveUp(message)
        if label is not None:
            log.warning("%s: sbatch failed (%s); retrying in %.0f s", label, message, delay)
        jittered = delay * _JITTER.uniform(0.8, 1.2)
        if backoff is not None:
            backoff.until = max(backoff.until, clock.monotonic() + jittered)
        await asyncio.sleep(jittered)
        delay *= 2


class SlotWaiters:
    """Jobs held by a submit limit, and the event that frees them: one of our jobs left the
    queue (``signal``), or ``submit_limit_wait`` passed."""

    def __init__(self) -> None:
        self.held: dict[int, JobHandle] = {}
        self._event: asyncio.Event | None = None
        #: how many times a job of ours left the queue: read before an sbatch, so that a job
        #: leaving while the sbatch was refused is not missed (the wake-up came before the wait)
        self.generation = 0

    def signal(self) -> None:
        """A job of ours left the queue: wake the jobs held by a submit limit (once)."""
        self.generation += 1
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self, timeout: float, since: int | None = None) -> None:
        """Until the next ``signal`` or ``timeout`` s; at once when one came after ``since``
        (the ``generation`` read before the sbatch that was refused)."""
        if since is not None and self.generation != since:
            return
        if self._event is None:
            self._event = asyncio.Event()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


async def record(job: JobHandle, update: StateUpdate) -> bool:
    """``job.apply`` (a fsynced record write), inline while the disk is fast (``blocking``)."""
    return await blocking(job.apply, update)


class Submitter:
    """Submits the single jobs of one executor (arrays: ``slurm.arrays``)."""

    def __init__(self, ex: SlurmExecutor) -> None:
        self.ex = ex
        #: ids of the jobs inside ``submit`` (staging, sbatch): a cancel there is handled by it
        self.in_submit: set[int] = set()
        self.backoff = Backoff()
        self.slots = SlotWaiters()
        self._semaphore: asyncio.Semaphore | None = None

    def semaphore(self) -> asyncio.Semaphore:
        """At most ``max_concurrent_sbatch`` sbatch calls at once (single jobs and arrays)."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.ex.tuning.max_concurrent_sbatch)
        return self._semaphore

    async def submit(self, job: JobHandle) -> None:
        # a cancel arriving while the job is staged is left to the submission: it stops before
        # sbatch, or cancels the id sbatch returns; nothing runs unrecorded
        key = id(job)
        outer = key not in self.in_submit
        self.in_submit.add(key)
        try:
            await self._submit(job)
        finally:
            if outer:
                self.in_submit.discard(key)

    def cancelled_before_sbatch(self, job: JobHandle) -> bool:
        """A cancel was asked before sbatch ran: record CANCELLED (nothing was submitted)."""
        if not job.cancel_requested:
            return False
        job.apply(
            StateUpdate(state=JobState.CANCELLED, detail="cancel", reason="cancelled on request")
        )
        return True

    async def _submit(self, job: JobHandle) -> None:
        ex, files = self.ex, self.ex.files
        launcher = job.launcher or ex.launcher
        tuning, clock = ex.tuning, ex.clock
        # Nothing is submitted yet, so a transport failure while staging is retried.
        deadline = clock.monotonic() + tuning.retry_total
        delay = tuning.retry_first
        while True:
            try:
                if not files.is_local:
                    await ex.stager(job, files)  # chooses the remote directory the script names
                spec = ex.script_spec(job, launcher)
                directory = await files.write_script(job, render_script(spec))
                break
            except ConnectorError as e:
                if self.cancelled_before_sbatch(job):
                    return
                if clock.monotonic() + delay > deadline:
                    job.apply(StateUpdate(state=JobState.FAILED, detail="staging",
                                          reason=f"could not stage the job: {e}"))  # fmt: skip
                    log.error("%s: could not stage the job: %s", job.task_id, e)
                    return
                log.warning("%s: staging failed (%s); retrying in %.0f s", job.task_id, e, delay)
                await asyncio.sleep(delay * _JITTER.uniform(0.8, 1.2))
                delay = min(delay * 2, tuning.retry_max)
        extra = None if files.is_local else {"remote_dir": directory}
        if self.cancelled_before_sbatch(job):
            return
        await record(job, StateUpdate(state=JobState.SUBMITTING, detail="sbatch", job_name=spec.job_name, reason="",
                                      extra=extra))  # fmt: skip
        await self._sbatch(job, spec.job_name, directory)

    async def _sbatch(self, job: JobHandle, name: str, directory: str) -> None:
        ex = self.ex
        since = self.slots.generation
        try:
            outcome = await sbatch_with_retries(
                ex.slurm,
                self.semaphore(),
                script="job.sh",
                cwd=directory,
                lookup=lambda: ex.reconciler.lookup(job, name),
                tuning=ex.tuning,
                clock=ex.clock,
                cancelled=lambda: self.cancelled_before_sbatch(job),
                backoff=self.backoff,
                label=job.task_id,
            )
        except SubmissionError as e:
            job.apply(StateUpdate(state=JobState.FAILED, detail="sbatch", reason=str(e)))
            log.error("%s: %s", job.task_id, e)
            return
        if isinstance(outcome, Accepted):
            if os.environ.get(KILL_AFTER_SBATCH_ENV):
                os.kill(os.getpid(), signal_module.SIGKILL)
            await self.accepted(job, outcome.native_id, outcome.cluster)
        elif isinstance(outcome, Adopted):
            await self.accepted(job, outcome.native_id, None)
        elif isinstance(outcome, AtLimit):
            await self.hold_for_limit(job, outcome.message, since)
        elif isinstance(outcome, Refused):
            log.error("%s: sbatch refused the job: %s", job.task_id, outcome.message)
            job.apply(
                StateUpdate(state=JobState.FAILED, detail="sbatch refused", reason=outcome.message)
            )
        elif isinstance(outcome, GaveUp):
            log.error("%s: sbatch kept failing for %.0f s: %s", job.task_id, ex.tuning.retry_total,
                      outcome.message)  # fmt: skip
            job.apply(StateUpdate(state=JobState.FAILED, detail="sbatch", reason=outcome.message))

    async def accepted(self, job: JobHandle, native_id: str, cluster: str | None) -> None:
        """Record the id Slurm gave (PENDING); a job cancelled meanwhile is cancelled there."""
        ex = self.ex
        ex.slurm.learn(cluster)
        job.runtime["submitted_mono"] = ex.clock.monotonic()
        await record(
            job,
            StateUpdate(
                state=JobState.PENDING,
                detail=f"submitted as {native_id}",
                native_id=native_id,
                cluster=cluster or ex.slurm.name,
                submitted_at=epoch_iso(ex.clock.time()),
                reason="",
            ),
        )
        ex.tracker.wake()
        if job.native_id != native_id:
            # the record refused the id (final already, e.g. cancelled elsewhere): never leave
            # a job running that nothing follows
            log.warning(
                "%s: job %s was submitted after the task ended (%s); cancelling it",
                job.task_id,
                native_id,
                job.state.value,
            )
            with contextlib.suppress(LaunchersError, OSError):
                await ex.slurm.scancel([native_id])
            return
        if job.cancel_requested:
            await ex.cancel([job])

    async def hold_for_limit(self, job: JobHandle, message: str, since: int) -> None:
        """WAITING with the limit named until a job of ours leaves the queue (since the
        ``generation`` ``since``), then again."""
        self.slots.held[id(job)] = job
        job.apply(StateUpdate(state=JobState.WAITING, detail="submit limit",
                              reason=f"waiting: submit limit reached ({message})"))  # fmt: skip
        try:
            await self.slots.wait(self.ex.tuning.submit_limit_wait, since)
        finally:
            self.slots.held.pop(id(job), None)
        if job.cancel_requested or job.state.is_final:
            return
        await self.ex.submit(job)


def submitted_since(job: JobHandle) -> float | None:
    """When this attempt's SUBMITTING was recorded (epoch), from the record's history."""
    return submitting_since(job.record)


__all__ = [
    "KILL_AFTER_SBATCH_ENV",
    "Accepted",
    "Adopted",
    "AtLimit",
    "Backoff",
    "Cancelled",
    "GaveUp",
    "Refused",
    "SlotWaiters",
    "Submitter",
    "record",
    "sbatch_with_retries",
    "submitted_since",
]
