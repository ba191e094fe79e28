"""The SSH connector: commands and files on a remote host over one asyncssh connection.

One connection per connector, opened lazily, shared by at most ``max_channels`` concurrent
commands plus one SFTP channel; host keys checked against ``known_hosts`` with the
``strict_host_key_checking`` policy; reconnects with exponential backoff after a loss
(docs/design/runtime.md §12).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Mapping, Sequence

import asyncssh

from launchers.connectors.base import CommandResult
from launchers.errors import ConnectorError

from .ssh_command import (
    PID_MARKER,
    _decode,
    _returncode,
    build_command,
    split_pid_marker,
)
from .ssh_connection import (
    BACKOFF_CAP,
    BACKOFF_JITTER,
    SSHConnection,
    backoff_delays,
    parse_proxy_jump,
)
from .ssh_files import SFTPFiles
from .ssh_keys import (
    POLICIES,
    HostKeyError,
    SSHAuthenticationError,
    known_hosts_pattern,
    private_key_from,
)

log = logging.getLogger("launchers.connectors.ssh")


class SSHConnector(SFTPFiles):
    """Runs commands and moves files on one host over SSH (asyncssh), reconnecting when lost.

    Use it from one event loop at a time; a new loop drops the old loop's connection.
    """

    is_local = False

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        """Run ``argv`` remotely; ConnectorError on transport failure or after ``timeout``
        (default ``command_timeout``), whose channel is then closed."""
        command = build_command(
            argv, env=env, cwd=cwd, login_shell=self.config.login_shell, pid_marker=True
        )
        shown = shlex.join(argv)
        limit = float(timeout if timeout is not None else self.config.command_timeout)
        self._bind_loop()  # before touching the semaphore: a new loop gets new primitives
        async with self._channels:
            conn, proc = await self._start(command, shown, limit)
            out, err = bytearray(), bytearray()
            try:
                await asyncio.wait_for(self._communicate(proc, input, out, err), limit)
            except asyncio.TimeoutError:
                proc.close()
                pid, _ = split_pid_marker(bytes(err))
                if pid is not None:
                    self._kill_later(conn, pid)
                raise ConnectorError(
                    f"connector {self.name}: command {shown!r} on {self.target} timed "
                    f"out after {limit:g} s (channel closed"
                    + (f", remote process {pid} sent SIGTERM)" if pid is not None else ")")
                )
            except (OSError, asyncssh.Error) as e:
                proc.close()
                raise ConnectorError(
                    f"connector {self.name}: command {shown!r} failed in transit: {e}"
                )
            except BaseException:
                proc.close()
                raise
        if proc.exit_status is None and proc.exit_signal is None:
            # the channel ended without an exit status: the connection dropped under it
            raise ConnectorError(
                f"connector {self.name}: command {shown!r} failed in transit: the channel "
                f"closed without an exit status (connection lost: {conn.is_closed()})"
            )
        _, err_clean = split_pid_marker(bytes(err))
        return CommandResult(
            returncode=_returncode(proc.exit_status, proc.exit_signal),
            stdout=_decode(bytes(out)),
            stderr=_decode(err_clean),
        )

    async def _start(
        self, command: str, shown: str, limit: float
    ) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientProcess[bytes]]:
        """Open a channel running ``command``; if the connection turns out to be gone before
        the channel opened (nothing ran), wait for the reconnect and try again."""

        async def connect(
            budget: float,
        ) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientConnection]:
            conn = await self._connection(budget)
            return conn, conn

        async def op(
            conn: asyncssh.SSHClientConnection,
        ) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientProcess[bytes]]:
            return conn, await conn.create_process(command, encoding=None, request_pty=False)

        def failure(_conn: asyncssh.SSHClientConnection, e: BaseException) -> BaseException:
            if isinstance(e, asyncio.TimeoutError):
                return ConnectorError(
                    f"connector {self.name}: no channel opened for {shown!r} within {limit:g} s"
                )
            return ConnectorError(f"connector {self.name}: cannot run {shown!r}: {e}")

        return await self._retrying(limit, connect, op, failure)

    @staticmethod
    async def _communicate(
        proc: asyncssh.SSHClientProcess[bytes],
        input: bytes | None,
        out: bytearray,
        err: bytearray,
    ) -> None:
        """Feed ``input``, collect both streams as they come (kept if we time out), wait."""

        async def drain(stream: asyncssh.SSHReader[bytes], buf: bytearray) -> None:
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                buf.extend(chunk)

        if input:
            proc.stdin.write(input)
        proc.stdin.write_eof()
        await asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
        await proc.wait_closed()

    def _kill_later(self, conn: asyncssh.SSHClientConnection, pid: int) -> None:
        """Best effort: SIGTERM the timed-out command's process group (else its pid)."""
        script = f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; true"

        async def kill() -> None:
            try:
                await asyncio.wait_for(conn.run(script, request_pty=False), 10)
            except (OSError, asyncssh.Error, asyncio.TimeoutError):
                log.debug("connector %s: could not signal remote pid %d", self.name, pid)

        task = asyncio.get_running_loop().create_task(kill())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def home(self) -> str:
        """The remote home directory (the SFTP server's start directory; else ``$HOME``)."""
        if self._home is None:
            try:
                self._home = (await self._sftp_client(float(self.config.command_timeout)))[2]
                return self._home
            except ConnectorError:
                if not self._alive():
                    raise  # no connection at all; SFTP alone failing falls back to the shell
            res = await self.run(["sh", "-c", 'printf %s "$HOME"'])
            if res.returncode != 0 or not res.stdout.startswith("/"):
                raise ConnectorError(
                    f"connector {self.name}: cannot read $HOME on {self.target}: {res.stderr.strip()}"
                )
            self._home = res.stdout
        return self._home

    async def expand_path(self, path: str) -> str:
        """``path`` with a leading ``~`` replaced by the remote home directory."""
        if path == "~" or path.startswith("~/"):
            return self._expand(path, await self.home())
        return path

    async def workdir(self) -> str:
        """The configured ``workdir`` (remote root of job directories), ``~`` expanded."""
        return await self.expand_path(self.config.workdir)


__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_JITTER",
    "PID_MARKER",
    "POLICIES",
    "HostKeyError",
    "SFTPFiles",
    "SSHAuthenticationError",
    "SSHConnection",
    "SSHConnector",
    "backoff_delays",
    "build_command",
    "known_hosts_pattern",
    "parse_proxy_jump",
    "private_key_from",
    "split_pid_marker",
]
