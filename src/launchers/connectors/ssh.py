"""The SSH connector: commands and files on a remote host over one asyncssh connection.

One connection per connector, opened lazily, shared by at most ``max_channels`` concurrent
commands plus one SFTP channel; host keys checked against ``known_hosts`` with the
``strict_host_key_checking`` policy; reconnects with exponential backoff after a loss
(slurm-runtime.md §12).
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
import random
import re
import secrets
import shlex
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import asyncssh
import attrs

from launchers.config.model import SSHConnectorConfig
from launchers.connectors.base import CommandResult, Connector
from launchers.errors import (
    AuthenticationError,
    ConfigurationError,
    ConnectorError,
    ScriptError,
)

log = logging.getLogger("launchers.connectors.ssh")

POLICIES = ("yes", "accept-new", "no")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
BACKOFF_CAP = 60.0
BACKOFF_JITTER = 0.2
#: First stderr line of every command run by the connector (removed from the result).
PID_MARKER = b"\x1elaunchers-pid="
_MARKER_PRINTF = "\\036launchers-pid="
_MARKER_RE = re.compile(re.escape(PID_MARKER) + rb"(\d+)\n")


class HostKeyError(ConnectorError):
    """The server's host key is unknown (policy ``yes``) or differs from ``known_hosts``."""


class SSHAuthenticationError(ConnectorError, AuthenticationError):
    """The server refused every key (and the password, when one is configured) we offered."""


# --------------------------------------------------------------------------- pure helpers


def build_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    login_shell: bool = False,
    pid_marker: bool = False,
) -> str:
    """The remote shell command for ``argv``: ``cd DIR && env NAME=value ARGV...``, POSIX-quoted.

    ``~`` or ``~/...`` in ``cwd`` is left to the remote shell's tilde expansion; with
    ``login_shell`` the whole line runs through ``bash -lc`` (modules, profile). With
    ``pid_marker`` the shell first reports its pid on stderr (``PID_MARKER``), then ``exec``s
    the command, so that a command past its timeout can be killed.
    """
    if isinstance(argv, str) or not argv:
        raise ScriptError(f"a command must be a non-empty list of arguments, got {argv!r}")
    for arg in argv:
        if not isinstance(arg, str):
            raise ScriptError(f"command argument {arg!r} is not a string (in {list(argv)!r})")
        if "\0" in arg:
            raise ScriptError(f"command argument {arg!r} contains a NUL character")
    parts: list[str] = []
    if cwd is not None:
        if not cwd or "\0" in cwd:
            raise ScriptError(f"invalid working directory {cwd!r}")
        parts.append(f"cd {_quote_dir(cwd)} &&")
    if pid_marker:
        parts.append("exec")
    if env:
        assigns = []
        for name, value in env.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ScriptError(f"invalid environment variable name {name!r}")
            if not isinstance(value, str) or "\0" in value:
                raise ScriptError(f"invalid value {value!r} for environment variable {name}")
            assigns.append(f"{name}={shlex.quote(value)}")
        parts.append("env " + " ".join(assigns))
    parts.append(shlex.join(argv))
    line = " ".join(parts)
    if pid_marker:
        line = f"printf '{_MARKER_PRINTF}%s\\n' \"$$\" >&2; {line}"
    return "bash -lc " + shlex.quote(line) if login_shell else line


_KEY_TEXT = ("-----BEGIN ", "PuTTY-User-Key-File-", "---- BEGIN SSH2 ")


