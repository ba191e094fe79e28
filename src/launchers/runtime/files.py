"""The remote-files layer over ``protocols.FileStore`` (docs/design/runtime.md §2): where a job's
directory is on another host (``remote_job_dir``, under ``connector_base``), copying a
finished job's results home (``fetch_outputs``), following its outputs while it runs
(``follow_outputs``) and the local copy of its exit record (``store_rc``). Used by Slurm over
SSH, the direct launcher over SSH, the SSH, UNICORE and firecREST sites and the batch queues."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LaunchersError
from ..fsutil import atomic_write_bytes, atomic_write_text
from ..jobs.record import FOLLOWED, RESULT_FILES, RcRecord, parse_rc

if TYPE_CHECKING:
    from ..protocols import JobHandle, Runner

#: the remote root of job directories (and batch queues) when a connector names none
DEFAULT_BASE = "~/.local/share/launchers"
#: the most bytes of one result file copied home
MAX_OUTPUT_BYTES = 64 * 1024 * 1024


class Readable(Protocol):
    """The part of a ``protocols.FileStore`` that an output fetch uses."""

    async def read(self, path: str, offset: int = 0, size: int | None = None) -> bytes: ...


def configured_base(connector: Any) -> str:
    """The connector's ``workdir`` as configured (``~`` not expanded), else ``DEFAULT_BASE``;
    no trailing ``/``."""
    base = getattr(getattr(connector, "config", None), "workdir", None) or DEFAULT_BASE
    return str(base).rstrip("/")


def expand_home(path: str, home: str) -> str:
    """``path`` with a leading ``~`` (alone or followed by ``/``) replaced by ``home`` (pure)."""
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


async def connector_base(connector: Runner) -> str:
    """The root of remote job directories on the connector's host: its ``workdir`` (else
    ``DEFAULT_BASE``) with ``~`` expanded against the remote home."""
    base = configured_base(connector)
    if base == "~" or base.startswith("~/"):
        base = expand_home(base, await connector.home()).rstrip("/")
    return base


def remote_job_dir(base: str, local_dir: Path, *, named: bool) -> str:
    """The remote job directory of the local job directory ``local_dir``
    (``<workdir>/jobs/<task name>/<digest>``) under ``base`` (pure):
    ``BASE/<workdir name>-<sha12>/jobs/<name>/<digest>`` when ``named`` (Slurm over SSH and
    SSH sites), ``BASE/<sha12>/jobs/<name>/<digest>`` otherwise (the direct launcher over SSH);
    ``sha12`` is 12 hex digits of the SHA-256 of the local workdir's path. Records keep the
    directory chosen (``remote_dir``), so a layout change never moves a submitted job."""
    root = local_dir.parent.parent.parent
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    top = f"{root.name}-{tag}" if named else tag
    return f"{base.rstrip('/')}/{top}/jobs/{local_dir.parent.name}/{local_dir.name}"


async def fetch_outputs(
    store: Readable,
    remote_dir: str,
    local_dir: Path,
    *,
    names: Sequence[str] = RESULT_FILES,
    max_bytes: int | None = MAX_OUTPUT_BYTES,
    present: Collection[str] | None = None,
    log: logging.Logger | None = None,
    skip_failures: bool = True,
) -> list[str]:
    """Copy the result files ``names`` of a finished job from ``remote_dir`` into ``local_dir``
    (created if needed): read at once, each written atomically in a worker thread (at most
    ``max_bytes`` of each; None: all). A missing file is skipped; ``present``: the names the
    remote directory is known to hold (a listing read before), so that no read is sent for the
    others. Another failure skips the file too (an output must not hide the job's state), with
    a warning on ``log`` when given; with ``skip_failures=False`` it is raised instead (the
    caller tries the whole fetch again later). Returns the names copied, in the order of
    ``names``."""

    async def one(name: str) -> bool:
        try:
            data = await store.read(f"{remote_dir}/{name}", 0, max_bytes)
        except FileNotFoundError:
            return False
        except (OSError, LaunchersError) as e:
            if not skip_failures:
                raise
            if log is not None:
                log.warning("%s: cannot copy %s back: %s", local_dir.name, name, e)
            return False
        local_dir.mkdir(parents=True, exist_ok=True)
        # up to 64 MiB: always in a worker thread
        await asyncio.to_thread(atomic_write_bytes, local_dir / name, data, sync_dir=False)
        return True

    wanted = [n for n in names if present is None or n in present]
    copied = await asyncio.gather(*(one(n) for n in wanted))
    return [n for n, ok in zip(wanted, copied, strict=True) if ok]


async def follow_outputs(
    job: JobHandle,
    read: Callable[[str, int], Awaitable[bytes | None]],
    names: Sequence[str] = FOLLOWED,
) -> int:
    """Append the new bytes of the job's remote ``job.out``/``job.err`` to the local copies;
    ``read(name, offset)`` gives the remote file's bytes from ``offset`` (None or b"": nothing
    new). Returns how many bytes arrived. Each local file is locked (``flock``) while it grows:
    another process following the same job (``launchers logs --follow``, ``status``) skips it
    meanwhile instead of appending the same bytes again."""
    lock = job.runtime.setdefault("output_lock", asyncio.Lock())
    total = 0
    async with lock:
        for name in names:
            with open(job.directory / name, "ab") as f:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being copied by another process right now
                offset = os.fstat(f.fileno()).st_size
                data = await read(name, offset)
                if data:
                    f.write(data)
                    total += len(data)
    return total


def store_rc(job: JobHandle, data: bytes) -> RcRecord | None:
    """The exit record ``data`` (a remote ``job.rc``) parsed; when it parses, also written
    atomically to the job's local ``job.rc`` with the job's attempt."""
    rc = parse_rc(data.decode("utf-8", errors="replace"))
    if rc is not None:
        record = json.loads(data)
        record["attempt"] = job.attempt
        atomic_write_text(job.paths.rc, json.dumps(record) + "\n")
    return rc


__all__ = [
    "DEFAULT_BASE",
    "MAX_OUTPUT_BYTES",
    "Readable",
    "configured_base",
    "connector_base",
    "expand_home",
    "fetch_outputs",
    "follow_outputs",
    "remote_job_dir",
    "store_rc",
]
