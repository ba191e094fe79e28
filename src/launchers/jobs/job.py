"""``Job``: one task's job in this process (docs/design/runtime.md §1, §2), and the submit/re-attach
decision taken under the job directory's ``.lock``.

A ``Job`` owns the in-memory ``StateRecord`` and is the only writer of ``state.json``; executors
change it with ``apply(StateUpdate)`` from the loop thread, user threads read it and ``wait``.
There is one ``Job`` per job directory per process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import JobFailedError, LaunchersError
from ..fsutil import directory_lock, fsync_file, read_json
from ..jobs.update import StateUpdate
from ..registry import executor_for_record
from ..runtime.core import current
from .depends import FAILED_KEY, RECORD_KEY, Edge
from .graph import SUBMIT, graph
from .proc import ProcessId
from .record import (
    JobPaths,
    StateRecord,
    archive_attempt,
    now_iso,
    read_record,
    write_record,
)
from .state import JobState
from .task import KIND_COMMAND, Task, decode_value

if TYPE_CHECKING:
    from ..launcher import Launcher
    from ..runtime.executor import Executor

log = logging.getLogger("launchers.jobs")

STDERR_TAIL_LINES = 20


class Job:
    """A submitted task: its directory, record and state; ``wait``, ``cancel``, ``result``."""

    #: Marks a job for the values that cannot import this module (``jobs.depends.is_job``).
    __launchers_job__ = True

    def __init__(
        self,
        task: Task | None,
        directory: Path,
        record: StateRecord,
        *,
        launcher: Launcher | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.task = task
        self.directory = Path(directory)
        self.paths = JobPaths(self.directory)
        self.launcher = launcher
        self.executor = executor
        self._record = record
        self._cond = threading.Condition()
        #: Set by ``cancel()``; executors read it to report "cancelled on request".
        self.cancel_requested = False
        #: True while another live process owns the submission (we only re-read state.json).
        self.observer = False
        #: Executor-private scratch space (handles, counters); never persisted.
        self.runtime: dict[str, Any] = {}
        #: Files written in place but not fsynced yet (``params.json``, ``job.sh``): made durable,
        #: with the directory, by the next record write, before anything reaches a scheduler.
        self._unsynced: list[Path] = []
        #: the record in memory is newer than state.json (``apply(write=False)``)
        self._unwritten = False
        #: Called (from any thread) with this job after each change of state: its dependents.
        self._watchers: list[Callable[[Job], None]] = []
        #: The jobs this one waits for, with their edges (docs/design/runtime.md §15).
        self.dependencies: list[tuple[Edge, Job]] = []

    # -- read-only view -----------------------------------------------------------------------

    @property
    def record(self) -> StateRecord:
        """The current state record (an immutable value)."""
        return self._record

    @property
    def task_id(self) -> str:
        return self._record.task_id

    @property
    def state(self) -> JobState:
        return self._record.state

    @property
    def native_id(self) -> str | None:
        """The scheduler's id: ``"123"``, ``"123_4"``, or a pid for the direct launcher."""
        return self._record.native_id

    @property
    def attempt(self) -> int:
        return self._record.attempt

    @property
    def pilot(self) -> str | None:
        """Batched jobs: the native id of the pilot whose runner claimed the task (docs/design/pilots.md §3.1)."""
        value = self._record.extra.get("pilot")
        return None if value is None else str(value)

    @property
    def reason(self) -> str | None:
        return self._record.reason

    @property
    def exit_code(self) -> int | None:
        return self._record.exit_code

    @property
    def signal(self) -> int | None:
        return self._record.signal

    @property
    def stdout_path(self) -> Path:
        return self.paths.stdout

    @property
    def stderr_path(self) -> Path:
        return self.paths.stderr

    @property
    def name(self) -> str:
        """The task's name (the directory's parent)."""
        return self.directory.parent.name

    def __repr__(self) -> str:
        nid = f" {self.native_id}" if self.native_id else ""
        return f"<Job {self.task_id} {self.state.value}{nid}>"

    # -- changes (executors, tracker) -----------------------------------------------------------

    def watch(self, callback: Callable[[Job], None]) -> None:
        """Call ``callback(self)`` after every change of state (dependents, docs/design/runtime.md §15)."""
        with self._cond:
            self._watchers.append(callback)

    def _notify(self) -> None:
        with self._cond:
            watchers = list(self._watchers)
        for callback in watchers:
            try:
                callback(self)
            except Exception as e:  # a dependent's trouble must not fail this job's record
                log.error("%s: a watcher failed: %s", self.task_id, e, exc_info=True)

    def apply(self, update: StateUpdate, *, sync: bool = True, write: bool = True) -> bool:
        """Apply ``update``, write ``state.json`` if anything changed, wake waiters.

        A final state is never left for a non-final one (a new attempt uses ``begin_attempt``).
        ``sync=False`` (a waiting job's reason, docs/design/runtime.md §15): renamed into place
        without fsync, made durable by the next record write, which always precedes sbatch.
        ``write=False`` (a waiting dependent's newer reason, the state unchanged): in memory
        only, written by the next record write or ``write_pending``.
        Returns True when the state changed."""
        with self._cond:
            rec = self._record
            new_state = update.state
            if new_state is not None and rec.state.is_final and not new_state.is_final:
                return False
            if rec.state.is_final and rec.extra.get(FAILED_KEY):
                return False  # ended for a dependency: what Slurm says of it later changes nothing
            if new_state is not None and new_state.is_final and new_state is not rec.state:
                settled = self._settled_elsewhere(update)
                if settled is not None:
                    if isinstance(settled, StateRecord):
                        self._record = settled
                        self._cond.notify_all()
                        return True
                    update = settled
                    new_state = update.state
            changes = update.changes()
            if changes.get("reason") == "":
                changes["reason"] = None  # "" in an update clears the reason
            if new_state is not None and new_state.is_final and new_state is not rec.state:
                changes.setdefault("ended_at", rec.ended_at)
            if (
                new_state is JobState.RUNNING
                and rec.started_at is None
                and "started_at" not in changes
            ):
                changes["started_at"] = now_iso()
            if new_state is not None and new_state.is_final and changes.get("ended_at") is None:
                changes["ended_at"] = now_iso()
            same = all(getattr(rec, k) == v for k, v in changes.items() if k != "extra")
            if update.extra:
                same = same and all(rec.extra.get(k) == v for k, v in update.extra.items())
            if (new_state is None or new_state is rec.state) and same and not update.detail:
                return False
            new = rec.transition(new_state, update.detail, **changes)
            if write or new.state is not rec.state:
                self._write(new, sync=sync)
            else:
                self._record = new
                self._unwritten = True
            changed = new.state is not rec.state
            self._cond.notify_all()
        if changed:
            log.debug(
                "%s: %s -> %s %s", self.task_id, rec.state.value, new.state.value, update.detail
            )
            self._notify()
        return changed

    def _settled_elsewhere(self, update: StateUpdate) -> StateRecord | StateUpdate | None:
        """Before recording a final state, look at ``state.json``: another process (a second
        tracker, ``launchers cancel``) may have recorded the end, or asked for a cancel. A cancel
        asked elsewhere turns an end it caused (a signal, no exit record) into ``CANCELLED``; a
        job that failed on its own with an exit code, or that Slurm ended otherwise, keeps its
        real state (docs/design/runtime.md §7)."""
        new_state = update.state
        try:
            disk = read_record(self.directory)
        except LaunchersError:
            return None
        if disk is None or disk.attempt != self._record.attempt:
            return None
        if disk.state.is_final and disk.state is not self._record.state:
            return disk
        if disk.extra.get("cancel_requested") == disk.attempt and (
            new_state is JobState.LOST
            or (
                new_state is JobState.FAILED
                and (update.signal is not None or update.exit_code is None)
            )
        ):
            self.cancel_requested = True
            return StateUpdate(
                state=JobState.CANCELLED,
                detail="cancelled by another process",
                reason="cancelled on request",
            )
        return None

    def mark_cancel_requested(self) -> None:
        """Record in ``state.json`` that a cancel was asked (seen by every process tracking it)."""
        with directory_lock(self.paths.lock), self._cond:
            disk = read_record(self.directory) or self._record
            if disk.state.is_final:
                self._record = disk
                return
            self._write(
                disk.transition(detail="cancel requested", extra={"cancel_requested": disk.attempt})
            )
            self.cancel_requested = True

    def begin_attempt(self, cause: str = "") -> None:
        """Archive this attempt's outputs to ``attempts/N/`` and start attempt N+1 (WAITING)."""
        with self._cond:
            archive_attempt(self.directory, self._record.attempt)
            self._write(
                self._record.next_attempt(cause).transition(
                    extra={"owner": ProcessId.current().to_json()}
                )
            )
            self.cancel_requested = False
            self._cond.notify_all()
        self._notify()

    def replace_record(self, record: StateRecord, *, write: bool = False) -> None:
        """Adopt ``record`` (read from disk by an observer, or rebuilt); wakes waiters."""
        with self._cond:
            before = self._record.state
            if write:
                self._write(record)
            else:
                self._record = record
            self._cond.notify_all()
        if record.state is not before:
            self._notify()

    def refresh(self) -> bool:
        """Re-read ``state.json`` (observers); True when the state changed."""
        try:
            rec = read_record(self.directory)
        except LaunchersError:
            return False
        if rec is None or rec == self._record:
            return False
        before = self._record.state
        self.replace_record(rec)
        return rec.state is not before

    def write_pending(self) -> bool:
        """Write the record kept in memory by ``apply(write=False)`` (without fsync), unless
        another process recorded an end or a cancel request meanwhile (``launchers cancel``:
        its mark is kept, the caller's check of the record sees it). True when written."""
        if not self._unwritten:  # the common case: no lock file opened
            return False
        with directory_lock(self.paths.lock), self._cond:
            if not self._unwritten:
                return False
            try:
                disk = read_record(self.directory)
            except LaunchersError:
                disk = None
            if (
                disk is not None
                and disk.attempt == self._record.attempt
                and (disk.state.is_final or disk.extra.get("cancel_requested") == disk.attempt)
            ):
                return False
            self._write(self._record, sync=False)
            return True

    def defer_sync(self, path: Path) -> None:
        """``path`` was written atomically without fsync: make it durable with the next record."""
        with self._cond:
            self._unsynced.append(path)

    def _write(self, record: StateRecord, *, sync: bool = True) -> None:
        # Every record is fsynced and renamed; the directory is fsynced for SUBMITTING only
        # (docs/design/runtime.md §4), which also makes the earlier renames in it durable. A later
        # rename lost in a power cut leaves an older record, which reconciliation handles.
        # Files written before (params.json, the WAITING record, job.sh) without fsync are
        # fsynced first, so one group of fsyncs precedes sbatch instead of one per file.
        sync_dir = record.state is JobState.SUBMITTING
        self._unwritten = False
        if not sync and not sync_dir:  # the next synced write makes this one durable too
            write_record(self.directory, record, sync=False)
            self._record = record
            return
        if self._unsynced:
            for path in self._unsynced:
                with contextlib.suppress(FileNotFoundError):
                    fsync_file(path)
            self._unsynced = []
            sync_dir = True
        write_record(self.directory, record, sync_dir=sync_dir)
        self._record = record

    # -- user API -----------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> JobState:
        """Block until the job is final and return its state; ``TimeoutError`` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._record.state.is_final:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"job {self.task_id} still {self._record.state.value} after {timeout} s"
                    )
                self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
            return self._record.state

    def cancel(self) -> None:
        """Ask for cancellation (sent with the tracker's next cycle); no-op once final."""
        if self.state.is_final:
            return
        self.mark_cancel_requested()
        if self.state.is_final or graph().cancel(self):
            return
        if self.native_id is None and self._record.extra.get(RECORD_KEY):
            # held for its dependencies by another process (docs/design/runtime.md §15), which
            # ends it on seeing the request: follow the record until then
            self.observer = True
        if self.executor is None:
            self.executor = executor_for_record(self._record)
        self.executor.tracker.request_cancel(self)

    def take_over(self) -> str | None:
        """Observers whose owner died: claim the submission if still needed (``take_over``); a
        job with dependencies is then held until they allow it (None: nothing to enqueue)."""
        action = take_over(self)
        if action == "submit" and self.dependencies:
            graph().hold(self, self.dependencies, SUBMIT)
            return None
        return action

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        """The last ``lines`` lines of ``job.err`` ("" when absent)."""
        try:
            with open(self.paths.stderr, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def result(self, timeout: float | None = None) -> Any:
        """Wait, then the return value (``0`` for a command); ``JobFailedError`` unless COMPLETED."""
        state = self.wait(timeout)
        rec = self._record
        if state is not JobState.COMPLETED:
            tail = self.stderr_tail()
            err = read_json(self.paths.error) if self.paths.error.exists() else None
            parts = [f"job {self.task_id} ended {state.value}"]
            if rec.exit_code is not None:
                parts.append(f"exit code {rec.exit_code}")
            if rec.signal:
                parts.append(f"signal {rec.signal}")
            if rec.reason:
                parts.append(f"reason: {rec.reason}")
            if isinstance(err, dict) and err.get("type"):
                parts.append(f"raised {err.get('type')}: {err.get('message')}")
            message = ", ".join(parts)
            if tail:
                message += f"\nlast lines of {self.paths.stderr}:\n{tail}"
            raise JobFailedError(
                message,
                state=state,  # a JobState (a str): compares equal to its name too
                exit_code=rec.exit_code,
                signal=rec.signal,
                reason=rec.reason,
                stderr_tail=tail,
            )
        kind = self.task.kind if self.task is not None else _read_kind(self.paths)
        if kind == KIND_COMMAND:
            return 0
        if self.paths.result_json.exists():
            try:
                return decode_value(json.loads(self.paths.result_json.read_text(encoding="utf-8")))
            except ValueError as e:
                raise LaunchersError(f"{self.paths.result_json}: unreadable result: {e}") from None
        if self.paths.result_pickle.exists():
            with open(self.paths.result_pickle, "rb") as f:
                return pickle.load(f)
        raise LaunchersError(
            f"job {self.task_id} completed but left no result file in {self.directory}"
        )


def _read_kind(paths: JobPaths) -> str:
    data = read_json(paths.params)
    return str(data.get("kind", "")) if isinstance(data, dict) else ""


# -- the per-process registry and the submit/re-attach decision ---------------------------------


def _owner_alive(record: StateRecord) -> bool:
    owner = ProcessId.from_json(record.extra.get("owner"))
    if owner is None:
        return False
    if owner.pid == os.getpid() and owner.start == ProcessId.current().start:
        return False  # ourselves: a previous Job object of this process, take it over
    return owner.is_alive()


def owner_alive(record: StateRecord) -> bool:
    """Whether another live process owns (follows) the job of ``record``."""
    return _owner_alive(record)


def registered_job(directory: Path) -> Job | None:
    """The ``Job`` of ``directory`` in this process, if any."""
    runtime = current()
    with runtime.jobs_lock:
        return cast("Job | None", runtime.jobs.get(directory))


def take_over(job: Job) -> str | None:
    """For an observer whose owner died: under ``.lock``, claim the submission if still needed.

    Returns "submit", "reconcile" or None (someone else progressed; keep tracking)."""
    with directory_lock(job.paths.lock):
        record = read_record(job.directory)
        if record is None:
            return None
        if record.state not in (JobState.WAITING, JobState.SUBMITTING) or _owner_alive(record):
            job.replace_record(record)
            return None
        record = record.transition(extra={"owner": ProcessId.current().to_json()})
        job.replace_record(record, write=True)
        job.observer = False
        return "submit" if record.state is JobState.WAITING else "reconcile"


def load_job(directory: str | os.PathLike[str]) -> Job:
    """A ``Job`` for an existing directory (CLI): the registered one, else read from disk."""
    path = Path(directory).absolute()
    job = registered_job(path)
    if job is not None:
        return job
    record = read_record(path)
    if record is None:
        raise LaunchersError(f"{path}: not a job directory (no state.json)")
    return Job(None, path, record)


__all__ = ["Job", "load_job", "owner_alive", "registered_job", "take_over"]
