"""Job arrays (docs/slurm.md, "Job arrays"): tasks submitted inside ``array()`` are collected,
then submitted as arrays of at most ``MaxArraySize - 1`` elements, each chunk sized to the
submit allowance, with the same sbatch-with-retries routine as single jobs."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LaunchersError
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.loop import background, call_soon
from . import parse as P
from .script import ArraySpec, index_text, render_array_script, render_script
from .submit import Accepted, Adopted, AtLimit, Cancelled, record, sbatch_with_retries

if TYPE_CHECKING:
    from ..launcher import Launcher
    from ..protocols import JobHandle
    from .executor import SlurmExecutor

log = logging.getLogger("launchers.slurm")


def launcher_key(launcher: Launcher) -> Any:
    """What tells two launchers apart in an ``array()`` block (the value, else its identity)."""
    try:
        hash(launcher)
    except TypeError:
        return id(launcher)
    return launcher


class Arrays:
    """Collects and submits the arrays of one executor."""

    def __init__(self, ex: SlurmExecutor) -> None:
        self.ex = ex
        self._collect = threading.local()

    def bucket(self) -> list[JobHandle] | None:
        """The jobs collected by this thread's ``array()`` block, if one is open."""
        return getattr(self._collect, "bucket", None)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[JobHandle]]:
        """Jobs submitted in this thread inside the block are collected instead of submitted."""
        if self.bucket() is not None:
            raise LaunchersError("array() blocks cannot be nested")
        bucket: list[JobHandle] = []
        self._collect.bucket = bucket
        try:
            yield bucket
        finally:
            self._collect.bucket = None

    def enqueue(self, jobs: Sequence[JobHandle], max_parallel: int | None) -> None:
        """Thread-safe: submit ``jobs`` as array chunks on the loop."""
        call_soon(self._start, list(jobs), max_parallel)

    def _start(self, jobs: list[JobHandle], max_parallel: int | None) -> None:
        for job in jobs:
            self.ex.tracker.add(job)
        background(self._guarded(jobs, max_parallel))

    async def _guarded(self, jobs: list[JobHandle], max_parallel: int | None) -> None:
        try:
            await self.submit(jobs, max_parallel=max_parallel)
        except Exception as e:
            log.error("array submission failed: %s", e, exc_info=not isinstance(e, LaunchersError))
            for job in jobs:
                if not job.state.is_final and not job.native_id:
                    job.apply(
                        StateUpdate(state=JobState.FAILED, detail="array submission", reason=str(e))
                    )
        finally:
            self.ex.tracker.wake()

    async def submit(self, jobs: Sequence[JobHandle], *, max_parallel: int | None = None) -> None:
        """Submit ``jobs`` (all WAITING, same launcher options) as arrays of at most
        ``MaxArraySize - 1`` elements; each element is tracked as ``ID_INDEX``.

        With accounting, each chunk also fits the submit allowance read with ``sacctmgr`` and
        ``squeue`` (:mod:`.limits`); with none left, the rest waits (WAITING) until one of our
        jobs leaves the queue or 60 s. Without readable limits, a chunk refused for a submit
        limit is halved until it fits; a single element still refused waits the same way."""
        ex = self.ex
        pending = [j for j in jobs if not j.state.is_final]
        size = max(1, await ex.slurm.max_array_size() - 1)
        launcher = pending[0].launcher or ex.launcher if pending else None
        while pending:
            since = ex.submitter.slots.generation  # a job leaving from here on is not missed
            allowance = await ex.submit_allowance(launcher)
            if allowance is not None and allowance.jobs <= 0:
                pending = await self._wait_for_room(
                    pending, f"waiting: submit limit reached ({allowance.limit})", since
                )
                continue
            chunk = pending[: size if allowance is None else min(size, allowance.jobs)]
            outcome = await self._chunk(chunk, max_parallel)
            if outcome == P.SUBMIT_LIMIT:
                if size > 1:
                    size = max(1, min(size, len(chunk)) // 2)
                    continue
                pending = await self._wait_for_room(
                    pending, "waiting: submit limit reached", since, chunk
                )
                continue
            pending = pending[len(chunk) :]

    async def _wait_for_room(
        self,
        pending: list[JobHandle],
        reason: str,
        since: int,
        shown: list[JobHandle] | None = None,
    ) -> list[JobHandle]:
        """Array elements held by a submit limit: ``shown`` (default all) become WAITING with
        ``reason``; wait until one of our jobs leaves the queue (after the ``generation``
        ``since``), or 60 s; the ones still to go."""
        for job in pending if shown is None else shown:
            await record(
                job, StateUpdate(state=JobState.WAITING, detail="submit limit", reason=reason)
            )
        await self.ex.submitter.slots.wait(self.ex.tuning.submit_limit_wait, since)
        return [j for j in pending if not j.cancel_requested and not j.state.is_final]

    async def _chunk(self, jobs: list[JobHandle], max_parallel: int | None) -> str:
        """One ``sbatch --array`` for ``jobs``; "ok", "failed" or ``P.SUBMIT_LIMIT``."""
        ex, files = self.ex, self.ex.files
        launcher = jobs[0].launcher or ex.launcher
        if not files.is_local:
            for job in jobs:
                await ex.stager(job, files)
        specs = [ex.script_spec(job, launcher) for job in jobs]
        for job, spec in zip(jobs, specs, strict=True):
            await files.write(
                f"{files.job_dir(job)}/job.sh", render_script(spec).encode("utf-8"), mode=0o755
            )
        base = Path(files.job_dir(jobs[0])).parent.parent.parent
        key = f"{specs[0].job_name}-{specs[-1].job_name.rsplit('-', 2)[-2]}-n{len(jobs)}"
        array_dir = str(base / "arrays" / key)
        index_file = f"{array_dir}/index"
        await files.write(index_file, index_text([files.job_dir(j) for j in jobs]).encode())
        name = f"array-{key}"
        script = render_array_script(
            ArraySpec(array_dir=array_dir, index_file=index_file, count=len(jobs), job_name=name,
                      template=specs[0], max_parallel=max_parallel)
        )  # fmt: skip
        await files.write(f"{array_dir}/array.sh", script.encode(), mode=0o755)
        for job, spec in zip(jobs, specs, strict=True):
            extra: dict[str, Any] = {"array": {"dir": array_dir, "name": name}}
            if not files.is_local:
                extra["remote_dir"] = files.job_dir(job)
            await record(job, StateUpdate(state=JobState.SUBMITTING, detail="sbatch array", job_name=spec.job_name,
                                          reason="", extra=extra))  # fmt: skip
        since = ex.clock.time()

        async def lookup() -> Adopted | None:
            found = await ex.reconciler.find_by_name(name, since=since)
            return Adopted(P.master_id(found[0])) if found else None

        outcome = await sbatch_with_retries(
            ex.slurm,
            ex.submitter.semaphore(),
            script="array.sh",
            cwd=array_dir,
            lookup=lookup,
            tuning=ex.tuning,
            clock=ex.clock,
        )
        if isinstance(outcome, AtLimit):
            return P.SUBMIT_LIMIT
        if isinstance(outcome, (Accepted, Adopted)):
            cluster = outcome.cluster if isinstance(outcome, Accepted) else None
            for i, job in enumerate(jobs):
                await ex.submitter.accepted(job, f"{outcome.native_id}_{i}", cluster)
            return "ok"
        assert not isinstance(outcome, Cancelled)  # arrays are not asked
        log.error("array %s: sbatch refused it: %s", name, outcome.message)
        for job in jobs:
            await record(
                job,
                StateUpdate(state=JobState.FAILED, detail="sbatch refused", reason=outcome.message),
            )
        return "failed"


__all__ = ["Arrays", "launcher_key"]
