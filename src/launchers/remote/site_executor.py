"""``SiteExecutor``: what the UNICORE and firecREST executors share (docs/remote-sites.md,
"Running").

Credentials from named variables (Mantik's as fallbacks for a standalone Compute Backend
Config), a client created once under a lock, ``validate`` before anything is recorded, the
submission's steps (payload, ``job.sh``, ``SUBMITTING`` with the site, the site's calls in a
worker thread, ``PENDING`` with the native id), the final-state block (outputs copied home,
``job.rc`` read, decided without it after a few failures) and cancel (one call per job, at
once, each retried). Each kind supplies its client, where a job goes (``place``), the
blocking submission (``submit_sync``), status and recovery.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..config.model import UnicoreSite
from ..fsutil import atomic_write_text
from ..jobs.record import RcRecord, now_iso
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.executor import Executor
from .decide import gives_up_outputs
from .outputs import RemoteOutputs, attached_payload
from .payload import RemotePayload, check_task, site_environment, task_payload
from .settings import (
    SITE_NAME,
    Credential,
    Site,
    credential_names,
    require_env,
    site_record,
    variables_used,
)

if TYPE_CHECKING:
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

log = logging.getLogger("launchers.remote")


@attrs.frozen
class Placement:
    """Where and as what a job goes: its name at the site, ``job.sh``, the run directory
    (None: the site chooses, UNICORE) and what the ``SUBMITTING`` record adds."""

    name: str
    script: str
    run_dir: str | None
    extra: Mapping[str, Any]


@attrs.frozen
class Accepted:
    """The site took the job: its native id, what the ``PENDING`` record adds, and what the
    job's executor-private scratch space keeps."""

    native_id: str
    extra: Mapping[str, Any]
    runtime: Mapping[str, Any] = attrs.field(factory=dict)


class SiteExecutor(RemoteOutputs, Executor):
    """Submits, follows and cancels jobs at one UNICORE or firecREST site (the skeleton)."""

    #: uploads in parallel per job
    upload_parallel = 4
    #: the ``detail`` of the ``PENDING`` record after a submission
    accepted_detail = ""

    def __init__(self, site: Site, *, mantik: bool = False, key: Hashable = ()) -> None:
        super().__init__(key)
        self.site = site
        self.mantik = mantik
        self._client: Any = None
        self._secrets: list[str] = []
        self._lock = threading.Lock()

    @property
    def site_name(self) -> str:
        """``UNICORE`` or ``firecREST``, for messages."""
        return SITE_NAME[self.kind]

    @property
    def where(self) -> str:
        """``<site name> site <URL>``, for messages."""
        url = self.site.url if isinstance(self.site, UnicoreSite) else self.site.api_url
        return f"{self.site_name} site {url}"

    # -- credentials and the client ---------------------------------------------------------------

    def credential_names(self) -> tuple[Credential, ...]:
        return credential_names(self.site, self.mantik)

    def credentials(self) -> list[str]:
        """The credentials' values from the environment, in ``credential_names`` order; an
        ``AuthenticationError`` naming the variables (never a value) for one that is not set."""
        names = self.credential_names()
        values = [require_env(c.names, f"{self.where}: {c.missing}", os.environ) for c in names]
        self._secrets = [v for c, v in zip(names, values, strict=True) if c.secret]
        return values

    def variables(self) -> str:
        """The variables the credentials come from, for messages (``USER and PASSWORD``)."""
        return variables_used(self.credential_names(), os.environ)

    @abc.abstractmethod
    def new_client(self) -> Any:
        """A client of the site (called once, under the lock)."""

    def client(self) -> Any:
        """The site's client, created on first use."""
        with self._lock:
            if self._client is None:
                self._client = self.new_client()
            return self._client

    def _site_record(self) -> dict[str, Any]:
        """The site as the job's record keeps it (``launchers status``/``cancel`` reach it)."""
        return site_record(self.site, self.mantik)

    # -- submission -------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Before anything is recorded: a command task with an environment in one form (and
        one a script can run), the site's own checks, and the credential variables are set."""
        check_task(task, self.kind)
        site_environment(launcher, task, self.kind)
        self.check_site()
        self.credentials()

    def check_site(self) -> None:
        """Checks of the site's settings before anything is recorded (default: none)."""

    async def submit(self, job: JobHandle) -> None:
        payload = attached_payload(job.directory) or task_payload(job, self.kind)
        placed = await self.place(job, payload)
        atomic_write_text(job.paths.script, placed.script)
        job.apply(
            StateUpdate(
                state=JobState.SUBMITTING,
                detail=f"submitting to {self.site_name}",
                job_name=placed.name,
                extra={f"{self.kind}_site": self._site_record(), **placed.extra},
            )
        )
        accepted = await asyncio.to_thread(self.submit_sync, payload, placed)
        job.runtime.update(accepted.runtime)
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail=self.accepted_detail,
                native_id=accepted.native_id,
                submitted_at=now_iso(),
                extra=dict(accepted.extra),
            )
        )

    @abc.abstractmethod
    async def place(self, job: JobHandle, payload: RemotePayload) -> Placement:
        """The job's name, script and run directory for ``job.attempt``."""

    @abc.abstractmethod
    def submit_sync(self, payload: RemotePayload, placed: Placement) -> Accepted:
        """Send the files and submit (a worker thread); a ``SubmissionError`` when refused."""

    # -- state ------------------------------------------------------------------------------------

    async def final_rc(self, job: JobHandle, *, before: Any = None) -> tuple[bool, RcRecord | None]:
        """For a job the site reports final: copy its outputs home and read ``job.rc``.
        ``(False, None)``: not yet (outputs unreadable: tried again next cycle, or ``before()``
        said to wait); ``(True, rc)``: decide now, without ``job.rc`` when it stayed unreadable
        ``decide.OUTPUT_TRIES`` times."""
        try:
            if before is not None and await before():
                return False, None
            await self.sync_outputs(job)
            return True, await self.fetch_rc(job)
        except Exception as e:
            failures = job.runtime["output_failures"] = job.runtime.get("output_failures", 0) + 1
            if not gives_up_outputs(failures):
                log.info(
                    "%s: cannot read its outputs yet (%s); state decided next cycle", job.task_id, e
                )
                return False, None
            log.warning(
                "%s: its outputs cannot be read (%s); deciding its state without job.rc",
                job.task_id,
                e,
            )
            return True, None

    # -- cancel -----------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        """One cancel call per submitted job, all at once; failures are logged (the next status
        cycle says what each job became)."""
        results = await asyncio.gather(
            *(asyncio.to_thread(self.cancel_sync, j) for j in jobs if j.native_id),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException):
                text = self.cancel_failure(r)
                if text is not None:
                    log.error("%s", text)
        self.tracker.wake(poll_now=True)

    @abc.abstractmethod
    def cancel_sync(self, job: JobHandle) -> None:
        """Cancel one job at the site (a worker thread)."""

    def cancel_failure(self, error: BaseException) -> str | None:
        """What to log for a failed cancel (None: nothing)."""
        return str(error)


__all__ = ["Accepted", "Placement", "SiteExecutor"]
