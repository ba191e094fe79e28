"""Submitting a task and re-attaching to its job directory (docs/design/runtime.md §2): the
decision taken under the directory's ``.lock`` (submit, follow, re-run, report), the record's
``launcher`` field, and the dependencies a task's parameters and ``after=`` give
(docs/design/runtime.md §15). ``Task.submit`` reaches ``submit_task`` through ``services``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import LaunchersError
from ..fsutil import atomic_write_json, directory_lock, read_json
from ..runtime.core import current
from .depends import FAILED_KEY, NATIVE_KEY, RECORD_KEY, Edge, after_edges, edges_json, merge_edges
from .experiment import current_experiment
from .graph import FOLLOW, SUBMIT, graph
from .job import Job, _owner_alive
from .proc import ProcessId
from .record import (
    JobPaths,
    StateRecord,
    archive_attempt,
    job_directory,
    read_record,
    write_record,
)
from .state import JobState
from .task import Task

if TYPE_CHECKING:
    from ..launcher import Launcher
    from ..runtime.executor import Executor

log = logging.getLogger("launchers.jobs")


def launcher_info(launcher: Launcher) -> dict[str, Any]:
    """``launcher`` field of the record: kind, group id, connector and exact sbatch options."""
    group = getattr(launcher, "group", None)
    info: dict[str, Any] = {
        "kind": launcher.kind,
        "group": getattr(group, "label", None) if group is not None else None,
        "connector": getattr(launcher, "connector", None) or getattr(group, "connector", "local"),
    }
    cfg_file = getattr(getattr(group, "position", None), "file", None)
    if info["connector"] != "local" and cfg_file:
        info["config"] = str(cfg_file)  # to reach the connector again from the record (CLI)
    sbatch_args = getattr(launcher, "sbatch_args", None)
    if callable(sbatch_args):
        try:
            info["options"] = list(sbatch_args())
        except Exception as e:  # a launcher that cannot render its options is reported, not hidden
            raise LaunchersError(f"launcher {launcher!r}: cannot compute its options: {e}") from e
    return info


def submit_task(
    task: Task,
    launcher: Launcher | None = None,
    *,
    force: bool = False,
    after: Sequence[object] | None = None,
) -> Job:
    """``Task.submit``: record the job under ``.lock`` and queue its submission (docs/design/runtime.md §1, §2);
    with dependencies (``after``, job parameters) held until they allow it (§15)."""
    deps = dependencies_of(task, after)
    xp = current_experiment()
    if launcher is None and xp is not None:
        launcher = xp.launcher
    if xp is None and launcher is None:
        raise LaunchersError(
            f"cannot submit {task.task_id}: no experiment and no launcher; use "
            "`with experiment(workdir, launcher):` (or pass launcher= inside one)"
        )
    if xp is None:
        raise LaunchersError(
            f"cannot submit {task.task_id}: no experiment is active (it gives the job directory); "
            "submit inside `with experiment(workdir, launcher):`"
        )
    if launcher is None:
        raise LaunchersError(
            f"cannot submit {task.task_id}: no launcher; pass launcher= to submit() or to experiment()"
        )
    directory = job_directory(xp.workdir, task.name, task.digest).absolute()
    runtime = current()
    with runtime.jobs_lock:
        existing = cast("Job | None", runtime.jobs.get(directory))
        rerun = (
            existing is not None
            and existing.state.is_final
            and existing.state is not JobState.COMPLETED
            and xp.rerun_failed
            and existing not in xp.jobs
        )
        if existing is not None and not force and not rerun:
            xp.add(existing)
            return existing
        if existing is not None and not existing.state.is_final:
            raise LaunchersError(
                f"job {existing.task_id} is {existing.state.value}: force=True needs a finished job "
                "(cancel it first)"
            )
        executor = launcher.executor()
        job = _attach(
            task,
            directory,
            launcher,
            executor,
            force=force,
            rerun_failed=xp.rerun_failed,
            deps=deps,
        )
        runtime.jobs[directory] = job
    xp.add(job)
    return job


def dependencies_of(task: Task, after: Sequence[object] | None) -> list[tuple[Edge, Job]]:
    """The dependencies of ``task``: ``after=`` (jobs, ``finished(job)``) and its job
    parameters (inputs), one edge per job (docs/design/runtime.md §15); ``TaskError`` for anything
    else in ``after``. A job of another experiment directory is allowed: the edge keeps its
    absolute directory."""
    pairs = after_edges(after)
    for dep in task.inputs:
        pairs.append((Edge(dep.task_id, str(dep.directory), input=True), dep))
    return merge_edges(pairs)


def _stale(record: StateRecord, extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` plus the clearing of a previous attempt's dependency keys it does not set."""
    out = dict(extra)
    for key in (RECORD_KEY, NATIVE_KEY, FAILED_KEY):
        if record.extra.get(key) is not None and key not in out:
            out[key] = None
    return out


