"""The dependents of this process (docs/design/runtime.md §15): a job with dependencies is held
here, ``WAITING``, until ``jobs.depends.decide_dependent`` says submit (then it goes to its
executor, with ``--dependency`` when Slurm can hold it itself) or end without running.

Nothing is polled per edge: every ``Job`` tells its watchers when its state changes (the tracker
already learns it), and only that job's dependents are decided again. The results of the
dependencies a dependent's function receives are written to its ``inputs.json`` before it is
submitted (or, for a Slurm dependency it waits for natively, the dependency's directory there).
"""

from __future__ import annotations

import base64
import collections
import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import LaunchersError
from ..fsutil import atomic_write_json, read_json
from ..runtime.core import current
from .depends import (
    FAILED_KEY,
    INPUTS,
    NATIVE_KEY,
    WAITING_FOR,
    DepState,
    Edge,
    End,
    Submit,
    Wait,
    decide_tally,
    held_by_slurm,
    satisfied,
    slurm_dependency,
)
from .record import RESULT_JSON, RESULT_PICKLE, read_record
from .state import JobState
from .update import StateUpdate

if TYPE_CHECKING:
    from .job import Job

log = logging.getLogger("launchers.jobs")

#: What the graph does with a held job: wait and submit it, or only follow a job already
#: submitted (natively held by Slurm, or re-attached) to end it when a dependency fails.
SUBMIT = "submit"
FOLLOW = "follow"
#: How often the records of held jobs are looked at for another process's cancel (seconds).
RECORD_CHECK = 1.0


@attrs.define
class _Held:
    job: Job
    deps: list[tuple[Edge, Job]]
    action: str
    #: each dependency's index in ``deps``, by its directory
    where: dict[Path, int] = attrs.field(factory=dict)
    #: the states of the dependencies not satisfied yet, by index: a satisfied one is final and
    #: stays so, and leaves the decision unchanged; each change updates its own entry only
    open: dict[int, DepState] = attrs.field(factory=dict)
    #: the indices of the open ones Slurm cannot hold (the dependent waits here for them)
    waiting: set[int] = attrs.field(factory=set)


