"""The SSH connector's connection: one asyncssh connection per connector, opened lazily
(through ``proxy_jump`` hops, each host key checked), shared by the commands and the SFTP
channel, and reopened with exponential backoff after a loss (docs/ssh.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import asyncssh

from launchers.config.model import SSHConnectorConfig
from launchers.connectors.base import Connector
from launchers.errors import ConfigurationError, ConnectorError

from .ssh_keys import (
    POLICIES,
    HostKeyError,
    SSHAuthenticationError,
    _HostKeyCheck,
    auth_hint,
    connect_options,
)

log = logging.getLogger("launchers.connectors.ssh")

T = TypeVar("T")
H = TypeVar("H")

BACKOFF_CAP = 60.0
BACKOFF_JITTER = 0.2


def backoff_delays(
    first: float = 1.0,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
    rng: random.Random | None = None,
) -> Iterator[float]:
    """Reconnect delays: ``first``, doubling, capped at ``cap``, each ±``jitter`` at random."""
    rnd = rng or random.Random()
    delay = first
    while True:
        yield delay * rnd.uniform(1 - jitter, 1 + jitter)
        delay = min(delay * 2, cap)


def parse_proxy_jump(spec: str) -> list[tuple[str | None, str, int | None]]:
    """Split ``[user@]host[:port][,...]`` (OpenSSH ``ProxyJump``) into hops."""
    hops: list[tuple[str | None, str, int | None]] = []
    for raw in spec.split(","):
        item = raw.strip()
        if item.startswith("ssh://"):
            item = item[len("ssh://") :]
        user: str | None = None
        if "@" in item:
            user, item = item.rsplit("@", 1)
        port: int | None = None
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            if rest.startswith(":"):
                port = _port(rest[1:], spec)
        elif item.count(":") == 1:
            host, p = item.split(":")
            port = _port(p, spec)
        else:
            host = item
        if not host:
            raise ConfigurationError(f"invalid proxy_jump {spec!r}: empty host", key="proxy_jump")
        hops.append((user or None, host, port))
    return hops


def _port(text: str, spec: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigurationError(f"invalid port {text!r} in proxy_jump {spec!r}", key="proxy_jump")
    return int(text)


class _Client(asyncssh.SSHClient):
    """Client callbacks: host-key policy, loss notification, and no password prompts (a
    configured password is answered by asyncssh itself, also to keyboard-interactive)."""

    def __init__(
        self, owner: SSHConnection | None, check: _HostKeyCheck, password: bool = False
    ) -> None:
        self._owner = owner
        self._check = check
        self._password = password
        self._conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        if self._owner is not None and self._conn is not None:
            self._owner._on_connection_lost(self._conn, exc)

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        return self._check.check(host, addr, port, key)

    def password_auth_requested(self) -> None:
        return None

    def kbdint_auth_requested(self) -> Any:
        # NotImplemented lets asyncssh answer a password prompt with the configured password
        return NotImplemented if self._password else None


class SSHConnection(Connector):
    """One asyncssh connection to one host (through ``proxy_jump`` hops), opened lazily and
    reconnected with backoff after a loss; :class:`SSHConnector` runs commands and moves
    files over it. Use it from one event loop at a time; a new loop drops the old connection.
    """

    is_local = False

    def __init__(self, config: SSHConnectorConfig, *, rng: random.Random | None = None) -> None:
        if config.strict_host_key_checking not in POLICIES:
            raise ConfigurationError(
                f"strict_host_key_checking must be one of {', '.join(POLICIES)}, "
                f"got {config.strict_host_key_checking!r}",
                key=f"connectors.ssh.{config.name}.strict_host_key_checking",
            )
        if config.max_channels < 1:
            raise ConfigurationError(
                f"max_channels must be at least 1, got {config.max_channels}",
                key=f"connectors.ssh.{config.name}.max_channels",
            )
        self.config = config
        self.name = config.name
        self._rng = rng or random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._hops: list[asyncssh.SSHClientConnection] = []
        self._sftp: asyncssh.SFTPClient | None = None
        self._sftp_conn: asyncssh.SSHClientConnection | None = None
        self._sftp_home: str | None = None
        self._home: str | None = None
        self._closed = False
        self._reconnect_task: asyncio.Task[bool] | None = None
        self._lost_at: float | None = None
        self._last_error = ""
        self._connects = 0
        self._background: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._sftp_lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(config.max_channels)

    # ---------------------------------------------------------------- description
    @property
    def target(self) -> str:
        """``user@host:port`` as configured, for messages."""
        c = self.config
        user = f"{c.username}@" if c.username else ""
        return f"{user}{c.hostname}:{c.port}"

    @property
    def connections_opened(self) -> int:
        """How many SSH connections this connector has opened (first one and reconnects)."""
        return self._connects

    def __repr__(self) -> str:
        return f"SSHConnector({self.name!r}, {self.target})"

    # ---------------------------------------------------------------- connection management
    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        if self._loop is not None:
            log.debug("connector %s: new event loop, dropping the old connection", self.name)
        self._loop = loop
        self._conn = None
        self._hops = []
        self._sftp = None
        self._reconnect_task = None
        self._lock = asyncio.Lock()
        self._sftp_lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(self.config.max_channels)

    def _on_connection_lost(
        self, conn: asyncssh.SSHClientConnection, exc: Exception | None
    ) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        self._sftp = None
        for hop in self._hops:
            hop.abort()
        self._hops = []
        if self._closed:
            return
        self._lost_at = time.monotonic()
        self._last_error = str(exc) if exc else "connection closed by the server"
        log.warning(
            "connector %s: SSH connection to %s lost (%s); reconnecting for up to %d s",
            self.name,
            self.target,
            self._last_error,
            self.config.reconnect_timeout,
        )
        if self._loop is not None and not self._loop.is_closed():
            self._reconnect_task = self._loop.create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> bool:
        """Try again at 1, 2, 4 ... s (cap 60 s, ±20 %) until ``reconnect_timeout``."""
        lost_at = self._lost_at if self._lost_at is not None else time.monotonic()
        deadline = lost_at + self.config.reconnect_timeout
        for delay in backoff_delays(rng=self._rng):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(delay, remaining))
            if self._closed:
                return False
            try:
                async with self._lock:
                    if self._alive():
                        return True
                    await self._open()
                return True
            except (ConnectorError, ConfigurationError) as e:
                self._last_error = str(e)
                log.debug("connector %s: reconnect attempt failed: %s", self.name, e)
            except Exception as e:  # keep trying whatever asyncssh raised
                self._last_error = f"{type(e).__name__}: {e}"
                log.debug("connector %s: reconnect attempt failed", self.name, exc_info=True)
        log.error(
            "connector %s: gave up reconnecting to %s after %d s: %s",
            self.name,
            self.target,
            self.config.reconnect_timeout,
            self._last_error,
        )
        return False

    def _alive(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def _retrying(
        self,
        limit: float,
        connect: Callable[[float], Awaitable[tuple[asyncssh.SSHClientConnection, H]]],
        op: Callable[[H], Awaitable[T]],
        failure: Callable[[H, BaseException], BaseException],
    ) -> T:
        """``op(handle)`` within ``limit`` seconds, ``connect(budget)`` giving the connection and
        the handle ``op`` works on (the connection, an SFTP channel). A failure becomes
        ``failure(handle, error)``; when that is a ``ConnectorError`` (the transport failed)
        and the connection turned out to be lost, ``op`` is tried again once reconnected, while
        time is left: the one "retry after a lost connection" of commands and files."""
        deadline = time.monotonic() + limit
        while True:
            conn, handle = await connect(max(deadline - time.monotonic(), 0.0))
            try:
                return await asyncio.wait_for(op(handle), max(deadline - time.monotonic(), 0.001))
            except asyncio.TimeoutError as e:
                raise failure(handle, e)
            except (OSError, asyncssh.Error) as e:
                error = failure(handle, e)
                if (
                    isinstance(error, ConnectorError)
                    and conn.is_closed()
                    and time.monotonic() < deadline
                ):
                    continue
                raise error

    async def _connection(self, budget: float) -> asyncssh.SSHClientConnection:
        """The live connection, opening it (first use) or waiting for a reconnect (≤ ``budget`` s)."""
        self._bind_loop()
        self._closed = False
        deadline = time.monotonic() + budget
        while True:
            if self._alive():
                assert self._conn is not None
                return self._conn
            task = self._reconnect_task
            if task is not None and not task.done():
                remaining = deadline - time.monotonic()
                try:
                    if remaining <= 0:
                        raise asyncio.TimeoutError
                    await asyncio.wait_for(asyncio.shield(task), remaining)
                except asyncio.CancelledError:
                    if not task.cancelled():
                        raise  # we were cancelled ourselves
                    raise ConnectorError(f"connector {self.name} was closed while reconnecting")
                except asyncio.TimeoutError:
                    since = time.monotonic() - (self._lost_at or time.monotonic())
                    raise ConnectorError(
                        f"connector {self.name}: SSH connection to {self.target} lost "
                        f"{since:.0f} s ago and not back after waiting {budget:g} s "
                        f"(still reconnecting; last error: {self._last_error})"
                    )
                if not self._alive() and task.result() is False:
                    raise ConnectorError(
                        f"connector {self.name}: could not reconnect to {self.target} within "
                        f"reconnect_timeout ({self.config.reconnect_timeout} s): {self._last_error}"
                    )
                continue
            async with self._lock:
                if self._alive():
                    continue
                if self._reconnect_task is not None and not self._reconnect_task.done():
                    continue
                await self._open()

    async def _connect_one(
        self,
        host: str,
        port: int | None,
        username: str | None,
        tunnel: asyncssh.SSHClientConnection | None,
        owner: SSHConnection | None,
    ) -> asyncssh.SSHClientConnection:
        check = _HostKeyCheck(
            self.name,
            os.path.expanduser(self.config.known_hosts),
            self.config.strict_host_key_checking,
        )
        opts = connect_options(self.config, check)
        if port is not None and (port != 22 or not self.config.ssh_config):
            opts["port"] = port
        if username:
            opts["username"] = username
        if tunnel is not None:
            opts["tunnel"] = tunnel
        where = f"{username + '@' if username else ''}{host}:{port or 22}"
        if check.policy == "no":
            log.warning(
                "connector %s: host key checking is disabled (strict_host_key_checking: no); "
                "connecting to %s without verifying its identity",
                self.name,
                where,
            )
        try:
            conn: asyncssh.SSHClientConnection
            password = "password" in opts
            conn, _ = await asyncssh.create_connection(
                lambda: _Client(owner, check, password), host, **opts
            )
            return conn
        except asyncssh.HostKeyNotVerifiable as e:
            raise HostKeyError(
                check.refusal or f"connector {self.name}: host key of {where} not verifiable: {e}"
            )
        except asyncssh.PermissionDenied as e:
            raise SSHAuthenticationError(
                f"connector {self.name}: {where} refused us ({e.reason}); {auth_hint(self.config)}"
            )
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as e:
            hint = ""
            if "bcrypt" in str(e):
                hint = " (install it: pip install 'asyncssh[bcrypt]')"
            elif self.config.passphrase_env:
                hint = f" (is the passphrase in {self.config.passphrase_env} right?)"
            elif "passphrase" in str(e).lower():
                hint = " (set passphrase_env to the name of a variable holding the passphrase)"
            raise ConfigurationError(
                f"cannot load the identity file: {e}{hint}",
                key=f"connectors.ssh.{self.name}.identity_file",
            )
        except asyncssh.ConfigParseError as e:
            raise ConfigurationError(
                f"cannot use ~/.ssh/config: {e} (or set ssh_config: false)",
                key=f"connectors.ssh.{self.name}.ssh_config",
            )
        except (OSError, asyncssh.Error, asyncio.TimeoutError, EOFError) as e:
            text = str(e) or type(e).__name__
            raise ConnectorError(f"connector {self.name}: cannot connect to {where}: {text}")
        except ValueError as e:  # asyncssh rejects an option value (from ~/.ssh/config or ours)
            raise ConfigurationError(
                f"cannot connect to {where}: {e}", key=f"connectors.ssh.{self.name}"
            )

    async def _open(self) -> None:
        """Open the connection (through ``proxy_jump`` hops, each checked the same way)."""
        c = self.config
        hops: list[asyncssh.SSHClientConnection] = []
        try:
            tunnel: asyncssh.SSHClientConnection | None = None
            for user, host, port in parse_proxy_jump(c.proxy_jump) if c.proxy_jump else []:
                tunnel = await self._connect_one(host, port, user, tunnel, None)
                hops.append(tunnel)
            conn = await self._connect_one(c.hostname, c.port, c.username, tunnel, self)
        except BaseException:
            for hop in reversed(hops):
                hop.close()
            raise
        self._conn = conn
        self._hops = hops
        self._sftp = None
        self._connects += 1
        if self._lost_at is not None:
            log.warning(
                "connector %s: reconnected to %s after %.0f s",
                self.name,
                self.target,
                time.monotonic() - self._lost_at,
            )
            self._lost_at = None
        else:
            log.debug("connector %s: connected to %s", self.name, self.target)

    # ---------------------------------------------------------------- close
    async def close(self) -> None:
        """Close the SFTP channel and the connection (and its jump hosts); stop reconnecting.

        A later call opens a new connection."""
        self._closed = True
        task, self._reconnect_task = self._reconnect_task, None
        if task is not None and not task.done():
            task.cancel()
        conn, self._conn = self._conn, None
        sftp, self._sftp = self._sftp, None
        hops, self._hops = self._hops, []
        pending, self._background = self._background, set()
        try:
            if pending:
                await asyncio.wait(pending, timeout=5)
            if sftp is not None:
                sftp.exit()
            if conn is not None:
                conn.close()
                await asyncio.wait_for(conn.wait_closed(), 5)
            for hop in reversed(hops):
                hop.close()
                await asyncio.wait_for(hop.wait_closed(), 5)
        except (OSError, asyncssh.Error, asyncio.TimeoutError, RuntimeError):
            pass
