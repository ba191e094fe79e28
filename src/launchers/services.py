"""The default services of ``launchers.hooks``: what values reach at run time, bound to the
registry of kinds, the job module and the Slurm query (docs/jobs.md, Layers).

Each operation looks its function up when called, so a test that patches one of them (e.g.
``launchers.slurm.query.refresh_group``) is seen here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import registry
from .jobs import attach as submission
from .jobs import job as jobs

if TYPE_CHECKING:
    from .config.model import LaunchersConfig, SlurmGroup
    from .jobs.record import StateRecord
    from .jobs.task import Task
    from .launcher import Launcher
    from .runtime.executor import Executor
    from .slurm.testonly import Answer


class DefaultServices:
    """``launchers.hooks.Services`` of a normal process."""

    def executor_for(self, launcher: Launcher) -> Executor:
        return registry.executor_for(launcher)

    def submit_task(
        self, task: Task, launcher: Launcher | None, *, force: bool, after: Sequence[object] | None
    ) -> jobs.Job:
        return submission.submit_task(task, launcher, force=force, after=after)

    def attach(self, task: Task, directory: Path, launcher: Launcher) -> jobs.Job:
        return submission.attach(task, directory, launcher)

    def adopt(self, directory: Path, record: StateRecord, launcher: Launcher) -> jobs.Job:
        return jobs.Job(None, directory, record, launcher=launcher, executor=launcher.executor())

    def refresh_group(self, group: SlurmGroup) -> SlurmGroup:
        # lazy: the Slurm query (scontrol parsers, connectors) only for a finder on Slurm groups
        from .slurm import query

        return query.refresh_group(group)

    def estimate_starts(
        self, asks: Sequence[tuple[SlurmGroup, list[str]]], config: LaunchersConfig
    ) -> list[Answer]:
        # lazy: sbatch --test-only (connectors, the loop) only for the earliest_start strategy
        from .slurm import testonly

        return testonly.ask_all(asks, config)


DEFAULT = DefaultServices()

__all__ = ["DEFAULT", "DefaultServices"]