def private_key_from(
    value: str, *, what: str, passphrase: str | None = None, passphrase_env: str | None = None
) -> asyncssh.SSHKey:
    """The private key in ``value`` (named ``what`` in messages): the key's text (OpenSSH, PEM
    or PuTTY; ``\\n`` written for newlines, as in a one-line ``.env`` entry, is understood), or
    the path of a key file. Never shows the value itself in an error."""
    text = value.strip()
    if "\n" not in text and "\\n" in text:
        text = text.replace("\\n", "\n")
    try:
        if text.startswith(_KEY_TEXT):
            return asyncssh.import_private_key(text + "\n", passphrase)
        path = os.path.expanduser(text)
        if "\n" not in text and os.path.isfile(path):
            return asyncssh.read_private_key(path, passphrase)
    except (asyncssh.KeyEncryptionError, asyncssh.KeyImportError, ValueError) as e:
        where = f" in {passphrase_env}" if passphrase_env else ""
        if isinstance(e, asyncssh.KeyEncryptionError) or "assphrase" in str(e):
            hint = (
                f"is the passphrase{where} right?"
                if passphrase
                else f"it is encrypted: give its passphrase{where}"
            )
            raise ConfigurationError(f"{what}: cannot decrypt the private key: {e} ({hint})")
        raise ConfigurationError(f"{what}: the private key is invalid ({e})")
    except OSError as e:
        raise ConfigurationError(f"{what}: cannot read the key file: {e.strerror or e}")
    raise ConfigurationError(
        f"{what} holds neither a private key (text starting with -----BEGIN) nor the path of a key file"
    )


def split_pid_marker(stderr: bytes) -> tuple[int | None, bytes]:
    """The pid reported by ``build_command(pid_marker=True)`` and stderr without its line."""
    m = _MARKER_RE.search(stderr)
    if m is None:
        return None, stderr
    return int(m.group(1)), stderr[: m.start()] + stderr[m.end() :]


def _quote_dir(path: str) -> str:
    """Quote a directory for ``cd``, keeping a leading ``~`` or ``~/`` expandable."""
    if path == "~":
        return "~"
    if path.startswith("~/"):
        rest = path[2:]
        return "~/" + shlex.quote(rest) if rest else "~/"
    if path.startswith("-"):
        path = "./" + path
    return shlex.quote(path)


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


