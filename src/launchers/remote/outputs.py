"""A remote job's files seen from this process: the payload it sends (attached by ``launchers
run`` before the submission) and the copy of its outputs and exit record home, shared by the
UNICORE, firecREST and SSH site executors, which differ only in how they read one remote file
(``read_file``)."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..jobs.record import FOLLOWED, RC, RcRecord
from ..runtime.core import current
from ..runtime.files import follow_outputs, store_rc

if TYPE_CHECKING:
    from ..protocols import JobHandle
    from .payload import RemotePayload

#: The files followed while a job runs (appended locally as they grow).
OUTPUTS = FOLLOWED


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
        """Append the new bytes of the remote ``job.out``/``job.err`` to the local copies
        (``runtime.files.follow_outputs``); returns how many bytes arrived."""

        async def read(name: str, offset: int) -> bytes | None:
            return await self.read_file(job, name, offset)

        return await follow_outputs(job, read)

    async def fetch_rc(self, job: JobHandle) -> RcRecord | None:
        """The remote ``job.rc`` (also written, atomically, to the local job directory), or None."""
        data = await self.read_file(job, RC)
        return store_rc(job, data) if data else None


__all__ = ["OUTPUTS", "RemoteOutputs", "attach_payload", "attached_payload"]
