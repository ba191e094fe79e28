"""The pilot manager (docs/design/pilots.md §3.2, §3.6): publishes tasks in their shape's queue, submits
pilots through the inner launcher's executor, and reads each task's state from the queue
directory (one listing per subdirectory per cycle, whatever the number of tasks).

Pilots are ordinary jobs of the inner launcher (their own job directories under
``<queue>/pilots/<n>/``), tracked by that launcher's tracker: batching adds no scheduler query.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

from ..config.environment import EMPTY, callable_python, requested_gpus
from ..config.loader import load_config
from ..connectors.registry import get_connector
from ..errors import LaunchersError
from ..jobs.record import FOLLOWED, RESULT_FILES
from ..jobs.state import JobState
from ..jobs.task import KIND_COMMAND
from ..jobs.update import StateUpdate
from ..runtime.core import current
from ..runtime.executor import Executor
from ..runtime.loop import run_sync
from . import queue as Q
from . import runner as R
from .decide import claimed as claimed_by_runner
from .decide import final_from_done, pilot_refused, requeued
from .launcher import BatchLauncher
from .pilots import (
    ACTIVE,
    Shape,
    active,
    fail_if_pilot_refused,
    final_pilot_keys,
    manage,
    pilot_native,
    pilot_of,
    refusal,
    refused_pilots,
)
from .remote import RemoteQueue, StoreQueue, connector_of, remote_base
from .rest import check_rest_site, rest_queue, rest_queue_from_locator
from .shape import (
    MAX_AUTO_SLOTS,
    MIN_WALLTIME,
    REST_KINDS,
    PilotSlurmLauncher,
    Resources,
    auto_slots,
    check_fits,
    entry_argv,
    inner_limit,
    node_capacities,
    pilot_name,
    pilot_tag,
    pilot_walltime,
    shape_of,
    task_environment,
    task_resources,
)
from .shape import (
    _pilot_slurm_launcher as _pilot_slurm_launcher,  # re-exported: tests use it
)

if TYPE_CHECKING:
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

log = logging.getLogger("launchers.batch")


# -- the executor -------------------------------------------------------------------------------


class BatchExecutor(Executor):
    """Runs the batched jobs of this process (every shape)."""

    kind = "batch"
    #: reading the queue directory is cheap (local listings): follow it closely
    poll_min = 0.25
    poll_max = 1.0

    def __init__(self) -> None:
        super().__init__(("batch",))
        self.shapes: dict[str, Shape] = {}
        #: pilots submitted by this process (benchmarks and tests read it)
        self.pilots_submitted = 0

    # -- shapes ---------------------------------------------------------------------------------

    def _shape(self, batch: BatchLauncher, workdir: Path, task: Task | None = None) -> Shape:
        environment = task_environment(batch.inner, task.environment) if task else EMPTY
        key = shape_of(batch.inner, environment.without_variables())
        queue = (workdir / "batch" / key).absolute()
        shape = self.shapes.get(str(queue))
        if shape is None:
            Q.ensure_queue(queue)
            shape = Shape(key, queue, batch, remote=self._remote_queue(batch, key))
            self.shapes[str(queue)] = shape
        return shape

    @staticmethod
    def _is_remote(batch: BatchLauncher) -> bool:
        return getattr(batch.inner, "connector", "local") not in ("local", None)

    def _remote_queue(self, batch: BatchLauncher, key: str) -> StoreQueue | None:
        """Where the queue lives when the pilot does not see this machine: under an SSH
        connector's ``workdir`` (``batch/<shape key>``), or at a UNICORE/firecREST site."""
        if batch.inner.kind in REST_KINDS:
            return rest_queue(batch.inner, key)
        if not self._is_remote(batch):
            return None
        connector = connector_of(batch.inner)
        config_file = getattr(
            getattr(getattr(batch.inner, "group", None), "position", None), "file", None
        )
        return RemoteQueue(
            connector=connector,
            path=f"{remote_base(connector)}/batch/{key}",
            config_file=str(config_file) if config_file else None,
        )

    async def _scan(self, shape: Shape) -> Q.Snapshot:
        if shape.remote is None:
            return Q.scan(shape.queue)
        rs = await shape.remote.scan()
        shape.last_remote = rs
        return rs.snap

    def validate(self, launcher: Launcher, task: Task) -> None:
        if not isinstance(launcher, BatchLauncher):
            raise LaunchersError(f"batch executor: {launcher!r} is not a BatchLauncher")
        kind = launcher.inner.kind
        if kind not in ("local", "slurm", *REST_KINDS):
            raise LaunchersError(f"batching over {kind} launchers is not supported")
        if (kind in REST_KINDS or self._is_remote(launcher)) and task.kind != KIND_COMMAND:
            where = f"a {kind} site" if kind in REST_KINDS else f"connector {launcher.connector!r}"
            raise LaunchersError(
                f"task {task.task_id}: batching over {where} runs commands only (a Python callable "
                "needs its local job directory): use launchers.command"
            )
        if kind in REST_KINDS:
            check_rest_site(launcher.inner, task)
        check_fits(launcher, task.task_id)

    # -- submission -----------------------------------------------------------------------------

    def _entry(self, job: JobHandle, batch: BatchLauncher, res: Resources) -> dict[str, Any]:
        task = job.task
        if task is None:
            raise LaunchersError(f"job {job.task_id}: the task is unknown, cannot queue it")
        inner = batch.inner
        group = getattr(inner, "group", None)
        python = getattr(inner, "python", None) or getattr(group, "python", None) or sys.executable
        if task.kind == KIND_COMMAND:
            argv = list(task.target)
        else:
            argv = [python, "-m", "launchers.run", str(job.directory)]
        env: dict[str, str] = {}
        env.update(dict(getattr(group, "env", ()) or ()))
        env.update(dict(getattr(inner, "env", ()) or ()))
        block = task_environment(inner, task.environment)
        env.update(dict(block.variables or ()))
        env.update(dict(task.env))
        if not block.is_empty:  # the task's environment, applied inside the pilot
            if task.kind != KIND_COMMAND and not (
                getattr(inner, "python", None) or getattr(group, "python", None)
            ):
                argv[0] = callable_python(block, None, python)
            argv = entry_argv(
                block,
                argv,
                job_dir=str(job.directory),
                cwd=task.cwd or str(job.directory),
                gpus=requested_gpus(inner),
                callable_task=task.kind != KIND_COMMAND,
            )
        return {
            "id": job.task_id,
            "name": task.name,
            "dir": str(job.directory),
            "argv": argv,
            "env": env,
            "cwd": task.cwd,
            "timeout": batch.task_timeout,
            "duration": res.duration,
            "resources": res.to_json(),
            "attempt": 0,
            "base_attempt": job.attempt - 1,
            "max_attempts": batch.max_attempts,
        }

    async def submit(self, job: JobHandle) -> None:
        batch = job.launcher
        if not isinstance(batch, BatchLauncher):
            raise LaunchersError(f"job {job.task_id}: not submitted through a BatchLauncher")
        workdir = job.directory.parent.parent.parent
        shape = self._shape(batch, workdir, job.task)
        res = task_resources(batch.inner)
        check_fits(batch, job.task_id, shape.longest)
        entry = self._entry(job, batch, res)
        if shape.remote is not None:
            await shape.remote.ensure()
            entry["dir"] = await shape.remote.prepare_task(job.task_id)
        Q.clear_previous(shape.queue, job.task_id)
        for name in (n for n in RESULT_FILES if n not in FOLLOWED):  # a previous run's results
            with contextlib.suppress(FileNotFoundError):
                (job.directory / name).unlink()
        job.apply(
            StateUpdate(
                state=JobState.SUBMITTING, detail="publishing", job_name=job.task_id, reason=""
            )
        )
        name = (
            Q.publish(shape.queue, entry)
            if shape.remote is None
            else await shape.remote.publish(entry)
        )
        shape.longest = max(
            shape.longest, res.duration or 0.0
        )  # declared durations only (docs/design/pilots.md §3.2)
        shape.jobs[job.task_id] = job
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail=f"queued in batch {shape.key}",
                native_id=f"batch:{shape.key}:{job.task_id}",
                reason=f"queued in batch {shape.key}",
                extra={
                    "batch": {
                        "queue": str(shape.queue),
                        "shape": shape.key,
                        "pending": name,
                        **_remote_info(shape),
                    }
                },
            )
        )
        await self._manage(shape, await self._scan(shape))

    async def reconcile(self, job: JobHandle) -> None:
        """A record left in SUBMITTING (crash around publication): adopt the entry when the
        queue has it (pending, running or done), publish only when it does not."""
        batch = job.launcher
        if not isinstance(batch, BatchLauncher):
            raise LaunchersError(f"job {job.task_id}: not submitted through a BatchLauncher")
        shape = self._shape(batch, job.directory.parent.parent.parent, job.task)
        snap = await self._scan(shape)
        tid = job.task_id
        if tid not in snap.pending and tid not in snap.running and tid not in snap.done:
            await self.submit(job)
            return
        shape.jobs[tid] = job
        info = {
            "queue": str(shape.queue),
            "shape": shape.key,
            "pending": snap.pending.get(tid, ""),
            **_remote_info(shape),
        }
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail="adopted after a crash",
                native_id=f"batch:{shape.key}:{tid}",
                extra={"batch": info},
            )
        )

    # -- pilots ---------------------------------------------------------------------------------

    async def _manage(self, shape: Shape, snap: Q.Snapshot, orphaned: bool = False) -> None:
        """Submit a pilot when the shape needs one (see :func:`.pilots.manage`)."""
        if manage(shape, snap, orphaned):
            self.pilots_submitted += 1

    # -- tracking -------------------------------------------------------------------------------

    def _shape_of_job(self, job: JobHandle) -> Shape | None:
        info = job.record.extra.get("batch") or {}
        queue = info.get("queue")
        if not queue:
            return None
        shape = self.shapes.get(queue)
        if shape is None and isinstance(job.launcher, BatchLauncher):
            shape = Shape(
                str(info.get("shape")),
                Path(queue),
                job.launcher,
                remote=self._remote_queue(job.launcher, str(info.get("shape"))),
            )
            self.shapes[queue] = shape
        if shape is not None:
            shape.jobs.setdefault(job.task_id, job)
        return shape

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        by_shape: dict[str, list[JobHandle]] = {}
        out: dict[JobHandle, StateUpdate] = {}
        for job in jobs:
            shape = self._shape_of_job(job)
            if shape is not None:
                by_shape.setdefault(str(shape.queue), []).append(job)
            else:  # known from its record only (launchers cancel in another process)
                update = await self._orphan_update(job)
                if update is not None:
                    out[job] = update
        for key, mine in by_shape.items():
            shape = self.shapes[key]
            snap = await self._scan(shape)
            final_pilots = [p.native_id for p in shape.pilots if p.state.is_final and p.native_id]
            if shape.remote is not None:
                await self._poll_remote_shape(shape, snap, mine, out)
                continue
            if snap.running:  # lost runners: pilot final, or heartbeat older than lost_after
                moved = Q.recover(shape.queue, final_natives=final_pilots)
                if moved:
                    log.warning(
                        "batch %s: re-queued %s (their pilot ended)", shape.key, ", ".join(moved)
                    )
                    snap = Q.scan(shape.queue)
            for job in mine:
                update = self._update(shape, snap, job)
                if update is not None:
                    out[job] = update
            if snap.pending:
                if fail_if_pilot_refused(shape, snap, mine, out):
                    snap = Q.scan(shape.queue)
                await self._manage(shape, snap)
        return out

    async def _poll_remote_shape(
        self,
        shape: Shape,
        snap: Q.Snapshot,
        mine: list[JobHandle],
        out: dict[JobHandle, StateUpdate],
    ) -> None:
        """One remote shape's cycle: states from the one-command scan, outputs copied back on the end."""
        assert shape.remote is not None
        rs = shape.last_remote
        assert rs is not None
        if rs.running:
            finals = final_pilot_keys(shape)
            lost = [
                r
                for r, e in rs.runners.items()
                if str(e.get("pilot")) in finals or str(e.get("native_id")) in finals
            ]
            claimed = {str(e.get("runner")) for e in rs.running.values()}
            lost_claimed = set(lost) & claimed
            now = time.monotonic()
            if not shape.remote.runs_python:
                # no heartbeat ages without Python there (the runners check those): claims of
                # final pilots only
                known = set() if shape.remote.can_rename else shape.remote.lost_runners
                go = bool(lost_claimed - known)
            else:
                go = bool(lost_claimed) or now - shape.last_recover >= R.LOST_CHECK_EVERY
            if go:
                shape.last_recover = now
                moved = await shape.remote.recover(f"manager-{os.getpid()}", lost)
                if moved:
                    log.warning(
                        "batch %s: re-queued %s (their pilot ended)", shape.key, ", ".join(moved)
                    )
                    snap = await self._scan(shape)
                    rs = shape.last_remote
                    assert rs is not None
        for job in mine:
            tid = job.task_id
            if tid in rs.done:
                await shape.remote.fetch_outputs(tid, job.directory)
                done = rs.done[tid]
                update = final_from_done(done)
                if done.get("pilot"):  # the pilot job's own id (UNICORE's differs from Slurm's)
                    update = attrs.evolve(
                        update, extra={**(update.extra or {}), "pilot": pilot_of(shape, done)}
                    )
                out[job] = update
            elif tid in rs.running:
                entry = rs.running[tid]
                if (
                    job.state is JobState.RUNNING
                    and job.record.extra.get("runner") == entry.get("runner")
                    and job.pilot is not None
                ):
                    continue
                runner = rs.runners.get(str(entry.get("runner", ""))) or {}
                out[job] = claimed_by_runner(entry, pilot_of(shape, runner))
            elif tid in snap.pending and job.state is JobState.RUNNING:
                out[job] = requeued()
        orphaned = bool(shape.remote.lost_runners) and any(
            str(e.get("runner")) in shape.remote.lost_runners for e in rs.running.values()
        )
        if orphaned and not snap.pending:
            # claims of a final pilot that no rename can re-queue: the next pilot's runner does
            await self._manage(shape, snap, orphaned=True)
        if snap.pending:
            refused = refused_pilots(shape)
            if refused:
                reason = refusal(refused)
                for job in mine:
                    if (
                        job.task_id in snap.pending
                        and await shape.remote.cancel_task(job.task_id) == "cancelled"
                    ):
                        out[job] = pilot_refused(reason)
                shape.pilots = [p for p in shape.pilots if p not in refused]
                snap = await self._scan(shape)
            await self._manage(shape, snap)

    def _update(self, shape: Shape, snap: Q.Snapshot, job: JobHandle) -> StateUpdate | None:
        tid = job.task_id
        if tid in snap.done:
            done = Q.read_done(shape.queue, tid)
            if done is None:
                return None
            return final_from_done(done)
        if tid in snap.running:
            entry = Q.read_running(shape.queue, tid) or {}
            if job.state is JobState.RUNNING and job.record.extra.get("runner") == entry.get(
                "runner"
            ):
                return None
            return claimed_by_runner(entry, pilot_native(shape, str(entry.get("runner", ""))))
        if tid in snap.pending and job.state is JobState.RUNNING:
            return requeued()
        return None

    async def _orphan_update(self, job: JobHandle) -> StateUpdate | None:
        """A job with no launcher here: its owner's record when that moved on, else its
        ``done/`` entry read from the queue (local, or through the recorded locator)."""
        if job.refresh() or job.state.is_final:
            return None
        info = job.record.extra.get("batch") or {}
        tid = job.task_id
        if info.get("remote_queue"):
            scan = await queue_from_locator(tid, info.get("locator")).scan()
            done = scan.done.get(tid) if tid in scan.snap.done else None
        elif info.get("queue"):
            done = Q.read_done(Path(info["queue"]), tid)
        else:
            return None
        return None if done is None else final_from_done(done)

    # -- cancel ---------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        for job in jobs:
            info = job.record.extra.get("batch") or {}
            queue = info.get("queue")
            if not queue:
                job.apply(
                    StateUpdate(
                        state=JobState.CANCELLED,
                        detail="cancelled before publication",
                        reason="cancelled on request",
                    )
                )
                continue
            remote = info.get("remote_queue")
            shape = self._shape_of_job(job) if remote else None
            if shape is not None and shape.remote is not None:
                result = await shape.remote.cancel_task(job.task_id)
            elif remote:  # known from its record only (launchers cancel): reach the queue again
                result = await queue_from_locator(job.task_id, info.get("locator")).cancel_task(
                    job.task_id
                )
            else:
                result = Q.cancel_task(queue, job.task_id)
            if result == "cancelled":
                job.apply(
                    StateUpdate(
                        state=JobState.CANCELLED,
                        detail="cancelled while queued",
                        reason="cancelled on request",
                    )
                )

    def cancel_launcher_sync(self, batch: BatchLauncher) -> None:
        """``cancel_launcher`` from a user thread (``BatchLauncher.cancel``)."""
        run_sync(self.cancel_launcher(batch))

    async def cancel_launcher(self, batch: BatchLauncher) -> None:
        """Cancel every pilot of ``batch``'s shapes (one request) and its unclaimed tasks."""
        for shape in self.shapes.values():
            if shape.batch.inner != batch.inner:
                continue
            for pilot in active(shape):
                pilot.cancel()
            if shape.remote is not None:
                snap = await self._scan(shape)
                for tid in [*snap.pending, *snap.running]:
                    job = shape.jobs.get(tid)
                    if await shape.remote.cancel_task(tid) == "cancelled" and job is not None:
                        job.apply(
                            StateUpdate(
                                state=JobState.CANCELLED,
                                detail="batch cancelled",
                                reason="cancelled on request",
                            )
                        )
                    elif job is not None:
                        job.cancel_requested = True
                continue
            snap = Q.scan(shape.queue)
            for tid, name in snap.pending.items():
                job = shape.jobs.get(tid)
                if Q.cancel_pending(shape.queue, name, tid) and job is not None:
                    job.apply(
                        StateUpdate(
                            state=JobState.CANCELLED,
                            detail="batch cancelled",
                            reason="cancelled on request",
                        )
                    )
            for tid in snap.running:
                # killed with their pilot: never re-queued for another one
                Q.request_cancel(shape.queue, tid)
                job = shape.jobs.get(tid)
                if job is not None:
                    job.cancel_requested = True


