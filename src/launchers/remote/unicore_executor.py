"""``UnicoreExecutor``: runs jobs through a UNICORE REST core API with pyunicore 2.x (remote-sites.md §3.2).

Flow per job: ``new_job(description, autostart=False)``, ``job.sh`` and the files uploaded four at
a time to relative destinations, then ``start``; a failed upload destroys the job first. Status:
no bulk query exists, so one GET per unfinished job per cycle (at most 8 in flight). Outputs are
read with ``Range: bytes=OFFSET-``. pyunicore is synchronous: its calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..config.model import UnicoreSite
from ..errors import AuthenticationError, LaunchersError, SubmissionError
from ..fsutil import atomic_write_text
from ..jobs.record import iso_epoch, now_iso, submitting_since
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.executor import Executor
from .http import (
    attached_payload,
    check_task,
    env_value,
    is_transient,
    redact,
    require_env,
    status_of,
    task_payload,
    with_retries,
)
from .outputs import RemoteOutputs
from .script import UNICORE_BSS_FILE

if TYPE_CHECKING:
    from ..jobs.record import StateRecord
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

log = logging.getLogger("launchers.remote")

PENDING_STATES = ("READY", "STAGINGIN", "QUEUED")
RUNNING_STATES = ("RUNNING", "STAGINGOUT")
MANTIK_USER = "MANTIK_UNICORE_USERNAME"
MANTIK_PASSWORD = "MANTIK_UNICORE_PASSWORD"
#: files up to this size are uploaded from memory (safe to repeat); larger ones are streamed
IN_MEMORY_UPLOAD = 64 * 1024 * 1024
#: UNICORE's statusMessage of an aborted job (given at once, while the batch job may still run)
ABORTED = "Job aborted."


def unicore_path(rel: str) -> str:
    """A path for a storage's ``/files/`` URL, percent-encoded twice: UNICORE decodes file paths
    twice (JAX-RS, then ``makeSMSLocal``) and pyunicore sends them as given, so ``x%41.txt``,
    ``a#b`` or ``c?d`` arrive as written only so (pure)."""
    return quote(quote(rel, safe="/"), safe="/")


def unicore_action_path(rel: str) -> str:
    """A path inside a storage action's JSON body (``rename``, ``copy``), decoded once (pure)."""
    return quote(rel, safe="/")


def read_start(offset: int, size: int, shift: int) -> tuple[int | None, int]:
    """Where to read a remote file that has ``size`` bytes, ``offset`` bytes being already
    copied home of which the first ``shift`` came before the file was last truncated: the
    remote start (None: nothing new) and the new shift. A start is never past ``size``: UNICORE
    loops forever on such a ``Range``, and answers 206 with no body for one equal to it. A file
    smaller than what was read (a requeue truncated it) is read again from 0 (pure)."""
    start = offset - shift
    if start > size:  # truncated: the new content follows what was copied
        return (0 if size > 0 else None), offset
    return (start if start < size else None), shift


def abort_grace(was_running: bool) -> float:
    """Seconds to wait for ``job.rc`` after UNICORE reported "Job aborted." (pure): the Slurm
    job may still be running its traps (scancel's SIGTERM, KillWait before SIGKILL)."""
    return UnicoreExecutor.abort_wait_running if was_running else UnicoreExecutor.abort_wait_queued


def _site_of(launcher: Any) -> UnicoreSite:
    site = getattr(getattr(launcher, "group", None), "site", None)
    if not isinstance(site, UnicoreSite):
        raise LaunchersError(f"launcher {launcher!r} has no UNICORE site")
    return site


def _standalone(launcher: Any) -> bool:
    """A launcher made from a standalone Compute Backend Config (no launchers.yaml position):
    Mantik's credential variables apply as fallbacks (remote-sites.md §2)."""
    group = getattr(launcher, "group", None)
    return getattr(getattr(group, "position", None), "line", None) is None


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """One executor per site and credential set."""
    site = _site_of(launcher)
    return (
        "unicore",
        site.url,
        site.auth,
        site.username_env,
        site.password_env,
        site.token_env,
        site.user_preferences,
        _standalone(launcher),
    )