def known_hosts_pattern(host: str, port: int) -> str:
    """The ``known_hosts`` host field OpenSSH uses: ``host``, or ``[host]:port`` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


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


def _returncode(status: int | None, sig: tuple[str, bool, str, str] | None) -> int:
    """Exit status, or ``-N`` for a command killed by signal N (as ``subprocess`` does)."""
    if status is not None and status >= 0:
        return status
    if sig:
        try:
            return -int(signal.Signals["SIG" + sig[0]])
        except KeyError:
            return -1
    return 255  # like ssh(1) when no status came back (run() raises before this)


# --------------------------------------------------------------------------- host keys


@attrs.define
class _HostKeyCheck:
    """One connection attempt's host-key decision; remembers why it refused."""

    connector: str
    path: str
    policy: str
    refusal: str = ""
    changed: bool = False
    _known: Any = None

    def known_hosts(self) -> Any:
        """The ``known_hosts`` argument for asyncssh (None disables checking)."""
        if self.policy == "no":
            return None
        if self._known is None:
            if os.path.exists(self.path):
                try:
                    self._known = asyncssh.read_known_hosts(self.path)
                except (OSError, ValueError, asyncssh.Error) as e:
                    raise ConfigurationError(
                        f"cannot read known_hosts file {self.path}: {e}",
                        key=f"connectors.ssh.{self.connector}.known_hosts",
                    )
            else:
                self._known = asyncssh.import_known_hosts("")
        return self._known

    def check(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called by asyncssh for a key not listed for this host: accept or refuse it."""
        pattern = known_hosts_pattern(host, port)
        alg = key.get_algorithm()
        fp = key.get_fingerprint("sha256")
        known = self.known_hosts()
        listed = asyncssh.match_known_hosts(known, host, addr, port if port != 22 else None)[0]
        if listed:
            self.changed = True
            self.refusal = (
                f"HOST KEY CHANGED for {pattern} (connector {self.connector}): the server "
                f"offered {alg} key {fp}, which does not match the key recorded in "
                f"{self.path}. Someone may be intercepting the connection, or the host was "
                f"reinstalled. If you trust the new key, remove the old one with: "
                f"ssh-keygen -R {shlex.quote(pattern)} -f {shlex.quote(self.path)}"
            )
            return False
        if self.policy != "accept-new":
            self.refusal = (
                f"host key of {pattern} (connector {self.connector}) is unknown: {alg} {fp} "
                f"is not in {self.path} (strict_host_key_checking: yes). Check the "
                f"fingerprint, then add it (ssh-keyscan -p {port} {shlex.quote(host)} >> "
                f"{shlex.quote(self.path)}) or set strict_host_key_checking: accept-new"
            )
            return False
        kind, blob = key.export_public_key("openssh").decode().split()[:2]
        line = f"{pattern} {kind} {blob}\n"
        try:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, mode=0o700, exist_ok=True)
            with open(self.path, "a+", encoding="utf-8") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() > 0:
                    f.seek(f.tell() - 1)
                    if f.read(1) != "\n":
                        f.write("\n")
                f.write(line)
        except OSError as e:
            self.refusal = f"cannot record the host key of {pattern} in {self.path}: {e}"
            return False
        log.warning(
            "connector %s: added the new host key of %s (%s %s) to %s (accept-new)",
            self.connector,
            pattern,
            alg,
            fp,
            self.path,
        )
        return True


class _Client(asyncssh.SSHClient):
    """Client callbacks: host-key policy, loss notification, and no password prompts (a
    configured password is answered by asyncssh itself, also to keyboard-interactive)."""

    def __init__(
        self, owner: SSHConnector | None, check: _HostKeyCheck, password: bool = False
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


# --------------------------------------------------------------------------- connector


class SSHConnector(Connector):
    """Runs commands and moves files on one host over SSH (asyncssh), reconnecting when lost.

    Use it from one event loop at a time; a new loop drops the old loop's connection.
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

    def _connect_options(self, check: _HostKeyCheck) -> dict[str, Any]:
        c = self.config
        opts: dict[str, Any] = {
            "known_hosts": check.known_hosts(),
            "config": () if c.ssh_config else None,
            "keepalive_interval": c.keepalive_interval,
            "keepalive_count_max": c.keepalive_count_max,
            "connect_timeout": c.connect_timeout,
            "login_timeout": c.connect_timeout,
            "password_auth": False,
            "kbdint_auth": False,
            "gss_auth": False,
            "host_based_auth": False,
        }
        if c.identity_file:
            keys = []
            files = (c.identity_file,) if isinstance(c.identity_file, str) else c.identity_file
            for f in files:
                path = os.path.expanduser(f)
                if not os.path.isfile(path):
                    raise ConfigurationError(
                        f"identity file {path} does not exist",
                        key=f"connectors.ssh.{self.name}.identity_file",
                    )
                keys.append(path)
            opts["client_keys"] = keys
        if c.passphrase_env:
            value = os.environ.get(c.passphrase_env)
            if value is None:
                raise ConfigurationError(
                    f"environment variable {c.passphrase_env} (named by passphrase_env) is not set",
                    key=f"connectors.ssh.{self.name}.passphrase_env",
                )
            opts["passphrase"] = value
        password = os.environ.get(c.password_env) if c.password_env else None
        if password:
            opts["password"] = password
            opts["password_auth"] = True
            opts["kbdint_auth"] = True
            opts.setdefault("passphrase", password)  # an encrypted key, as paramiko uses it
        key = os.environ.get(c.private_key_env) if c.private_key_env else None
        if key and key.strip():
            assert c.private_key_env is not None
            opts["client_keys"] = [
                private_key_from(
                    key,
                    what=c.private_key_env,
                    passphrase=opts.get("passphrase"),
                    passphrase_env=c.passphrase_env or c.password_env,
                )
            ]
        return opts

    def _auth_hint(self) -> str:
        """What to check when the server refuses us."""
        c = self.config
        if c.password_env or c.private_key_env:
            key = bool(c.private_key_env and (os.environ.get(c.private_key_env) or "").strip())
            sources = [
                f"the key in {c.private_key_env}" if key else "the SSH agent and the keys of ~/.ssh"
            ]
            if c.password_env and os.environ.get(c.password_env):
                sources.append(f"the password in {c.password_env}")
            unset = [n for n in (c.private_key_env, c.password_env) if n and not os.environ.get(n)]
            return (
                "tried "
                + " and ".join(sources)
                + f": check {'them' if len(sources) > 1 else 'it'} and the "
                "remote authorized_keys" + (f" ({' and '.join(unset)} not set)" if unset else "")
            )
        return (
            "keys and agent only, no passwords: check identity_file, passphrase_env and the remote "
            "authorized_keys"
        )

    async def _connect_one(
        self,
        host: str,
        port: int | None,
        username: str | None,
        tunnel: asyncssh.SSHClientConnection | None,
        owner: SSHConnector | None,
    ) -> asyncssh.SSHClientConnection:
        check = _HostKeyCheck(
            self.name,
            os.path.expanduser(self.config.known_hosts),
            self.config.strict_host_key_checking,
        )
        opts = self._connect_options(check)
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
                f"connector {self.name}: {where} refused us ({e.reason}); {self._auth_hint()}"
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

    # ---------------------------------------------------------------- commands
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
        deadline = time.monotonic() + limit
        while True:
            conn = await self._connection(max(deadline - time.monotonic(), 0.0))
            try:
                proc = await asyncio.wait_for(
                    conn.create_process(command, encoding=None, request_pty=False),
                    max(deadline - time.monotonic(), 0.001),
                )
                return conn, proc
            except asyncio.TimeoutError:
                raise ConnectorError(
                    f"connector {self.name}: no channel opened for {shown!r} within {limit:g} s"
                )
            except (OSError, asyncssh.Error) as e:
                if conn.is_closed() and time.monotonic() < deadline:
                    continue
                raise ConnectorError(f"connector {self.name}: cannot run {shown!r}: {e}")

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

    # ---------------------------------------------------------------- files (SFTP)
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
        deadline = time.monotonic() + limit
        while True:
            conn, sftp, home = await self._sftp_client(max(deadline - time.monotonic(), 0.0))
            full = self._expand(path, home)
            try:
                return await asyncio.wait_for(
                    op(sftp, full), max(deadline - time.monotonic(), 0.001)
                )
            except asyncssh.SFTPNoSuchFile:
                raise FileNotFoundError(2, f"{what}: no such file on {self.name}", full)
            except asyncssh.SFTPPermissionDenied:
                raise PermissionError(13, f"{what}: permission denied on {self.name}", full)
            except asyncio.TimeoutError:
                raise ConnectorError(
                    f"connector {self.name}: {what} {full} timed out after {limit:g} s"
                )
            except (OSError, asyncssh.Error) as e:
                if conn.is_closed() and time.monotonic() < deadline:
                    continue
                raise ConnectorError(f"connector {self.name}: {what} {full} failed: {e}")

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

    async def expand_path(self, path: str) -> str:
        """``path`` with a leading ``~`` replaced by the remote home directory."""
        if path == "~" or path.startswith("~/"):
            return self._expand(path, await self.home())
        return path

    async def workdir(self) -> str:
        """The configured ``workdir`` (remote root of job directories), ``~`` expanded."""
        return await self.expand_path(self.config.workdir)

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


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


__all__ = [
    "HostKeyError",
    "SSHAuthenticationError",
    "SSHConnector",
    "backoff_delays",
    "build_command",
    "known_hosts_pattern",
    "parse_proxy_jump",
    "private_key_from",
]
