"""The queue directory protocol, submitting side (docs/design/pilots.md §3.3, §3.6): publish by temporary
name + rename, cancel, one-listing-per-subdirectory snapshots, lost-runner recovery.

Claiming, finishing and heartbeats are done by the runner; both sides share the primitives of
``launchers.batch.runner`` (standard library only, so that the same file runs in the pilot).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import LaunchersError
from . import runner as R
from .decide import Snapshot

RUNNER_FILE = "runner.py"


def runner_source() -> bytes:
    """The runner script's text (shipped inside the package)."""
    return Path(R.__file__).read_bytes()


def ensure_queue(queue: str | os.PathLike[str]) -> Path:
    """Create the queue directory, its subdirectories and ``runner.py`` (rewritten when stale)."""
    root = Path(queue)
    try:
        for sub in R.SUBDIRS:
            (root / sub).mkdir(parents=True, exist_ok=True)
        source = runner_source()
        target = root / RUNNER_FILE
        try:
            current = target.read_bytes()
        except FileNotFoundError:
            current = None
        if current != source:
            R.write_atomic(str(target), source)
    except OSError as e:
        raise LaunchersError(f"batch queue {root}: cannot prepare it: {e}") from None
    return root


def publish(queue: str | os.PathLike[str], entry: Mapping[str, Any]) -> str:
    """Publish a task entry as ``pending/<seq>-<id>.json`` (written as ``.tmp-<id>``, renamed).

    ``entry`` must hold ``id``; ``seq`` (ns) is added when missing. Returns the file name."""
    data = dict(entry)
    task_id = str(data["id"])
    data.setdefault("seq", time.time_ns())
    data.setdefault("attempt", 0)
    name = R.pending_name(int(data["seq"]), task_id)
    pending = Path(queue) / R.PENDING
    tmp = pending / f".tmp-{task_id}"
    R.write_json(str(tmp), data)
    os.replace(tmp, pending / name)
    R.fsync_dir(str(pending))
    return name


def clear_previous(queue: str | os.PathLike[str], task_id: str) -> None:
    """Forget a previous run of ``task_id`` (its ``done/`` entry and cancel request)."""
    for path in (Path(queue) / R.DONE / f"{task_id}.json", Path(queue) / R.CANCEL / task_id):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def cancel_pending(queue: str | os.PathLike[str], name: str, task_id: str) -> bool:
    """Rename ``pending/<name>`` to ``done/<id>.json`` as CANCELLED; False when a runner has it.

    The rename is the claim; the entry is rewritten with its state right after. Readers take a
    ``done/`` entry without ``state`` (seen in between, or left by a crash) as CANCELLED."""
    src = Path(queue) / R.PENDING / name
    dst = Path(queue) / R.DONE / f"{task_id}.json"
    entry = R.read_entry(str(src)) or {"id": task_id}
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return False
    entry.update(
        state="CANCELLED", reason="cancelled on request", rc=None, signal=None, end=R.now_iso()
    )
    R.write_json(str(dst), entry)
    return True


def request_cancel(queue: str | os.PathLike[str], task_id: str) -> None:
    """Write ``cancel/<id>``: the runner running the task stops it within a second."""
    R.write_atomic(str(Path(queue) / R.CANCEL / task_id), R.now_iso() + "\n")


def cancel_task(queue: str | os.PathLike[str], task_id: str) -> str:
    """Cancel one task: "cancelled" when it was still pending, "requested" otherwise."""
    for name in R.listing(str(queue), R.PENDING):
        parsed = R.split_pending(name)
        if parsed is not None and parsed[1] == task_id and cancel_pending(queue, name, task_id):
            return "cancelled"
    request_cancel(queue, task_id)
    return "requested"


def scan(queue: str | os.PathLike[str]) -> Snapshot:
    """List each subdirectory once."""
    q = str(queue)
    pending: dict[str, str] = {}
    for name in R.listing(q, R.PENDING):
        parsed = R.split_pending(name)
        if parsed is not None:
            pending[parsed[1]] = name

    def ids(sub: str, suffix: str = ".json") -> frozenset[str]:
        return frozenset(
            n[: -len(suffix)] if suffix and n.endswith(suffix) else n for n in R.listing(q, sub)
        )

    return Snapshot(
        pending=pending,
        running=ids(R.RUNNING),
        done=ids(R.DONE),
        cancel=ids(R.CANCEL, ""),
        runners=ids(R.RUNNERS),
    )


def read_done(queue: str | os.PathLike[str], task_id: str) -> dict[str, Any] | None:
    """The ``done/<id>.json`` entry (None if absent or unreadable)."""
    return R.read_entry(str(Path(queue) / R.DONE / f"{task_id}.json"))


def read_running(queue: str | os.PathLike[str], task_id: str) -> dict[str, Any] | None:
    """The ``running/<id>.json`` entry (None if absent)."""
    return R.read_entry(str(Path(queue) / R.RUNNING / f"{task_id}.json"))


def read_runners(queue: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every runner heartbeat, with ``age`` (seconds, measured with the queue's own clock)."""
    q = str(queue)
    out = []
    try:
        now = R.fs_now(q, f"manager-{os.getpid()}")
    except OSError:
        now = time.time()
    for name in sorted(R.listing(q, R.RUNNERS)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(q, R.RUNNERS, name)
        entry = R.read_entry(path)
        if entry is None:
            continue
        try:
            entry["age"] = now - os.stat(path).st_mtime
        except OSError:
            continue
        out.append(entry)
    return out


def recover(
    queue: str | os.PathLike[str],
    *,
    lost_after: float = R.LOST_AFTER,
    final_natives: Iterable[str] = (),
) -> list[str]:
    """Re-queue claims of lost runners: heartbeat older than ``lost_after`` or whose pilot
    (native id in ``final_natives``) is final. Returns the re-queued task ids."""
    q = str(queue)
    finals = set(final_natives)
    final_runners = []
    if finals:
        for name in R.listing(q, R.RUNNERS):
            entry = (
                R.read_entry(os.path.join(q, R.RUNNERS, name)) if name.endswith(".json") else None
            )
            if entry is not None and str(entry.get("native_id")) in finals:
                final_runners.append(str(entry.get("runner")))
    try:
        return R.recover_lost(q, f"manager-{os.getpid()}", lost_after, final_runners)
    except OSError as e:
        raise LaunchersError(f"batch queue {q}: recovery failed: {e}") from None


__all__ = [
    "Snapshot",
    "cancel_task",
    "clear_previous",
    "ensure_queue",
    "publish",
    "read_done",
    "read_runners",
    "read_running",
    "recover",
    "request_cancel",
    "runner_source",
    "scan",
]