def create_executor(launcher: Launcher) -> UnicoreExecutor:
    return UnicoreExecutor(
        _site_of(launcher), mantik=_standalone(launcher), key=executor_key(launcher)
    )


def executor_from_record(info: Mapping[str, Any], record: StateRecord) -> UnicoreExecutor:
    """For ``launchers cancel`` on a job known only from its record."""
    data = record.extra.get("unicore_site")
    if not isinstance(data, Mapping) or not data.get("url"):
        raise LaunchersError(f"job {record.task_id}: its record does not name its UNICORE site")
    site = UnicoreSite(
        **{
            k: v
            for k, v in data.items()
            if k
            in (
                "url",
                "auth",
                "username_env",
                "password_env",
                "token_env",
                "verify_tls",
                "user_preferences",
            )
        }
    )
    return UnicoreExecutor(site, mantik=bool(data.get("mantik")), key=("record-unicore", site.url))


#: s: a UNICORE site's clock may differ from ours. A job tagged with this task id but created more
#: than this before our SUBMITTING record is another run's (the same task of another work
#: directory, or an earlier attempt), never the one a crash left unrecorded.
RECONCILE_CLOCK_SLACK = 3600.0


def attempt_tag(run_id: str, attempt: int) -> str:
    """The tag of one attempt of one run directory's job (``NAME-DIGEST-PLACE-aN``)."""
    return f"{run_id}-a{attempt}"


def tagged_choice(
    rows: Sequence[tuple[str, Mapping[str, Any]]], not_before: float | None
) -> tuple[str | None, list[str]]:
    """Among the jobs of a task id (URL, properties): the oldest started one to adopt, and the
    ones left ``READY`` to destroy. Jobs created before ``not_before`` are left alone; a job
    whose ``submissionTime`` cannot be read counts (adopting beats submitting twice)."""
    started: list[tuple[float, str]] = []
    destroy: list[str] = []
    for url, props in rows:
        created = iso_epoch(str(props.get("submissionTime") or ""))
        if not_before is not None and created is not None and created < not_before:
            continue
        if props.get("status") == "READY":
            destroy.append(url)
        else:
            started.append((float("inf") if created is None else created, url))
    return (min(started)[1] if started else None), destroy


