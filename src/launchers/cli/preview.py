"""The job script a launcher would write, shown before anything runs: ``launchers submit
--dry-run`` prints it whole, ``launchers find --explain`` the part its ``environment:`` adds
(docs/configuration.md, Environment). Built with the executors' own pure functions."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, cast

import attrs

from ..batch.launcher import BatchLauncher
from ..batch.shape import entry_argv, task_environment
from ..config.environment import EMPTY, merge_all, requested_gpus
from ..errors import LaunchersError
from ..jobs.task import Task
from ..local.launcher import DirectLauncher
from ..local.settings import resolve, script_spec
from ..remote.payload import task_payload
from ..remote.site_launcher import SiteLauncher
from ..slurm.envscript import render_environment
from ..slurm.launcher import SlurmLikeLauncher
from ..slurm.script import render_script
from ..slurm.settings import SlurmSettings, job_script_spec, launcher_environment


def job_script(launcher: Any, task: Task, job_dir: str) -> str:
    """The ``job.sh`` of ``task``'s first attempt in ``job_dir`` under ``launcher`` (for a batch
    launcher: the script of the same task as a job of its inner launcher, and the wrapper the
    pilot runs it with)."""
    if isinstance(launcher, BatchLauncher):
        block = task_environment(launcher.inner, task.environment).without_variables()
        argv = entry_argv(
            block,
            list(task.target)
            if task.kind == "command"
            else ["python3", "-m", "launchers.run", job_dir],
            job_dir=job_dir,
            cwd=task.cwd or job_dir,
            gpus=requested_gpus(launcher.inner),
            callable_task=task.kind != "command",
        )
        head = "# batched: a pilot runs this task as\n# " + " ".join(argv[:2]) + "\n"
        body = argv[2] if len(argv) > 2 else " ".join(argv)
        return head + body + "\n"
    if isinstance(launcher, SiteLauncher):
        return site_script(launcher, task, job_dir)
    if isinstance(launcher, SlurmLikeLauncher):
        spec = job_script_spec(
            task,
            SlurmSettings.resolve(launcher),
            job_dir=job_dir,
            default_python=sys.executable if launcher.connector == "local" else "python3",
            gpus=requested_gpus(launcher),
        )
        return render_script(spec)
    if isinstance(launcher, DirectLauncher):
        settings = resolve(launcher, cpu_count=os.cpu_count() or 1)
        spec = script_spec(
            task,
            settings,
            task_id=task.task_id,
            attempt=1,
            job_dir=job_dir,
            default_python=sys.executable,
            environment=launcher.environment,
            gpus=requested_gpus(launcher),
        )
        return render_script(spec)
    raise_unsupported(launcher)
    return ""


@attrs.frozen
class _Preview:
    """What ``task_payload`` reads of a job, for its first attempt in ``directory``."""

    task: Task
    launcher: Any
    directory: Path
    attempt: int = 1

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def name(self) -> str:
        return self.task.name


def site_script(launcher: SiteLauncher, task: Task, job_dir: str) -> str:
    """The ``job.sh`` a UNICORE or firecREST site runs for ``task`` (its run directory, known
    once the site answered, shown as ``RUN_DIR`` on firecREST)."""
    payload = task_payload(cast(Any, _Preview(task, launcher, Path(job_dir))), launcher.kind)
    return payload.script(None if launcher.kind == "unicore" else "RUN_DIR")


def raise_unsupported(launcher: Any) -> None:
    raise LaunchersError(
        f"--dry-run shows the job script of local, slurm, unicore, firecrest and batch launchers, "
        f"not of {launcher.kind}"
    )


def environment_lines(launcher: Any) -> list[str]:
    """What the launcher's ``environment:`` adds around a job's command (empty when none)."""
    if isinstance(launcher, SlurmLikeLauncher):
        env = launcher_environment(launcher)
    else:
        group = getattr(launcher, "group", None)
        env = merge_all(
            getattr(group, "job_environment", EMPTY), getattr(launcher, "environment", EMPTY)
        )
    env = env.without_variables()
    if env.is_empty:
        return []
    job_dir = str(Path("JOB_DIR"))
    lines = render_environment(env, job_dir=job_dir, cwd=job_dir, gpus=requested_gpus(launcher))
    return [
        "environment (docs/configuration.md, Environment): the job script runs",
        *(f"  {line}" for text in lines.setup for line in text.splitlines()),
        "  " + " ".join([*lines.wrap, "COMMAND..."]),
        *(f"  {line}" for line in lines.teardown),
    ]


__all__ = ["environment_lines", "job_script"]
