"""The pilot manager (batching.md §3.2, §3.6): publishes tasks in their shape's queue, submits
pilots through the inner launcher's executor, and reads each task's state from the queue
directory (one listing per subdirectory per cycle, whatever the number of tasks).

Pilots are ordinary jobs of the inner launcher (their own job directories under
``<queue>/pilots/<n>/``), tracked by that launcher's tracker: batching adds no scheduler query.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

from ..config.loader import load_config
from ..connectors.registry import get_connector
from ..errors import LaunchersError
from ..fsutil import directory_lock
from ..hooks import services
from ..jobs.proc import ProcessId
from ..jobs.record import read_record
from ..jobs.state import JobState
from ..jobs.task import KIND_COMMAND, command
from ..jobs.update import StateUpdate
from ..runtime.core import current
from ..runtime.executor import Executor
from ..runtime.loop import run_sync
from ..slurm.launcher import SlurmLauncher
from ..units import format_duration, parse_size, parse_slurm_time
from . import queue as Q
from . import runner as R
from .launcher import BatchLauncher
from .remote import RemoteQueue, RemoteSnapshot, connector_of, remote_base
from .rest import RestQueue, check_rest_site, rest_queue, rest_queue_from_locator

if TYPE_CHECKING:
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

log = logging.getLogger("launchers.batch")

MAX_AUTO_SLOTS = 8
#: inner launchers whose queue lives at a site reached through a REST API (batch/rest.py)
REST_KINDS = ("unicore", "firecrest")
MIN_WALLTIME = 3600.0
ACTIVE = (
    JobState.WAITING,
    JobState.SUBMITTING,
    JobState.PENDING,
    JobState.RUNNING,
    JobState.SUSPENDED,
)


# -- pure pieces --------------------------------------------------------------------------------


@attrs.frozen
class Resources:
    """What one task asks for: cores, memory (bytes, 0 = unset), GPUs; and its declared duration."""

    cpus: int = 1
    memory: int = 0
    gpus: int = 0
    duration: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "memory": self.memory, "gpus": self.gpus}


def task_resources(inner: Launcher) -> Resources:
    """The resources the inner launcher would request for one task as a job of its own."""
    options = getattr(inner, "options", None)
    if options is None:
        return Resources()
    memory = 0
    if getattr(options, "mem", None):
        try:
            memory = parse_size(
                str(options.mem) if not str(options.mem)[-1].isdigit() else f"{options.mem}M"
            )
        except Exception:
            memory = 0
    duration = None
    if getattr(options, "time", None):
        seconds = parse_slurm_time(str(options.time))
        duration = float(seconds) if seconds else None
    gpus = int(getattr(options, "gpus_per_node", None) or 0)
    gres = _GRES_GPUS.fullmatch(str(getattr(options, "gres", None) or ""))
    if not gpus and gres:  # a group with gpu_option: gres asks --gres=gpu[:TYPE]:N
        gpus = int(gres.group(2))
    return Resources(
        cpus=int(getattr(options, "cpus_per_task", None) or 1),
        memory=memory,
        gpus=gpus,
        duration=duration,
    )


#: ``--gres`` asking for GPUs only: ``gpu:N`` or ``gpu:TYPE:N``
_GRES_GPUS = re.compile(r"gpu(?::([^:,]+))?:(\d+)")


def shape_of(inner: Launcher) -> str:
    """12 hex digits naming the shape: the inner launcher's target and options without the
    time limit (tasks of several durations share a pilot), environment included."""
    args = [a for a in getattr(inner, "sbatch_args", list)() if not a.startswith("--time=")]
    group = getattr(inner, "group", None)
    data = {
        "kind": inner.kind,
        "group": getattr(group, "label", None),
        "connector": getattr(inner, "connector", "local"),
        "options": args,
        "export": getattr(inner, "export", None),
        "env": [list(p) for p in (getattr(inner, "env", ()) or ())],
        "python": getattr(inner, "python", None),
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def pilot_name(shape: str, n: int) -> str:
    """``lxpilot-<shape12>-<n>``: the pilot's job name."""
    return f"lxpilot-{shape}-{n}"


