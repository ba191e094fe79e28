"""The transport interface: run a command and move files, here or on another host.

A connector has both sides the runtime uses: ``protocols.Runner`` (``run``, ``home``) and
``protocols.FileStore`` (``read``, ``write``, ``stat_size``, ``mkdir``, ``remove``, ``rename``,
``listdir``), so that the output fetch, the remote job directory and the batch queue work the
same over a connector and over a remote site's storage. Connectors are asynchronous (asyncssh
is); the jobs layer drives them from its own event loop.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from ..protocols import FileStore, Runner


@attrs.frozen
class CommandResult:
    """What a finished command returned; output decoded as UTF-8 with replacement."""

    returncode: int
    stdout: str
    stderr: str


class Connector(abc.ABC):
    """Runs commands and reads/writes files on one host (this one, or one reached over SSH):
    a ``protocols.Runner`` and a ``protocols.FileStore`` at once."""

    #: True when paths are paths of this machine (no copy needed).
    is_local: bool = False
    #: Name used in state records and error messages.
    name: str = "local"
    #: a rename is one atomic call on both hosts (``rename(2)``, SFTP ``posix-rename``)
    can_rename: bool = True

    @property
    def runner(self) -> Runner:
        """The command side of this connector."""
        return self

    @property
    def files(self) -> FileStore:
        """The file side of this connector."""
        return self

    @abc.abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        """Run ``argv`` (no shell); ``env`` is added to the environment. Raises
        ``ConnectorError`` when the transport fails or ``timeout`` passes."""

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        """Write atomically: parents created, temporary name, rename over ``path``."""

    @abc.abstractmethod
    async def read_file(self, path: str, *, offset: int = 0, max_bytes: int | None = None) -> bytes:
        """Read ``path`` from ``offset``, at most ``max_bytes``; ``FileNotFoundError`` if absent."""

    @abc.abstractmethod
    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""

    @abc.abstractmethod
    async def mkdir(self, path: str) -> None:
        """Create ``path`` and its parents; no error if it exists."""

    # the FileStore side (protocols.FileStore) ------------------------------------------------

    async def read(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        """The file's bytes from ``offset`` (at most ``size``); b"" at or past its end."""
        return await self.read_file(path, offset=offset, max_bytes=size)

    async def write(self, path: str, data: bytes) -> None:
        """Create or replace the file atomically."""
        await self.write_file(path, data)

    @abc.abstractmethod
    async def stat_size(self, path: str) -> int | None:
        """The file's size in bytes; None when it does not exist."""

    @abc.abstractmethod
    async def remove(self, path: str) -> bool:
        """Remove a file or a directory tree; False when nothing was there."""

    @abc.abstractmethod
    async def rename(self, src: str, dst: str) -> None:
        """Rename atomically (``FileNotFoundError`` when ``src`` is gone)."""

    @abc.abstractmethod
    async def listdir(self, path: str) -> list[str]:
        """The names in a directory (``FileNotFoundError`` when it does not exist)."""

    async def home(self) -> str:
        """The home directory on that host (to expand ``~``)."""
        res = await self.run(["sh", "-c", 'printf %s "$HOME"'])
        return res.stdout

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release the transport (connections, channels)."""
