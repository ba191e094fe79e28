"""What the Slurm executor reads of a launcher and its group, resolved once into typed values,
and the timings of the executor itself (docs/slurm.md, "Settings and tuning"). Pure.

Precedence is one rule, ``pick``: the launcher's value (``launcher.config(...)``), else the
group's (``launchers.yaml``), else the default; ``None`` means "not set" at every level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from ..config.environment import EMPTY, Environment, callable_python, for_job, merge_all
from ..config.model import SlurmGroup
from ..jobs.task import Task
from ..launcher import Launcher
from .launcher import SlurmLikeLauncher
from .options import SlurmOptions
from .script import ScriptSpec, job_name

T = TypeVar("T")

DEFAULT_MAX_REQUEUES = 3
DEFAULT_RESUME_SIGNAL = "USR1"
DEFAULT_RESUME_GRACE = 120
STATUS_SOURCES = ("auto", "sacct", "squeue")


def pick(launcher_value: T | None, group_value: T | None, default: T) -> T:
    """The launcher's value, else the group's, else ``default`` (``None`` is "not set")."""
    if launcher_value is not None:
        return launcher_value
    if group_value is not None:
        return group_value
    return default


@attrs.frozen
class SlurmTuning:
    """The executor's timings and sizes (seconds, counts, bytes). One value per process, owned
    by the runtime (``Runtime.tuned(SlurmTuning)``); a test sets its own with ``Runtime.tune``."""

    #: sbatch calls at once (one executor)
    max_concurrent_sbatch: int = 4
    sbatch_timeout: float = 60.0
    query_timeout: float = 30.0
    #: retries of a transient failure (staging, sbatch): first delay, doubling, until the total
    retry_first: float = 2.0
    retry_total: float = 300.0
    #: the longest delay between two staging tries
    retry_max: float = 60.0
    #: a job held by a submit limit tries again after a job of ours left the queue, or this long
    submit_limit_wait: float = 60.0
    #: a job sacct does not list yet is not looked for elsewhere before this long after sbatch
    sacct_grace: float = 120.0
    #: a job no Slurm command knows and that left no job.rc is LOST after ``lost_polls`` polls
    #: spanning ``lost_after`` (a group's ``lost_after`` replaces it)
    lost_after: float = 600.0
    lost_polls: int = 3
    #: a fatal pending reason counts once seen twice this far apart
    fatal_confirm: float = 60.0
    #: a failed scancel is asked again after this long
    cancel_retry: float = 10.0
    #: margin when comparing the cluster's submit times with the records' (seconds)
    clock_skew: float = 10.0
    #: above this many bytes of ids, sacct asks by user and start time instead
    max_id_list: int = 32 * 1024
    #: the tracker's interval: after a change, and at most (a group's ``poll_max`` replaces it)
    poll_min: float = 2.0
    poll_max: float = 60.0
    #: period of the job.rc check on this machine (no Slurm call)
    fast_interval: float = 1.0

    @property
    def poll_timeout(self) -> float:
        """How long the tracker waits for one poll: two queries and a margin."""
        return 2 * self.query_timeout + 5


@attrs.frozen
class Placement:
    """What shapes one executor: the connector and cluster it talks to, and how its single
    tracker reads states. Groups that agree share an executor (``key``)."""

    connector: str = "local"
    cluster: str | None = None
    status_source: str = "auto"
    poll_max: int | None = None

    @classmethod
    def of(cls, launcher: Launcher) -> Placement:
        """The placement of ``launcher`` (cheap: computed for every submission)."""
        if not isinstance(launcher, SlurmLikeLauncher):
            return cls()
        group = launcher.group
        return cls(
            connector=launcher.connector or "local",
            cluster=cluster_of(launcher.extra_options),
            status_source=str(group.status_source or "auto").lower(),
            poll_max=group.poll_max,
        )

    def key(self) -> tuple[Any, ...]:
        """``("slurm", connector, cluster)``, plus ``status_source`` and ``poll_max`` when the
        group sets them (the other settings are read per job)."""
        key: tuple[Any, ...] = ("slurm", self.connector, self.cluster)
        if self.status_source != "auto" or self.poll_max:
            key += (self.status_source, self.poll_max)
        return key


def cluster_of(extra_options: tuple[tuple[str, str | bool], ...]) -> str | None:
    """The cluster named by ``--clusters``/``--cluster`` among the extra sbatch options."""
    for name, value in extra_options:
        if name in ("clusters", "cluster") and isinstance(value, str):
            return value
    return None


@attrs.frozen
class SlurmSettings:
    """The settings of the jobs of one launcher, as the executor uses them."""

    #: the job's group (its limits name the cause of a fatal pending reason)
    group: SlurmGroup | None = None
    options: SlurmOptions = attrs.field(factory=SlurmOptions)
    #: ``#SBATCH`` lines from the options, and the extra sbatch options (group's, then launcher's)
    directives: tuple[str, ...] = ()
    sbatch_options: tuple[tuple[str, str | bool], ...] = ()
    export: str = "ALL"
    #: the group's ``env:`` then the launcher's (later wins)
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None
    max_requeues: int = DEFAULT_MAX_REQUEUES
    resume_signal: str = DEFAULT_RESUME_SIGNAL
    resume_grace: int = DEFAULT_RESUME_GRACE
    fatal_pending: str = "cancel"
    fatal_reasons_add: tuple[str, ...] = ()
    fatal_reasons_remove: tuple[str, ...] = ()
    #: the group's ``lost_after`` in seconds, or None (0 counts as not set: the tuning's)
    lost_after: float | None = None
    #: the ``environment:`` of the group, partition, node group and launcher, merged
    environment: Environment = EMPTY

    @classmethod
    def resolve(cls, launcher: Launcher, group: SlurmGroup | None = None) -> SlurmSettings:
        """The settings of ``launcher`` (``group`` stands in when the launcher has none)."""
        if not isinstance(launcher, SlurmLikeLauncher):
            return cls(group=group)
        own = launcher.group
        return cls(
            group=own,
            options=launcher.options,
            directives=tuple(launcher.options.sbatch_args()),
            sbatch_options=launcher.extra_options,
            export=pick(launcher.export, own.export, "ALL"),
            env=tuple({**dict(own.env), **dict(launcher.env)}.items()),
            python=pick(launcher.python, own.python, None),
            max_requeues=int(pick(launcher.max_requeues, own.max_requeues, DEFAULT_MAX_REQUEUES)),
            resume_signal=str(
                pick(launcher.resume_signal, own.resume_signal, DEFAULT_RESUME_SIGNAL)
            ),
            resume_grace=int(pick(launcher.resume_grace, own.resume_grace, DEFAULT_RESUME_GRACE)),
            fatal_pending=str(own.fatal_pending or "cancel"),
            fatal_reasons_add=tuple(own.fatal_reasons_add or ()),
            fatal_reasons_remove=tuple(own.fatal_reasons_remove or ()),
            lost_after=float(own.lost_after) if own.lost_after else None,
            environment=launcher_environment(launcher),
        )

    def job_env(self, task_env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """The environment a job's script sets: these settings' ``env`` then the task's."""
        return tuple({**dict(self.env), **dict(task_env)}.items())


