"""``SSHSiteExecutor``: runs the jobs of an SSH site (docs/remote-sites.md, "SSH sites").

The Slurm executor, composed with what an SSH site brings through its extension points
(``launchers.slurm.executor``): the connection built from the site (Mantik's credential
variables, checked before anything is recorded) instead of a connector named in
``launchers.yaml``; a stager that records the site and uploads the project files (minus
``Exclude``) to the ``project/`` sub-directory of the remote job directory; a script wrapper
that runs the command inside the ``Environment`` (``bash -l``, for ``module``); outputs copied
home under a lock, since ``job.out``/``job.err`` are also followed while the job runs
(``sync_outputs``). Submission, tracking (sacct/squeue and ``job.rc`` in one SSH command per
cycle) and cancel are the Slurm executor's own.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..connectors.base import Connector
from ..errors import AuthenticationError, ConnectorError, LaunchersError
from ..jobs.record import RcRecord
from ..jobs.update import StateUpdate
from ..runtime.loop import blocking
from ..slurm.executor import SlurmExecutor
from ..slurm.files import JobFiles
from ..slurm.script import ScriptSpec
from .environment import Environment, validate_environment
from .outputs import RemoteOutputs, attached_payload
from .script import JobScriptSpec, render_job_script
from .ssh_kind import check_credentials, connector_config
from .ssh_site import PROJECT_SUBDIR, SSHSite, SSHSiteGroup, SSHSiteLauncher

if TYPE_CHECKING:
    from ..jobs.record import StateRecord
    from ..launcher import Launcher
    from ..protocols import JobHandle

#: files sent at once
UPLOAD_CONCURRENCY = 4


def _site_of(launcher: Any) -> SSHSite:
    site = getattr(getattr(launcher, "group", None), "site", None)
    if not isinstance(site, SSHSite):
        raise LaunchersError(f"launcher {launcher!r} has no SSH site")
    return site


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """One executor (one SSH connection) per site."""
    return ("ssh", _site_of(launcher))


def create_executor(launcher: Launcher) -> SSHSiteExecutor:
    return SSHSiteExecutor(launcher)


def executor_from_record(info: Mapping[str, Any], record: StateRecord) -> SSHSiteExecutor:
    """For ``launchers status``/``cancel`` on a job known only from its record."""
    data = record.extra.get("ssh_site") if isinstance(record.extra, Mapping) else None
    if not isinstance(data, Mapping) or not data.get("hostname"):
        raise LaunchersError(f"job {record.task_id}: its record does not name its SSH site")
    site = SSHSite.from_record(data)
    group = SSHSiteGroup(id=info.get("group"), site=site)
    return SSHSiteExecutor(SSHSiteLauncher(group=group))


def project_dir(remote: str) -> str:
    """Where the project's files go in the remote job directory ``remote``."""
    return f"{remote.rstrip('/')}/{PROJECT_SUBDIR}"


class SiteAccess:
    """The connection to one SSH site: its connector, and the credentials checked first."""

    def __init__(self, site: SSHSite) -> None:
        self.site = site
        self._checked: set[int] = set()

    def connect(self) -> Connector:
        # lazy: asyncssh (~0.3 s to import) only when the site is reached
        from ..connectors.ssh import SSHConnector

        return SSHConnector(connector_config(self.site))

    def check(self, launcher: Launcher) -> None:
        """Credentials, before anything is recorded; a key is decrypted once per value of the
        variables, not for every task."""
        site = _site_of(launcher)
        seen = hash(
            tuple(
                os.environ.get(n)
                for n in (site.username_env, site.private_key_env, site.password_env)
            )
        )
        if seen not in self._checked:
            check_credentials(site)
            self._checked.add(seen)


class ProjectStager:
    """Stages a job of the site: the site recorded, the remote job directory created (with
    params.json), the project's files uploaded to its ``project/`` sub-directory."""

    def __init__(self, site: SSHSite) -> None:
        self.site = site

    async def __call__(self, job: JobHandle, files: JobFiles) -> str:
        # lazy: asyncssh (~0.3 s to import) only when the site is reached
        from ..connectors.ssh import HostKeyError, SSHAuthenticationError

        if not job.record.extra.get("ssh_site"):
            await blocking(job.apply, StateUpdate(extra={"ssh_site": self.site.to_record()}))
        try:
            remote = await files.prepare(job)
            payload = attached_payload(job.directory)
            target = project_dir(remote)
            await files.mkdir(target)
            if payload is not None and payload.uploads:
                await _upload(files, payload.uploads, target)
        except (SSHAuthenticationError, HostKeyError) as e:
            # not a transient failure (those are retried): the job fails at once with the reason
            raise AuthenticationError(str(e)) from None
        return remote


