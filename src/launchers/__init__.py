"""launchers: decide where a compute job should run, then run it there.

The public names (docs/api.md) are importable from the package root. Those not needed by
``import launchers`` itself load on first use, so that the import stays cheap; type checkers
read them from the ``TYPE_CHECKING`` imports below, so they see each name as what it is.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # the names of _LAZY, for type checkers (at run time: __getattr__)
    from .batch.launcher import BatchLauncher as BatchLauncher
    from .config.loader import load_config as load_config
    from .finder.search import find_launcher as find_launcher
    from .jobs.depends import finished as finished
    from .jobs.experiment import experiment as experiment
    from .jobs.job import Job as Job
    from .jobs.state import JobState as JobState
    from .jobs.task import Task as Task
    from .jobs.task import command as command
    from .jobs.task import task as task
    from .language.parser import parse as parse
    from .local.launcher import DirectLauncher as DirectLauncher
    from .remote.firecrest import FirecrestLauncher as FirecrestLauncher
    from .remote.unicore import UnicoreLauncher as UnicoreLauncher
    from .slurm.launcher import SlurmLauncher as SlurmLauncher

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
    "finished": "launchers.jobs.depends",
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
