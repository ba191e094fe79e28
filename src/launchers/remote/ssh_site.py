"""SSH sites (docs/remote-sites.md, "SSH sites"): a Slurm login node reached over SSH, as Mantik's
``SSH: {Hostname, Port}`` Compute Backend Config describes it. Values only, no I/O.

The job goes through the SSH connector and sbatch (``launchers.remote.ssh_executor``), with the
``Resources`` as ``#SBATCH`` options (the firecREST mapping) and the ``Environment`` around the
command. Credentials come from Mantik's variables (checked and turned into the connector's
settings by ``launchers.remote.ssh_kind``): ``MANTIK_SSH_USERNAME`` (required),
``MANTIK_SSH_PRIVATE_KEY`` (the key's text, as Mantik reads it, or the path of a key file) and
``MANTIK_SSH_PASSWORD`` (password authentication, and the passphrase of an encrypted key).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..config.model import SlurmGroup
from ..errors import AuthenticationError
from ..slurm.launcher import SlurmLauncher
from .script import sbatch_pairs

if TYPE_CHECKING:
    from .resources import Resources

USERNAME_ENV = "MANTIK_SSH_USERNAME"
PASSWORD_ENV = "MANTIK_SSH_PASSWORD"
PRIVATE_KEY_ENV = "MANTIK_SSH_PRIVATE_KEY"
#: the remote root of job directories (as for a slurm group's SSH connector)
DEFAULT_WORKDIR = "~/.local/share/launchers"
#: the project's files go to this sub-directory of the remote job directory, so that none can
#: clash with the job's own files (job.sh, job.out, job.err, job.rc, params.json)
PROJECT_SUBDIR = "project"


@attrs.frozen
class SSHSite:
    """A Slurm login node reached over SSH. Secrets stay in the named variables."""

    hostname: str
    port: int = 22
    username_env: str = USERNAME_ENV
    password_env: str = PASSWORD_ENV
    private_key_env: str = PRIVATE_KEY_ENV
    known_hosts: str = "~/.ssh/known_hosts"
    #: a host seen for the first time is recorded in known_hosts (a changed key is refused)
    strict_host_key_checking: str = "accept-new"
    workdir: str = DEFAULT_WORKDIR
    account: str | None = None

    @property
    def address(self) -> str:
        """``HOST:PORT`` (``[HOST]:PORT`` for an IPv6 address), for messages."""
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"

    def to_record(self) -> dict[str, Any]:
        """The site as stored in a job's record (no secret: variable names only)."""
        return attrs.asdict(self)

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> SSHSite:
        names = {f.name for f in attrs.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def ssh_username(site: SSHSite, environ: Mapping[str, str] | None = None) -> str:
    """The user name from ``site.username_env``; an ``AuthenticationError`` naming the
    variable when it is not set (Mantik requires it too)."""
    env = os.environ if environ is None else environ
    value = (env.get(site.username_env) or "").strip()
    if not value:
        raise AuthenticationError(
            f"SSH site {site.address}: set the environment variable {site.username_env} to your user name there"
        )
    return value


@attrs.frozen
class SSHSiteGroup(SlurmGroup):
    """The group of an SSH site: its site and ``Environment`` (plain data, as written)."""

    site: SSHSite | None = None
    environment: Mapping[str, Any] | None = attrs.field(default=None, hash=False)

    @property
    def kind(self) -> str:
        return "ssh"


@attrs.frozen(kw_only=True)
class SSHSiteLauncher(SlurmLauncher):
    """Submits with sbatch on an SSH site; ``options`` and ``sbatch_options`` hold the
    ``Resources`` as ``#SBATCH`` options."""

    group: SSHSiteGroup = attrs.field(factory=lambda: SSHSiteGroup(), repr=lambda g: repr(g.label))
    #: the Compute Backend Config's ``Resources`` (for ``SRUN_CPUS_PER_TASK``)
    resources: Resources | None = attrs.field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "ssh"

    @property
    def connector(self) -> str:
        """A name for records and messages; the connection itself comes from the site."""
        site = self.group.site
        return f"ssh-site {site.address}" if site is not None else "ssh-site"


def ssh_launcher(
    site: SSHSite,
    resources: Resources,
    *,
    environment: Mapping[str, Any] | None = None,
    account: str | None = None,
    label: str = "backend-config",
) -> SSHSiteLauncher:
    """The launcher of an SSH site with ``Resources`` as sbatch options (the firecREST mapping:
    ``--partition``, ``--time=D-HH:MM:SS``, ``--ntasks-per-node=1 --cpus-per-task=N``...)."""
    group = SSHSiteGroup(id=label, site=site, environment=environment)
    launcher = SSHSiteLauncher(group=group, resources=resources)
    pairs = sbatch_pairs(resources, account)
    return launcher.config(sbatch_options=pairs) if pairs else launcher


__all__ = [
    "PASSWORD_ENV",
    "PRIVATE_KEY_ENV",
    "PROJECT_SUBDIR",
    "USERNAME_ENV",
    "SSHSite",
    "SSHSiteGroup",
    "SSHSiteLauncher",
    "ssh_launcher",
    "ssh_username",
]
