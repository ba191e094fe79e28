"""Where a direct job's files live, and how they get there and back: the one seam through which
the direct executor touches a job directory other than its own (docs/jobs.md, "The direct
launcher"). ``LocalJobFiles``: the job runs in its local directory, nothing moves.
``ConnectorJobFiles``: the direct launcher over SSH; the job runs in a directory under the
connector's ``workdir`` (the layout below, recorded as ``remote_dir``), ``job.sh`` and
``params.json`` are written there before the start, and the outputs and results are copied back
when the job ends. A shared remote-files layer replaces ``ConnectorJobFiles`` as a whole.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..jobs.record import RESULT_FILES
from ..runtime.files import DEFAULT_BASE, connector_base, fetch_outputs, remote_job_dir
from .decide import banner_seen

if TYPE_CHECKING:
    from ..connectors.base import Connector
    from ..protocols import JobHandle

log = logging.getLogger("launchers.local")

#: Files copied back from the remote job directory once a job has ended (whole).
FETCHED = RESULT_FILES
#: The connector's ``workdir`` when it names none (``~`` is the remote home).
DEFAULT_ROOT = DEFAULT_BASE


def has_banner(directory: Path, attempt: int) -> bool:
    """Whether ``job.out`` (here: the local copy) shows that attempt ``attempt`` started."""
    try:
        with open(directory / "job.out", "rb") as f:
            return banner_seen(f.read(), attempt)
    except OSError:
        return False


class JobFiles(abc.ABC):
    """Where a direct job runs, and the files moved for it."""

    @abc.abstractmethod
    async def job_dir(self, job: JobHandle) -> str:
        """The directory the job runs in (the one recorded for it when there is one)."""

    @abc.abstractmethod
    def recorded_dir(self, job: JobHandle) -> str | None:
        """The directory a started job runs in, as its record says; None when unknown."""

    def record_extra(self, where: str) -> dict[str, Any]:
        """What the job's record keeps of ``where`` (default: nothing)."""
        return {}

    async def stage(self, job: JobHandle, where: str, script: str) -> None:  # noqa: B027
        """Put ``job.sh`` (already written locally) and the job's inputs in ``where``."""

    async def fetch(self, job: JobHandle, where: str) -> None:  # noqa: B027
        """Copy the job's outputs and results from ``where`` to its local directory."""


class LocalJobFiles(JobFiles):
    """The job runs in its own local directory: nothing to stage or fetch."""

    async def job_dir(self, job: JobHandle) -> str:
        return str(job.directory)

    def recorded_dir(self, job: JobHandle) -> str | None:
        return str(job.directory)


class ConnectorJobFiles(JobFiles):
    """The job directory on the host of an SSH connector (``connector()`` returns it, connected
    on first use): ``<root>/<12 hex of the local workdir's hash>/jobs/<name>/<digest>``, the
    root being the connector's ``workdir`` unless ``root`` is given."""

    def __init__(self, connector: Callable[[], Connector], *, root: str | None = None) -> None:
        self.connector = connector
        self._root = root

    async def _remote_root(self) -> str:
        if self._root is None:
            self._root = await connector_base(self.connector())
        return self._root

    async def job_dir(self, job: JobHandle) -> str:
        known = job.record.extra.get("remote_dir")
        if isinstance(known, str) and known:
            return known
        return remote_job_dir(await self._remote_root(), job.directory, named=False)

    def recorded_dir(self, job: JobHandle) -> str | None:
        where = job.record.extra.get("remote_dir")
        return where if isinstance(where, str) else None

    def record_extra(self, where: str) -> dict[str, Any]:
        return {"remote_dir": where}

    async def stage(self, job: JobHandle, where: str, script: str) -> None:
        connector = self.connector()
        await connector.write_file(f"{where}/job.sh", script.encode(), mode=0o755)
        await connector.write_file(f"{where}/params.json", job.paths.params.read_bytes())
        inputs = job.directory / "inputs.json"  # a dependent's inputs: docs/design/runtime.md §15
        if inputs.exists():
            await connector.write_file(f"{where}/inputs.json", inputs.read_bytes())

    async def fetch(self, job: JobHandle, where: str) -> None:
        await fetch_outputs(self.connector(), where, job.directory, max_bytes=None, log=log)


__all__ = [
    "DEFAULT_ROOT",
    "FETCHED",
    "ConnectorJobFiles",
    "JobFiles",
    "LocalJobFiles",
    "has_banner",
]
