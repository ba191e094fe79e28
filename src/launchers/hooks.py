"""The few services that values reach at run time, above them (docs/jobs.md, Layers).

A launcher is a value, yet ``launcher.executor()`` returns its executor, ``task.submit()``
records and submits a job, and the finder refreshes a Slurm group from ``scontrol``: each is
work of a higher layer. The values call ``services()``, an object with those operations;
``launchers.services`` (the user-API layer) builds it from the registry, the job module and the
Slurm query (``DEFAULT``), loaded when first needed. This module is the one place that imports
a higher layer, by name, and only once per process; a test may ``install`` other services.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .config.model import LaunchersConfig, SlurmGroup
    from .jobs.job import Job
    from .jobs.record import StateRecord
    from .jobs.task import Task
    from .launcher import Launcher
    from .runtime.executor import Executor
    from .slurm.testonly import Answer


class Services(Protocol):
    """What the values need of the layers above them."""

    def executor_for(self, launcher: Launcher) -> Executor:
        """The process's executor for ``launcher`` (``launchers.registry.executor_for``)."""
        ...

    def submit_task(
        self, task: Task, launcher: Launcher | None, *, force: bool, after: Sequence[object] | None
    ) -> Job:
        """Record ``task``'s job and queue its submission (``Task.submit``), once every job of
        ``after`` and of the task's job parameters allows it."""
        ...

    def attach(self, task: Task, directory: Path, launcher: Launcher) -> Job:
        """A job for ``task`` in ``directory`` of ``launcher``, submitted unless already there
        (the batch executor's pilots, outside any experiment)."""
        ...

    def adopt(self, directory: Path, record: StateRecord, launcher: Launcher) -> Job:
        """A job for a directory recorded by another process (a pilot found on disk)."""
        ...

    def refresh_group(self, group: SlurmGroup) -> SlurmGroup:
        """The Slurm group as ``scontrol`` describes it now (finder, ``query_slurm``)."""
        ...

    def estimate_starts(
        self, asks: Sequence[tuple[SlurmGroup, list[str]]], config: LaunchersConfig
    ) -> list[Answer]:
        """``sbatch --test-only`` of each (group, sbatch arguments), concurrently, each within
        ``config.estimate_timeout`` (the finder's ``earliest_start`` strategy)."""
        ...


_installed: Services | None = None


def install(services: Services | None) -> None:
    """Use ``services`` from now on (None: the default ones again, loaded on next use)."""
    global _installed
    _installed = services


def services() -> Services:
    """The installed services, else those of ``launchers.services`` (loaded on first use)."""
    found = _installed
    if found is None:
        # lazy: the one upward import of the package, by name (docs/jobs.md, Layers)
        found = importlib.import_module("launchers.services").DEFAULT
        install(found)
    return found


__all__ = ["Services", "install", "services"]
