"""launchers: decide where a compute job should run, then run it there.

Public names (finder.md §6, slurm-runtime.md §1) are importable from the package root; they
are loaded lazily so that ``import launchers`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__ as __version__
from .errors import (
    AuthenticationError,
    ConfigurationError,
    ConnectorError,
    ExperimentFailed,
    JobFailedError,
    LauncherNotFoundError,
    LaunchersError,
    RequirementSyntaxError,
    ScriptError,
    SubmissionError,
    TaskError,
)
from .language.values import cpu, cuda_gpu, duration, gpu, mps

_LAZY = {
    "parse": "launchers.language.parser",
    "find_launcher": "launchers.finder.search",
    "load_config": "launchers.config.loader",
    "SlurmLauncher": "launchers.slurm.launcher",
    "DirectLauncher": "launchers.local.launcher",
    "UnicoreLauncher": "launchers.remote.unicore",
    "FirecrestLauncher": "launchers.remote.firecrest",
    "BatchLauncher": "launchers.batch.launcher",
    "command": "launchers.jobs.task",
    "task": "launchers.jobs.task",
    "Task": "launchers.jobs.task",
    "experiment": "launchers.jobs.experiment",
    "Job": "launchers.jobs.job",
    "JobState": "launchers.jobs.state",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'launchers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AuthenticationError",
    "ConfigurationError",
    "ConnectorError",
    "ExperimentFailed",
    "JobFailedError",
    "LauncherNotFoundError",
    "LaunchersError",
    "RequirementSyntaxError",
    "ScriptError",
    "SubmissionError",
    "TaskError",
    "cpu",
    "cuda_gpu",
    "duration",
    "gpu",
    "mps",
    *sorted(_LAZY),
]
