"""The settings of the direct launcher as one typed value (``LocalSettings``), resolved once per
launcher configuration (docs/jobs.md, "The direct launcher"), and what they make of a job: the
script it runs (``script_spec``) and the environment it starts with (``job_environment``).

Precedence is launcher, then group, then default. A ``DirectLauncher`` carries no setting of its
own, so each comes from its ``local`` group, else the default; a job known only from its record
(no launcher) gets the defaults of the implicit group. Pure values and functions: nothing here
reads a file or the machine (the CPU count is an argument).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..config.environment import EMPTY, Environment, callable_python, for_job
from ..config.model import LocalGroup
from ..jobs.task import KIND_COMMAND, Task
from ..launcher import Launcher
from ..slurm.script import ScriptSpec, job_name
from .launcher import DirectLauncher

#: Seconds between SIGTERM and SIGKILL when cancelling (a group's ``kill_grace`` overrides it).
KILL_GRACE = 10.0
#: Variables passed with ``export: NONE``.
NONE_VARS = ("HOME", "USER", "LOGNAME", "PATH", "LANG", "LC_ALL", "TMPDIR")


@attrs.frozen
class LocalSettings:
    """Everything the direct executor reads of a job's launcher."""

    #: the group itself: the jobs of equal groups share its ``max_jobs`` slots
    group: LocalGroup
    #: the group id, or ``local[i]`` (error messages)
    label: str
    #: ``local``, or the SSH connector the group runs through
    connector: str
    #: the configuration file the group was read from (token totals, the connector)
    config_file: str | None
    export: str
    env: tuple[tuple[str, str], ...]
    #: the interpreter for callables; None: the executor's default
    python: str | None
    #: at most this many jobs of the group run at once in a process
    max_jobs: int
    #: seconds between SIGTERM and SIGKILL on cancel
    kill_grace: float
    #: counter tokens (name, units) a job of the group holds while it runs
    tokens: tuple[tuple[str, int], ...]


def group_of(launcher: Launcher | None) -> LocalGroup:
    """The local group of ``launcher``; the implicit group when it has none."""
    if isinstance(launcher, DirectLauncher) and isinstance(launcher.group, LocalGroup):
        return launcher.group
    return LocalGroup(implicit=True)


def connector_of(launcher: Launcher | None) -> str:
    """``local``, or the SSH connector the launcher's group runs through."""
    return str(group_of(launcher).connector or "local")


def resolve(
    launcher: Launcher | None, *, cpu_count: int, kill_grace: float = KILL_GRACE
) -> LocalSettings:
    """The settings of ``launcher`` (launcher > group > default). ``cpu_count`` is this
    machine's, the last default of ``max_jobs``; ``kill_grace`` the executor's default."""
    return resolve_group(group_of(launcher), cpu_count=cpu_count, kill_grace=kill_grace)


def resolve_group(
    group: LocalGroup, *, cpu_count: int, kill_grace: float = KILL_GRACE
) -> LocalSettings:
    """The settings a local group gives (see ``resolve``).

    ``max_jobs``: the group's, else its ``cpu.cores``, else ``cpu_count`` (0 counts as unset).
    ``kill_grace``: the group's when given (0 included), else the default. ``python``: the
    group's unless empty."""
    if group.max_jobs:
        max_jobs = int(group.max_jobs)
    elif group.cpu.cores:
        max_jobs = int(group.cpu.cores)
    else:
        max_jobs = cpu_count
    return LocalSettings(
        group=group,
        label=group.label,
        connector=str(group.connector or "local"),
        config_file=group.position.file,
        export=group.export,
        env=tuple(group.env),
        python=group.python or None,
        max_jobs=max_jobs,
        kill_grace=kill_grace if group.kill_grace is None else float(group.kill_grace),
        tokens=tuple(group.tokens),
    )


def job_environment(export: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the job starts with: everything (``ALL``) or the few ``NONE_VARS``."""
    if export.upper() == "NONE":
        return {k: environ[k] for k in NONE_VARS if k in environ}
    return dict(environ)


def script_spec(
    task: Task,
    settings: LocalSettings,
    *,
    task_id: str,
    attempt: int,
    job_dir: str,
    default_python: str,
    cleanup: tuple[str, ...] = (),
    environment: Environment = EMPTY,
    gpus: int = 0,
    use_environment: bool = True,
) -> ScriptSpec:
    """What ``job.sh`` of attempt ``attempt`` contains (``slurm.script.render_script`` writes
    it): the task's command, or ``PYTHON -m launchers.run JOB_DIR`` for a callable; the group's
    ``env:`` then the task's; ``cleanup`` files (token holders) removed when the job ends;
    ``environment`` the launcher's block, between the group's and the task's."""
    levels = (settings.group.job_environment, environment) if use_environment else ()
    block, env = for_job(settings.env, task.env, *levels, task.environment)
    python = callable_python(block, settings.python, default_python)
    if task.kind == KIND_COMMAND:
        argv = tuple(task.target)
    else:
        argv = (python, "-m", "launchers.run", job_dir)
    return ScriptSpec(
        job_dir=job_dir,
        task_id=task_id,
        job_name=job_name(task.name, task.digest, attempt),
        argv=argv,
        attempt=attempt,
        cwd=task.cwd,
        export=settings.export,
        env=env,
        python=None if task.kind == KIND_COMMAND else python,
        cleanup=cleanup,
        slurm=False,
        environment=block,
        gpus=gpus,
    )


__all__ = [
    "KILL_GRACE",
    "NONE_VARS",
    "LocalSettings",
    "connector_of",
    "group_of",
    "job_environment",
    "resolve",
    "resolve_group",
    "script_spec",
]
