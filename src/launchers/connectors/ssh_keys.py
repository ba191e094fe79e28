"""What the SSH connector offers and accepts: the private key read from a variable or a
file, the host-key check against ``known_hosts`` under the ``strict_host_key_checking``
policy (recording a new key for ``accept-new``), the credentials passed to asyncssh and the
hint given when the server refuses them."""

from __future__ import annotations

import logging
import os
import shlex
from typing import Any

import asyncssh
import attrs

from launchers.config.model import SSHConnectorConfig
from launchers.errors import AuthenticationError, ConfigurationError, ConnectorError

log = logging.getLogger("launchers.connectors.ssh")

POLICIES = ("yes", "accept-new", "no")


class HostKeyError(ConnectorError):
    """The server's host key is unknown (policy ``yes``) or differs from ``known_hosts``."""


class SSHAuthenticationError(ConnectorError, AuthenticationError):
    """The server refused every key (and the password, when one is configured) we offered."""


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


def known_hosts_pattern(host: str, port: int) -> str:
    """The ``known_hosts`` host field OpenSSH uses: ``host``, or ``[host]:port`` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


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


def connect_options(config: SSHConnectorConfig, check: _HostKeyCheck) -> dict[str, Any]:
    """The keyword arguments of ``asyncssh.connect`` for one host: host-key check,
    keepalives, and the keys and password we offer (errors name the connector's key)."""
    c = config
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
                    key=f"connectors.ssh.{config.name}.identity_file",
                )
            keys.append(path)
        opts["client_keys"] = keys
    if c.passphrase_env:
        value = os.environ.get(c.passphrase_env)
        if value is None:
            raise ConfigurationError(
                f"environment variable {c.passphrase_env} (named by passphrase_env) is not set",
                key=f"connectors.ssh.{config.name}.passphrase_env",
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


def auth_hint(config: SSHConnectorConfig) -> str:
    """What to check when the server refuses us."""
    c = config
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
