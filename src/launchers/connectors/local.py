"""``LocalConnector``: the ``Connector`` interface for this machine (subprocesses, local files)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ConnectorError
from ..fsutil import atomic_write_bytes
from .base import CommandResult, Connector


class LocalConnector(Connector):
    """Runs commands with ``asyncio`` subprocesses (no shell) and uses local files."""

    is_local = True

    def __init__(self, name: str = "local") -> None:
        self.name = name

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        """Run ``argv``; ``env`` is added to this process's environment. A missing program or
        directory, or a command past ``timeout`` (then killed), is a ``ConnectorError``."""
        if not argv:
            raise ConnectorError("local: empty command")
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=full_env,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
            raise ConnectorError(f"local: cannot run {argv[0]!r}: {e.strerror or e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except asyncio.TimeoutError:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            await proc.wait()
            raise ConnectorError(f"local: {argv[0]} gave no answer in {timeout} s") from None
        return CommandResult(
            returncode=proc.returncode if proc.returncode is not None else -1,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
        )

    async def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        """Atomic write (parents created)."""
        atomic_write_bytes(os.path.expanduser(path), data, mode=mode)

    async def read_file(self, path: str, *, offset: int = 0, max_bytes: int | None = None) -> bytes:
        with open(os.path.expanduser(path), "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if max_bytes is None else f.read(max_bytes)

    async def exists(self, path: str) -> bool:
        return os.path.exists(os.path.expanduser(path))

    async def mkdir(self, path: str) -> None:
        Path(os.path.expanduser(path)).mkdir(parents=True, exist_ok=True)

    async def home(self) -> str:
        return str(Path.home())
