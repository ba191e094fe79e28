"""What the monitor does to jobs, through the jobs layer as the command line does: cancel (as
``launchers cancel``: the cancel is marked in ``state.json`` and sent by the job's executor,
one request per tracker cycle) and ``--track`` (the unfinished jobs that no live process
follows are followed by their executors' trackers, one scheduler query per poll cycle per
executor, and their records kept true).

A job a live process owns (the experiment script still running) is left to it; a job whose
owner is gone is tracked from then on. Jobs that were never submitted (no native id) are never
taken over: the monitor submits nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import LaunchersError
from ..jobs.job import Job, registered_job
from ..jobs.proc import ProcessId
from ..jobs.record import read_record
from ..registry import executor_for_record
from ..runtime.core import current
from .index import ExperimentState, Index
from .model import is_final

log = logging.getLogger("launchers.monitor")

#: How often unfinished jobs that a live process owned are checked again (``--track``).
OWNER_CHECK = 5.0


def job_for(directory: Path) -> Job:
    """The process's ``Job`` of ``directory``: the registered one while it still describes the
    attempt on disk, else a new one read from ``state.json`` and registered."""
    path = Path(directory).absolute()
    disk = read_record(path)
    if disk is None:
        raise LaunchersError(f"{path}: not a job directory (no state.json)")
    runtime = current()
    with runtime.jobs_lock:
        job = registered_job(path)
        if job is not None and (
            job.attempt != disk.attempt or (job.state.is_final and not disk.state.is_final)
        ):
            job = None  # a new attempt started elsewhere: follow that one
        if job is None:
            job = Job(None, path, disk)
            runtime.jobs[path] = job
        return job


def owner_alive(owner: Any) -> bool:
    """Whether the process recorded as a job's owner still runs (another host: assumed so)."""
    pid = ProcessId.from_json(owner)
    return pid is not None and pid.is_alive()


def cancel(directories: Sequence[Path]) -> list[dict[str, Any]]:
    """Cancel the jobs of ``directories`` (the unfinished ones); what was done for each.
    Blocking: the server calls it in a thread."""
    out = []
    for directory in directories:
        try:
            job = job_for(directory)
            if job.state.is_final:
                out.append({"task_id": job.task_id, "state": job.state.value, "requested": False})
                continue
            job.cancel()
            out.append({"task_id": job.task_id, "state": job.state.value, "requested": True})
        except LaunchersError as e:
            out.append({"directory": str(directory), "error": str(e), "requested": False})
    return out


class Tracking:
    """``--track``: follows the unfinished, submitted jobs that no live process owns."""

    def __init__(self, index: Index) -> None:
        self.index = index
        #: job directory -> why it could not be tracked (shown once in the log)
        self.problems: dict[Path, str] = {}
        self.tracked: set[Path] = set()
        self._lock = threading.Lock()
        self._last_check = 0.0
        index.listeners.append(self.changed)

    def changed(self, state: ExperimentState, keys: list[str]) -> None:
        """Rows changed (the index's listener, on the server's loop): consider those jobs, in a
        thread (reading records, loading an executor's module)."""
        candidates = self._candidates(state, keys)
        if candidates:
            threading.Thread(target=self._consider, args=(candidates,), daemon=True).start()

    def check_all(self) -> None:
        """Consider every unfinished job again (owners may have ended); called on the server's
        loop, acts at most every ``OWNER_CHECK`` s."""
        now = time.monotonic()
        if now - self._last_check < OWNER_CHECK:
            return
        self._last_check = now
        self.untrack_final()
        candidates = [
            c for s in self.index.experiments.values() for c in self._candidates(s, s.unfinished())
        ]
        if candidates:
            threading.Thread(target=self._consider, args=(candidates,), daemon=True).start()

    def _candidates(self, state: ExperimentState, keys: list[str]) -> list[tuple[Path, Any]]:
        """The submitted, unfinished jobs among ``keys`` not tracked yet, with their owners."""
        out = []
        with self._lock:
            for key in keys:
                row = state.rows.get(key)
                if row is None or is_final(str(row.get("state"))) or not row.get("native_id"):
                    continue
                directory = state.exp.jobs / key
                if directory not in self.tracked and directory not in self.problems:
                    out.append((directory, state.owners.get(key)))
        return out

    def _consider(self, candidates: list[tuple[Path, Any]]) -> None:
        for directory, owner in candidates:
            if not owner_alive(owner):
                self.track(directory)

    def track(self, directory: Path) -> None:
        """Hand the job of ``directory`` to its executor's tracker (once)."""
        with self._lock:
            if directory in self.tracked:
                return
            self.tracked.add(directory)
        try:
            job = job_for(directory)
            if job.state.is_final or not job.native_id:
                with self._lock:
                    self.tracked.discard(directory)
                return
            if job.executor is None:
                job.executor = executor_for_record(job.record)
            job.executor.track(job)
        except Exception as e:  # a kind that cannot be driven from its record: said once
            with self._lock:
                self.tracked.discard(directory)
                self.problems[directory] = str(e)
            log.warning("--track: cannot follow %s: %s", directory, e)
            return
        kind = job.record.launcher.get("kind")
        log.info("--track: following %s (%s job %s)", job.task_id, kind, job.native_id)

    def untrack_final(self) -> None:
        """Forget the tracked jobs that ended (their trackers dropped them already)."""
        with self._lock:
            for directory in list(self.tracked):
                job = registered_job(directory)
                if job is None or job.state.is_final:
                    self.tracked.discard(directory)


__all__ = ["OWNER_CHECK", "Tracking", "cancel", "job_for", "owner_alive"]
