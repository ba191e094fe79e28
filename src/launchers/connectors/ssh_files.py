"""The SSH connector's files: one SFTP channel per connection, ``~`` expanded against the
remote home, every operation bounded by ``command_timeout`` and tried again once reconnected
after a loss, writes made atomic by a rename (docs/ssh.md)."""

from __future__ import annotations

import asyncio
import posixpath
import secrets
from typing import Any

import asyncssh

from launchers.errors import ConnectorError

from .ssh_connection import SSHConnection


class SFTPFiles(SSHConnection):
    """Reads and writes files on the connection's host over SFTP."""

    async def _sftp_client(
        self, budget: float
    ) -> tuple[asyncssh.SSHClientConnection, asyncssh.SFTPClient, str]:
        """The connection, its SFTP channel (opened once per connection) and the remote home."""
        conn = await self._connection(budget)
        async with self._sftp_lock:
            if self._sftp is None or self._sftp_conn is not conn:
                try:
                    sftp = await asyncio.wait_for(
                        conn.start_sftp_client(), self.config.command_timeout
                    )
                    home = await sftp.realpath(".")
                except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
                    raise ConnectorError(
                        f"connector {self.name}: cannot open SFTP on {self.target}: {e or type(e).__name__}"
                    )
                self._sftp = sftp
                self._sftp_conn = conn
                self._sftp_home = home if isinstance(home, str) else home.decode()
            assert self._sftp_home is not None
            return conn, self._sftp, self._sftp_home

    @staticmethod
    def _expand(path: str, home: str) -> str:
        if path == "~":
            return home
        if path.startswith("~/"):
            return posixpath.join(home, path[2:])
        return path

    async def _file_op(self, what: str, path: str, op: Any) -> Any:
        """Run ``op(sftp, expanded_path)`` within ``command_timeout``, errors mapped; after a
        connection loss the (idempotent) operation is tried again once reconnected."""
        limit = float(self.config.command_timeout)

        async def connect(
            budget: float,
        ) -> tuple[asyncssh.SSHClientConnection, tuple[asyncssh.SFTPClient, str]]:
            conn, sftp, home = await self._sftp_client(budget)
            return conn, (sftp, self._expand(path, home))

        async def run(handle: tuple[asyncssh.SFTPClient, str]) -> Any:
            return await op(*handle)

        def failure(handle: tuple[asyncssh.SFTPClient, str], e: BaseException) -> BaseException:
            full = handle[1]
            if isinstance(e, asyncssh.SFTPNoSuchFile):
                return FileNotFoundError(2, f"{what}: no such file on {self.name}", full)
            if isinstance(e, asyncssh.SFTPPermissionDenied):
                return PermissionError(13, f"{what}: permission denied on {self.name}", full)
            if isinstance(e, asyncio.TimeoutError):
                return ConnectorError(
                    f"connector {self.name}: {what} {full} timed out after {limit:g} s"
                )
            return ConnectorError(f"connector {self.name}: {what} {full} failed: {e}")

        return await self._retrying(limit, connect, run, failure)

    async def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        """Write atomically: parents created, temporary name, ``posix-rename`` over ``path``."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> None:
            parent = posixpath.dirname(full)
            if parent:
                await sftp.makedirs(parent, exist_ok=True)
            tmp = posixpath.join(parent, f".{posixpath.basename(full)}.tmp-{secrets.token_hex(6)}")
            try:
                attrs_ = (
                    asyncssh.SFTPAttrs(permissions=mode)
                    if mode is not None
                    else asyncssh.SFTPAttrs()
                )
                async with sftp.open(tmp, "wb", attrs_) as f:
                    await f.write(data)
                if mode is not None:
                    await sftp.chmod(tmp, mode)
                try:
                    await sftp.posix_rename(tmp, full)
                except asyncssh.SFTPOpUnsupported:
                    if await sftp.exists(full):
                        await sftp.remove(full)
                    await sftp.rename(tmp, full)
            except BaseException:
                try:
                    await sftp.remove(tmp)
                except (OSError, asyncssh.Error):
                    pass
                raise

        await self._file_op("write", path, op)

    async def read_file(self, path: str, *, offset: int = 0, max_bytes: int | None = None) -> bytes:
        """Read ``path`` from ``offset``, at most ``max_bytes`` (all when None)."""
        if offset < 0 or (max_bytes is not None and max_bytes < 0):
            raise ValueError("offset and max_bytes must not be negative")

        async def op(sftp: asyncssh.SFTPClient, full: str) -> bytes:
            if max_bytes == 0:
                await sftp.stat(full)
                return b""
            async with sftp.open(full, "rb") as f:
                if max_bytes is None:
                    size = (await f.stat()).size or 0
                    if size <= offset:
                        return b""
                    data = await f.read(size - offset, offset)
                else:
                    data = await f.read(max_bytes, offset)
            return data if isinstance(data, bytes) else data.encode()

        result: bytes = await self._file_op("read", path, op)
        return result

    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists on the remote host."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> bool:
            return bool(await sftp.exists(full))

        result: bool = await self._file_op("stat", path, op)
        return result

    async def mkdir(self, path: str) -> None:
        """Create ``path`` and its parents; no error if it exists."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> None:
            await sftp.makedirs(full, exist_ok=True)

        await self._file_op("mkdir", path, op)

    async def stat_size(self, path: str) -> int | None:
        """The remote file's size; None when it does not exist."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> int | None:
            try:
                return int((await sftp.stat(full)).size or 0)
            except asyncssh.SFTPNoSuchFile:
                return None

        result: int | None = await self._file_op("stat", path, op)
        return result

    async def remove(self, path: str) -> bool:
        """Remove a remote file or directory tree; False when nothing was there."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> bool:
            try:
                if (await sftp.lstat(full)).type == asyncssh.FILEXFER_TYPE_DIRECTORY:
                    await sftp.rmtree(full)
                else:
                    await sftp.remove(full)
            except asyncssh.SFTPNoSuchFile:
                return False
            return True

        result: bool = await self._file_op("remove", path, op)
        return result

    async def rename(self, src: str, dst: str) -> None:
        """``posix-rename`` (atomic, replacing ``dst``); ``FileNotFoundError`` when ``src`` is gone."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> None:
            await sftp.posix_rename(full, self._expand(dst, self._sftp_home or "~"))

        await self._file_op("rename", src, op)

    async def listdir(self, path: str) -> list[str]:
        """The names in a remote directory (no ``.`` or ``..``)."""

        async def op(sftp: asyncssh.SFTPClient, full: str) -> list[str]:
            names = await sftp.listdir(full)
            out = [n if isinstance(n, str) else n.decode() for n in names]
            return [n for n in out if n not in (".", "..")]

        result: list[str] = await self._file_op("list", path, op)
        return result