def create_executor(launcher: Launcher) -> BatchExecutor:
    """The process's batch executor (the registry keeps one: ``executor_key``)."""
    return BatchExecutor()


def executor_key(launcher: Launcher) -> tuple[str]:
    """One batch executor per process (shapes are kept apart inside it)."""
    return ("batch",)


def _remote_info(shape: Shape) -> dict[str, Any]:
    """The record's keys for a queue that lives elsewhere: its path and how to reach it."""
    if shape.remote is None:
        return {}
    return {"remote_queue": shape.remote.path, "locator": shape.remote.locator()}


def queue_from_locator(task_id: str, locator: Any) -> StoreQueue:
    """The remote queue a record's ``locator`` names (SSH connector, UNICORE or firecREST site)."""
    if not isinstance(locator, Mapping):
        raise LaunchersError(
            f"job {task_id}: its record does not say how to reach its batch queue "
            "(recorded by an older version); cancel it from the experiment that submitted it"
        )
    kind = locator.get("kind")
    if kind == "ssh":
        connector = get_connector(str(locator.get("connector")), load_config(locator.get("config")))
        return RemoteQueue(
            connector=connector, path=str(locator.get("path")), config_file=locator.get("config")
        )
    if kind in REST_KINDS:
        return rest_queue_from_locator(task_id, locator)
    raise LaunchersError(f"job {task_id}: unknown batch queue transport {kind!r} in its record")


def executor_from_record(info: Mapping[str, Any], record: object) -> BatchExecutor:
    """The executor that cancels a batched job known only from its record: the process's one."""
    return cast(BatchExecutor, current().executor(("batch",), BatchExecutor))


__all__ = [
    "ACTIVE",
    "MAX_AUTO_SLOTS",
    "MIN_WALLTIME",
    "REST_KINDS",
    "BatchExecutor",
    "PilotSlurmLauncher",
    "Resources",
    "Shape",
    "auto_slots",
    "check_fits",
    "inner_limit",
    "node_capacities",
    "pilot_name",
    "pilot_tag",
    "pilot_walltime",
    "shape_of",
    "task_resources",
]
