"""The transport interface: run a command and move files, here or on another host.

Connectors are asynchronous (asyncssh is); the jobs layer drives them from its own event loop.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

import attrs


@attrs.frozen
class CommandResult:
    """What a finished command returned; output decoded as UTF-8 with replacement."""

    returncode: int
    stdout: str
    stderr: str


class Connector(abc.ABC):
    """Runs commands and reads/writes files on one host (this one, or one reached over SSH)."""

    #: True when paths are paths of this machine (no copy needed).
    is_local: bool = False
    #: Name used in state records and error messages.
    name: str = "local"

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

    async def home(self) -> str:
        """The home directory on that host (to expand ``~``)."""
        res = await self.run(["sh", "-c", 'printf %s "$HOME"'])
        return res.stdout

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release the transport (connections, channels)."""
