"""``with experiment(workdir, launcher=None, *, rerun_failed=True) as xp:`` (docs/design/runtime.md §1).

The block's jobs are tracked; a normal exit waits for all of them and raises ``ExperimentFailed``
listing each unsuccessful job; an exception or Ctrl-C leaves at once without cancelling anything
(jobs keep running and a re-run re-attaches).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from ..errors import ExperimentFailed, LaunchersError
from ..runtime.core import current
from .depends import FAILED_KEY
from .progress import wait_with_progress
from .state import JobState

if TYPE_CHECKING:
    from ..launcher import Launcher
    from .job import Job


def current_experiment() -> Experiment | None:
    """The innermost active experiment, or None."""
    runtime = current()
    with runtime.experiments_lock:
        stack = runtime.experiments
        return cast(Experiment, stack[-1]) if stack else None


class Experiment:
    """A working directory, a default launcher and the jobs submitted while it is active."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        launcher: Launcher | None = None,
        *,
        rerun_failed: bool = True,
        progress: bool | None = None,
    ) -> None:
        if not isinstance(workdir, (str, os.PathLike)):
            raise LaunchersError(
                f"experiment: workdir must be a path, not {type(workdir).__name__}"
            )
        self.workdir = Path(workdir).expanduser().absolute()
        self.launcher = launcher
        self.rerun_failed = bool(rerun_failed)
        self.progress = progress
        self._jobs: dict[Path, Job] = {}
        self._lock = threading.Lock()

    @property
    def jobs(self) -> list[Job]:
        """Jobs submitted in this experiment, in submission order."""
        with self._lock:
            return list(self._jobs.values())

    def add(self, job: Job) -> None:
        """Track ``job`` (called by ``Task.submit``)."""
        with self._lock:
            self._jobs.setdefault(job.directory, job)

    def cancel(self) -> None:
        """Cancel every unfinished job of this experiment (one request per tracker cycle)."""
        for job in self.jobs:
            job.cancel()

    def wait(self, timeout: float | None = None) -> list[Job]:
        """Wait for every job (with live progress in a terminal); the unsuccessful ones."""
        wait_with_progress(self.jobs, enabled=self.progress, timeout=timeout)
        return [j for j in self.jobs if j.state is not JobState.COMPLETED]

    def leave(self) -> None:
        """Stop being the current experiment without waiting (jobs keep running; a later run
        re-attaches). ``with`` does this itself when its block raises."""
        _leave(self)

    def __enter__(self) -> Experiment:
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LaunchersError(
                f"experiment: cannot create {self.workdir}: {e.strerror}"
            ) from None
        runtime = current()
        with runtime.experiments_lock:
            runtime.experiments.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                failed = self.wait()
                if failed:
                    raise ExperimentFailed(_failure_message(failed), list[object](failed))
        finally:
            _leave(self)


def _leave(xp: Experiment) -> None:
    runtime = current()
    with runtime.experiments_lock:
        if xp in runtime.experiments:
            runtime.experiments.remove(xp)


def _failure_message(failed: list[Job]) -> str:
    # jobs ended because a dependency failed are listed apart (docs/design/runtime.md §15)
    skipped = [j for j in failed if j.record.extra.get(FAILED_KEY)]
    own = [j for j in failed if not j.record.extra.get(FAILED_KEY)]
    lines = [f"{len(own)} job(s) did not complete:"] if own else []
    lines += _failure_lines(own)
    if skipped:
        lines.append(f"{len(skipped)} job(s) did not run because a dependency failed:")
        lines += _failure_lines(skipped)
    return "\n".join(lines)


def _failure_lines(failed: list[Job]) -> list[str]:
    lines = []
    for job in failed:
        extra = []
        if job.reason:
            extra.append(job.reason)
        elif job.signal:
            extra.append(f"signal {job.signal}")
        elif job.exit_code is not None:
            extra.append(f"exit code {job.exit_code}")
        detail = f" ({'; '.join(extra)})" if extra else ""
        lines.append(f"  {job.task_id}: {job.state.value}{detail} [{job.directory}]")
    return lines


def experiment(
    workdir: str | os.PathLike[str],
    launcher: Any = None,
    *,
    rerun_failed: bool = True,
    progress: bool | None = None,
) -> Experiment:
    """An experiment context: ``with experiment(workdir, launcher) as xp: task.submit()``.

    ``progress``: live display while waiting (default: when stderr is a terminal)."""
    return Experiment(workdir, launcher, rerun_failed=rerun_failed, progress=progress)


__all__ = ["Experiment", "current_experiment", "experiment"]
