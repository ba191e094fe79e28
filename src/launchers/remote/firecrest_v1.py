"""``FirecrestV1Executor``: firecREST v1 (``api_version: 1``) with ``firecrest.v1.Firecrest``
(docs/remote-sites.md, "firecREST v1").

Same flow and state mapping as the v2 executor, over v1's endpoints: ``POST /utilities/mkdir``,
``POST /utilities/upload`` (small files only: up to the direct-upload limit, nothing is staged),
``POST /compute/jobs/upload`` (a task; v1 runs the script from a directory of its own, hence the
explicit ``cd`` of ``job.sh``), ``GET /compute/acct`` for the status of every job in one call,
``GET /utilities/view`` for outputs (``FirecrestV1Storage``), ``DELETE /compute/jobs/{id}`` to
cancel.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import LaunchersError
from ..jobs.update import StateUpdate
from .decide import oldest_in
from .firecrest_executor import FirecrestExecutor
from .storage import FirecrestV1Storage

if TYPE_CHECKING:
    from ..protocols import JobHandle

log = logging.getLogger("launchers.remote")

#: seconds between two reads of a v1 task (pyfirecrest's default starts at 1 s)
TASK_POLL_SLEEPS = [0.2] * 10 + [0.5] * 20 + [1.0] * 120


class FirecrestV1Executor(FirecrestExecutor):
    """Submits, follows and cancels jobs on one firecREST v1 machine."""

    storage_class = FirecrestV1Storage
    too_big_advice = "firecREST v1 sends small files only: exclude it (Exclude) and copy it to the site another way"

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

    def _remove_stale(self, path: str) -> None:
        """v1 overwrites a previous attempt's file with an empty upload (its upload takes one)."""
        self.files.write_sync(path, b"", what=f"upload of {posixpath.basename(path)}")

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
                self._not_visible(job)
                continue
            # v1's acct rows carry no exit code: job.rc gives it (read by _update_for)
            update = await self._update_for(
                job, {"status": {"state": row.get("state"), "stateReason": ""}}
            )
            if update is not None:
                updates[job] = update
        return updates

    def cancel_sync(self, job: JobHandle) -> None:
        try:
            self.client().cancel(self.site.machine, str(job.native_id))
        except Exception as e:  # e.g. the job already ended: the next poll reports its state
            log.info("cancel of %s: %s", job.native_id, self._message(e))


__all__ = ["FirecrestV1Executor"]
