"""What the SSH site kind does with a site's credentials (docs/remote-sites.md, "SSH sites"):
check them before anything is recorded, and turn the site into the SSH connector's settings.
The site itself is a value of ``launchers.remote.ssh_site``."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..config.model import SSHConnectorConfig
from .ssh_site import SSHSite, ssh_username


def check_credentials(site: SSHSite, environ: Mapping[str, str] | None = None) -> None:
    """Before anything is recorded: the user name is set and a private key given in the
    environment can be read (decrypted with the password when it is encrypted)."""
    env = os.environ if environ is None else environ
    ssh_username(site, env)
    key = env.get(site.private_key_env)
    if key and key.strip():
        # lazy: asyncssh (~0.3 s to import) only when a key is given to check
        from ..connectors.ssh import private_key_from

        private_key_from(
            key,
            what=site.private_key_env,
            passphrase=env.get(site.password_env) or None,
            passphrase_env=site.password_env,
        )


def connector_config(site: SSHSite, environ: Mapping[str, str] | None = None) -> SSHConnectorConfig:
    """The SSH connector's settings for ``site`` (the user name read now, secrets at connection)."""
    return SSHConnectorConfig(
        name=site.address,
        hostname=site.hostname,
        port=site.port,
        username=ssh_username(site, environ),
        known_hosts=site.known_hosts,
        strict_host_key_checking=site.strict_host_key_checking,
        workdir=site.workdir,
        password_env=site.password_env,
        private_key_env=site.private_key_env,
    )


__all__ = ["check_credentials", "connector_config"]
