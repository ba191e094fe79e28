"""``FirecrestV1Executor``: firecREST v1 (``api_version: 1``) with ``firecrest.v1.Firecrest``
(remote-sites.md §3.3, §4.3).

Same flow and state mapping as the v2 executor, over v1's endpoints: ``POST /utilities/mkdir``,
``POST /utilities/upload`` (small files only: up to the direct-upload limit, nothing is staged),
``POST /compute/jobs/upload`` (a task; v1 runs the script from a directory of its own, hence the
explicit ``cd`` of ``job.sh``), ``GET /compute/acct`` for the status of every job in one call,
``GET /utilities/view`` for outputs, ``DELETE /compute/jobs/{id}`` to cancel.
"""

from __future__ import annotations

import asyncio
import io
import logging
import posixpath
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import LaunchersError
from ..jobs.update import StateUpdate
from .firecrest_executor import (
    NOT_VISIBLE_GRACE,
    FirecrestExecutor,
    firecrest_transient,
)
from .http import oldest_in, status_of, with_retries

if TYPE_CHECKING:
    from ..protocols import JobHandle

log = logging.getLogger("launchers.remote")

#: seconds between two reads of a v1 task (pyfirecrest's default starts at 1 s)
TASK_POLL_SLEEPS = [0.2] * 10 + [0.5] * 20 + [1.0] * 120


class FirecrestV1Executor(FirecrestExecutor):
    """Submits, follows and cancels jobs on one firecREST v1 machine."""

    def _client_class(self) -> Any:
        # lazy: pyfirecrest is heavy: loaded when a firecREST site is used
        from firecrest.v1 import Firecrest

        return Firecrest

    def _configure(self, client: Any) -> None:
        client.polling_sleep_times = list(TASK_POLL_SLEEPS)

    def _site_record(self) -> dict[str, Any]:
        return {**super()._site_record(), "api_version": 1}

    def base_dir(self) -> str:
        """BASE: ``site.workdir`` with ``{user}`` replaced (v1 names no work file system)."""
        if self._base is not None:
            return self._base
        if not self.site.workdir:
            raise LaunchersError(
                f"firecREST site {self.site.api_url} (api_version 1) does not say where jobs work: "
                "set site.workdir (e.g. /scratch/{user}/launchers)"
            )
        user = ""
        if "{user}" in self.site.workdir:
            user = str(self._call("firecREST whoami", lambda c: c.whoami(self.site.machine)) or "")
            if not user:
                raise LaunchersError(
                    f"firecREST site {self.site.api_url}: whoami gave no user name for {{user}}"
                )
        self._base = self.site.workdir.replace("{user}", user)
        return self._base

    too_big_advice = "firecREST v1 sends small files only: exclude it (Exclude) and copy it to the site another way"

    def _mkdir(self, client: Any, path: str) -> None:
        self._call(f"firecREST mkdir {path}", lambda c: c.mkdir(self.site.machine, path, p=True))

    def _upload_one(self, client: Any, directory: str, filename: str, data: bytes) -> None:
        client.simple_upload(self.site.machine, io.BytesIO(data), directory, filename=filename)

    async def _started_remotely(self, job: JobHandle) -> bool:
        """Whether the run directory's ``job.rc`` or ``job.out`` has content (v1 reads them with
        ``utilities/view``)."""
        for name in ("job.rc", "job.out"):
            try:
                if await self.read_file(job, name):
                    return True
            except (LaunchersError, OSError):
                continue
        return False

    def read_bytes_sync(self, path: str, offset: int = 0) -> bytes | None:
        """``GET /utilities/view`` of the whole file (UTF-8 text), from ``offset``; None if missing."""
        try:
            text = with_retries(
                lambda: self.client().view(self.site.machine, path),
                f"firecREST view {path}",
                tries=4,
                transient=firecrest_transient,
                secrets=self._secrets,
            )
        except LaunchersError:
            raise
        except Exception as e:
            if status_of(e) in (400, 404):
                return None
            raise LaunchersError(f"firecREST view {path}: {self._message(e)}") from None
        return str(text).encode("utf-8")[offset:]

    def _remove_stale(self, path: str) -> None:
        """v1 overwrites a previous attempt's file with an empty upload (its upload takes one)."""
        d, name = posixpath.split(path)
        self._call(f"upload of {name}", lambda c: self._upload_one(c, d, name, b""))

    def _submit_script(self, run_dir: str, script: str) -> str:
        # a POST that creates a task is not repeated: a lost answer could mean a submitted job
        result = self._call(
            "firecREST submit", lambda c: c.submit(self.site.machine, script_str=script), tries=1
        )
        return str(result["jobid"])

    def _acct(self, ids: Sequence[str] | None) -> list[Mapping[str, Any]]:
        machine = self.site.machine
        rows = self._call(
            "firecREST acct", lambda c: c.poll(machine, list(ids) if ids else None), tries=3
        )
        return [r for r in rows if isinstance(r, Mapping)]

    def _lookup_by_name(self, name: str, run_dir: str | None = None) -> str | None:
        """The oldest job of that name (v1's rows tell no working directory), or None; raises
        LaunchersError when the site cannot say."""
        return oldest_in(
            self._acct(None), name, run_dir, id_key="jobid", dir_key="workingDirectory"
        )

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        ids = [str(j.native_id) for j in jobs if j.native_id]
        rows = {str(r.get("jobid")): r for r in await asyncio.to_thread(self._acct, ids)}
        updates: dict[JobHandle, StateUpdate] = {}
        for job in jobs:
            row = rows.get(str(job.native_id))
            if row is None:
                since = time.time() - float(job.record.extra.get("firecrest_submitted") or 0)
                if since > NOT_VISIBLE_GRACE:
                    log.warning(
                        "firecREST does not know job %s (%s), submitted %.0f s ago",
                        job.native_id,
                        job.task_id,
                        since,
                    )
                continue
            # v1's acct rows carry no exit code: job.rc gives it (read by _update_for)
            update = await self._update_for(
                job, {"status": {"state": row.get("state"), "stateReason": ""}}
            )
            if update is not None:
                updates[job] = update
        return updates

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """Bytes of ``RUN/name`` from ``offset`` (``GET /utilities/view``); None when missing."""
        path = posixpath.join(self._run_dir(job), name)
        return await asyncio.to_thread(self.read_bytes_sync, path, offset)

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        machine = self.site.machine

        def one(job: JobHandle) -> None:
            try:
                self.client().cancel(machine, str(job.native_id))
            except Exception as e:  # e.g. the job already ended: the next poll reports its state
                log.info("cancel of %s: %s", job.native_id, self._message(e))

        await asyncio.gather(
            *(asyncio.to_thread(one, j) for j in jobs if j.native_id), return_exceptions=True
        )
        self.tracker.wake(poll_now=True)


__all__ = ["FirecrestV1Executor"]