class Graph:
    """The dependents held in this process, indexed by their dependencies' directories."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._held: dict[Path, _Held] = {}
        self._dependents: dict[Path, set[Path]] = {}
        self._watched: set[int] = set()
        self._queue: collections.deque[Path] = collections.deque()
        self._draining = False
        self._watcher: threading.Thread | None = None
        self._seen: dict[Path, tuple[int, int, int]] = {}

    def hold(self, job: Job, deps: list[tuple[Edge, Job]], action: str = SUBMIT) -> None:
        """Hold ``job`` until its dependencies ``deps`` allow it (``SUBMIT``), or follow a job
        already submitted (``FOLLOW``); decided at once, then at each dependency's change."""
        with self._lock:
            where = {Path(dep.directory): i for i, (_edge, dep) in enumerate(deps)}
            self._held[job.directory] = _Held(job, deps, action, where)
            for _edge, dep in deps:
                self._dependents.setdefault(dep.directory, set()).add(job.directory)
                if id(dep) not in self._watched:
                    self._watched.add(id(dep))
                    dep.watch(self._changed)
        self._decide(job.directory)
        if action == SUBMIT:
            self._watch_records()

    def holds(self, job: Job) -> bool:
        """Whether ``job`` waits here, not submitted yet."""
        with self._lock:
            held = self._held.get(job.directory)
            return held is not None and held.job is job and held.action == SUBMIT

    def cancel(self, job: Job) -> bool:
        """Cancel a held job before it is submitted: ``CANCELLED`` at once; False when it is
        not held (its executor cancels it)."""
        with self._lock:
            held = self._held.get(job.directory)
            if held is None or held.job is not job or held.action != SUBMIT:
                return False
            self._drop(job.directory)
        job.apply(
            StateUpdate(state=JobState.CANCELLED, detail="cancel", reason="cancelled on request")
        )
        return True

    def waiting_for(self, job: Job) -> list[Job]:
        """The dependencies ``job`` still waits for (for the CLI and the progress display)."""
        with self._lock:
            held = self._held.get(job.directory)
            deps = list(held.deps) if held is not None else []
        return [d for _e, d in deps if not d.state.is_final]

    # -- reacting to changes --------------------------------------------------------------------

    def _watch_records(self) -> None:
        """While jobs are held here, look every ``RECORD_CHECK`` s at their ``state.json``
        (one stat each; read only when it changed): ``launchers cancel`` in another process."""
        with self._lock:
            if self._watcher is not None and self._watcher.is_alive():
                return
            self._watcher = threading.Thread(
                target=self._check_records, name="launchers-dependents", daemon=True
            )
            self._watcher.start()

    def _check_records(self) -> None:
        while True:
            time.sleep(RECORD_CHECK)
            with self._lock:
                held = [h.job for h in self._held.values() if h.action == SUBMIT]
                if not held:
                    self._watcher = None
                    return
            for job in held:
                try:
                    st = job.paths.state.stat()
                except OSError:
                    continue
                # every record write is a new file (renamed into place): its inode, time and
                # size tell a change even within one tick of the file system's clock
                seen = (st.st_ino, st.st_mtime_ns, st.st_size)
                if self._seen.get(job.directory) != seen:
                    self._seen[job.directory] = seen
                    if _cancelled_elsewhere(job):
                        with self._lock:
                            self._drop(job.directory)
                        continue
                # the newest reason, at most once per RECORD_CHECK s (read again next time: a
                # request written just after it is seen then)
                job.write_pending()

    def _changed(self, dep: Job) -> None:
        """A watched job changed state: decide its dependents again (any thread; the first
        one drains the queue, so that a chain of ends needs no recursion)."""
        with self._lock:
            self._queue.append(dep.directory)
            if self._draining:
                return
            self._draining = True
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                directory = self._queue.popleft()
                dependents = list(self._dependents.get(directory, ()))
            for dependent in dependents:
                try:
                    self._decide(dependent, directory)
                except Exception as e:  # one bad dependent must not stop the others
                    log.error("%s: dependency handling failed: %s", dependent, e, exc_info=True)

    def _drop(self, directory: Path) -> None:
        self._seen.pop(directory, None)
        held = self._held.pop(directory, None)
        if held is None:
            return
        for _edge, dep in held.deps:
            dependents = self._dependents.get(dep.directory)
            if dependents is not None:
                dependents.discard(directory)
                if not dependents:
                    del self._dependents[dep.directory]

    def _decide(self, directory: Path, changed: Path | None = None) -> None:
        """Decide the held job of ``directory`` again after its dependency ``changed`` changed
        state (None: read all of them): only that dependency's state is read."""
        with self._lock:
            held = self._held.get(directory)
            if held is None:
                return
            job, deps, action = held.job, held.deps, held.action
            if changed is None:
                indices: Iterable[int] = range(len(deps))
            else:
                i = held.where.get(changed)
                indices = () if i is None else (i,)
            states = []
            for i in indices:
                edge, dep = deps[i]
                st = DepState(edge, dep.state, dep.native_id if _native(job, dep) else None)
                states.append(st)
                if satisfied(edge, st.state):
                    held.open.pop(i, None)
                    held.waiting.discard(i)
                    continue
                held.open[i] = st
                if held_by_slurm(st):
                    held.waiting.discard(i)
                else:
                    held.waiting.add(i)
            decision = decide_tally(states, held.open, held.waiting)
            all_final = not held.open
        if isinstance(decision, End):
            with self._lock:
                self._drop(directory)
            _end(job, decision)
            return
        if action == FOLLOW:
            if all_final or job.state.is_final:
                with self._lock:
                    self._drop(directory)
            return
        if job.state.is_final:  # cancelled meanwhile
            with self._lock:
                self._drop(directory)
            return
        if isinstance(decision, Wait):
            # a reason only: no fsync (the record before sbatch is fsynced anyway); the first
            # one is written at once, a newer one each RECORD_CHECK s (_check_records): a
            # dependent of N jobs is decided again at each of their changes, and writing its
            # record (N edges) each time would cost O(N^2) per graph
            first = not (job.reason or "").startswith(WAITING_FOR)
            job.apply(
                StateUpdate(state=JobState.WAITING, reason=decision.reason), sync=False, write=first
            )
            return
        if _cancelled_elsewhere(job):  # asked in another process: never submitted
            with self._lock:
                self._drop(directory)
            return
        assert isinstance(decision, Submit)
        with self._lock:
            current_held = self._held.get(directory)
            if current_held is None or current_held.action != SUBMIT:
                return  # decided by another thread
            if decision.native:
                current_held.action = FOLLOW  # Slurm holds it now; a failure still ends it here
            else:
                self._drop(directory)
        _submit(job, deps, decision)


