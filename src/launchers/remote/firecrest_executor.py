"""``FirecrestExecutor``: runs jobs through firecREST v2 with pyfirecrest 3.x
(docs/remote-sites.md, "Running", "firecREST: server behaviours we rely on and work around").

``firecrest.v2.Firecrest`` with ``ClientCredentialsAuth(..., min_token_validity=60)`` and
``num_retries_rate_limit=10``. Run directory ``BASE/<run id>`` (``site.workdir``, else the
system's default work file system + ``/<user>/launchers``); files up to ``max_ops_file_size``
go by direct ``ops/upload`` (pyfirecrest would stage those above 1 MiB); larger files are staged
through the system's transfer backend (``dataOperation.data_transfer``) with pyfirecrest's
``upload()``, and refused before anything is sent when the system declares none; submission with
``script_str`` + ``working_dir``; per cycle, ``GET jobs/{id}`` for each of a few tracked jobs, one
jobs listing (every job of the user in the site's window) for more; a ``404 Job not found.``
within 60 s of submission means "not visible yet". Files are the machine's ``FirecrestStorage``
(byte-exact although firecREST decodes what it reads; never an empty upload). pyfirecrest is
synchronous: calls run in threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import posixpath
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.model import FirecrestSite
from ..errors import AuthenticationError, ConfigurationError, LaunchersError, SubmissionError
from ..jobs.record import FOLLOWED, RC
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..slurm.states import UnknownStateWarner
from . import decide
from .firecrest_staging import stage_upload
from .payload import RemotePayload
from .retry import describe, error_message, firecrest_transient, status_of, with_retries
from .site_executor import Accepted, Placement, SiteExecutor
from .storage import FirecrestStorage

if TYPE_CHECKING:
    from ..protocols import JobHandle

#: a crashed submission is looked up by name for up to this long before giving up (seconds)
RECONCILE_PATIENCE = 300.0
#: after a submit that timed out (408: sbatch outlived firecREST's command timeout, the job may
#: still appear), look for it by name this long before concluding it was not submitted
SUBMIT_SETTLE = 30.0
#: a previous attempt's files in a reused run directory, removed before each submission
STALE_OUTPUTS = (*FOLLOWED, RC)
RECONCILE_FIRST_RETRY = 2.0
#: lookups by name, 2 s apart, for a job that evidently started but is not listed yet
RECONCILE_NAME_LAG_TRIES = 30
log = logging.getLogger("launchers.remote")

MIN_TOKEN_VALIDITY = 60
RATE_LIMIT_RETRIES = 10
DEFAULT_MAX_OPS = 5 * 1024 * 1024


class SubmitTimedOut(LaunchersError):
    """The submit timed out (408, or no answer): the job may exist all the same."""


def _auth_class() -> Any:
    # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
    from firecrest import ClientCredentialsAuth

    class Auth(ClientCredentialsAuth):
        """Refuses tokens that live no longer than the renewal margin (they would be renewed
        at every request, or used with under 30 s left)."""

        def get_access_token(self) -> str:
            token = str(super().get_access_token())
            left = (self._token_expiration_ts or 0) - time.time()
            if left <= self._min_token_validity:
                lifetime = round(left)
                raise AuthenticationError(
                    f"the token endpoint {self._token_uri} issued a token with expires_in={lifetime} s; "
                    f"launchers renews tokens {self._min_token_validity} s before they expire, so it needs "
                    f"tokens valid for more than {self._min_token_validity} s"
                )
            return token

    return Auth


class FirecrestExecutor(SiteExecutor):
    """Submits, follows and cancels jobs on one firecREST machine."""

    kind = "firecrest"
    poll_min = 2.0
    poll_max = 60.0
    accepted_detail = "submitted to firecREST"
    storage_class: type[FirecrestStorage] = FirecrestStorage
    site: FirecrestSite
    #: why a file above ``max_ops_file_size`` is refused (v1 says it in its own words)
    too_big_advice = (
        "the system declares no transfer backend (dataOperation.data_transfer) to stage it "
        "through; exclude it (Exclude) and copy it to the site another way"
    )
    #: how long a staged upload waits for its transfer job (pyfirecrest cancels it then), seconds
    staged_timeout = 3600.0

    def __init__(self, site: FirecrestSite, *, mantik: bool = False, key: Hashable = ()) -> None:
        super().__init__(site, mantik=mantik, key=key)
        self._base: str | None = None
        self._max_ops: int = DEFAULT_MAX_OPS
        self._transfer: Any = None
        self._warner = UnknownStateWarner()
        #: the machine's files
        self.files = self.storage_class(self, site.machine)

    # -- client ----------------------------------------------------------------------------------

    def _client_class(self) -> Any:
        """The pyfirecrest client class of this API version."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        from firecrest.v2 import Firecrest

        return Firecrest

    def _configure(self, client: Any) -> None:
        """Version-specific settings of a new client."""
        client.disable_client_logging = False

    def new_client(self) -> Any:
        """The pyfirecrest client, credentials from the named variables."""
        Firecrest = self._client_class()
        cid, secret = self.credentials()
        auth = _auth_class()(
            cid, secret, self.site.token_url, min_token_validity=MIN_TOKEN_VALIDITY
        )
        client = Firecrest(self.site.api_url, auth, verify=self.site.verify_tls)
        client.num_retries_rate_limit = RATE_LIMIT_RETRIES
        self._configure(client)
        return client

    def _retried(
        self, what: str, fn: Any, *, tries: int = 8, transient: Any = firecrest_transient
    ) -> Any:
        """``fn(client)`` with retries on transient failures (other errors as they are)."""
        return with_retries(
            lambda: fn(self.client()), what, tries=tries, transient=transient, secrets=self._secrets
        )

    def _call(
        self, what: str, fn: Any, *, tries: int = 8, transient: Any = firecrest_transient
    ) -> Any:
        """``fn(client)`` with retries on transient failures; errors become ``LaunchersError``s."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        from firecrest.FirecrestException import ClientsCredentialsException

        try:
            return self._retried(what, fn, tries=tries, transient=transient)
        except LaunchersError:
            raise
        except ClientsCredentialsException:
            ids, secrets = (c.names for c in self.credential_names())
            raise AuthenticationError(
                f"the token endpoint {self.site.token_url} refused the client credentials of "
                f"{' or '.join(ids)} / {' or '.join(secrets)}"
            ) from None
        except Exception as e:
            raise LaunchersError(f"{what}: {self._message(e)}") from None

    def _message(self, e: BaseException) -> str:
        return describe(e, self._secrets)

    # -- run directory ---------------------------------------------------------------------------

    def base_dir(self) -> str:
        """BASE: ``site.workdir`` (``{user}`` replaced) or the system's work file system + user."""
        if self._base is not None:
            return self._base
        machine = self.site.machine
        systems = self._call("firecREST systems", lambda c: c.systems())
        system = next((s for s in systems if s.get("name") == machine), None)
        if system is None:
            names = ", ".join(str(s.get("name")) for s in systems)
            raise LaunchersError(
                f"firecREST site {self.site.api_url} has no system {machine!r} (it has: {names})"
            )
        ops = system.get("dataOperation") or {}
        self._max_ops = int(ops.get("max_ops_file_size") or DEFAULT_MAX_OPS)
        self._transfer = ops.get("data_transfer")
        info = self._call("firecREST userinfo", lambda c: c.userinfo(machine))
        user = str((info.get("user") or {}).get("name") or "")
        if self.site.workdir:
            self._base = self.site.workdir.replace("{user}", user)
            return self._base
        fss = system.get("fileSystems") or []
        chosen = next((f for f in fss if f.get("defaultWorkDir")), None)
        chosen = chosen or next((f for f in fss if f.get("dataType") == "scratch"), None)
        chosen = chosen or next((f for f in fss if f.get("dataType") == "users"), None)
        if chosen is None:
            raise LaunchersError(
                f"firecREST system {machine!r} declares no work file system; set site.workdir"
            )
        self._base = posixpath.join(str(chosen["path"]), user, "launchers")
        return self._base

    def max_ops(self) -> int:
        """The system's ``max_ops_file_size`` (read with the run directory's base, once)."""
        self.base_dir()
        return self._max_ops

    # -- submission ------------------------------------------------------------------------------

    def check_site(self) -> None:
        """A work directory firecREST can write."""
        if self.site.workdir and "'" in self.site.workdir:
            raise ConfigurationError(
                f"firecREST site {self.site.api_url}: workdir {self.site.workdir!r} contains ', "
                "which firecREST's shell quoting cannot take"
            )

    async def place(self, job: JobHandle, payload: RemotePayload) -> Placement:
        """``BASE/<run id>``; the name is per attempt: a recovery never adopts an earlier one."""
        base = await asyncio.to_thread(self.base_dir)
        run_dir = posixpath.join(base, payload.run_id)
        name = payload.name_for(job.attempt)
        extra = {"run_dir": run_dir, "run_id": payload.run_id}
        return Placement(
            name=name, script=payload.script(run_dir, name), run_dir=run_dir, extra=extra
        )

    def submit_sync(self, payload: RemotePayload, placed: Placement) -> Accepted:
        assert placed.run_dir is not None
        jid = self._submit_sync(placed.run_dir, placed.script, payload.uploads, placed.name)
        return Accepted(native_id=jid, extra={"firecrest_submitted": time.time()})

    def _submit_script(self, run_dir: str, script: str) -> str:
        """POST the job; the site's job id. ``SubmitTimedOut`` when it may exist all the same."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        import httpx

        def refused_before_processing(e: BaseException) -> bool:
            if status_of(e) == 500 and any(t in self._message(e) for t in decide.SLURM_TRANSIENT):
                return True  # sbatch failed to reach the controller: the job was not accepted
            if status_of(e) == 500 and any(t in error_message(e) for t in decide.SSH_REFUSED):
                return True  # firecREST could not even connect to the site
            return status_of(e) == 503 or isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))

        def submit(c: Any) -> Any:
            try:
                return c.submit(self.site.machine, working_dir=run_dir, script_str=script)
            except Exception as e:
                if status_of(e) == 408 or (
                    isinstance(e, httpx.TimeoutException)
                    and not isinstance(e, httpx.ConnectTimeout)
                ):
                    raise SubmitTimedOut(f"firecREST submit: {self._message(e)}") from None
                raise

        result = self._call("firecREST submit", submit, transient=refused_before_processing)
        return str(result["jobId"])

    def _submit_sync(
        self, run_dir: str, script: str, uploads: Sequence[tuple[Path, str]], name: str
    ) -> str:
        """Check sizes, create directories, upload (several at once), submit; a submit that
        answered an error but created the job (found by name) is adopted."""
        sizes = [(rel, local.stat().st_size) for local, rel in uploads]
        refusal, staged = decide.upload_plan(
            sizes,
            machine=self.site.machine,
            max_ops=self._max_ops,
            method=decide.transfer_method(self._transfer),
            no_backend=self.too_big_advice,
        )
        if refusal is not None:
            raise SubmissionError(refusal)
        dirs = sorted(
            {run_dir} | {posixpath.dirname(posixpath.join(run_dir, rel)) for _, rel in uploads}
        )
        for d in dirs:
            self.files.mkdir_sync(d)
        items: list[tuple[Path | bytes, str] | str] = [(script.encode(), "job.sh")]
        # a re-run uses the same run directory: no previous attempt's outputs or job.rc may stay
        items += list(STALE_OUTPUTS)
        items += [(local, rel) for local, rel in uploads]

        def upload(item: tuple[Path | bytes, str] | str) -> None:
            if isinstance(item, str):
                self._remove_stale(posixpath.join(run_dir, item))
                return
            source, rel = item
            target = posixpath.join(run_dir, rel)
            if isinstance(source, Path) and rel in staged:
                directory, filename = posixpath.split(target)
                stage_upload(self, source, directory, filename, rel)
                return
            data = source if isinstance(source, bytes) else source.read_bytes()
            self.files.write_sync(target, data, what=f"upload of {rel}")

        with concurrent.futures.ThreadPoolExecutor(self.upload_parallel) as pool:
            futures = [pool.submit(upload, it) for it in items]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise SubmissionError(
                f"{errors[0]}; nothing was submitted (the run directory {run_dir} keeps "
                "the files sent so far)"
            )
        try:
            return self._submit_script(run_dir, script)
        except LaunchersError as e:
            # the site may have created the job anyway: after a timeout (408) sbatch goes on
            settle = SUBMIT_SETTLE if isinstance(e, SubmitTimedOut) else 0.0
            found = self._find_by_name(name, run_dir, patience=settle)
            if found is None:
                raise SubmissionError(str(e)) from None
            log.warning(
                "firecREST submit answered %s, but job %s named %s exists: adopted", e, found, name
            )
            return found

    def _remove_stale(self, path: str) -> None:
        """``ops/rm`` of a previous attempt's output in the run directory (none there is fine)."""
        what = f"removing the previous attempt's {posixpath.basename(path)}"
        self.files.remove_sync(path, what=what)

    def _upload(self, client: Any, directory: str, filename: str, data: bytes) -> None:
        """A direct upload of ``data`` to ``DIR/NAME`` (the batch queues write their entries so)."""
        self.files.upload_direct(client, posixpath.join(directory, filename), data)

    # -- recovery --------------------------------------------------------------------------------

    async def reconcile(self, job: JobHandle) -> None:
        """A job found SUBMITTING after a crash: adopt the job of its name, else submit. A failed
        lookup is retried, never taken for "not there": that would submit the job twice."""
        name = job.record.job_name
        run_dir = job.record.extra.get("run_dir")
        found = None
        delay, deadline = RECONCILE_FIRST_RETRY, time.monotonic() + RECONCILE_PATIENCE
        while name:
            try:
                found = await asyncio.to_thread(self._lookup_by_name, name, run_dir)
                break
            except LaunchersError as e:
                if time.monotonic() + delay > deadline:
                    job.apply(decide.lookup_failed(name, str(e)))
                    return
                log.warning(
                    "%s: looking for job %s failed (%s); retrying in %.0f s",
                    job.task_id,
                    name,
                    e,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
        stale = False
        if found is None and name and run_dir:
            # ended before the jobs list's window (24 h from firecREST 2.5.7 on): its job.rc names
            # it; a job.rc naming another job is an earlier attempt's (the crash came before it
            # was removed): nothing of this attempt ran
            found, stale = await asyncio.to_thread(self._named_in_rc, name, str(run_dir))
        if found is None and name and not stale and await self._started_remotely(job):
            # Submitted and started, yet not listed under its name: right after a job ends,
            # Slurm's accounting may report the name as "allocation" for a while. Look again.
            for _ in range(RECONCILE_NAME_LAG_TRIES):
                await asyncio.sleep(RECONCILE_FIRST_RETRY)
                try:
                    found = await asyncio.to_thread(self._lookup_by_name, name, run_dir)
                except LaunchersError:
                    continue
                if found is not None:
                    break
            if found is None:
                job.apply(decide.ran_unlisted(name))
                return
        if found is None:
            await self.submit(job)
            return
        log.warning("%s: adopting firecREST job %s found by its name %s", job.task_id, found, name)
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail="adopted by name after a restart",
                native_id=found,
                extra={"firecrest_submitted": time.time()},
            )
        )

    async def _started_remotely(self, job: JobHandle) -> bool:
        """Whether this attempt's job has begun on the site: its run directory's ``job.out`` or
        ``job.rc`` has content (both are removed before each submission)."""
        run_dir = self._run_dir(job)
        for name in ("job.rc", "job.out"):
            try:
                if await self.files.stat_size(posixpath.join(run_dir, name)):
                    return True
            except (LaunchersError, OSError):
                continue
        return False

    def _named_in_rc(self, name: str, run_dir: str) -> tuple[str | None, bool]:
        """What the run directory's ``job.rc`` says: (the id of the job of this name that wrote
        it; whether another job wrote it, an earlier attempt's left behind). Its ``job_name``
        tells (``SLURM_JOB_NAME``); a job.rc without one is checked with ``GET jobs/{id}``
        (sacct, without the list's time window). (None, False) when it cannot be told."""
        try:
            data = self.read_bytes_sync(posixpath.join(run_dir, "job.rc"))
            record = json.loads(data) if data else None
        except (LaunchersError, ValueError):
            return None, False
        nid, stale = decide.rc_names(record, name)
        if stale is not None:
            return nid, stale
        if nid is None:
            return None, False
        try:
            rows = self._call(
                f"firecREST job {nid}", lambda c: c.job_info(self.site.machine, nid), tries=3
            )
        except LaunchersError:
            return None, False
        found = decide.oldest_in(rows, name, run_dir, id_key="jobId", dir_key="workingDirectory")
        return found, found is None and decide.other_jobs_named(rows, name)

    def _lookup_by_name(self, name: str, run_dir: str | None = None) -> str | None:
        """The oldest job of that name (in ``run_dir`` when the site tells each job's working
        directory: another experiment's job of the same task is not ours), or None; raises
        LaunchersError when the site cannot say. The ``name`` filter needs API 2.6.0 in
        pyfirecrest; before, the whole list (every job of the user, in the site's window) is
        read and filtered here."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        from firecrest.FirecrestException import NotImplementedOnAPIversion

        machine = self.site.machine

        def jobs(c: Any) -> Any:
            try:
                return c.job_info(machine, name=name)
            except NotImplementedOnAPIversion:
                return c.job_info(machine)

        return decide.oldest_in(
            self._call("firecREST jobs", jobs, tries=3),
            name,
            run_dir,
            id_key="jobId",
            dir_key="workingDirectory",
        )

    def _find_by_name(
        self, name: str, run_dir: str | None = None, patience: float = 0.0
    ) -> str | None:
        """Like ``_lookup_by_name``, None when the lookup fails (only to adopt after an error);
        with ``patience``, looked for every 2 s for that long until found."""
        deadline = time.monotonic() + patience
        while True:
            try:
                found = self._lookup_by_name(name, run_dir)
            except LaunchersError:
                found = None
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(RECONCILE_FIRST_RETRY)

    # -- status ----------------------------------------------------------------------------------

    #: up to this many tracked jobs are asked one by one (``GET jobs/{id}``): the list holds
    #: every job of the user over a day (or a week), whatever its length
    list_from = 9

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        machine = self.site.machine
        found: dict[JobHandle, Mapping[str, Any] | None] = {}
        if len(jobs) >= self.list_from:
            listing = await asyncio.to_thread(
                self._call, "firecREST jobs", lambda c: c.job_info(machine), tries=3
            )
            rows = {str(j.get("jobId")): j for j in listing}
            found = {job: rows[str(job.native_id)] for job in jobs if str(job.native_id) in rows}
        missing = [job for job in jobs if job not in found]
        sem = asyncio.Semaphore(8)

        async def one(job: JobHandle) -> Mapping[str, Any] | None:
            async with sem:
                return await asyncio.to_thread(self._one_job, job)

        answers = await asyncio.gather(*(one(job) for job in missing), return_exceptions=True)
        if missing and not found and all(isinstance(a, BaseException) for a in answers):
            raise LaunchersError(f"firecREST jobs: {answers[0]}")
        found.update(
            {
                job: a
                for job, a in zip(missing, answers, strict=True)
                if not isinstance(a, BaseException)
            }
        )
        updates: dict[JobHandle, StateUpdate] = {}
        for job in jobs:
            row = found.get(job)
            if row is None:
                continue
            update = await self._update_for(job, row)
            if update is not None:
                updates[job] = update
        return updates

    def _not_visible(self, job: JobHandle) -> None:
        """A job the site does not know: warned about once it should be visible."""
        since = time.time() - float(job.record.extra.get("firecrest_submitted") or 0)
        if since > decide.NOT_VISIBLE_GRACE:
            log.warning(
                "firecREST does not know job %s (%s), submitted %.0f s ago",
                job.native_id,
                job.task_id,
                since,
            )

    def _one_job(self, job: JobHandle) -> Mapping[str, Any] | None:
        """``GET .../jobs/{id}`` for a job missing from the listing; None while not visible yet."""
        machine = self.site.machine
        try:
            found = self._retried(
                f"firecREST job {job.native_id}",
                lambda c: c.job_info(machine, str(job.native_id)),
                tries=3,
            )
        except Exception as e:
            if status_of(e) == 404:
                self._not_visible(job)
                return None
            raise
        return found[0] if found else None

    async def _update_for(self, job: JobHandle, row: Mapping[str, Any]) -> StateUpdate | None:
        state, raw = decide.firecrest_state(row)
        if state is None:
            self._warner(raw)
            return None
        rc = None
        if state.is_final:
            ready, rc = await self.final_rc(job)
            if not ready:
                return None
        return decide.firecrest_update(row, rc, cancel_requested=job.cancel_requested)

    # -- files -----------------------------------------------------------------------------------

    def _run_dir(self, job: JobHandle) -> str:
        d = job.record.extra.get("run_dir")
        if not d:
            raise LaunchersError(f"job {job.task_id}: no run directory in its record")
        return str(d)

    async def read_file(self, job: JobHandle, name: str, offset: int = 0) -> bytes | None:
        """Bytes of ``RUN/name`` from ``offset``, exactly as they are on the site; None when the
        file does not exist."""
        path = posixpath.join(self._run_dir(job), name)
        return await asyncio.to_thread(self.read_bytes_sync, path, offset)

    def read_bytes_sync(self, path: str, offset: int = 0) -> bytes | None:
        """The bytes of the remote ``path`` from ``offset``, byte-exact (None: no such file)."""
        return self.files.read_bytes_sync(path, offset)

    # -- cancel ----------------------------------------------------------------------------------

    def cancel_sync(self, job: JobHandle) -> None:
        machine = self.site.machine
        try:
            self._retried(
                f"firecREST cancel {job.native_id}",
                lambda c: c.cancel_job(machine, str(job.native_id)),
                tries=4,
            )
        except Exception as e:
            if status_of(e) in (500, 404):
                # already final (firecREST answers 500 for a job that ended, see
                # docs/remote-sites.md): the next poll reports the real state
                log.info("cancel of %s: %s (job already finished)", job.native_id, self._message(e))
                return
            raise LaunchersError(
                f"firecREST cancel of {job.native_id}: {self._message(e)}"
            ) from None


__all__ = ["FirecrestExecutor"]