def pilot_tag(argv: Sequence[str]) -> str | None:
    """The ``--pilot`` value of a pilot's runner command line (None when absent)."""
    args = list(argv)
    for i, a in enumerate(args[:-1]):
        if a == "--pilot":
            return str(args[i + 1])
    return None


def node_capacities(inner: Launcher) -> list[tuple[int, int, int]]:
    """``(cores, memory, gpus)`` of each node the inner launcher may land on (0 = unknown)."""
    out = []
    for host in getattr(inner, "hosts", ()) or ():
        out.append((int(host.cores or 0), int(host.memory or 0), len(host.gpus or ())))
    if out:
        return out
    group = getattr(inner, "group", None)
    cpu = getattr(group, "cpu", None)
    if cpu is not None and not getattr(group, "implicit", False):
        gpus = sum(int(g.count) for g in getattr(group, "gpus", ()) or ())
        out.append((int(cpu.cores or 0), int(cpu.memory or 0), gpus))
    return out


def auto_slots(inner: Launcher, res: Resources) -> int:
    """The largest k <= 8 such that k tasks fit the smallest node matched (1 when unknown)."""
    best: int | None = None
    for cores, memory, gpus in node_capacities(inner):
        limits = []
        if cores:
            limits.append(cores // max(1, res.cpus))
        if memory and res.memory:
            limits.append(memory // res.memory)
        if res.gpus:
            limits.append(gpus // res.gpus)
        if not limits:
            continue
        k = min(limits)
        best = k if best is None else min(best, k)
    if best is None:
        return 1
    return max(1, min(MAX_AUTO_SLOTS, best))


def inner_limit(inner: Launcher) -> float | None:
    """The inner launcher's time limit (smallest partition/QoS maximum of its nodes)."""
    limits = [
        float(h.max_duration)
        for h in getattr(inner, "hosts", ()) or ()
        if getattr(h, "max_duration", 0)
    ]
    return min(limits) if limits else None


def pilot_walltime(batch: BatchLauncher, longest: float | None) -> float:
    """``walltime``, else min(inner limit, max(1 h, 2 x longest declared duration))."""
    if batch.walltime:
        return float(batch.walltime)
    want = max(MIN_WALLTIME, 2 * (longest or 0))
    limit = inner_limit(batch.inner)
    return min(limit, want) if limit else want


def check_fits(batch: BatchLauncher, task_id: str, longest: float | None = None) -> None:
    """Refuse a task that can never run: its limit plus ``drain_margin`` exceeds the walltime."""
    res = task_resources(batch.inner)
    limit = batch.task_timeout or res.duration
    if not limit:
        return
    walltime = pilot_walltime(batch, max(longest or 0, res.duration or 0))
    if limit + batch.drain_margin > walltime:
        what = "task_timeout" if batch.task_timeout else "declared duration"
        raise LaunchersError(
            f"task {task_id} can never run in a batch pilot: its {what} {format_duration(int(limit))} "
            f"plus drain_margin {format_duration(int(batch.drain_margin))} exceeds the pilot walltime "
            f"{format_duration(int(walltime))}"
        )


# -- the executor -------------------------------------------------------------------------------


@attrs.define(eq=False)
class Shape:
    """One shape's queue and pilots, in this process."""

    key: str
    queue: Path
    batch: BatchLauncher
    pilots: list[JobHandle] = attrs.field(factory=list)
    longest: float = 0.0
    jobs: dict[str, JobHandle] = attrs.field(factory=dict)
    refused_pilot: str | None = None
    #: the queue on the far side of an SSH connector or a REST API (None: the local queue is the queue)
    remote: RemoteQueue | RestQueue | None = None
    #: the remote queue's last scan (entries read in the same command)
    last_remote: RemoteSnapshot | None = None
    #: when the remote queue was last checked for lost runners (monotonic)
    last_recover: float = 0.0
    #: each pilot's ``--pilot`` tag (its runner records it), by pilot directory
    tags: dict[Path, str] = attrs.field(factory=dict)


def _pilot_slurm_launcher(
    inner: Any, batch: BatchLauncher, res: Resources, slots: int, walltime: float
) -> Any:
    """The inner Slurm launcher resized for ``slots`` tasks and the walltime, warned with USR1."""
    changes: dict[str, Any] = {"cpus_per_task": res.cpus * slots, "time": int(walltime)}
    if res.memory:
        changes["mem"] = f"{-(-res.memory * slots // (1024 * 1024))}M"
    if res.gpus:
        options = getattr(inner, "options", None)
        gres = _GRES_GPUS.fullmatch(str(getattr(options, "gres", None) or ""))
        if gres and not getattr(options, "gpus_per_node", None):  # keep the group's gpu_option
            changes["gres"] = (
                f"gpu:{gres.group(1) + ':' if gres.group(1) else ''}{res.gpus * slots}"
            )
        else:
            changes["gpus_per_node"] = res.gpus * slots
    launcher = inner.config(**changes)
    if isinstance(launcher, SlurmLauncher):
        warning: dict[str, Any] = {
            "max_requeues": 0,
            "resume_signal": "USR1",
            "resume_grace": max(1, int(batch.drain_margin)),
        }
        names = {f.name for f in attrs.fields(type(launcher))}
        if set(warning) <= names:  # the launcher carries these settings itself
            return attrs.evolve(launcher, **warning)
        fields = {f.name: getattr(launcher, f.name) for f in attrs.fields(type(launcher)) if f.init}
        fields.update(warning)
        return PilotSlurmLauncher(**fields)
    return launcher


def _pilot_class() -> Any:
    @attrs.frozen(kw_only=True)
    class _Pilot(SlurmLauncher):
        """A Slurm launcher for pilots: USR1 ``drain_margin`` before the end, never requeued."""

        max_requeues: int = 0
        resume_signal: str = "USR1"
        resume_grace: int = 300

    _Pilot.__name__ = _Pilot.__qualname__ = "PilotSlurmLauncher"
    return _Pilot


PilotSlurmLauncher: Any = _pilot_class()


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

    def _shape(self, batch: BatchLauncher, workdir: Path) -> Shape:
        key = shape_of(batch.inner)
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

    def _remote_queue(self, batch: BatchLauncher, key: str) -> RemoteQueue | RestQueue | None:
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
            connector,
            f"{remote_base(connector)}/batch/{key}",
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
            check_rest_site(launcher.inner)
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
        env.update(dict(task.env))
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
        shape = self._shape(batch, workdir)
        res = task_resources(batch.inner)
        check_fits(batch, job.task_id, shape.longest)
        entry = self._entry(job, batch, res)
        if shape.remote is not None:
            await shape.remote.ensure()
            entry["dir"] = await shape.remote.prepare_task(job.task_id)
        Q.clear_previous(shape.queue, job.task_id)
        for name in ("job.rc", "result.json", "result.pickle", "error.json"):
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
        shape.longest = max(shape.longest, res.duration or 0.0)  # declared durations only (§3.2)
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
        shape = self._shape(batch, job.directory.parent.parent.parent)
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

    def _active(self, shape: Shape) -> list[JobHandle]:
        return [p for p in shape.pilots if p.state in ACTIVE]

    def _adopt_pilots(self, shape: Shape) -> None:
        """Pilots submitted by other processes (or an earlier run) that are not final."""
        known = {p.directory for p in shape.pilots}
        root = shape.queue / "pilots"
        if not root.is_dir():
            return
        for d in sorted(root.iterdir()):
            if d in known or not d.is_dir():
                continue
            try:
                rec = read_record(d)
            except LaunchersError:
                continue
            if rec is None or rec.state.is_final:
                continue
            inner = shape.batch.inner
            executor = inner.executor()
            pilot = services().adopt(d, rec, inner)
            # another live process owns it: only observe its state.json
            pilot.observer = rec.state in (
                JobState.WAITING,
                JobState.SUBMITTING,
            ) or self._owned_elsewhere(rec)
            shape.pilots.append(pilot)
            if not pilot.observer:
                executor.track(pilot)

    @staticmethod
    def _owned_elsewhere(rec: Any) -> bool:
        owner = ProcessId.from_json(rec.extra.get("owner"))
        return owner is not None and owner.pid != os.getpid() and owner.is_alive()

    async def _manage(self, shape: Shape, snap: Q.Snapshot, orphaned: bool = False) -> None:
        """Submit a pilot when tasks are pending and none is PENDING/RUNNING; scale up to
        ``max_pilots`` when the oldest pending task waited ``scale_after`` while all run."""
        for pilot in shape.pilots:
            if pilot.observer:
                pilot.refresh()
        if not snap.pending and not orphaned:
            return
        active = self._active(shape)
        batch = shape.batch
        if active:
            if len(active) >= batch.max_pilots or any(
                p.state is not JobState.RUNNING for p in active
            ):
                return
            oldest = snap.oldest_seq
            if oldest is None or time.time() - oldest / 1e9 < batch.scale_after:
                return
        with directory_lock(shape.queue / ".pilots.lock"):
            self._adopt_pilots(shape)
            now_active = self._active(shape)
            if len(now_active) > len(active) or (not active and now_active):
                return
            self._submit_pilot(shape)

    def _submit_pilot(self, shape: Shape) -> None:
        batch = shape.batch
        inner = batch.inner
        res = task_resources(inner)
        slots = batch.slots if isinstance(batch.slots, int) else auto_slots(inner, res)
        walltime = pilot_walltime(batch, shape.longest)
        root = shape.queue / "pilots"
        root.mkdir(exist_ok=True)
        numbers = [int(p.name) for p in root.iterdir() if p.name.isdigit()]
        n = max(numbers, default=0) + 1
        python = getattr(inner, "python", None) or sys.executable
        qpath = str(shape.queue)
        if shape.remote is not None:  # the runner runs next to the remote queue
            python = (
                getattr(inner, "python", None)
                or getattr(getattr(inner, "group", None), "python", None)
                or "python3"
            )
            qpath = shape.remote.path
        argv = [
            python,
            f"{qpath}/{Q.RUNNER_FILE}",
            "--queue",
            qpath,
            "--slots",
            str(slots),
            "--walltime",
            f"{walltime:g}",
            "--linger",
            f"{batch.linger:g}",
            "--drain-margin",
            f"{batch.drain_margin:g}",
            "--kill-grace",
            f"{batch.kill_grace:g}",
            # unique even when several processes (own pilot numbers each) share a site's queue
            "--pilot",
            f"{pilot_name(shape.key, n)}-{uuid.uuid4().hex[:8]}",
        ]
        if isinstance(shape.remote, RestQueue):
            argv += shape.remote.pilot_args()
        task = command(
            argv, name=pilot_name(shape.key, n), cwd=qpath, resumable=inner.kind == "slurm"
        )
        if inner.kind in ("slurm", *REST_KINDS):
            launcher = _pilot_slurm_launcher(inner, batch, res, slots, walltime)
        else:
            launcher = inner
        directory = root / str(n)
        pilot = services().attach(task, directory, launcher)
        shape.pilots.append(pilot)
        self.pilots_submitted += 1
        log.info(
            "batch %s: pilot %d submitted (%d slots, walltime %s)",
            shape.key,
            n,
            slots,
            format_duration(int(walltime)),
        )

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
                if self._fail_if_pilot_refused(shape, snap, mine, out):
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
            finals = self._final_pilot_keys(shape)
            lost = [
                r
                for r, e in rs.runners.items()
                if str(e.get("pilot")) in finals or str(e.get("native_id")) in finals
            ]
            claimed = {str(e.get("runner")) for e in rs.running.values()}
            lost_claimed = set(lost) & claimed
            now = time.monotonic()
            if isinstance(shape.remote, RestQueue):
                # no heartbeat ages over REST (the runners check those): claims of final pilots only
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
                update = self._final(job, done)
                if done.get("pilot"):  # the pilot job's own id (UNICORE's differs from Slurm's)
                    update = attrs.evolve(
                        update, extra={**(update.extra or {}), "pilot": self._pilot_of(shape, done)}
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
                native = self._pilot_of(shape, runner)
                out[job] = StateUpdate(
                    state=JobState.RUNNING,
                    detail=f"claimed by runner {entry.get('runner')}",
                    reason="",
                    extra={
                        "pilot": str(native) if native is not None else None,
                        "runner": entry.get("runner"),
                        "batch_attempt": entry.get("attempt"),
                    },
                )
            elif tid in snap.pending and job.state is JobState.RUNNING:
                out[job] = StateUpdate(
                    state=JobState.PENDING,
                    detail="re-queued",
                    reason="re-queued: its runner was lost",
                )
        orphaned = (
            isinstance(shape.remote, RestQueue)
            and bool(shape.remote.lost_runners)
            and any(str(e.get("runner")) in shape.remote.lost_runners for e in rs.running.values())
        )
        if orphaned and not snap.pending:
            # claims of a final pilot that no rename can re-queue: the next pilot's runner does
            await self._manage(shape, snap, orphaned=True)
        if snap.pending:
            refused = [p for p in shape.pilots if p.state is JobState.FAILED and not p.native_id]
            if refused and not self._active(shape):
                reason = f"the batch pilot could not be submitted: {refused[-1].reason}"
                for job in mine:
                    if (
                        job.task_id in snap.pending
                        and await shape.remote.cancel_task(job.task_id) == "cancelled"
                    ):
                        out[job] = StateUpdate(
                            state=JobState.FAILED, detail="pilot refused", reason=reason
                        )
                shape.pilots = [p for p in shape.pilots if p not in refused]
                snap = await self._scan(shape)
            await self._manage(shape, snap)

    @staticmethod
    def _tag_of(shape: Shape, pilot: JobHandle) -> str | None:
        """A pilot's ``--pilot`` tag, from its task or, for an adopted pilot, its params.json."""
        tag = shape.tags.get(pilot.directory)
        if tag is None:
            argv = list(getattr(pilot.task, "target", None) or ())
            if not argv:
                try:
                    argv = (
                        json.loads((pilot.directory / "params.json").read_text()).get("target")
                        or []
                    )
                except (OSError, ValueError, AttributeError):
                    argv = []
            tag = shape.tags[pilot.directory] = pilot_tag(argv) or ""
        return tag or None

    def _final_pilot_keys(self, shape: Shape) -> set[str]:
        """Tags and native ids of this shape's final pilots (runners record both)."""
        out: set[str] = set()
        for p in shape.pilots:
            if p.state.is_final:
                out.add(self._tag_of(shape, p) or "")
                out.add(str(p.native_id or ""))
        out.discard("")
        return out

    def _pilot_of(self, shape: Shape, runner: Mapping[str, Any]) -> str | None:
        """The native id of a runner's pilot job (the runner knows only the scheduler's id,
        which is not UNICORE's job id): found by the pilot tag it records."""
        tag = runner.get("pilot")
        for p in shape.pilots:
            if tag and p.native_id and self._tag_of(shape, p) == tag:
                return str(p.native_id)
        native = runner.get("native_id")
        return str(native) if native is not None else None

    def _fail_if_pilot_refused(
        self,
        shape: Shape,
        snap: Q.Snapshot,
        mine: list[JobHandle],
        out: dict[JobHandle, StateUpdate],
    ) -> bool:
        """A pilot refused at submission (no id): this process's pending tasks fail with its
        message (no retry loop against a request the scheduler refuses). True if any failed."""
        refused = [p for p in shape.pilots if p.state is JobState.FAILED and not p.native_id]
        if not refused or self._active(shape):
            return False
        reason = f"the batch pilot could not be submitted: {refused[-1].reason}"
        failed = False
        for job in mine:
            name = snap.pending.get(job.task_id)
            if name and Q.cancel_pending(shape.queue, name, job.task_id):
                out[job] = StateUpdate(state=JobState.FAILED, detail="pilot refused", reason=reason)
                failed = True
        shape.pilots = [p for p in shape.pilots if p not in refused]
        return failed

    def _update(self, shape: Shape, snap: Q.Snapshot, job: JobHandle) -> StateUpdate | None:
        tid = job.task_id
        if tid in snap.done:
            done = Q.read_done(shape.queue, tid)
            if done is None:
                return None
            return self._final(job, done)
        if tid in snap.running:
            entry = Q.read_running(shape.queue, tid) or {}
            if job.state is JobState.RUNNING and job.record.extra.get("runner") == entry.get(
                "runner"
            ):
                return None
            pilot = self._pilot_native(shape, str(entry.get("runner", "")))
            return StateUpdate(
                state=JobState.RUNNING,
                detail=f"claimed by runner {entry.get('runner')}",
                reason="",
                extra={
                    "pilot": pilot,
                    "runner": entry.get("runner"),
                    "batch_attempt": entry.get("attempt"),
                },
            )
        if tid in snap.pending and job.state is JobState.RUNNING:
            return StateUpdate(
                state=JobState.PENDING, detail="re-queued", reason="re-queued: its runner was lost"
            )
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
        return None if done is None else self._final(job, done)

    def _pilot_native(self, shape: Shape, runner: str) -> str | None:
        entry = R.read_entry(str(shape.queue / R.RUNNERS / f"{runner}.json")) or {}
        native = entry.get("native_id")
        return str(native) if native is not None else None

    def _final(self, job: JobHandle, done: Mapping[str, Any]) -> StateUpdate:
        name = str(done.get("state") or "CANCELLED")
        try:
            state = JobState[name]
        except KeyError:
            state = JobState.FAILED
        if not state.is_final:
            state = JobState.FAILED
        reason = done.get("reason")
        if state is JobState.CANCELLED:
            reason = "cancelled on request"
        return StateUpdate(
            state=state,
            detail="batch done",
            reason=reason or "",
            exit_code=done.get("rc"),
            signal=done.get("signal"),
            started_at=done.get("start"),
            ended_at=done.get("end"),
            extra={
                "pilot": done.get("native_id"),
                "runner": done.get("runner"),
                "batch_attempt": done.get("attempt"),
            },
        )

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
            for pilot in self._active(shape):
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


def queue_from_locator(task_id: str, locator: Any) -> RemoteQueue | RestQueue:
    """The remote queue a record's ``locator`` names (SSH connector, UNICORE or firecREST site)."""
    if not isinstance(locator, Mapping):
        raise LaunchersError(
            f"job {task_id}: its record does not say how to reach its batch queue "
            "(recorded by an older version); cancel it from the experiment that submitted it"
        )
    kind = locator.get("kind")
    if kind == "ssh":
        connector = get_connector(str(locator.get("connector")), load_config(locator.get("config")))
        return RemoteQueue(connector, str(locator.get("path")), config_file=locator.get("config"))
    if kind in REST_KINDS:
        return rest_queue_from_locator(task_id, locator)
    raise LaunchersError(f"job {task_id}: unknown batch queue transport {kind!r} in its record")


def executor_from_record(info: Mapping[str, Any], record: object) -> BatchExecutor:
    """The executor that cancels a batched job known only from its record: the process's one."""
    return cast(BatchExecutor, current().executor(("batch",), BatchExecutor))


__all__ = [
    "BatchExecutor",
    "Resources",
    "auto_slots",
    "check_fits",
    "pilot_walltime",
    "shape_of",
    "task_resources",
]