def _attach(
    task: Task,
    directory: Path,
    launcher: Launcher,
    executor: Executor,
    *,
    force: bool,
    rerun_failed: bool,
    deps: list[tuple[Edge, Job]] | None = None,
) -> Job:
    paths = JobPaths(directory)
    executor.validate(launcher, task)
    directory.mkdir(parents=True, exist_ok=True)
    deps = deps or []
    me: dict[str, Any] = {"owner": ProcessId.current().to_json()}
    if deps:
        me[RECORD_KEY] = edges_json(e for e, _j in deps)
    info = launcher_info(launcher)
    deferred: list[Path] = []
    with directory_lock(paths.lock):
        record = read_record(directory)
        action = "submit"
        if record is None:
            # Nothing is submitted yet: both files are written atomically (temporary name,
            # rename: visible whole to other processes at once, which is what the decision
            # under .lock needs) and made durable by the job's next record write (SUBMITTING,
            # or RUNNING for the direct launcher), which fsyncs them and the directory before
            # anything reaches a scheduler. A power cut before that loses only a job that was
            # never submitted; submit() itself waits for no disk.
            if read_json(paths.params) != task.params_json():
                atomic_write_json(paths.params, task.params_json(), sync=False)
                deferred.append(paths.params)
            record = StateRecord(task_id=task.task_id, launcher=info, extra=me).transition(
                JobState.WAITING, "created"
            )
            write_record(directory, record, sync=False)
        elif not record.state.is_final:
            if force:
                raise LaunchersError(
                    f"job {record.task_id} in {directory} is {record.state.value}: force=True needs "
                    "a finished job (cancel it first)"
                )
            if record.state in (JobState.WAITING, JobState.SUBMITTING):
                if _owner_alive(record):
                    action = "observe"
                else:
                    action = "submit" if record.state is JobState.WAITING else "reconcile"
                    record = record.transition(launcher=info, extra=_stale(record, me))
                    write_record(directory, record)
            else:
                action = "track"
        elif not force and (record.state is JobState.COMPLETED or not rerun_failed):
            action = "done"
        else:
            if read_json(paths.params) != task.params_json():
                atomic_write_json(paths.params, task.params_json())
            cause = "forced re-run" if force else f"re-run after {record.state.value}"
            archive_attempt(directory, record.attempt)
            record = record.next_attempt(cause).transition(launcher=info, extra=_stale(record, me))
            write_record(directory, record)
    job = Job(task, directory, record, launcher=launcher, executor=executor)
    job.dependencies = list(deps)
    for path in deferred:
        job.defer_sync(path)
    if action == "submit" and deps:
        graph().hold(job, deps, SUBMIT)
    elif action == "submit":
        executor.enqueue(job)
    elif action == "reconcile":
        # decided before the crash (--dependency recorded): reconcile, and still follow the
        # dependencies so that a failure ends it (docs/design/runtime.md §15)
        executor.enqueue(job, reconcile=True)
        if deps:
            graph().hold(job, deps, FOLLOW)
    elif action in ("track", "observe"):
        job.observer = action == "observe"
        executor.track(job)
        if deps and action == "track":
            graph().hold(job, deps, FOLLOW)
    return job


def attach(task: Task, directory: Path, launcher: Launcher) -> Job:
    """A job for ``task`` in ``directory`` (outside any experiment, e.g. a batch pilot):
    recorded and submitted, or re-attached when the directory already holds it."""
    return _attach(task, directory, launcher, launcher.executor(), force=False, rerun_failed=False)


__all__ = ["attach", "dependencies_of", "launcher_info", "submit_task"]
