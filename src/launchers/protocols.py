"""What the runtime and the executors use of the objects above them, as protocols
(docs/jobs.md, Layers): ``JobHandle`` is a job as an executor sees it (``jobs.job.Job``
implements it; a test may pass a fake), ``Clock`` the time an executor reads, ``Runner`` the
commands and ``FileStore`` the files at one place an executor reaches (this machine or a host
over SSH: a connector is both; a remote site's storage is a ``FileStore``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .connectors.base import CommandResult
    from .jobs.record import JobPaths, StateRecord
    from .jobs.state import JobState
    from .jobs.task import Task
    from .jobs.update import StateUpdate
    from .launcher import Launcher
    from .runtime.executor import Executor


class JobHandle(Protocol):
    """One job of this process: its directory, its record, and the changes an executor makes
    (``apply``, ``begin_attempt``); see ``launchers.runtime.executor``."""

    task: Task | None
    directory: Path
    paths: JobPaths
    launcher: Launcher | None
    executor: Executor | None
    #: set when a cancel was asked; executors report "cancelled on request"
    cancel_requested: bool
    #: True while another live process owns the submission
    observer: bool
    #: executor-private scratch space, never persisted
    runtime: dict[str, Any]

    @property
    def record(self) -> StateRecord: ...

    @property
    def task_id(self) -> str: ...

    @property
    def state(self) -> JobState: ...

    @property
    def native_id(self) -> str | None: ...

    @property
    def attempt(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def pilot(self) -> str | None: ...

    def apply(self, update: StateUpdate) -> bool:
        """Record ``update``; True when the state changed."""
        ...

    def begin_attempt(self, cause: str = "") -> None:
        """Archive this attempt's outputs and start the next one (WAITING)."""
        ...

    def replace_record(self, record: StateRecord, *, write: bool = False) -> None:
        """Adopt ``record`` (read from disk, or rebuilt)."""
        ...

    def refresh(self) -> bool:
        """Re-read ``state.json``; True when the state changed."""
        ...

    def defer_sync(self, path: Path) -> None:
        """``path`` was written without fsync: make it durable with the next record."""
        ...

    def take_over(self) -> str | None:
        """An observer whose owner died claims the submission: "submit", "reconcile" or None."""
        ...

    def cancel(self) -> None:
        """Ask for cancellation."""
        ...


class Clock(Protocol):
    """The time an executor reads: wall-clock seconds and a monotonic counter."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class Runner(Protocol):
    """Runs commands at one place: this machine (a subprocess) or a host over SSH. A connector
    (``connectors.base.Connector``) is one, and the ``FileStore`` of the same place."""

    #: the name used in records and messages
    name: str
    #: True when paths are paths of this machine (no copy needed)
    is_local: bool

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        """Run ``argv`` (no shell); ``ConnectorError`` when the transport fails or ``timeout``
        passes."""
        ...

    async def home(self) -> str:
        """The home directory there (to expand ``~``)."""
        ...


class FileStore(Protocol):
    """Files at one place (a UNICORE storage, a firecREST file system...), as the executors and
    the queues of batched tasks use them (docs/remote-sites.md, "Remote files").

    Paths are the store's own: absolute on the site, or relative to the store's root where it
    has one (a UNICORE job's working directory). A missing file or directory raises
    ``FileNotFoundError``; other failures raise a ``LaunchersError`` (transient ones were
    retried first). Contents are bytes, exactly as on the site, whatever the API decodes."""

    #: whether ``rename`` is a cheap, atomic operation of the site (else it raises)
    can_rename: bool

    async def read(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        """The file's bytes from ``offset`` (at most ``size`` of them); b"" at or past its end."""
        ...

    async def write(self, path: str, data: bytes) -> None:
        """Create or replace the file with ``data`` (its directory exists)."""
        ...

    async def stat_size(self, path: str) -> int | None:
        """The file's size in bytes; None when it does not exist."""
        ...

    async def mkdir(self, path: str) -> None:
        """Create the directory and its parents (an existing one is fine)."""
        ...

    async def remove(self, path: str) -> bool:
        """Remove a file (or a directory with what it holds); False when the site said that
        nothing was there (a site that does not tell, UNICORE, answers True)."""
        ...

    async def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (``FileNotFoundError`` when ``src`` is gone)."""
        ...

    async def listdir(self, path: str) -> list[str]:
        """The names in a directory (not sorted, no ``.`` or ``..``)."""
        ...


__all__ = ["Clock", "FileStore", "JobHandle", "Runner"]
