"""A remote job's files seen from this process: the payload it sends (attached by ``launchers
run`` before the submission) and the copy of its outputs and exit record home, shared by the
UNICORE, firecREST and SSH site executors, which differ only in how they read one remote file
(``read_file``)."""

from __future__ import annotations

import abc
import asyncio
import fcntl
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..fsutil import atomic_write_text
from ..jobs.record import RcRecord, parse_rc
from ..runtime.core import current

if TYPE_CHECKING:
    from ..protocols import JobHandle
    from .payload import RemotePayload

#: The files followed while a job runs (appended locally as they grow).
OUTPUTS = ("job.out", "job.err")


def attach_payload(directory: Path, payload: RemotePayload) -> None:
    """Make ``payload`` what the job of ``directory`` sends (``run_project`` sets it before submit)."""
    runtime = current()
    with runtime.payloads_lock:
        runtime.payloads[Path(directory).absolute()] = payload


def attached_payload(directory: Path) -> RemotePayload | None:
    """The payload attached to the job of ``directory`` in this process, if any."""
    runtime = current()
    with runtime.payloads_lock:
        return cast("RemotePayload | None", runtime.payloads.get(Path(directory).absolute()))


class RemoteOutputs(abc.ABC):
    """Follows ``job.out``/``job.err`` and fetches ``job.rc`` through ``read_file``."""

    @abc.abstractmethod
    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """Bytes of the job's remote file ``name`` from ``offset`` (None when absent)."""

    async def sync_outputs(self, job: JobHandle) -> int:
        """Append the new bytes of the remote ``job.out``/``job.err`` to the local copies;
        returns how many bytes arrived. Each local file is locked (``flock``) while it grows:
        another process following the same job (``launchers logs --follow``, ``status``) skips
        it meanwhile instead of appending the same bytes again."""
        lock = job.runtime.setdefault("output_lock", asyncio.Lock())
        total = 0
        async with lock:
            for name in OUTPUTS:
                with open(job.directory / name, "ab") as f:
                    try:
                        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue  # being copied by another process right now
                    offset = os.fstat(f.fileno()).st_size
                    data = await self.read_file(job, name, offset)
                    if data:
                        f.write(data)
                        total += len(data)
        return total

    async def fetch_rc(self, job: JobHandle) -> RcRecord | None:
        """The remote ``job.rc`` (also written, atomically, to the local job directory), or None."""
        data = await self.read_file(job, "job.rc")
        if not data:
            return None
        rc = parse_rc(data.decode("utf-8", errors="replace"))
        if rc is not None:
            record = json.loads(data)
            record["attempt"] = job.attempt
            atomic_write_text(job.paths.rc, json.dumps(record) + "\n")
        return rc


__all__ = ["OUTPUTS", "RemoteOutputs", "attach_payload", "attached_payload"]