class UnicoreExecutor(RemoteOutputs, Executor):
    """Submits, follows and cancels jobs at one UNICORE site."""

    kind = "unicore"
    poll_min = 5.0
    poll_max = 60.0
    #: at most this many status GETs at once
    max_in_flight = 8
    #: uploads in parallel per job
    upload_parallel = 4
    #: s to wait for job.rc of a job UNICORE reports aborted (last seen running, or not)
    abort_wait_running = 40.0
    abort_wait_queued = 5.0

    def __init__(self, site: UnicoreSite, *, mantik: bool = False, key: Hashable = ()) -> None:
        super().__init__(key)
        self.site = site
        self.mantik = mantik
        self._client: Any = None
        self._secrets: list[str] = []
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    # -- the pyunicore client (worker threads) -------------------------------------------------------

    def _credential(self) -> Any:
        # lazy: pyunicore is heavy: loaded when a UNICORE site is used
        from pyunicore import credentials

        env = os.environ
        if self.site.auth == "bearer":
            token = require_env(
                [self.site.token_env], f"UNICORE site {self.site.url}: no token", env
            )
            self._secrets = [token]
            return credentials.OIDCToken(token)
        users = [self.site.username_env] + ([MANTIK_USER] if self.mantik else [])
        passwords = [self.site.password_env] + ([MANTIK_PASSWORD] if self.mantik else [])
        user = require_env(users, f"UNICORE site {self.site.url}: no user name", env)
        password = require_env(passwords, f"UNICORE site {self.site.url}: no password", env)
        self._secrets = [password]
        return credentials.UsernamePassword(user, password)

    def _variables(self) -> str:
        if self.site.auth == "bearer":
            return self.site.token_env
        users = [self.site.username_env] + ([MANTIK_USER] if self.mantik else [])
        pw = [self.site.password_env] + ([MANTIK_PASSWORD] if self.mantik else [])
        u = env_value(users, os.environ)
        p = env_value(pw, os.environ)
        return f"{u[0] if u else users[0]} and {p[0] if p else pw[0]}"

    def client(self) -> Any:
        """The pyunicore ``Client`` (created once; checks that we are not ``anonymous``)."""
        # lazy: pyunicore is heavy: loaded when a UNICORE site is used
        from pyunicore.client import Client, Transport
        from pyunicore.credentials import AuthenticationFailedException

        with self._lock:
            if self._client is not None:
                return self._client
            transport = Transport(self._credential(), verify=self.site.verify_tls)
            if self.site.user_preferences:
                transport.preferences = self.site.user_preferences
            try:
                self._client = with_retries(
                    lambda: Client(transport, self.site.url),
                    f"UNICORE {self.site.url}",
                    secrets=self._secrets,
                )
            except AuthenticationFailedException:
                raise AuthenticationError(
                    f"UNICORE site {self.site.url} did not accept the credentials of {self._variables()} "
                    "(the site answered with the anonymous role)"
                ) from None
            except LaunchersError:
                raise
            except Exception as e:
                self._raise_if_refused(e)
                raise LaunchersError(
                    f"UNICORE site {self.site.url}: {redact(str(e), self._secrets)}"
                ) from None
            return self._client

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
                f"UNICORE site {self.site.url} refused the credentials of {self._variables()} ({reason}"
                f"{', ' + what if what else ''}): check them{hint}"
            ) from None

    def _get(self, url: str, **kw: Any) -> Any:
        return self.client().transport.get(url=url, **kw)

    def _post(self, url: str) -> None:
        self.client().transport.post(url=url, json={}).close()

    # -- submission ------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Before anything is recorded: a command task, and the credential variables are set."""
        check_task(task, "unicore")
        self._credential()

    async def submit(self, job: JobHandle) -> None:
        payload = attached_payload(job.directory) or task_payload(job, "unicore")
        name = payload.name_for(job.attempt)
        script = payload.script(None, name)
        atomic_write_text(job.paths.script, script)
        # tagged per run directory and attempt: a recovery never adopts an earlier attempt's job
        tag = attempt_tag(payload.run_id, job.attempt)
        job.apply(
            StateUpdate(
                state=JobState.SUBMITTING,
                detail="submitting to UNICORE",
                job_name=name,
                extra={
                    "unicore_site": self._site_record(),
                    "run_id": payload.run_id,
                    "unicore_tag": tag,
                },
            )
        )
        description = dict(payload.description or {})
        description["Name"] = name
        description["Tags"] = [*description.get("Tags", []), tag]
        files: list[tuple[Path | bytes, str]] = [(script.encode(), "job.sh")]
        bss = payload.bss_file(name)
        if bss is not None:
            files.append((bss.encode(), UNICORE_BSS_FILE))
        files += [(local, rel) for local, rel in payload.uploads]
        url = await asyncio.to_thread(self._submit_sync, description, files)
        job.runtime["unicore_url"] = url
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail="started at the UNICORE site",
                native_id=url.rstrip("/").rsplit("/", 1)[-1],
                submitted_at=now_iso(),
                extra={"unicore_url": url},
            )
        )

    def _site_record(self) -> dict[str, Any]:
        s = self.site
        return {
            "url": s.url,
            "auth": s.auth,
            "username_env": s.username_env,
            "password_env": s.password_env,
            "token_env": s.token_env,
            "verify_tls": s.verify_tls,
            "user_preferences": s.user_preferences,
            "mantik": self.mantik,
        }

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
            storage = with_retries(
                lambda: ujob.working_dir, f"{what}: working directory", secrets=self._secrets
            )

            def upload(item: tuple[Path | bytes, str]) -> None:
                source, name = item
                rel = unicore_path(name)  # arrives as written (decoded twice at the site)
                try:
                    # pyunicore repeats a request once after a 432 (expired session) with the same
                    # body: a file stream would then be sent empty, so small files go as bytes
                    if not isinstance(source, bytes) and source.stat().st_size <= IN_MEMORY_UPLOAD:
                        source = source.read_bytes()
                    if isinstance(source, bytes):
                        data = source
                        with_retries(
                            lambda: storage.put(data, rel),
                            f"{what}: upload {rel}",
                            secrets=self._secrets,
                        )
                    else:
                        with_retries(
                            lambda: storage.upload(str(source), destination=rel),
                            f"{what}: upload {rel}",
                            secrets=self._secrets,
                        )
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
        """A job found SUBMITTING after a crash: adopt the started UNICORE job tagged with its task
        id (destroying ones left READY, whose uploads may be incomplete), else submit."""
        tag = job.record.extra.get("unicore_tag")
        run_id = (
            str(tag) if tag else job.task_id
        )  # a record written before attempt tags: the task's
        since = submitting_since(job.record)
        not_before = None if since is None else since - RECONCILE_CLOCK_SLACK
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
        adopt, destroy = tagged_choice(rows, not_before)
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
                updates[job] = gone_update(job)  # expired (termination time) or destroyed
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
        if status in PENDING_STATES:
            return StateUpdate(state=JobState.PENDING, slurm_state=status)
        if status in RUNNING_STATES:
            return StateUpdate(state=JobState.RUNNING, slurm_state=status)
        if status not in ("SUCCESSFUL", "FAILED"):
            if status not in self._warned:
                self._warned.add(status)
                log.warning("UNICORE job state %r: the job keeps its previous state", status)
            return None
        aborted = status == "FAILED" and str(props.get("statusMessage") or "") == ABORTED
        try:
            if aborted:
                # UNICORE says FAILED at once while the Slurm job may still run its traps: wait for
                # job.rc (written last) so that outputs are complete and a job that completed just
                # before the abort stays COMPLETED
                rc = await self.fetch_rc(job)
                if rc is None and str(props.get("batchSystemID") or "N/A") != "N/A":
                    first = job.runtime.setdefault(
                        "unicore_abort_seen", (time.monotonic(), job.state is JobState.RUNNING)
                    )
                    if time.monotonic() - first[0] < abort_grace(first[1]):
                        return None
            await self.sync_outputs(job)
            rc = await self.fetch_rc(job)
        except Exception as e:  # outputs are retried next cycle; after 3 failures decided without
            failures = job.runtime["output_failures"] = job.runtime.get("output_failures", 0) + 1
            if failures < 3:
                log.info(
                    "%s: cannot read its outputs yet (%s); state decided next cycle", job.task_id, e
                )
                return None
            log.warning(
                "%s: its outputs cannot be read (%s); deciding its state without job.rc",
                job.task_id,
                e,
            )
            rc = None
        code_text = props.get("exitCode")
        exit_code = (
            int(code_text)
            if isinstance(code_text, (str, int)) and str(code_text).strip().lstrip("-").isdigit()
            else None
        )
        if status == "SUCCESSFUL" and (rc is None or rc.success):
            return StateUpdate(
                state=JobState.COMPLETED,
                detail="UNICORE SUCCESSFUL",
                slurm_state=status,
                exit_code=0,
                reason="",
            )
        if aborted and rc is not None and rc.success:
            return StateUpdate(
                state=JobState.COMPLETED,
                detail="completed before UNICORE's abort",
                slurm_state=status,
                exit_code=0,
                reason="",
            )
        if job.cancel_requested and (rc is None or rc.signalled):
            return StateUpdate(
                state=JobState.CANCELLED,
                detail=f"UNICORE {status}",
                slurm_state=status,
                reason="cancelled on request",
                exit_code=exit_code if exit_code is not None else (rc.rc if rc else None),
            )
        if rc is not None and not rc.success:
            exit_code = rc.rc if exit_code is None or status == "SUCCESSFUL" else exit_code
        reason = str(props.get("statusMessage") or "") or (
            f"exit code {exit_code}" if exit_code is not None else "failed"
        )
        if status == "SUCCESSFUL":
            reason = f"UNICORE reported SUCCESSFUL but job.rc says exit code {exit_code}"
        return StateUpdate(
            state=JobState.FAILED,
            detail=f"UNICORE {status}",
            slurm_state=status,
            reason=reason,
            exit_code=exit_code,
            signal=rc.signal if rc else None,
        )

    # -- files -----------------------------------------------------------------------------------

    async def _storage_url(self, job: JobHandle) -> str:
        props: Any = job.runtime.get("unicore_props")
        if not isinstance(props, Mapping):
            url = self.job_url(job)
            props = await asyncio.to_thread(self._get, url)
            job.runtime["unicore_props"] = props
        return str(props["_links"]["workingDirectory"]["href"])

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """Bytes of ``name`` in the job's working directory from ``offset`` (None: no such file).

        From an offset, the file's size is read first and the ``Range`` never starts past it
        (``read_start``): UNICORE loops forever on such a range. A file that shrank (a requeue
        truncated it) is read again from its start, appended after what was copied before."""
        url = await self._storage_url(job) + "/files/" + unicore_path(name)
        shifts: dict[str, int] = job.runtime.setdefault("unicore_read_shift", {})

        def get() -> bytes | None:
            headers = {"Accept": "application/octet-stream"}
            try:
                if offset > 0:
                    size = int(
                        self._get(url, headers={"Accept": "application/json"}).get("size") or 0
                    )
                    start, shifts[name] = read_start(offset, size, shifts.get(name, 0))
                    if start is None:
                        return b""
                    if start > 0:
                        headers["Range"] = f"bytes={start}-"
                resp = self._get(url, headers=headers, to_json=False)
            except Exception as e:
                code = status_of(e)
                if code == 416:
                    return b""
                if code == 404:
                    return None
                self._raise_if_refused(e, f"reading {name}")
                raise
            return bytes(resp.content)

        return await asyncio.to_thread(
            lambda: with_retries(get, f"UNICORE read {name}", tries=4, secrets=self._secrets)
        )

    # -- cancel ----------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        async def one(job: JobHandle) -> None:
            url = self.job_url(job) + "/actions/abort"
            props = job.runtime.get("unicore_props")
            if isinstance(props, Mapping):
                url = str(props.get("_links", {}).get("action:abort", {}).get("href") or url)
            await asyncio.to_thread(
                lambda: with_retries(
                    lambda: self._post(url), f"UNICORE abort {job.task_id}", secrets=self._secrets
                )
            )

        results = await asyncio.gather(
            *(one(j) for j in jobs if j.native_id), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException) and status_of(r) != 404:  # 404: gone already
                log.error("UNICORE abort failed: %s", redact(str(r), self._secrets))
        self.tracker.wake(poll_now=True)

    async def destroy(self, job: JobHandle) -> None:
        """Remove a finished job and its working directory at the site (``launchers clean``)."""
        url = self.job_url(job)
        await asyncio.to_thread(lambda: self.client().transport.delete(url=url).close())


def gone_update(job: JobHandle) -> StateUpdate:
    """A job whose URL answers 404 (pure): UNICORE destroyed it (its termination time passed,
    or it was deleted), its working directory with it; it will never change again."""
    reason = (
        "the UNICORE job no longer exists at the site (404): it expired (termination time) or was "
        "destroyed, with its working directory"
    )
    if job.cancel_requested:
        return StateUpdate(state=JobState.CANCELLED, detail="UNICORE job gone", reason=reason)
    return StateUpdate(
        state=JobState.FAILED, detail="UNICORE job gone", slurm_state="GONE", reason=reason
    )


class _UploadFailed(Exception):
    def __init__(self, rel: str, message: str) -> None:
        super().__init__(f"{rel}: {message}")
        self.rel = rel
        self.message = message


__all__ = ["UnicoreExecutor", "create_executor", "executor_from_record", "executor_key"]