def job_script_spec(
    task: Task,
    settings: SlurmSettings,
    *,
    job_dir: str,
    attempt: int = 1,
    default_python: str = "python3",
    gpus: int = 0,
    extra_directives: tuple[str, ...] = (),
) -> ScriptSpec:
    """What ``job.sh`` of ``task``'s attempt ``attempt`` contains on a Slurm group: the
    command, or ``PYTHON -m launchers.run JOB_DIR`` for a callable; the settings' options,
    variables and ``environment:`` merged with the task's (docs/design/runtime.md §3);
    ``extra_directives`` follow the settings' (a dependent held by Slurm, docs/design/runtime.md §15)."""
    block, env = for_job(settings.env, task.env, settings.environment, task.environment)
    python = callable_python(block, settings.python, default_python)
    if task.kind == "command":
        argv = tuple(task.target)
        check = None
    else:
        argv = (python, "-m", "launchers.run", job_dir)
        check = python
    return ScriptSpec(
        job_dir=job_dir,
        task_id=task.task_id,
        job_name=job_name(task.name, task.digest, attempt),
        argv=argv,
        attempt=attempt,
        cwd=task.cwd,
        export=settings.export,
        env=env,
        directives=(*settings.directives, *extra_directives),
        sbatch_options=settings.sbatch_options,
        resumable=bool(task.resumable),
        max_requeues=settings.max_requeues,
        resume_signal=settings.resume_signal,
        resume_grace=settings.resume_grace,
        python=check,
        environment=block,
        gpus=gpus,
    )


def launcher_environment(launcher: SlurmLikeLauncher) -> Environment:
    """The ``environment:`` of the group, of the chosen partition, of its node group when the
    job can land on no other (the partition has one, or all of them set the same), and of the
    launcher, merged in that order (docs/configuration.md, Environment); none for a batch pilot."""
    if not launcher.use_environment:
        return EMPTY
    group = launcher.group
    levels = [group.job_environment]
    name = launcher.options.partition
    for partition in group.partitions:
        if partition.name == name:
            levels.append(partition.job_environment)
            node_envs = {n.job_environment for n in partition.nodes}
            if len(node_envs) == 1:
                levels.append(node_envs.pop())
            break
    levels.append(launcher.environment)
    return merge_all(*levels)


__all__ = [
    "DEFAULT_MAX_REQUEUES",
    "STATUS_SOURCES",
    "Placement",
    "SlurmSettings",
    "SlurmTuning",
    "cluster_of",
    "job_script_spec",
    "launcher_environment",
    "pick",
]