def _native(job: Job, dep: Job) -> bool:
    """Whether Slurm itself can hold ``job`` on ``dep``: the same executor (kind, connector,
    cluster), one that supports ``--dependency``, the dependency submitted by us and not
    resumable."""
    ex = job.executor
    return (
        ex is not None
        and dep.executor is ex
        and bool(getattr(ex, "native_dependencies", False))
        and dep.native_id is not None
        and not dep.observer
        # a resumable dependency may come back as a new Slurm job (§9): Slurm's afterok on the
        # old id would cancel the dependent; it waits in the client instead
        and not (dep.task is not None and dep.task.resumable)
    )


def _cancelled_elsewhere(job: Job) -> bool:
    """Whether another process (``launchers cancel``) ended or asked to cancel this held job:
    its ``state.json`` says so. Then it ends here too, and is never submitted."""
    try:
        disk = read_record(job.directory)
    except LaunchersError:
        return False
    if disk is None or disk.attempt != job.attempt:
        return False
    if disk.state.is_final:
        job.replace_record(disk)
        return True
    if disk.extra.get("cancel_requested") == disk.attempt:
        job.cancel_requested = True
        job.apply(
            StateUpdate(state=JobState.CANCELLED, detail="cancel", reason="cancelled on request")
        )
        return True
    return False


def _end(job: Job, decision: End) -> None:
    """End ``job`` without running, naming the dependency (also a job Slurm already cancelled
    for it: its reason becomes ours)."""
    if job.state.is_final and (
        job.state is not decision.state or job.cancel_requested or job.record.extra.get(FAILED_KEY)
    ):
        return
    job.apply(
        StateUpdate(
            state=decision.state,
            detail="dependency",
            reason=decision.reason,
            extra={FAILED_KEY: decision.dependency},
        )
    )
    log.info("%s: %s", job.task_id, decision.reason)


def _submit(job: Job, deps: list[tuple[Edge, Job]], decision: Submit) -> None:
    """Write the inputs, record the native dependency, and hand the job to its executor."""
    native = {edge.directory for edge, _id in decision.native}
    inputs: dict[str, Any] = {}
    for edge, dep in deps:
        if edge.input:
            inputs[edge.task_id] = _input_of(dep, native=edge.directory in native)
    if inputs:
        path = job.directory / INPUTS
        atomic_write_json(path, inputs, sync=False)
        job.defer_sync(path)
    text = slurm_dependency(decision.native) if decision.native else None
    job.apply(
        StateUpdate(
            detail="dependencies " + ("held by Slurm: " + text if text else "satisfied"),
            reason="",
            extra={NATIVE_KEY: text},
        ),
        sync=False,  # made durable by the SUBMITTING record, fsynced before sbatch
    )
    assert job.executor is not None
    job.executor.enqueue(job)


def _input_of(dep: Job, *, native: bool) -> dict[str, Any]:
    """How ``launchers.run`` gets ``dep``'s result: its value (a JSON value, or a pickle in
    base64), or for a dependency Slurm still holds, its directory on the cluster."""
    if dep.task is not None and dep.task.kind == "command":
        return {"value": 0}
    if native:
        where = dep.record.extra.get("remote_dir") or str(dep.directory)
        return {"dir": str(where)}
    if dep.paths.result_json.exists():
        return {"value": read_json(dep.paths.result_json)}
    if dep.paths.result_pickle.exists():
        return {"pickle": base64.b64encode(dep.paths.result_pickle.read_bytes()).decode("ascii")}
    if (dep.directory / RESULT_JSON).exists() or (dep.directory / RESULT_PICKLE).exists():
        return {"value": None}
    return {"missing": f"{dep.task_id} left no result file in {dep.directory}"}


def graph() -> Graph:
    """The process's graph of dependents (created on first use)."""
    runtime = current()
    with runtime.dependencies_lock:
        if runtime.dependencies is None:
            runtime.dependencies = Graph()
        return runtime.dependencies


__all__ = ["FOLLOW", "SUBMIT", "Graph", "graph"]
