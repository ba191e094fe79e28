"""What a UNICORE or firecREST job sends (docs/remote-sites.md, "The job script"): files,
``job.sh``, the UNICORE description and its ``BSS file``, and the job's names at the site.
Values only: ``launchers run`` plans a payload (``remote.submit``), an experiment's command
task gets one from ``task_payload``, the executors send it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ..config.environment import EMPTY, requested_gpus
from ..config.environment import Environment as Block
from ..errors import ConfigurationError, LaunchersError, TaskError
from ..jobs.task import KIND_COMMAND
from ..slurm.envscript import check_environment
from ..slurm.script import sh_quote
from ..slurm.settings import launcher_environment
from .backend_config import resolve_account
from .environment import Environment, mixed_forms, validate_environment
from .resources import resources_from_options
from .script import (
    JobScriptSpec,
    attempt_job_name,
    finder_pairs,
    job_name,
    render_job_script,
    run_id_for,
    sbatch_pairs,
    unicore_bss_file,
    unicore_description,
)
from .settings import SiteSettings

if TYPE_CHECKING:
    from ..protocols import JobHandle


class ScriptFor(Protocol):
    """``job.sh`` for a run directory (None on UNICORE) and the attempt's job name (None: the
    first attempt's)."""

    def __call__(self, run_dir: str | None, job_name: str | None = None) -> str: ...


@attrs.frozen
class RemotePayload:
    """What one remote job sends: files (local path, relative destination; never an empty file:
    ``job.sh`` creates those), the script (``script(run_dir, job_name)``), the UNICORE
    description and the ``#SBATCH`` pairs of its ``BSS file`` (a ``raw`` job), the run
    directory's name, and ``job_name``, the base of the site's job name (``name_for(attempt)``
    adds ``-aN``)."""

    uploads: tuple[tuple[Path, str], ...]
    script: ScriptFor = attrs.field(eq=False)
    run_id: str
    job_name: str
    description: Mapping[str, Any] | None = attrs.field(default=None, eq=False)
    bss_sbatch: tuple[tuple[str, str | bool], ...] | None = None

    def bss_file(self, name: str) -> str | None:
        """UNICORE's ``BSS file`` for the job name ``name`` (None: not a UNICORE job)."""
        if self.bss_sbatch is None:
            return None

        return unicore_bss_file(name, self.bss_sbatch)

    def name_for(self, attempt: int) -> str:
        """The job name of ``attempt`` at the site (``BASE-aN``)."""
        return attempt_job_name(self.job_name, attempt)


def remote_job_name(job: JobHandle) -> str:
    """``NAME-DIGEST12-aN``: unique per task and attempt, as for Slurm jobs; a long name is
    shortened, never the suffix (a site allows 64 characters)."""
    place = f"-{job.directory.name[:12]}"
    return attempt_job_name(
        job_name(job.name, 64 - len(place) - len(f"-a{job.attempt}")) + job_name(place), job.attempt
    )


def check_task(task: Any, kind: str) -> None:
    """Only commands run on a remote site (a callable would need this package there)."""
    if task is not None and getattr(task, "kind", KIND_COMMAND) != KIND_COMMAND:
        raise TaskError(
            f"task {task.task_id}: a {kind} launcher runs commands only (command([...])); "
            "a @task function needs launchers installed at the site"
        )


def site_environment(launcher: Any, task: Any, kind: str) -> tuple[Environment, Block]:
    """The environment of a task's job on a site, in one of its two forms (docs/remote-sites.md,
    "The same model"): the group's Compute Backend Config ``Environment`` (Mantik's script), or
    launchers.yaml's block of the group, partition, node group, launcher and task merged (the
    one renderer's lines). Both at once: a ``ConfigurationError`` (the launcher's level) or a
    ``TaskError`` (the task's); a block no script can run: a ``ScriptError``. Pure."""
    settings = SiteSettings.of(launcher, kind)
    mantik = Environment()
    if settings.environment:
        mantik = validate_environment(
            settings.environment, None, f"{kind}.{settings.label}.environment", site_kind=kind
        )
    base = launcher_environment(launcher) if hasattr(launcher, "use_environment") else EMPTY
    own: Block = getattr(task, "environment", None) or EMPTY
    problem = mixed_forms(
        mantik, base, "the launcher's environment (launcher.config(environment=...))"
    )
    if problem:
        raise ConfigurationError(problem, key="environment")
    problem = mixed_forms(mantik, own, "the task's environment")
    if problem:
        raise TaskError(f"task {getattr(task, 'task_id', '?')}: {problem}")
    block = base.merged(own)
    if not block.is_empty:
        check_environment(block, slurm=True)
    return mantik, block


def task_payload(job: JobHandle, kind: str) -> RemotePayload:
    """The payload of an experiment's command task: ``job.sh`` runs its argv in the run directory
    with the group's ``environment`` and the task's ``env``; nothing else is uploaded."""

    task = job.task
    launcher: Any = job.launcher
    if task is None or launcher is None:
        raise LaunchersError(
            f"job {job.task_id}: nothing to submit (no task or launcher in this process)"
        )
    check_task(task, kind)
    settings = SiteSettings.of(launcher, kind)
    env, block = site_environment(launcher, task, kind)
    argv = tuple(str(a) for a in task.target)
    command = " ".join(sh_quote(a, what="an argument") for a in argv)
    if task.cwd and block.is_empty:
        command = f"cd {sh_quote(task.cwd, what='cwd')} && {command}"
    exports = tuple(sorted(dict(task.env).items()))
    account = resolve_account(settings.account, settings.site)  # as `launchers run`
    name = remote_job_name(job)
    base = name[: -len(f"-a{job.attempt}")]
    run_id = run_id_for(job.task_id, job.directory)
    written = settings.resources  # a Compute Backend Config's, sent as written
    resources = written if written is not None else resources_from_options(settings.options)
    sbatch: tuple[tuple[str, str | bool], ...] = ()
    if written is not None:
        sbatch = sbatch_pairs(written, account, settings.gpu_option) + settings.extra_options
    else:
        sbatch = finder_pairs(launcher.sbatch_args(), account)

    def script(run_dir: str | None, job_name: str | None = None) -> str:
        return render_job_script(
            JobScriptSpec(
                environment=env,
                command=command,
                transport=kind,
                run_dir=run_dir,
                job_name=job_name or name,
                sbatch=sbatch if kind == "firecrest" else (),
                exports=exports,
                cpus_per_node=resources.cpus_per_node,
                run_id=run_id,
                block=block,
                argv=argv if not block.is_empty else (),
                cwd=task.cwd if not block.is_empty else None,
                gpus=requested_gpus(launcher) if not block.is_empty else 0,
            )
        )

    description = bss = None
    if kind == "unicore":
        description = unicore_description(name=name, environment=env, task_id=job.task_id)
        bss = sbatch
    return RemotePayload(
        uploads=(),
        script=script,
        run_id=run_id,
        job_name=base,
        description=description,
        bss_sbatch=bss,
    )


__all__ = [
    "RemotePayload",
    "ScriptFor",
    "check_task",
    "remote_job_name",
    "site_environment",
    "task_payload",
]
