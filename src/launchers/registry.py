"""The registry of launcher kinds: which module runs the jobs of each kind, and the one executor
per ``(kind, connector, cluster)`` of the process (``executor_for``).

A kind's module (``KIND_MODULES``) defines ``create_executor(launcher) -> Executor``, may define
``executor_key(launcher) -> tuple`` (default ``(kind, connector, cluster)``) and, to drive jobs
known only from their record (``launchers cancel``), ``executor_from_record(launcher_info,
record)``. The modules are imported by name when a kind is first used: a process that only runs
local jobs never loads the Slurm or the remote-site code.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import LaunchersError
from .runtime.core import current
from .runtime.executor import Executor

if TYPE_CHECKING:
    from .jobs.record import StateRecord
    from .launcher import Launcher

#: launcher kind -> module defining ``create_executor(launcher)``.
KIND_MODULES: dict[str, str] = {
    "local": "launchers.local.executor",
    "slurm": "launchers.slurm.kind",
    "unicore": "launchers.remote.unicore_executor",
    "firecrest": "launchers.remote.firecrest_kind",
    "ssh": "launchers.remote.ssh_executor",
    "batch": "launchers.batch.executor",
}


def default_executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """``(kind, connector, cluster)`` of a launcher (missing attributes read as None)."""
    group = getattr(launcher, "group", None)
    connector = getattr(launcher, "connector", None) or getattr(group, "connector", None) or "local"
    cluster = getattr(launcher, "cluster", None)
    if cluster is None:
        options = getattr(launcher, "options", None)
        cluster = getattr(options, "clusters", None) or getattr(options, "cluster", None)
    return (launcher.kind, connector, cluster)


def executor_for(launcher: Launcher) -> Executor:
    """The process-wide executor for ``launcher`` (one per kind, connector and cluster)."""
    kind = launcher.kind
    module_name = KIND_MODULES.get(kind)
    if module_name is None:
        raise LaunchersError(f"no executor for launcher kind {kind!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise LaunchersError(
            f"launchers of kind {kind!r} cannot run jobs: module {module_name} is missing ({e})"
        ) from None
    key_fn = getattr(module, "executor_key", default_executor_key)
    key = key_fn(launcher)
    return current().executor(key, lambda: module.create_executor(launcher))


def executor_for_record(record: StateRecord) -> Executor:
    """The executor for a job known only from its ``state.json`` (CLI ``cancel``, ``jobs``).

    The kind's module must define ``executor_from_record(launcher_info, record) -> Executor``
    (``launcher_info`` is the record's ``launcher`` mapping); it is cached like ``executor_for``."""
    info = dict(record.launcher)
    kind = str(info.get("kind", ""))
    module_name = KIND_MODULES.get(kind)
    if module_name is None:
        raise LaunchersError(f"job {record.task_id}: unknown launcher kind {kind!r} in its record")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise LaunchersError(
            f"job {record.task_id}: module {module_name} is missing ({e})"
        ) from None
    factory = getattr(module, "executor_from_record", None)
    if factory is None:
        raise LaunchersError(
            f"job {record.task_id}: launchers of kind {kind!r} cannot be driven from a record"
        )
    # Remote kinds keep their site in the record: jobs on two sites need two executors.
    site = record.extra.get(f"{kind}_site") if isinstance(record.extra, Mapping) else None
    site_key = json.dumps(site, sort_keys=True, default=str) if site is not None else None
    key = ("record", kind, info.get("connector"), record.cluster, site_key)
    return current().executor(key, lambda: factory(info, record))


def all_executors() -> list[Executor]:
    """Every executor created in this process."""
    runtime = current()
    with runtime.executors_lock:
        return list(runtime.executors.values())


__all__ = [
    "KIND_MODULES",
    "all_executors",
    "default_executor_key",
    "executor_for",
    "executor_for_record",
]
