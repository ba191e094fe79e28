"""``JobFiles``: the Slurm executor's one seam to a job's files on the cluster side (docs/slurm.md,
"Over a connector"): where the job directory is, staging it, writing scripts, reading ``job.rc``
and the output banner, copying the outputs home. On this machine the job directory is the
local one; through a connector it is under the connector's ``workdir`` (recorded as
``remote_dir``). Everything else of the executor reaches files through this object, so a
remote-files layer can replace it whole."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConnectorError
from ..fsutil import atomic_write_bytes
from ..jobs.record import RC, RESULT_FILES, STDOUT, RcRecord, parse_rc
from ..runtime.files import (
    DEFAULT_BASE,
    MAX_OUTPUT_BYTES,
    connector_base,
    fetch_outputs,
    remote_job_dir,
)
from ..runtime.loop import blocking

if TYPE_CHECKING:
    from ..connectors.base import Connector
    from ..protocols import JobHandle
    from .cluster import SlurmCluster

#: the remote root of job directories when the connector names none
DEFAULT_WORKDIR = DEFAULT_BASE
#: what a finished remote job leaves that is copied home (each up to ``MAX_OUTPUT_BYTES``)
OUTPUT_FILES = RESULT_FILES


class JobFiles:
    """Job directories on the cluster side of one executor (see the module docstring)."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self._cluster = cluster

    @property
    def is_local(self) -> bool:
        return self._cluster.is_local

    @property
    def connector(self) -> Connector:
        return self._cluster.connector

    def job_dir(self, job: JobHandle) -> str:
        """Where the job's files are on the cluster side (the local directory on this machine;
        under the connector's ``workdir`` otherwise, recorded as ``remote_dir``)."""
        if self.is_local:
            return str(job.directory)
        remote = job.runtime.get("remote_dir") or job.record.extra.get("remote_dir")
        return str(remote) if remote else str(job.directory)

    async def prepare(self, job: JobHandle) -> str:
        """Choose (once) and create the remote job directory, and copy ``params.json`` there:
        ``WORKDIR/<experiment>-<sha12 of its path>/jobs/<task name>/<digest>``."""
        remote = job.runtime.get("remote_dir") or job.record.extra.get("remote_dir")
        if not remote:
            base = await connector_base(self.connector)
            remote = remote_job_dir(base, Path(job.directory), named=True)
        job.runtime["remote_dir"] = remote
        await self.connector.mkdir(remote)
        for name in ("params.json", "inputs.json"):  # inputs: docs/design/runtime.md §15
            local = Path(job.directory) / name
            if local.exists():
                await self.connector.write_file(f"{remote}/{name}", local.read_bytes())
        return str(remote)

    async def write(
        self, path: str, data: bytes, *, mode: int | None = None, sync_dir: bool = True
    ) -> None:
        """Write a file on the cluster side (here: ``blocking``, inline while the disk is fast)."""
        if self.is_local:
            await blocking(atomic_write_bytes, path, data, mode=mode, sync_dir=sync_dir)
        else:
            await self.connector.write_file(path, data, mode=mode)

    async def write_script(self, job: JobHandle, text: str) -> str:
        """Write the job's ``job.sh`` where it runs (a copy stays in the local directory);
        returns the job directory on the cluster side."""
        data = text.encode("utf-8")
        if not self.is_local:
            local_copy = str(Path(job.directory) / "job.sh")
            await blocking(atomic_write_bytes, local_copy, data, mode=0o755, sync_dir=False)
        directory = self.job_dir(job)
        if self.is_local:
            # no fsync here: the SUBMITTING record written next fsyncs job.sh, params.json and
            # the directory together, before sbatch runs
            script = f"{directory}/job.sh"
            await blocking(atomic_write_bytes, script, data, mode=0o755, sync=False)
            job.defer_sync(Path(script))
        else:
            await self.write(f"{directory}/job.sh", data, mode=0o755, sync_dir=False)
        return directory

    async def mkdir(self, path: str) -> None:
        """Create a directory on the cluster side (and its parents)."""
        await self.connector.mkdir(path)

    async def read(self, path: str, *, offset: int = 0, max_bytes: int | None = None) -> bytes:
        """A file on the cluster side from ``offset`` (``FileNotFoundError`` when absent)."""
        return await self.connector.read_file(path, offset=offset, max_bytes=max_bytes)

    async def read_rc(self, directory: str) -> RcRecord | None:
        """The ``job.rc`` of a job directory on the cluster side, or None."""
        try:
            data = await self.connector.read_file(f"{directory}/{RC}", max_bytes=4096)
        except (FileNotFoundError, OSError):
            return None
        return parse_rc(data.decode("utf-8", errors="replace"))

    async def banner_seen(self, directory: str, attempt: int) -> bool:
        """Whether attempt ``attempt`` started (its banner is in ``job.out``)."""
        try:
            data = await self.connector.read_file(f"{directory}/{STDOUT}")
        except (FileNotFoundError, ConnectorError, OSError):
            return False
        return f"==== launchers: attempt {attempt}, ".encode() in data

    async def fetch_outputs(self, job: JobHandle) -> None:
        """Copy a finished remote job's outputs back into the local job directory."""
        if self.is_local:
            return
        await fetch_outputs(self.connector, self.job_dir(job), Path(job.directory))

    def archive_rc(self, job: JobHandle) -> None:
        """Move the local ``job.rc`` of the ending attempt to ``attempts/N/`` (a resubmission)."""
        rc = Path(job.directory) / RC
        if rc.exists():
            dest = Path(job.directory) / "attempts" / str(job.attempt)
            dest.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.replace(rc, dest / RC)


__all__ = ["DEFAULT_WORKDIR", "MAX_OUTPUT_BYTES", "OUTPUT_FILES", "JobFiles"]
