"""Finding our jobs by name, and settling a job found in SUBMITTING after a crash (docs/slurm.md,
"Submission"): adopt the job Slurm has under its name, else decide by its files, else submit.
A job is never submitted twice and never forgotten."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from . import commands as C
from .decide import LOST_REASON, choose_adoption, decide_rc
from .submit import Adopted, submitted_since

if TYPE_CHECKING:
    from ..protocols import JobHandle
    from .executor import SlurmExecutor

log = logging.getLogger("launchers.slurm")


class Reconciler:
    """Lookups by name and crash recovery for one executor."""

    def __init__(self, ex: SlurmExecutor) -> None:
        self.ex = ex

    async def find_by_name(self, name: str, since: float | None = None) -> list[str]:
        """Ids (array master ids for arrays) of this user's jobs named ``name`` (squeue, and
        sacct over 7 days if available), oldest first. ``since`` (epoch) drops jobs submitted
        before it (minus clock skew): the same task in another experiment directory has the
        same name, but an earlier job."""
        ids, _ = await self.ex.slurm.named(name, since, None, self.ex.clock.time())
        return ids

    def _workdir(self, job: JobHandle) -> str | None:
        """The working directory the job's script asks for (``--chdir``), when it is known."""
        if job.task is None:
            return None
        return job.task.cwd or self.ex.files.job_dir(job)

    async def lookup(self, job: JobHandle, name: str) -> Adopted | None:
        """The job sbatch may have accepted for ``job`` (named ``name``, submitted since this
        attempt's SUBMITTING, in its directory); duplicates found are cancelled."""
        slurm = self.ex.slurm
        ids, foreign = await slurm.named(
            name, submitted_since(job), self._workdir(job), self.ex.clock.time()
        )
        adoption = choose_adoption(ids, foreign)
        if adoption is None:
            return None
        if adoption.duplicates:
            log.warning("%s: several Slurm jobs named %s (%s); keeping %s and cancelling the others",
                        job.task_id, name, ", ".join(adoption.candidates), adoption.keep)  # fmt: skip
            await slurm.run(C.scancel_argv(adoption.duplicates, slurm.name))
        return Adopted(adoption.keep)

    async def adopt_by_name(self, job: JobHandle, name: str) -> bool:
        found = await self.lookup(job, name)
        if found is None:
            return False
        await self.ex.submitter.accepted(job, found.native_id, None)
        return True

    async def adopt_array_element(self, job: JobHandle) -> bool:
        """A SUBMITTING element of an array: find the array by its name, then our index."""
        arr = job.record.extra.get("array")
        if not isinstance(arr, Mapping) or not arr.get("name") or not arr.get("dir"):
            return False
        ids = await self.find_by_name(str(arr["name"]), since=submitted_since(job))
        if not ids:
            return False
        try:
            index = (await self.ex.files.read(f"{arr['dir']}/index")).decode(
                "utf-8", errors="replace"
            )
        except (FileNotFoundError, OSError):
            return False
        lines = index.splitlines()
        me = self.ex.files.job_dir(job)
        if me not in lines:
            return False
        await self.ex.submitter.accepted(job, f"{ids[0]}_{lines.index(me)}", None)
        return True

    async def reconcile(self, job: JobHandle) -> None:
        """A record found in SUBMITTING: adopt the job found by name, else submit."""
        ex, files = self.ex, self.ex.files
        if await self.adopt_array_element(job):
            return
        if isinstance(job.record.extra.get("array"), Mapping):
            directory = files.job_dir(job)
            if not await files.banner_seen(directory, job.attempt):
                await ex.submit(job)
                return
        name = job.record.job_name
        launcher = job.launcher or ex.launcher
        if not name and job.task is not None:
            name = ex.script_spec(job, launcher).job_name
        if name and await self.adopt_by_name(job, name):
            return
        directory = files.job_dir(job)
        if await files.banner_seen(directory, job.attempt):
            rc = await files.read_rc(directory)
            if rc is not None and rc.native_id:
                job.apply(StateUpdate(native_id=rc.native_id, detail="found by job.rc"))
                decision = decide_rc(rc, ex.tracking.facts(job))
                ex.tracking.carry_out(job, decision)
                if decision.update is not None:
                    job.apply(decision.update)
                    return
            job.apply(StateUpdate(state=JobState.LOST, detail="reconcile", reason=LOST_REASON))
            return
        await ex.submit(job)


__all__ = ["Reconciler"]
