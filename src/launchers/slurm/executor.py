"""``SlurmExecutor``: runs the jobs of Slurm launchers sharing one connector and cluster
(docs/slurm.md). A thin facade over modules of one job each:

* ``settings``: what a launcher and its group ask for, resolved once (pure);
* ``cluster``: the Slurm commands, here or through a connector; ``files``: the job directories
  on the cluster side (the one file seam);
* ``submit``: staging and ONE sbatch-with-retries routine; ``reconcile``: lookups by name and
  crash recovery; ``arrays``: job arrays;
* ``track``: ONE poll path (here and through a connector), its decisions pure in ``decide``.

Extension points (how an SSH site reuses all of it, ``launchers.remote.ssh_executor``):
``connect`` (the connector, made on first use), ``check`` (before anything is recorded),
``stager`` (prepare the remote job directory), ``script`` (wrap the job's script spec) and
``outputs`` (copy a finished job's outputs home). ``array`` and ``submit_array`` are the
documented module functions (``with array(launcher):``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..config.environment import requested_gpus
from ..connectors.base import Connector
from ..connectors.registry import get_connector
from ..errors import LaunchersError, ScriptError
from ..jobs.depends import NATIVE_KEY, slurm_directives
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.core import current
from ..runtime.executor import Executor
from .arrays import Arrays, launcher_key
from .cluster import SlurmCluster
from .commands import CLEAN_ENV
from .decide import limit_detail
from .envscript import check_environment
from .files import JobFiles
from .limits import Allowance
from .parse import UNREADABLE, Row
from .reconcile import Reconciler
from .script import ScriptSpec, check_env, check_launcher_values
from .settings import STATUS_SOURCES, Placement, SlurmSettings, SlurmTuning, job_script_spec
from .states import UnknownStateWarner
from .submit import KILL_AFTER_SBATCH_ENV, Submitter
from .track import Tracking

if TYPE_CHECKING:
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import Clock, JobHandle

#: Prepares a job's directory on the cluster side (staging); returns it.
Stager = Callable[["JobHandle", JobFiles], Awaitable[str]]
#: The job's script spec, wrapped (e.g. the command inside an environment script).
ScriptWrapper = Callable[["JobHandle", "Launcher", ScriptSpec], ScriptSpec]
#: Copies a finished remote job's outputs home.
Outputs = Callable[["JobHandle", JobFiles], Awaitable[None]]

# kept for their former import path (the CLEAN_ENV wrapper, rows, the limit text)
_CLEAN_ENV = CLEAN_ENV


async def stage(job: JobHandle, files: JobFiles) -> str:
    """The default stager: the remote job directory, created, with ``params.json``."""
    return await files.prepare(job)


async def fetch_outputs(job: JobHandle, files: JobFiles) -> None:
    """The default outputs: copied home once the job is final."""
    await files.fetch_outputs(job)


def _same(job: JobHandle, launcher: Launcher, spec: ScriptSpec) -> ScriptSpec:
    return spec


class SlurmExecutor(Executor):
    """Runs jobs of Slurm launchers sharing one connector and cluster."""

    kind = "slurm"
    #: a dependent on a job of this executor is submitted at once with ``--dependency``
    native_dependencies = True

    def __init__(
        self,
        launcher: Launcher,
        *,
        connect: Callable[[], Connector] | None = None,
        local: bool | None = None,
        check: Callable[[Launcher], None] | None = None,
        stager: Stager = stage,
        script: ScriptWrapper = _same,
        outputs: Outputs = fetch_outputs,
        tuning: SlurmTuning | None = None,
        clock: Clock | None = None,
    ) -> None:
        placement = Placement.of(launcher)
        super().__init__(placement.key())
        self.launcher = launcher
        self.group = getattr(launcher, "group", None)
        self._tuning = tuning
        self.clock: Clock = clock or current().clock
        self.connector_name = placement.connector
        source = placement.status_source
        if source not in STATUS_SOURCES:
            raise LaunchersError(f"status_source: {source!r} is not auto, sacct or squeue")
        self.status_source = source
        tuned = self.tuning
        is_local = self.connector_name == "local" if local is None else local
        self.poll_min = tuned.poll_min
        self.poll_max = float(placement.poll_max) if placement.poll_max else tuned.poll_max
        self.poll_timeout = tuned.poll_timeout
        self.fast_interval = tuned.fast_interval if is_local else None
        self.slurm = SlurmCluster(
            connect or self._group_connector,
            local=is_local,
            cluster=placement.cluster,
            tuning=lambda: self.tuning,
            accounting=None if source == "auto" else source == "sacct",
        )
        self.files = JobFiles(self.slurm)
        self._check = check
        self.stager = stager
        self._script = script
        self.outputs = outputs
        self.submitter = Submitter(self)
        self.reconciler = Reconciler(self)
        self.arrays = Arrays(self)
        self.tracking = Tracking(self)
        self.warn_unknown = UnknownStateWarner()
        #: launchers whose script values were checked (``validate``)
        self._checked: set[Any] = set()
        #: id(launcher) -> (launcher, its settings), resolved once per launcher
        self._settings: dict[int, tuple[Launcher, SlurmSettings]] = {}

    def _group_connector(self) -> Connector:
        """The connector the group names (``local``, or one of ``launchers.yaml``)."""
        config = None
        if self.connector_name != "local":
            # lazy: the configuration loader (~80 ms to import) only for a connector
            from ..config.loader import load_config

            path = self.group.position.file if self.group is not None else None
            config = load_config(path)
        return get_connector(self.connector_name, config)

    # -- what the executor knows ------------------------------------------------------------------

    @property
    def tuning(self) -> SlurmTuning:
        """The timings in force: the executor's own, else the runtime's (``Runtime.tune``)."""
        return self._tuning or current().tuned(SlurmTuning)

    def settings(self, launcher: Launcher | None) -> SlurmSettings:
        """The settings of ``launcher`` (this executor's own when None), resolved once."""
        launcher = launcher or self.launcher
        found = self._settings.get(id(launcher))
        if found is not None and found[0] is launcher:
            return found[1]
        settings = SlurmSettings.resolve(launcher, self.group)
        if len(self._settings) >= 1024:
            self._settings.clear()
        self._settings[id(launcher)] = (launcher, settings)
        return settings

    @property
    def connector(self) -> Connector:
        return self.slurm.connector

    @property
    def is_local(self) -> bool:
        return self.slurm.is_local

    @property
    def cluster(self) -> str | None:
        """The cluster passed as ``--clusters`` to every command (None: the default one)."""
        return self.slurm.name

    @property
    def commands(self) -> dict[str, int]:
        """Slurm commands run, by name (benchmarks and tests read it)."""
        return self.slurm.commands

    async def user(self) -> tuple[str, int]:
        """The submitting user's name and uid on the cluster side."""
        return await self.slurm.user()

    # -- script ---------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """In ``task.submit``: the values the script will carry can be written, so a bad one is
        a ``ScriptError`` there, not a FAILED job; each launcher is checked once."""
        if self._check is not None:
            self._check(launcher)
        key = launcher_key(launcher)
        if key not in self._checked:
            settings = self.settings(launcher)
            check_launcher_values(
                directives=list(settings.directives),
                sbatch_options=settings.sbatch_options,
                env=settings.env,
                export=settings.export,
                resume_signal=settings.resume_signal,
            )
            if len(self._checked) < 1024:
                self._checked.add(key)
        check_env(task.env)
        if not task.environment.is_empty:
            check_environment(
                self.settings(launcher).environment.merged(task.environment), slurm=True
            )

    def script_spec(self, job: JobHandle, launcher: Any) -> ScriptSpec:
        """The script inputs of ``job``'s current attempt."""
        task = job.task
        if task is None:
            raise LaunchersError(
                f"job {job.task_id}: the task is unknown (re-submit it from its experiment)"
            )
        directory = self.files.job_dir(job)
        spec = job_script_spec(
            task,
            self.settings(launcher),
            job_dir=directory,
            attempt=job.attempt,
            default_python=sys.executable if self.is_local else "python3",
            gpus=requested_gpus(launcher),
            # a dependent held by Slurm itself (docs/design/runtime.md §15)
            extra_directives=tuple(slurm_directives(job.record.extra.get(NATIVE_KEY))),
        )
        return self._script(job, launcher, spec)

    # -- the Executor interface -----------------------------------------------------------------

    def owns_waiting(self, job: JobHandle) -> bool:
        return id(job) in self.submitter.slots.held

    def _learn_cluster(self, job: JobHandle) -> None:
        """A job recorded with the cluster sbatch named (``ID;CLUSTER``) gives it to every later
        command of this executor, also in a later process."""
        self.slurm.learn(job.record.cluster)

    def track(self, job: JobHandle) -> None:
        self._learn_cluster(job)
        super().track(job)

    def enqueue(self, job: JobHandle, *, reconcile: bool = False) -> None:
        """Collect jobs inside ``array()`` blocks; otherwise as every executor."""
        self._learn_cluster(job)
        bucket = self.arrays.bucket()
        native = job.record.extra.get(NATIVE_KEY)
        if bucket is not None and not reconcile and job.launcher is not None and not native:
            bucket.append(job)
            return
        super().enqueue(job, reconcile=reconcile)

    async def submit(self, job: JobHandle) -> None:
        await self.submitter.submit(job)

    async def reconcile(self, job: JobHandle) -> None:
        """A record found in SUBMITTING: adopt the job found by name, else submit."""
        await self.reconciler.reconcile(job)

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        return await self.tracking.poll(jobs)

    async def fast_poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """Every second on this machine: a ``job.rc`` with rc 0 completes a job, no Slurm call."""
        return await self.tracking.fast_poll(jobs)

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        await self.tracking.cancel(jobs)

    async def find_by_name(self, name: str, since: float | None = None) -> list[str]:
        """Ids of this user's jobs named ``name``, oldest first (``Reconciler.find_by_name``)."""
        return await self.reconciler.find_by_name(name, since)

    # -- arrays ---------------------------------------------------------------------------------

    def array(
        self, launcher: Launcher, max_parallel: int | None = None
    ) -> AbstractContextManager[list[JobHandle]]:
        """``SlurmLauncher.array``: the module's ``array`` (documented there)."""
        return array(launcher, max_parallel=max_parallel)

    def collecting(self) -> AbstractContextManager[list[JobHandle]]:
        """Jobs submitted in this thread inside the block are collected instead of submitted."""
        return self.arrays.collecting()

    def enqueue_array(self, jobs: Sequence[JobHandle], max_parallel: int | None) -> None:
        """Thread-safe: submit ``jobs`` as array chunks on the loop."""
        self.arrays.enqueue(jobs, max_parallel)

    async def submit_array(
        self, jobs: Sequence[JobHandle], *, max_parallel: int | None = None
    ) -> None:
        """Submit ``jobs`` as arrays (``Arrays.submit``)."""
        await self.arrays.submit(jobs, max_parallel=max_parallel)

    async def max_array_size(self) -> int:
        """``MaxArraySize`` from ``scontrol show config`` (read once per cluster)."""
        return await self.slurm.max_array_size()

    async def submit_allowance(self, launcher: Any) -> Allowance | None:
        """How many more jobs Slurm accepts from this user now, or None (unknown)."""
        return await self.slurm.submit_allowance(self.settings(launcher).options)

    def __repr__(self) -> str:
        return f"<SlurmExecutor connector={self.connector_name} cluster={self.cluster}>"


# -- public helpers for arrays --------------------------------------------------------------------


def _executor(launcher: Launcher) -> SlurmExecutor:
    ex = launcher.executor()
    if not isinstance(ex, SlurmExecutor):
        raise LaunchersError(f"arrays need a Slurm launcher, not {launcher.kind!r}")
    return ex


@contextlib.contextmanager
def array(launcher: Launcher, max_parallel: int | None = None) -> Iterator[list[JobHandle]]:
    """``with array(launcher, max_parallel=None) as jobs:`` around ``task.submit`` calls:
    the tasks submitted with this launcher's executor in the block go in as job arrays."""
    if max_parallel is not None and max_parallel < 1:
        raise ScriptError(f"max_parallel must be at least 1, not {max_parallel}")
    ex = _executor(launcher)
    with ex.collecting() as bucket:
        yield bucket
    # one array per launcher: a task submitted in the block with another configuration of the
    # launcher (launcher.config(time=...)) keeps its own options and script header
    groups: dict[Any, list[JobHandle]] = {}
    for job in bucket:
        if job.state is JobState.WAITING:
            groups.setdefault(launcher_key(job.launcher or launcher), []).append(job)
    for jobs in groups.values():
        ex.enqueue_array(jobs, max_parallel)


def submit_array(
    launcher: Launcher, tasks: Sequence[Any], *, max_parallel: int | None = None
) -> list[JobHandle]:
    """Submit ``tasks`` (in the current experiment) as job arrays; returns their jobs."""
    with array(launcher, max_parallel=max_parallel):
        jobs = [t.submit(launcher) for t in tasks]
    return jobs


__all__ = [
    "KILL_AFTER_SBATCH_ENV",
    "UNREADABLE",
    "Outputs",
    "Row",
    "ScriptWrapper",
    "SlurmExecutor",
    "Stager",
    "array",
    "fetch_outputs",
    "limit_detail",
    "stage",
    "submit_array",
]
