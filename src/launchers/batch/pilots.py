"""The pilot bookkeeping of one batch shape: its queue and pilots in this process, pilots
adopted from other processes, when to submit one more (under the queue's pilot lock), how a
pilot is submitted through the inner launcher, and which pilot a runner belongs to
(docs/design/pilots.md §3.2, §3.6). The executor calls these from its submit and poll paths."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import LaunchersError
from ..fsutil import directory_lock
from ..hooks import services
from ..jobs.proc import ProcessId
from ..jobs.record import read_record
from ..jobs.state import JobState
from ..jobs.task import command
from ..units import format_duration
from . import queue as Q
from . import runner as R
from .decide import pilot_refused
from .launcher import BatchLauncher
from .remote import RemoteSnapshot, StoreQueue
from .shape import (
    REST_KINDS,
    _pilot_slurm_launcher,
    auto_slots,
    bare_launcher,
    pilot_name,
    pilot_tag,
    pilot_walltime,
    task_resources,
)

if TYPE_CHECKING:
    from ..jobs.update import StateUpdate
    from ..protocols import JobHandle

log = logging.getLogger("launchers.batch")

ACTIVE = (
    JobState.WAITING,
    JobState.SUBMITTING,
    JobState.PENDING,
    JobState.RUNNING,
    JobState.SUSPENDED,
)


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
    remote: StoreQueue | None = None
    #: the remote queue's last scan (entries read in the same command)
    last_remote: RemoteSnapshot | None = None
    #: when the remote queue was last checked for lost runners (monotonic)
    last_recover: float = 0.0
    #: each pilot's ``--pilot`` tag (its runner records it), by pilot directory
    tags: dict[Path, str] = attrs.field(factory=dict)


def active(shape: Shape) -> list[JobHandle]:
    """The shape's pilots that are not final."""
    return [p for p in shape.pilots if p.state in ACTIVE]


def owned_elsewhere(rec: Any) -> bool:
    """Whether a pilot's record names another live process as its owner."""
    owner = ProcessId.from_json(rec.extra.get("owner"))
    return owner is not None and owner.pid != os.getpid() and owner.is_alive()


def adopt_pilots(shape: Shape) -> None:
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
        ) or owned_elsewhere(rec)
        shape.pilots.append(pilot)
        if not pilot.observer:
            executor.track(pilot)


def manage(shape: Shape, snap: Q.Snapshot, orphaned: bool = False) -> bool:
    """Submit a pilot when tasks are pending and none is PENDING/RUNNING; scale up to
    ``max_pilots`` when the oldest pending task waited ``scale_after`` while all run.
    True when a pilot was submitted."""
    for pilot in shape.pilots:
        if pilot.observer:
            pilot.refresh()
    if not snap.pending and not orphaned:
        return False
    running = active(shape)
    batch = shape.batch
    if running:
        if len(running) >= batch.max_pilots or any(
            p.state is not JobState.RUNNING for p in running
        ):
            return False
        oldest = snap.oldest_seq
        if oldest is None or time.time() - oldest / 1e9 < batch.scale_after:
            return False
    with directory_lock(shape.queue / ".pilots.lock"):
        adopt_pilots(shape)
        now_active = active(shape)
        if len(now_active) > len(running) or (not running and now_active):
            return False
        submit_pilot(shape)
        return True


def submit_pilot(shape: Shape) -> None:
    """Submit the shape's next pilot (``pilots/<n>``) through the inner launcher."""
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
    if shape.remote is not None:
        argv += shape.remote.pilot_args()  # --lost-runner R: claims no rename could re-queue
    task = command(argv, name=pilot_name(shape.key, n), cwd=qpath, resumable=inner.kind == "slurm")
    if inner.kind in ("slurm", *REST_KINDS):
        launcher = _pilot_slurm_launcher(inner, batch, res, slots, walltime)
    else:
        launcher = bare_launcher(inner)
    directory = root / str(n)
    pilot = services().attach(task, directory, launcher)
    shape.pilots.append(pilot)
    log.info(
        "batch %s: pilot %d submitted (%d slots, walltime %s)",
        shape.key,
        n,
        slots,
        format_duration(int(walltime)),
    )


def tag_of(shape: Shape, pilot: JobHandle) -> str | None:
    """A pilot's ``--pilot`` tag, from its task or, for an adopted pilot, its params.json."""
    tag = shape.tags.get(pilot.directory)
    if tag is None:
        argv = list(getattr(pilot.task, "target", None) or ())
        if not argv:
            try:
                argv = json.loads((pilot.directory / "params.json").read_text()).get("target") or []
            except (OSError, ValueError, AttributeError):
                argv = []
        tag = shape.tags[pilot.directory] = pilot_tag(argv) or ""
    return tag or None


def final_pilot_keys(shape: Shape) -> set[str]:
    """Tags and native ids of this shape's final pilots (runners record both)."""
    out: set[str] = set()
    for p in shape.pilots:
        if p.state.is_final:
            out.add(tag_of(shape, p) or "")
            out.add(str(p.native_id or ""))
    out.discard("")
    return out


def pilot_of(shape: Shape, runner: Mapping[str, Any]) -> str | None:
    """The native id of a runner's pilot job (the runner knows only the scheduler's id,
    which is not UNICORE's job id): found by the pilot tag it records."""
    tag = runner.get("pilot")
    for p in shape.pilots:
        if tag and p.native_id and tag_of(shape, p) == tag:
            return str(p.native_id)
    native = runner.get("native_id")
    return str(native) if native is not None else None


def pilot_native(shape: Shape, runner: str) -> str | None:
    """The native id a local runner's entry records for its pilot job."""
    entry = R.read_entry(str(shape.queue / R.RUNNERS / f"{runner}.json")) or {}
    native = entry.get("native_id")
    return str(native) if native is not None else None


def refused_pilots(shape: Shape) -> list[JobHandle]:
    """Pilots refused at submission (FAILED, no id) while no other pilot is active: the
    shape's pending tasks would wait for ever (empty when there is none or one is active)."""
    refused = [p for p in shape.pilots if p.state is JobState.FAILED and not p.native_id]
    return [] if not refused or active(shape) else refused


def refusal(refused: list[JobHandle]) -> str:
    """The reason given to the tasks of a refused pilot."""
    return f"the batch pilot could not be submitted: {refused[-1].reason}"


def fail_if_pilot_refused(
    shape: Shape,
    snap: Q.Snapshot,
    mine: list[JobHandle],
    out: dict[JobHandle, StateUpdate],
) -> bool:
    """A pilot refused at submission (no id): this process's pending tasks fail with its
    message (no retry loop against a request the scheduler refuses). True if any failed."""
    refused = refused_pilots(shape)
    if not refused:
        return False
    reason = refusal(refused)
    failed = False
    for job in mine:
        name = snap.pending.get(job.task_id)
        if name and Q.cancel_pending(shape.queue, name, job.task_id):
            out[job] = pilot_refused(reason)
            failed = True
    shape.pilots = [p for p in shape.pilots if p not in refused]
    return failed