async def _upload(files: JobFiles, uploads: tuple[tuple[Path, str], ...], target: str) -> None:
    """Each (local file, relative path) written under ``target``, a few at a time; the
    executable bit is kept (a project's scripts stay runnable)."""
    sem = asyncio.Semaphore(UPLOAD_CONCURRENCY)

    async def one(local: Path, rel: str) -> None:
        async with sem:
            try:
                data, executable = await asyncio.to_thread(_read, local)
            except OSError as e:
                raise LaunchersError(f"cannot read {local} to upload it: {e.strerror or e}")
            await files.write(f"{target}/{rel}", data, mode=0o755 if executable else 0o644)

    await asyncio.gather(*(one(Path(local), rel) for local, rel in uploads))


def environment_script(job: JobHandle, launcher: Launcher, spec: ScriptSpec) -> ScriptSpec:
    """The Slurm job script of ``job``: its command runs in ``project/`` through the
    ``Environment`` script (``bash -l -c``, so that ``module`` is defined)."""
    run_dir = project_dir(spec.job_dir)
    payload = attached_payload(job.directory)
    if payload is not None:
        text = payload.script(run_dir)
    else:
        text = _environment_script(launcher, spec, run_dir, spec.cwd)
    return attrs.evolve(spec, argv=("bash", "-l", "-c", text), cwd=run_dir)


def _environment_script(launcher: Any, spec: ScriptSpec, run_dir: str, cwd: str | None) -> str:
    """An experiment task: its argv inside the group's ``Environment``."""
    group = getattr(launcher, "group", None)
    env = Environment()
    if group is not None and getattr(group, "environment", None):
        env = validate_environment(
            group.environment, None, f"ssh.{group.label}.environment", site_kind="ssh"
        )
    command = shlex.join(spec.argv)
    if cwd:  # the task's own working directory on the site
        command = f"cd {shlex.quote(cwd)} && {command}"
    resources = getattr(launcher, "resources", None)
    return render_job_script(
        JobScriptSpec(
            environment=env,
            command=command,
            transport="ssh",
            run_dir=run_dir,
            job_name=spec.job_name,
            cpus_per_node=getattr(resources, "cpus_per_node", None),
            run_id=spec.task_id,
        )
    )


async def fetch_outputs_locked(job: JobHandle, files: JobFiles) -> None:
    """The final copy, never interleaved with ``sync_outputs`` appending to the same files."""
    lock = job.runtime.setdefault("output_lock", asyncio.Lock())
    async with lock:
        await files.fetch_outputs(job)


class SiteOutputs(RemoteOutputs):
    """``job.out``/``job.err`` followed while a job of the site runs (``RemoteOutputs``)."""

    def __init__(self, site: SSHSite, files: JobFiles) -> None:
        self.site = site
        self.files = files

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """The remote job directory's ``name`` from ``offset`` (None before it exists)."""
        remote = self.files.job_dir(job)
        if not remote or remote == str(job.directory):
            return None
        try:
            return await self.files.read(f"{remote}/{name}", offset=offset)
        except FileNotFoundError:
            return None
        except (OSError, ConnectorError) as e:
            raise ConnectorError(f"cannot read {name} of {job.task_id} on {self.site.address}: {e}")


class SSHSiteExecutor(SlurmExecutor):
    """Slurm over the SSH connection of one SSH site (see the module docstring)."""

    kind = "ssh"

    def __init__(self, launcher: Launcher) -> None:
        site = _site_of(launcher)
        access = SiteAccess(site)
        super().__init__(
            launcher,
            connect=access.connect,
            local=False,
            check=access.check,
            stager=ProjectStager(site),
            script=environment_script,
            outputs=fetch_outputs_locked,
        )
        self.site = site
        self.followed = SiteOutputs(site, self.files)

    def __repr__(self) -> str:
        return f"<SSHSiteExecutor {self.site.address}>"

    async def sync_outputs(self, job: JobHandle) -> int:
        """Append what the remote ``job.out``/``job.err`` gained to the local copies."""
        return await self.followed.sync_outputs(job)

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """The remote job directory's ``name`` from ``offset`` (None before it exists)."""
        return await self.followed.read_file(job, name, offset)

    async def fetch_rc(self, job: JobHandle) -> RcRecord | None:
        """The remote ``job.rc`` (also written to the local job directory), or None."""
        return await self.followed.fetch_rc(job)


def _read(path: Path) -> tuple[bytes, bool]:
    return path.read_bytes(), os.access(path, os.X_OK)


__all__ = [
    "ProjectStager",
    "SSHSiteExecutor",
    "SiteAccess",
    "SiteOutputs",
    "create_executor",
    "environment_script",
    "executor_from_record",
    "executor_key",
    "fetch_outputs_locked",
    "project_dir",
]
