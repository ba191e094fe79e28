"""``UnicoreExecutor``: runs jobs through a UNICORE REST core API with pyunicore 2.x
(docs/remote-sites.md, "Running", "UNICORE: server behaviours we rely on and work around").

Flow per job: ``new_job(description, autostart=False)``, ``job.sh``, ``job.sbatch`` and the
files uploaded four at a time to relative destinations of its working directory, then
``start``; a failed upload destroys the job first. Status: no bulk query exists, so one GET per
unfinished job per cycle (at most 8 in flight); what each answer means is ``remote.decide``'s.
Files are the working directory's ``UnicoreStorage``. pyunicore is synchronous: its calls run in
worker threads. Also the kind's entry points (``executor_key``, ``create_executor``,
``executor_from_record``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.model import UnicoreSite
from ..errors import AuthenticationError, LaunchersError, SubmissionError
from ..jobs.record import submitting_since
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from . import decide
from . import settings as S
from .payload import RemotePayload
from .retry import is_transient, redact, status_of, with_retries
from .script import UNICORE_BSS_FILE
from .site_executor import Accepted, Placement, SiteExecutor
from .storage import UnicoreStorage

if TYPE_CHECKING:
    from ..jobs.record import StateRecord
    from ..launcher import Launcher
    from ..protocols import JobHandle

log = logging.getLogger("launchers.remote")


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """One executor per site and credential set."""
    return S.executor_key(launcher, "unicore")


def create_executor(launcher: Launcher) -> UnicoreExecutor:
    site, mantik, key = S.resolve(launcher, "unicore")
    assert isinstance(site, UnicoreSite)
    return UnicoreExecutor(site, mantik=mantik, key=key)


def executor_from_record(info: Mapping[str, Any], record: StateRecord) -> UnicoreExecutor:
    """For ``launchers cancel`` on a job known only from its record."""
    site, mantik = S.site_from_record("unicore", record.task_id, record.extra)
    assert isinstance(site, UnicoreSite)
    return UnicoreExecutor(site, mantik=mantik, key=("record-unicore", site.url))


class UnicoreExecutor(SiteExecutor):
    """Submits, follows and cancels jobs at one UNICORE site."""

    kind = "unicore"
    poll_min = 5.0
    poll_max = 60.0
    #: at most this many status GETs at once
    max_in_flight = 8
    accepted_detail = "started at the UNICORE site"
    site: UnicoreSite

    def __init__(self, site: UnicoreSite, *, mantik: bool = False, key: Hashable = ()) -> None:
        super().__init__(site, mantik=mantik, key=key)
        self._warned: set[str] = set()

    # -- the pyunicore client (worker threads) -------------------------------------------------------

    def new_client(self) -> Any:
        """The pyunicore ``Client`` (checks that the site does not take us for ``anonymous``)."""
        # lazy: pyunicore is heavy: loaded when a UNICORE site is used
        from pyunicore import credentials
        from pyunicore.client import Client, Transport
        from pyunicore.credentials import AuthenticationFailedException

        values = self.credentials()
        credential = (
            credentials.OIDCToken(values[0])
            if self.site.auth == "bearer"
            else credentials.UsernamePassword(values[0], values[1])
        )
        transport = Transport(credential, verify=self.site.verify_tls)
        if self.site.user_preferences:
            transport.preferences = self.site.user_preferences
        try:
            return with_retries(
                lambda: Client(transport, self.site.url),
                f"UNICORE {self.site.url}",
                secrets=self._secrets,
            )
        except AuthenticationFailedException:
            raise AuthenticationError(
                f"UNICORE site {self.site.url} did not accept the credentials of {self.variables()} "
                "(the site answered with the anonymous role)"
            ) from None
        except LaunchersError:
            raise
        except Exception as e:
            self._raise_if_refused(e)
            raise LaunchersError(
                f"UNICORE site {self.site.url}: {redact(str(e), self._secrets)}"
            ) from None

    def _raise_if_refused(self, error: BaseException, what: str = "") -> None:
        """An ``AuthenticationError`` naming the credential variables for a 401 or a 403 (a
        UNICORE site answers 403 on every path to credentials it cannot verify, and to another
        user's job); pyunicore raises a plain ``httpx.HTTPError`` whose text holds the status."""
        code = status_of(error)
        if code in (401, 403):
            reason = "401 Unauthorized" if code == 401 else "403 Forbidden"
            hint = (
                "; a job of another user also answers 403" if code == 403 and "job" in what else ""
            )
            raise AuthenticationError(
                f"UNICORE site {self.site.url} refused the credentials of {self.variables()} ({reason}"
                f"{', ' + what if what else ''}): check them{hint}"
            ) from None

    def _get(self, url: str, **kw: Any) -> Any:
        return self.client().transport.get(url=url, **kw)

    def _post(self, url: str) -> None:
        self.client().transport.post(url=url, json={}).close()

    def storage(self, files_url: str, rename_url: str = "") -> UnicoreStorage:
        """The files of a storage (a job's working directory, the user's home)."""
        return UnicoreStorage(
            self,
            files_url,
            site=self.site.url,
            refused=self._raise_if_refused,
            rename_url=rename_url,
        )

    # -- submission ------------------------------------------------------------------------------

    async def place(self, job: JobHandle, payload: RemotePayload) -> Placement:
        """UNICORE chooses the working directory; the job is tagged per run directory and
        attempt, so a recovery never adopts an earlier attempt's job."""
        name = payload.name_for(job.attempt)
        tag = decide.attempt_tag(payload.run_id, job.attempt)
        extra = {"run_id": payload.run_id, "unicore_tag": tag}
        return Placement(name=name, script=payload.script(None, name), run_dir=None, extra=extra)

    def submit_sync(self, payload: RemotePayload, placed: Placement) -> Accepted:
        description = dict(payload.description or {})
        description["Name"] = placed.name
        description["Tags"] = [*description.get("Tags", []), placed.extra["unicore_tag"]]
        files: list[tuple[Path | bytes, str]] = [(placed.script.encode(), "job.sh")]
        bss = payload.bss_file(placed.name)
        if bss is not None:
            files.append((bss.encode(), UNICORE_BSS_FILE))
        files += [(local, rel) for local, rel in payload.uploads]
        url = self._submit_sync(description, files)
        return Accepted(
            native_id=url.rstrip("/").rsplit("/", 1)[-1],
            extra={"unicore_url": url},
            runtime={"unicore_url": url},
        )

    def _submit_sync(
        self, description: dict[str, Any], files: Sequence[tuple[Path | bytes, str]]
    ) -> str:
        client = self.client()
        what = f"UNICORE {self.site.url}"

        def refused_before_processing(e: BaseException) -> bool:  # a POST is retried only then
            return status_of(e) in (429, 503) or (is_transient(e) and status_of(e) is None)

        try:
            ujob = with_retries(
                lambda: client.new_job(description, autostart=False),
                f"{what}: submit",
                transient=refused_before_processing,
                secrets=self._secrets,
            )
        except LaunchersError:
            raise
        except Exception as e:
            self._raise_if_refused(e, "submitting the job")
            raise SubmissionError(
                f"{what} refused the job: {redact(str(e), self._secrets)}"
            ) from None
        try:
            working_dir = with_retries(
                lambda: ujob.working_dir, f"{what}: working directory", secrets=self._secrets
            )
            storage = self.storage(str(working_dir.resource_url) + "/files")

            def upload(item: tuple[Path | bytes, str]) -> None:
                source, name = item
                try:
                    if isinstance(source, bytes):
                        storage.write_sync(name, source)
                    else:
                        storage.upload_sync(source, name)
                except Exception as e:
                    raise _UploadFailed(name, redact(str(e), self._secrets)) from None

            with concurrent.futures.ThreadPoolExecutor(self.upload_parallel) as pool:
                futures = [pool.submit(upload, f) for f in files]
                errors = [f.exception() for f in futures if f.exception() is not None]
            if errors:
                raise errors[0]  # type: ignore[misc]
            with_retries(ujob.start, f"{what}: start", secrets=self._secrets)
        except Exception as e:
            try:
                ujob.delete()
            except Exception as d:
                log.warning(
                    "could not destroy UNICORE job %s after a failed upload: %s",
                    ujob.resource_url,
                    d,
                )
            if isinstance(e, _UploadFailed):
                raise SubmissionError(
                    f"upload of {e.rel} failed: {e.message}; the UNICORE job was destroyed "
                    "before it started"
                ) from None
            raise SubmissionError(
                f"{what}: {redact(str(e), self._secrets)}; the UNICORE job was destroyed"
            ) from None
        return str(ujob.resource_url)

    async def reconcile(self, job: JobHandle) -> None:
        """A job found SUBMITTING after a crash: adopt the started UNICORE job tagged with its
        attempt's tag (destroying ones left READY, whose uploads may be incomplete), else submit."""
        tag = job.record.extra.get("unicore_tag")
        # a record written before attempt tags: the task id is the tag
        run_id = str(tag) if tag else job.task_id
        since = submitting_since(job.record)
        not_before = None if since is None else since - decide.RECONCILE_CLOCK_SLACK
        found = await asyncio.to_thread(self._find_tagged, run_id, not_before)
        if found is None:
            await self.submit(job)
            return
        log.warning("%s: adopting UNICORE job %s found by its tag %s", job.task_id, found, run_id)
        job.runtime["unicore_url"] = found
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail="adopted by tag after a restart",
                native_id=found.rstrip("/").rsplit("/", 1)[-1],
                extra={"unicore_url": found},
            )
        )

    def _find_tagged(self, tag: str, not_before: float | None = None) -> str | None:
        client = self.client()
        rows: list[tuple[str, Mapping[str, Any]]] = []
        jobs = {}
        for ujob in with_retries(
            lambda: client.get_jobs(tags=[tag]), "UNICORE jobs", secrets=self._secrets
        ):
            url = str(ujob.resource_url)
            props = with_retries(lambda: self._get(url), "UNICORE job", secrets=self._secrets)  # noqa: B023
            rows.append((url, props))
            jobs[url] = ujob
        adopt, destroy = decide.tagged_choice(rows, not_before)
        for url in destroy:
            jobs[url].delete()  # never started: its files may be incomplete
        return adopt

    # -- status ----------------------------------------------------------------------------------

    def job_url(self, job: JobHandle) -> str:
        url = job.runtime.get("unicore_url") or job.record.extra.get("unicore_url")
        if not url:
            raise LaunchersError(f"job {job.task_id}: no UNICORE job URL in its record")
        return str(url)

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        sem = asyncio.Semaphore(self.max_in_flight)

        async def one(job: JobHandle) -> Any:
            async with sem:
                url = self.job_url(job)
                return await asyncio.to_thread(
                    lambda: with_retries(
                        lambda: self._get(url),
                        f"UNICORE status of {job.task_id}",
                        tries=4,
                        secrets=self._secrets,
                    )
                )

        results = await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)
        updates: dict[JobHandle, StateUpdate] = {}
        for job, props in zip(jobs, results, strict=True):
            if isinstance(props, BaseException) and status_of(props) == 404:
                # expired (termination time) or destroyed
                updates[job] = decide.unicore_gone(cancel_requested=job.cancel_requested)
        failed = [r for r in results if isinstance(r, BaseException) and status_of(r) != 404]
        if results and len(failed) == len(results):
            self._raise_if_refused(failed[0], "reading job status")
            raise LaunchersError(redact(str(failed[0]), self._secrets))
        for job, props in zip(jobs, results, strict=True):
            if isinstance(props, BaseException) or not isinstance(props, Mapping):
                continue
            job.runtime["unicore_props"] = props
            update = await self._update_for(job, props)
            if update is not None:
                updates[job] = update
        return updates

    async def _update_for(self, job: JobHandle, props: Mapping[str, Any]) -> StateUpdate | None:
        status = str(props.get("status", ""))
        progress = decide.unicore_progress(status)
        if progress is not None:
            return progress
        if status not in decide.UNICORE_FINAL:
            if status not in self._warned:
                self._warned.add(status)
                log.warning("UNICORE job state %r: the job keeps its previous state", status)
            return None

        async def wait_after_abort() -> bool:
            # UNICORE says FAILED at once while the Slurm job may still run its traps: wait for
            # job.rc (written last) so that outputs are complete and a job that completed just
            # before the abort stays COMPLETED
            if not decide.unicore_aborted(props):
                return False
            if await self.fetch_rc(job) is not None or not decide.reached_batch_system(props):
                return False
            seen = job.runtime.setdefault(
                "unicore_abort_seen", (time.monotonic(), job.state is JobState.RUNNING)
            )
            return decide.waits_for_rc(seen, time.monotonic())

        ready, rc = await self.final_rc(job, before=wait_after_abort)
        if not ready:
            return None
        return decide.unicore_final(props, rc, cancel_requested=job.cancel_requested)

    # -- files -----------------------------------------------------------------------------------

    async def files(self, job: JobHandle) -> UnicoreStorage:
        """The job's working directory."""
        props: Any = job.runtime.get("unicore_props")
        if not isinstance(props, Mapping):
            url = self.job_url(job)
            props = await asyncio.to_thread(self._get, url)
            job.runtime["unicore_props"] = props
        return self.storage(str(props["_links"]["workingDirectory"]["href"]) + "/files")

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """Bytes of ``name`` in the job's working directory from ``offset`` (None: no such file).

        From an offset, the file's size is read first and the ``Range`` never starts past it
        (``decide.read_start``): UNICORE loops forever on such a range. A file that shrank (a
        requeue truncated it) is read again from its start, appended after what was copied."""
        store = await self.files(job)
        shifts: dict[str, int] = job.runtime.setdefault("unicore_read_shift", {})
        return await asyncio.to_thread(store.read_after, name, offset, shifts)

    # -- cancel ----------------------------------------------------------------------------------

    def cancel_sync(self, job: JobHandle) -> None:
        url = self.job_url(job) + "/actions/abort"
        props = job.runtime.get("unicore_props")
        if isinstance(props, Mapping):
            url = str(props.get("_links", {}).get("action:abort", {}).get("href") or url)
        with_retries(lambda: self._post(url), f"UNICORE abort {job.task_id}", secrets=self._secrets)

    def cancel_failure(self, error: BaseException) -> str | None:
        if status_of(error) == 404:  # gone already
            return None
        return f"UNICORE abort failed: {redact(str(error), self._secrets)}"

    async def destroy(self, job: JobHandle) -> None:
        """Remove a finished job and its working directory at the site (``launchers clean``)."""
        url = self.job_url(job)
        await asyncio.to_thread(lambda: self.client().transport.delete(url=url).close())


class _UploadFailed(Exception):
    def __init__(self, rel: str, message: str) -> None:
        super().__init__(f"{rel}: {message}")
        self.rel = rel
        self.message = message


__all__ = ["UnicoreExecutor", "create_executor", "executor_from_record", "executor_key"]
