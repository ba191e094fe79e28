"""The Slurm kind as the registry sees it (``launchers.registry``): one executor per connector,
cluster and tracking settings (``executor_key``), created by ``create_executor``, or rebuilt
from a job's record for ``launchers status``/``cancel`` (``executor_from_record``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config.model import Position, SlurmGroup
from .executor import SlurmExecutor
from .launcher import SlurmLauncher
from .settings import Placement

if TYPE_CHECKING:
    from ..launcher import Launcher


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """``("slurm", connector, cluster)``, plus the group's ``status_source`` and ``poll_max``
    when it sets them: those shape the one tracker of an executor, so groups that disagree on
    them get executors of their own (the other group settings are read per job)."""
    return Placement.of(launcher).key()


def create_executor(launcher: Launcher) -> SlurmExecutor:
    """The executor for ``launcher``'s connector and cluster (called once per key)."""
    return SlurmExecutor(launcher)


def executor_from_record(info: Mapping[str, Any], record: Any) -> SlurmExecutor:
    """An executor for a job known only from its ``state.json`` (CLI ``cancel``, ``jobs``)."""
    group = SlurmGroup(
        id=info.get("group"),
        connector=str(info.get("connector") or "local"),
        position=Position(file=info.get("config")),
    )
    ex = SlurmExecutor(SlurmLauncher(group=group))
    ex.slurm.learn(str(record.cluster) if record.cluster else None)
    return ex


__all__ = ["create_executor", "executor_from_record", "executor_key"]
