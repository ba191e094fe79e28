"""``SSHSiteExecutor``: runs the jobs of an SSH site (remote-sites.md, "SSH sites").

A ``SlurmExecutor`` whose connector is the SSH connector built from the site (Mantik's
credential variables) instead of one named in ``launchers.yaml``: submission, tracking
(sacct/squeue and ``job.rc`` in one SSH command per cycle), cancel and the copy of the outputs
are the Slurm launcher's. What it adds: the project files (minus ``Exclude``) uploaded to the
``project/`` sub-directory of the remote job directory, the ``Environment`` around the command
(``bash -l``, for ``module``), ``job.out``/``job.err`` followed while the job runs, and the site
kept in the record so that ``launchers status``/``cancel`` reach it again.
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
from ..jobs.update import StateUpdate
from ..runtime.loop import blocking
from ..slurm.executor import SlurmExecutor
from ..slurm.script import ScriptSpec
from .environment import Environment, validate_environment
from .outputs import RemoteOutputs, attached_payload
from .script import JobScriptSpec, render_job_script
from .ssh_kind import check_credentials, connector_config
from .ssh_site import PROJECT_SUBDIR, SSHSite, SSHSiteGroup, SSHSiteLauncher

if TYPE_CHECKING:
    from ..jobs.record import StateRecord
    from ..jobs.task import Task
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


class SSHSiteExecutor(SlurmExecutor, RemoteOutputs):
    """Slurm over the SSH connection of one SSH site."""

    kind = "ssh"

    def __init__(self, launcher: Launcher) -> None:
        super().__init__(launcher)
        self.site = _site_of(launcher)
        self._credentials_checked: set[int] = set()

    def __repr__(self) -> str:
        return f"<SSHSiteExecutor {self.site.address}>"

    @property
    def connector(self) -> Connector:
        if self._connector is None:
            # lazy: asyncssh (~0.3 s to import) only when the site is reached
            from ..connectors.ssh import SSHConnector

            self._connector = SSHConnector(connector_config(self.site))
        return self._connector

    @property
    def is_local(self) -> bool:
        return False

    # -- submission -----------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Credentials first (before anything is recorded), then the Slurm checks. A key is
        decrypted once per value of the variables, not for every task."""
        site = _site_of(launcher)
        seen = hash(
            tuple(
                os.environ.get(n)
                for n in (site.username_env, site.private_key_env, site.password_env)
            )
        )
        if seen not in self._credentials_checked:
            check_credentials(site)
            self._credentials_checked.add(seen)
        super().validate(launcher, task)

    async def _prepare_remote(self, job: JobHandle) -> str:
        """The remote job directory (created, params.json copied), the site recorded, and the
        project's files uploaded to its ``project/`` sub-directory."""
        # lazy: asyncssh (~0.3 s to import) only when the site is reached
        from ..connectors.ssh import HostKeyError, SSHAuthenticationError

        if not job.record.extra.get("ssh_site"):
            await blocking(job.apply, _site_update(self.site))
        try:
            remote = await super()._prepare_remote(job)
            payload = attached_payload(job.directory)
            target = project_dir(remote)
            await self.connector.mkdir(target)
            if payload is not None and payload.uploads:
                await self._upload(payload.uploads, target)
        except (SSHAuthenticationError, HostKeyError) as e:
            # not a transient failure (those are retried): the job fails at once with the reason
            raise AuthenticationError(str(e)) from None
        return remote

    async def _upload(self, uploads: tuple[tuple[Path, str], ...], target: str) -> None:
        """Each (local file, relative path) written under ``target``, a few at a time; the
        executable bit is kept (a project's scripts stay runnable)."""
        sem = asyncio.Semaphore(UPLOAD_CONCURRENCY)

        async def one(local: Path, rel: str) -> None:
            async with sem:
                try:
                    data, executable = await asyncio.to_thread(_read, local)
                except OSError as e:
                    raise LaunchersError(f"cannot read {local} to upload it: {e.strerror or e}")
                await self.connector.write_file(
                    f"{target}/{rel}", data, mode=0o755 if executable else 0o644
                )

        await asyncio.gather(*(one(Path(local), rel) for local, rel in uploads))

    def script_spec(self, job: JobHandle, launcher: Any) -> ScriptSpec:
        """The Slurm job script of ``job``: its command runs in ``project/`` through the
        ``Environment`` script (``bash -l -c``, so that ``module`` is defined)."""
        spec = super().script_spec(job, launcher)
        run_dir = project_dir(spec.job_dir)
        payload = attached_payload(job.directory)
        if payload is not None:
            text = payload.script(run_dir)
        else:
            text = self._environment_script(launcher, spec, run_dir, spec.cwd)
        return attrs.evolve(spec, argv=("bash", "-l", "-c", text), cwd=run_dir)

    def _environment_script(
        self, launcher: Any, spec: ScriptSpec, run_dir: str, cwd: str | None
    ) -> str:
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

    # -- outputs --------------------------------------------------------------------------------

    async def _fetch_outputs(self, job: JobHandle) -> None:
        """The final copy, never interleaved with ``sync_outputs`` appending to the same files."""
        lock = job.runtime.setdefault("output_lock", asyncio.Lock())
        async with lock:
            await super()._fetch_outputs(job)

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """The remote job directory's ``name`` from ``offset`` (None before it exists)."""
        remote = self._job_dir(job)
        if not remote or remote == str(job.directory):
            return None
        try:
            return await self.connector.read_file(f"{remote}/{name}", offset=offset)
        except FileNotFoundError:
            return None
        except (OSError, ConnectorError) as e:
            raise ConnectorError(f"cannot read {name} of {job.task_id} on {self.site.address}: {e}")


def _read(path: Path) -> tuple[bytes, bool]:
    return path.read_bytes(), os.access(path, os.X_OK)


def _site_update(site: SSHSite) -> Any:
    return StateUpdate(extra={"ssh_site": site.to_record()})


__all__ = [
    "SSHSiteExecutor",
    "create_executor",
    "executor_from_record",
    "executor_key",
    "project_dir",
]
