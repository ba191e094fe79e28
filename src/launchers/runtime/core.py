"""``Runtime``: everything of launchers that lives as long as the process and makes behaviour
depend on its history: the background loop, the one executor per key, the one job per job
directory, the stack of experiments, the connectors, the payloads of remote jobs, the clock and
the executors' tuning values (timings a test shortens with ``tune``).

There is one current runtime (``current()``); ``reset()`` gives a test the state of a fresh
process (``fresh_runtime`` in tests/conftest.py) without starting one. Pure memos of values
(the configuration loader's cache, the Slurm query's cache) stay in their modules and are
cleared by ``reset()`` too.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .loopthread import LoopThread

T = TypeVar("T")

if TYPE_CHECKING:
    from ..connectors.base import Connector
    from ..protocols import Clock, JobHandle
    from .executor import Executor

#: Caches of pure values cleared by ``reset()``: (module, function), called when the module is
#: loaded (a module never loaded has nothing cached).
CACHE_CLEARERS = (
    ("launchers.config.loader", "clear_cache"),
    ("launchers.slurm.query", "clear_cache"),
)


class SystemClock:
    """The machine's clocks (``protocols.Clock``)."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class Runtime:
    """The process state of launchers (see the module docstring)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.loop = LoopThread()
        #: executor key -> executor (``launchers.registry``)
        self.executors: dict[Hashable, Executor] = {}
        self.executors_lock = threading.RLock()
        #: job directory -> the process's job of it (``launchers.jobs.job``)
        self.jobs: dict[Path, JobHandle] = {}
        self.jobs_lock = threading.RLock()
        #: the active experiments, innermost last (``launchers.jobs.experiment``)
        self.experiments: list[Any] = []
        self.experiments_lock = threading.Lock()
        #: (configuration file, name) -> connector (``launchers.connectors.registry``)
        self.connectors: dict[tuple[str | None, str], Connector] = {}
        self.connectors_lock = threading.Lock()
        #: job directory -> what a remote job was submitted with (``launchers.remote.outputs``)
        self.payloads: dict[Path, Any] = {}
        self.payloads_lock = threading.Lock()
        #: tuning class -> the value set with ``tune`` (others read their defaults)
        self.tunings: dict[type, Any] = {}
        #: the dependents held until their dependencies allow them (``jobs.graph``)
        self.dependencies: Any = None
        self.dependencies_lock = threading.Lock()

    def tuned(self, cls: type[T]) -> T:
        """The tuning value of type ``cls`` (e.g. ``slurm.settings.SlurmTuning``): the one set
        with ``tune``, else ``cls()``, its defaults."""
        found = self.tunings.get(cls)
        return cls() if found is None else found

    def tune(self, value: Any) -> None:
        """Use ``value`` as the tuning of its type from now on (executors created later read
        it; a test sets short timings this way)."""
        self.tunings[type(value)] = value

    def executor(self, key: Hashable, factory: Callable[[], Executor]) -> Executor:
        """The executor of ``key``, created by ``factory()`` on first use."""
        with self.executors_lock:
            found = self.executors.get(key)
            if found is None:
                found = self.executors[key] = factory()
            return found

    def executors_of(self, kind: str) -> list[Executor]:
        """Every executor created for launcher kind ``kind`` (its key starts with the kind)."""
        with self.executors_lock:
            return [e for k, e in self.executors.items() if _kind_of(k) == kind]

    def forget_executors(self, kind: str) -> None:
        """Drop the executors of ``kind`` without closing them: the next use creates new ones
        (tests that change the cluster's configuration under a running process)."""
        with self.executors_lock:
            for key in [k for k in self.executors if _kind_of(k) == kind]:
                del self.executors[key]

    def forget_job(self, directory: Path) -> None:
        """Forget the job of ``directory``, as a new process would not know it."""
        with self.jobs_lock:
            self.jobs.pop(Path(directory).absolute(), None)

    def forget_jobs(self) -> None:
        """Forget every job, as a new process would (their directories stay as they are)."""
        with self.jobs_lock:
            self.jobs.clear()

    def forget_connectors(self) -> None:
        """Drop the connectors without closing them (a fresh process state)."""
        with self.connectors_lock:
            self.connectors.clear()

    def reset(self) -> None:
        """The state of a fresh process: the loop stopped (a new one starts on next use), every
        table emptied, the value caches cleared. Nothing is closed or cancelled, as when a
        process exits; jobs keep running and a later submit re-attaches."""
        self.loop.stop()
        self.loop = LoopThread()
        with self.executors_lock:
            self.executors.clear()
        self.forget_jobs()
        with self.experiments_lock:
            self.experiments.clear()
        self.forget_connectors()
        with self.payloads_lock:
            self.payloads.clear()
        self.tunings.clear()
        with self.dependencies_lock:
            self.dependencies = None
        for module_name, function in CACHE_CLEARERS:
            module = sys.modules.get(module_name)
            if module is not None:
                getattr(module, function)()


def _kind_of(key: Hashable) -> str | None:
    """The launcher kind an executor key names: ``("slurm", ...)``, or
    ``("record", "slurm", ...)`` for an executor rebuilt from a record."""
    if not isinstance(key, tuple) or not key:
        return None
    if key[0] == "record" and len(key) > 1:
        return str(key[1])
    return str(key[0])


_current = Runtime()


def current() -> Runtime:
    """The process's runtime."""
    return _current


__all__ = ["CACHE_CLEARERS", "Runtime", "SystemClock", "current"]
