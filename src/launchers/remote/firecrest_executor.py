"""``FirecrestExecutor``: runs jobs through firecREST v2 with pyfirecrest 3.x (remote-sites.md §3.3, §5).

``firecrest.v2.Firecrest`` with ``ClientCredentialsAuth(..., min_token_validity=60)`` and
``num_retries_rate_limit=10``. Run directory ``BASE/<run id>`` (``site.workdir``, else the
system's default work file system + ``/<user>/launchers``); files up to ``max_ops_file_size``
go by direct ``ops/upload`` (pyfirecrest would stage those above 1 MiB); larger files are staged
through the system's transfer backend (``dataOperation.data_transfer``) with pyfirecrest's
``upload()``, and refused before anything is sent when the system declares none; submission with
``script_str`` + ``working_dir``; one jobs listing per cycle; a ``404 Job not found.`` within
60 s of submission means "not visible yet". pyfirecrest is synchronous: calls run in threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import posixpath
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.model import FirecrestSite
from ..errors import AuthenticationError, LaunchersError, SubmissionError
from ..fsutil import atomic_write_text
from ..jobs.executor import Executor, StateUpdate
from ..jobs.record import now_iso
from ..jobs.state import JobState
from ..slurm.states import UnknownStateWarner, cancel_reason, map_state
from ..units import format_size
from .http import (
    TRANSIENT_STATUS,
    attached_payload,
    check_task,
    is_transient,
    oldest_in,
    redact,
    require_env,
    status_of,
    task_payload,
    with_retries,
)
from .outputs import RemoteOutputs

if TYPE_CHECKING:
    from ..jobs.job import Job
    from ..jobs.record import StateRecord
    from ..jobs.task import Task
    from ..launcher import Launcher

#: a crashed submission is looked up by name for up to this long before giving up (seconds)
RECONCILE_PATIENCE = 300.0
RECONCILE_FIRST_RETRY = 2.0
#: lookups by name, 2 s apart, for a job that evidently started but is not listed yet
RECONCILE_NAME_LAG_TRIES = 30

#: what a transfer job's log says when the file arrived (the texts pyfirecrest checks for)
_TRANSFER_DONE = ("Files were successfully", "File was successfully", "Multipart file upload successfully completed")
log = logging.getLogger("launchers.remote")

MIN_TOKEN_VALIDITY = 60
RATE_LIMIT_RETRIES = 10
NOT_VISIBLE_GRACE = 60.0
MANTIK_ID = "MANTIK_FIRECREST_CLIENT_ID"
MANTIK_SECRET = "MANTIK_FIRECREST_CLIENT_SECRET"
DEFAULT_MAX_OPS = 5 * 1024 * 1024
#: sbatch errors (in a 500 answer) that mean "not accepted, try again" (slurm-runtime.md §4)
SLURM_TRANSIENT = ("Socket timed out", "Unable to contact slurm controller", "temporarily unable to accept job")
#: transfer backends through which pyfirecrest's ``upload()`` stages a file itself ("wormhole"
#: needs the external ``wormhole`` program and is not used)
STAGING_METHODS = ("s3", "streamer")


def _site_of(launcher: Any) -> FirecrestSite:
    site = getattr(getattr(launcher, "group", None), "site", None)
    if not isinstance(site, FirecrestSite):
        raise LaunchersError(f"launcher {launcher!r} has no firecREST site")
    return site


def _standalone(launcher: Any) -> bool:
    group = getattr(launcher, "group", None)
    return getattr(getattr(group, "position", None), "line", None) is None


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """One executor per (API, machine, credentials)."""
    s = _site_of(launcher)
    return ("firecrest", s.api_url, s.machine, s.token_url, s.client_id_env, s.client_secret_env, s.workdir,
            s.api_version, _standalone(launcher))


def create_executor(launcher: Launcher) -> FirecrestExecutor:
    site = _site_of(launcher)
    if site.api_version == 1:
        from .firecrest_v1 import FirecrestV1Executor

        return FirecrestV1Executor(site, mantik=_standalone(launcher), key=executor_key(launcher))
    if site.api_version != 2:
        raise LaunchersError(f"firecREST site {site.api_url}: api_version {site.api_version} is not supported "
                             "(write 2, the default, or 1)")
    return FirecrestExecutor(site, mantik=_standalone(launcher), key=executor_key(launcher))


def executor_from_record(info: Mapping[str, Any], record: StateRecord) -> FirecrestExecutor:
    """For ``launchers cancel`` on a job known only from its record."""
    data = record.extra.get("firecrest_site")
    if not isinstance(data, Mapping) or not data.get("api_url"):
        raise LaunchersError(f"job {record.task_id}: its record does not name its firecREST site")
    fields = ("api_url", "token_url", "machine", "client_id_env", "client_secret_env", "workdir", "verify_tls",
              "api_version")
    site = FirecrestSite(**{k: v for k, v in data.items() if k in fields})
    key = ("record-firecrest", site.api_url, site.machine, site.api_version)
    if site.api_version == 1:
        from .firecrest_v1 import FirecrestV1Executor

        return FirecrestV1Executor(site, mantik=bool(data.get("mantik")), key=key)
    return FirecrestExecutor(site, mantik=bool(data.get("mantik")), key=key)


def firecrest_transient(error: BaseException) -> bool:
    """Worth retrying here: pyfirecrest already waited out 429s (10 times, ``Retry-After``), so
    an API 429 that reaches us is final for this call; the token endpoint's 429/5xx are retried."""
    from firecrest.FirecrestException import ClientsCredentialsException

    if isinstance(error, ClientsCredentialsException):
        return status_of(error) in TRANSIENT_STATUS
    return is_transient(error) and status_of(error) != 429


def _auth_class() -> Any:
    from firecrest import ClientCredentialsAuth

    class Auth(ClientCredentialsAuth):
        """Refuses tokens that live no longer than the renewal margin (they would be renewed
        at every request, or used with under 30 s left: remote-sites.md §5)."""

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


class FirecrestExecutor(RemoteOutputs, Executor):
    """Submits, follows and cancels jobs on one firecREST machine."""

    kind = "firecrest"
    poll_min = 2.0
    poll_max = 60.0
    upload_parallel = 4

    def __init__(self, site: FirecrestSite, *, mantik: bool = False, key: Hashable = ()) -> None:
        super().__init__(key)
        self.site = site
        self.mantik = mantik
        self._client: Any = None
        self._secrets: list[str] = []
        self._lock = threading.Lock()
        self._base: str | None = None
        self._max_ops: int = DEFAULT_MAX_OPS
        self._transfer: Any = None
        self._warner = UnknownStateWarner()

    # -- client ----------------------------------------------------------------------------------

    def _names(self) -> tuple[list[str], list[str]]:
        ids = [self.site.client_id_env] + ([MANTIK_ID] if self.mantik else [])
        secrets = [self.site.client_secret_env] + ([MANTIK_SECRET] if self.mantik else [])
        return ids, secrets

    def _client_class(self) -> Any:
        """The pyfirecrest client class of this API version."""
        from firecrest.v2 import Firecrest

        return Firecrest

    def _configure(self, client: Any) -> None:
        """Version-specific settings of a new client."""
        client.disable_client_logging = False

    def client(self) -> Any:
        """The pyfirecrest client (created once), credentials from the named variables."""
        Firecrest = self._client_class()
        with self._lock:
            if self._client is None:
                ids, secrets = self._names()
                where = f"firecREST site {self.site.api_url}"
                cid = require_env(ids, f"{where}: no client id", os.environ)
                secret = require_env(secrets, f"{where}: no client secret", os.environ)
                self._secrets = [secret]
                auth = _auth_class()(cid, secret, self.site.token_url, min_token_validity=MIN_TOKEN_VALIDITY)
                client = Firecrest(self.site.api_url, auth, verify=self.site.verify_tls)
                client.num_retries_rate_limit = RATE_LIMIT_RETRIES
                self._configure(client)
                self._client = client
            return self._client

    def _call(self, what: str, fn: Any, *, tries: int = 8, transient: Any = firecrest_transient) -> Any:
        """``fn(client)`` with retries on transient failures; errors become ``LaunchersError``s."""
        from firecrest.FirecrestException import ClientsCredentialsException

        try:
            return with_retries(lambda: fn(self.client()), what, tries=tries, transient=transient,
                                secrets=self._secrets)
        except LaunchersError:
            raise
        except ClientsCredentialsException:
            ids, secrets = self._names()
            raise AuthenticationError(
                f"the token endpoint {self.site.token_url} refused the client credentials of "
                f"{' or '.join(ids)} / {' or '.join(secrets)}"
            ) from None
        except Exception as e:
            raise LaunchersError(f"{what}: {self._message(e)}") from None

    def _message(self, e: BaseException) -> str:
        responses = getattr(e, "responses", None)
        if responses:
            r = responses[-1]
            try:
                body = r.json()
                text = body.get("message") or body.get("error") or json.dumps(body)
            except ValueError:
                text = r.text
            return redact(f"{r.status_code} {text}", self._secrets)
        return redact(str(e), self._secrets)

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
            raise LaunchersError(f"firecREST site {self.site.api_url} has no system {machine!r} (it has: {names})")
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
            raise LaunchersError(f"firecREST system {machine!r} declares no work file system; set site.workdir")
        self._base = posixpath.join(str(chosen["path"]), user, "launchers")
        return self._base

    # -- submission ------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Before anything is recorded: a command task, and the credential variables are set."""
        check_task(task, "firecrest")
        ids, secrets = self._names()
        where = f"firecREST site {self.site.api_url}"
        require_env(ids, f"{where}: no client id", os.environ)
        require_env(secrets, f"{where}: no client secret", os.environ)

    async def submit(self, job: Job) -> None:
        payload = attached_payload(job.directory) or task_payload(job, "firecrest")
        base = await asyncio.to_thread(self.base_dir)
        run_dir = posixpath.join(base, payload.run_id)
        script = payload.script(run_dir)
        atomic_write_text(job.paths.script, script)
        job.apply(StateUpdate(state=JobState.SUBMITTING, detail="submitting to firecREST", job_name=payload.job_name,
                              extra={"firecrest_site": self._site_record(), "run_dir": run_dir,
                                     "run_id": payload.run_id}))
        jid = await asyncio.to_thread(self._submit_sync, run_dir, script, payload.uploads, payload.job_name)
        job.runtime["submitted_mono"] = time.monotonic()
        job.apply(StateUpdate(state=JobState.PENDING, detail="submitted to firecREST", native_id=jid,
                              submitted_at=now_iso(), extra={"firecrest_submitted": time.time()}))

    def _site_record(self) -> dict[str, Any]:
        s = self.site
        return {"api_url": s.api_url, "token_url": s.token_url, "machine": s.machine,
                "client_id_env": s.client_id_env, "client_secret_env": s.client_secret_env,
                "workdir": s.workdir, "verify_tls": s.verify_tls, "mantik": self.mantik}

    #: why a file above ``max_ops_file_size`` is refused (v1 says it in its own words)
    too_big_advice = ("the system declares no transfer backend (dataOperation.data_transfer) to stage it "
                      "through; exclude it (Exclude) and copy it to the site another way")
    #: how long a staged upload waits for its transfer job (pyfirecrest cancels it then), seconds
    staged_timeout = 3600.0

    def _transfer_method(self) -> str | None:
        """The declared transfer backend's ``service_type`` (``s3``, ``streamer``...), or None."""
        t = self._transfer
        if not t:
            return None
        if isinstance(t, Mapping):
            kind = t.get("service_type") or t.get("serviceType") or t.get("name")
            return str(kind) if kind else None
        return str(t)

    def _stage(self, local: Path, directory: str, filename: str, rel: str) -> None:
        """A file above ``max_ops_file_size`` through the transfer backend, as pyfirecrest's
        ``upload()`` stages it: ``POST /filesystem/{machine}/transfer/upload`` (a transfer job and
        the presigned part URLs), the parts and the completion call, then the transfer job that
        moves the file into place is awaited (its log must report success). A failure after the
        transfer job exists cancels that job (it would otherwise wait for the file for hours)."""
        from firecrest.FirecrestException import MultipartUploadException

        machine, method = self.site.machine, str(self._transfer_method())
        size = local.stat().st_size

        def start(c: Any) -> Any:
            # pyfirecrest stages from 1 MiB; a system whose direct limit is lower needs it from there
            c.MAX_DIRECT_UPLOAD_SIZE = min(type(c).MAX_DIRECT_UPLOAD_SIZE, self._max_ops + 1)
            return c.upload(machine, str(local), directory, filename, blocking=False, transfer_method=method,
                            file_size=size)

        def accepted_or_refused(e: BaseException) -> bool:  # repeat the POST only if nothing was created
            return status_of(e) == 503 or (is_transient(e) and status_of(e) is None)

        what = f"staged upload of {rel} ({format_size(size)}, {method})"
        ext = self._call(f"{what}: transfer/upload", start, transient=accepted_or_refused)
        job_id = ((getattr(ext, "transfer_data", None) or {}).get("transferJob") or {}).get("jobId")
        try:
            if method == "s3":

                def parts(c: Any) -> None:
                    ext._all_tags = []  # a repeated attempt sends every part again
                    try:
                        ext.upload_file_to_stage()
                    except MultipartUploadException as e:  # not str(e): it holds the presigned URLs
                        raise LaunchersError(f"{what}: {getattr(e, '_msg', None) or 'multipart upload failed'}"
                                             ) from None

                self._call(f"{what}: parts", parts, tries=3)
            else:
                ext.wait_for_streamer_job_to_listen()
                ext.upload_file_streamer()
            self._call(f"{what}: transfer job {job_id}", lambda c: self._wait_transfer(c, ext, what), tries=3)
        except BaseException:
            self._cancel_transfer(job_id)
            raise

    def _wait_transfer(self, c: Any, ext: Any, what: str) -> None:
        """Wait for a staged upload's transfer job, then read its log with ``ops/view`` and an
        explicit ``size`` (pyfirecrest's own wait views it without one, which a site whose
        ``max_ops_file_size`` is under 5 MiB refuses: remote-sites §5)."""
        from firecrest.FirecrestException import JobTimeoutException

        tj = (getattr(ext, "transfer_data", None) or {}).get("transferJob") or {}
        system, job_id = str(tj.get("system") or self.site.machine), str(tj.get("jobId"))
        try:
            c.wait_for_job(system, job_id, timeout=self.staged_timeout)
        except JobTimeoutException:
            raise LaunchersError(f"{what}: transfer job {job_id} did not end within {self.staged_timeout:.0f} s"
                                 ) from None  # fmt: skip
        log_path = (tj.get("logs") or {}).get("outputLog")
        text = self._tail_text(c, system, str(log_path)) if log_path else None
        if text is None:
            raise LaunchersError(f"{what}: transfer job {job_id} left no log (cancelled before it ran?)")
        if not any(mark in text for mark in _TRANSFER_DONE):
            raise LaunchersError(f"{what}: transfer job {job_id} did not report success: {text.strip()[-300:]!r}")

    def _tail_text(self, c: Any, system: str, path: str) -> str | None:
        """The end of a small remote text file (at most ``max_ops_file_size``); None if absent."""
        try:
            size = int(c.stat(system, path).get("size") or 0)
        except Exception as e:
            if status_of(e) == 404:
                return None
            raise
        n = min(size, self._max_ops)
        resp = c._get_request(endpoint=f"/filesystem/{system}/ops/view",
                              params={"path": path, "offset": size - n, "size": n})  # fmt: skip
        return str(c._check_response(resp, 200)["output"])

    def _cancel_transfer(self, job_id: Any) -> None:
        if job_id is None:
            return
        try:
            self.client().cancel_job(self.site.machine, str(job_id))
        except Exception as e:  # already over, or unreachable: nothing more to do
            log.info("cancel of transfer job %s: %s", job_id, self._message(e))

    def _mkdir(self, client: Any, path: str) -> None:
        self._call(f"firecREST mkdir {path}", lambda c: c.mkdir(self.site.machine, path, create_parents=True))

    def _upload_one(self, client: Any, directory: str, filename: str, data: bytes) -> None:
        self._upload(client, directory, filename, data)

    def _submit_script(self, run_dir: str, script: str) -> str:
        """POST the job; the site's job id."""

        def refused_before_processing(e: BaseException) -> bool:
            if status_of(e) == 500 and any(t in self._message(e) for t in SLURM_TRANSIENT):
                return True  # sbatch failed to reach the controller: the job was not accepted
            return status_of(e) == 503 or (is_transient(e) and status_of(e) is None)

        result = self._call("firecREST submit",
                            lambda c: c.submit(self.site.machine, working_dir=run_dir, script_str=script),
                            transient=refused_before_processing)
        return str(result["jobId"])

    def _submit_sync(self, run_dir: str, script: str, uploads: Sequence[tuple[Path, str]], name: str) -> str:
        """Check sizes, create directories, upload (several at once), submit; a submit that
        answered an error but created the job (found by name) is adopted."""
        machine = self.site.machine
        too_big = [(rel, local.stat().st_size) for local, rel in uploads if local.stat().st_size > self._max_ops]
        method = self._transfer_method()
        if too_big and method not in STAGING_METHODS:
            rel, size = too_big[0]
            advice = self.too_big_advice if method is None else (
                f"its transfer backend {method!r} is not one launchers stages through "
                f"({', '.join(STAGING_METHODS)}); exclude it (Exclude) and copy it to the site another way")
            raise SubmissionError(
                f"{rel} ({format_size(size)}) is larger than the direct upload limit of {machine} "
                f"(max_ops_file_size {format_size(self._max_ops)}); {advice}"
                + ("" if len(too_big) == 1 else f" ({len(too_big) - 1} more such files)")
            )
        staged = {rel for rel, _ in too_big}
        dirs = sorted({run_dir} | {posixpath.dirname(posixpath.join(run_dir, rel)) for _, rel in uploads})
        for d in dirs:
            self._mkdir(None, d)
        items: list[tuple[Path | bytes, str]] = [(script.encode(), "job.sh")]
        # a re-run uses the same run directory: empty the previous attempt's outputs and job.rc
        items += [(b"", n) for n in ("job.out", "job.err", "job.rc")]
        items += [(local, rel) for local, rel in uploads]

        def upload(item: tuple[Path | bytes, str]) -> None:
            source, rel = item
            target = posixpath.join(run_dir, rel)
            if isinstance(source, Path) and rel in staged:
                self._stage(source, posixpath.dirname(target), posixpath.basename(target), rel)
                return
            data = source if isinstance(source, bytes) else source.read_bytes()
            self._call(f"upload of {rel}", lambda c: self._upload_one(c, posixpath.dirname(target),
                                                                    posixpath.basename(target), data))

        with concurrent.futures.ThreadPoolExecutor(self.upload_parallel) as pool:
            futures = [pool.submit(upload, it) for it in items]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise SubmissionError(f"{errors[0]}; nothing was submitted (the run directory {run_dir} keeps "
                                  "the files sent so far)")
        try:
            return self._submit_script(run_dir, script)
        except LaunchersError as e:
            found = self._find_by_name(name, run_dir)
            if found is None:
                raise SubmissionError(str(e)) from None
            log.warning("firecREST submit answered %s, but job %s named %s exists: adopted", e, found, name)
            return found

    async def reconcile(self, job: Job) -> None:
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
                    job.apply(StateUpdate(state=JobState.FAILED, detail="reconcile failed",
                                          reason=f"could not tell whether job {name} exists on the site ({e}); "
                                                 "not submitted again"))
                    return
                log.warning("%s: looking for job %s failed (%s); retrying in %.0f s", job.task_id, name, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
        if found is None and name and await self._started_remotely(job):
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
                job.apply(StateUpdate(state=JobState.FAILED, detail="reconcile failed",
                                      reason=f"job {name} ran on the site (its outputs are there) but the site does "
                                             "not list it by name; not submitted again"))
                return
        if found is None:
            await self.submit(job)
            return
        log.warning("%s: adopting firecREST job %s found by its name %s", job.task_id, found, name)
        job.apply(StateUpdate(state=JobState.PENDING, detail="adopted by name after a restart", native_id=found,
                              extra={"firecrest_submitted": time.time()}))

    async def _started_remotely(self, job: Job) -> bool:
        """Whether this attempt's job has begun on the site: its run directory's ``job.out`` or
        ``job.rc`` has content (both are emptied before each submission)."""
        for name in ("job.rc", "job.out"):
            try:
                if await self.read_file(job, name):
                    return True
            except (LaunchersError, OSError):
                continue
        return False

    def _lookup_by_name(self, name: str, run_dir: str | None = None) -> str | None:
        """The oldest job of that name (in ``run_dir`` when the site tells each job's working
        directory: another experiment's job of the same task is not ours), or None; raises
        LaunchersError when the site cannot say."""
        jobs = self._call("firecREST jobs", lambda c: c.job_info(self.site.machine, name=name), tries=3)
        return oldest_in(jobs, name, run_dir, id_key="jobId", dir_key="workingDirectory")

    def _find_by_name(self, name: str, run_dir: str | None = None) -> str | None:
        """Like ``_lookup_by_name``, None when the lookup fails (only to adopt after an error)."""
        try:
            return self._lookup_by_name(name, run_dir)
        except LaunchersError:
            return None

    def _upload(self, client: Any, directory: str, filename: str, data: bytes) -> None:
        """``POST /filesystem/{machine}/ops/upload?path=DIR``, multipart ``file``: direct, whatever
        the size up to ``max_ops_file_size`` (pyfirecrest's ``upload`` stages files from 1 MiB)."""
        resp = client._post_request(endpoint=f"/filesystem/{self.site.machine}/ops/upload",
                                    params={"path": directory}, files={"file": (filename, data)})
        client._check_response(resp, 204, return_json=False)

    # -- status ----------------------------------------------------------------------------------

    async def poll(self, jobs: Sequence[Job]) -> Mapping[Job, StateUpdate]:
        machine = self.site.machine
        listing = await asyncio.to_thread(self._call, "firecREST jobs", lambda c: c.job_info(machine), tries=3)
        rows = {str(j.get("jobId")): j for j in listing}
        updates: dict[Job, StateUpdate] = {}
        for job in jobs:
            row = rows.get(str(job.native_id))
            if row is None:
                row = await asyncio.to_thread(self._one_job, job)
            if row is None:
                continue
            update = await self._update_for(job, row)
            if update is not None:
                updates[job] = update
        return updates

    def _one_job(self, job: Job) -> Mapping[str, Any] | None:
        """``GET .../jobs/{id}`` for a job missing from the listing; None while not visible yet."""
        machine = self.site.machine
        try:
            found = with_retries(lambda: self.client().job_info(machine, str(job.native_id)),
                                 f"firecREST job {job.native_id}", tries=3, transient=firecrest_transient,
                                 secrets=self._secrets)
        except Exception as e:
            if status_of(e) == 404:
                since = time.time() - float(job.record.extra.get("firecrest_submitted") or 0)
                if since > NOT_VISIBLE_GRACE:
                    log.warning("firecREST does not know job %s (%s), submitted %.0f s ago",
                                job.native_id, job.task_id, since)
                return None
            raise
        return found[0] if found else None

    async def _update_for(self, job: Job, row: Mapping[str, Any]) -> StateUpdate | None:
        status = row.get("status") or {}
        raw = str(status.get("state") or "")
        st = map_state(raw)
        if st.state is None:
            self._warner(raw)
            return None
        state = JobState[st.state]
        reason = str(status.get("stateReason") or "")
        exit_code = status.get("exitCode")
        signal = status.get("interruptSignal") or None
        common: dict[str, Any] = {"slurm_state": raw, "extra": {"state_reason": reason}}
        if not state.is_final:
            if state is JobState.PENDING and reason and reason.lower() != "none":
                common["reason"] = reason
            return StateUpdate(state=state, **common)
        try:
            await self.sync_outputs(job)
            rc = await self.fetch_rc(job)
        except Exception as e:  # outputs are retried next cycle; after 3 failures decided without
            failures = job.runtime["output_failures"] = job.runtime.get("output_failures", 0) + 1
            if failures < 3:
                log.info("%s: cannot read its outputs yet (%s); state decided next cycle", job.task_id, e)
                return None
            log.warning("%s: its outputs cannot be read (%s); deciding its state without job.rc", job.task_id, e)
            rc = None
        if state is JobState.CANCELLED:
            return StateUpdate(state=state, detail=raw, reason=cancel_reason(
                st.cancelled_by, requested=job.cancel_requested, my_uid=None), **common)
        if state is JobState.COMPLETED:
            if rc is not None and not rc.success:
                return StateUpdate(state=JobState.FAILED, detail=raw, exit_code=rc.rc, signal=rc.signal,
                                   reason=f"exit code {rc.rc}", **common)
            return StateUpdate(state=state, detail=raw, exit_code=0, reason="", **common)
        code = rc.rc if rc is not None and rc.rc else (int(exit_code) if isinstance(exit_code, int) else None)
        why = f"exit code {code}" if code is not None else raw
        return StateUpdate(state=state, detail=raw, exit_code=code, signal=(rc.signal if rc else None) or signal,
                           reason=why, **common)

    # -- files -----------------------------------------------------------------------------------

    def _run_dir(self, job: Job) -> str:
        d = job.record.extra.get("run_dir")
        if not d:
            raise LaunchersError(f"job {job.task_id}: no run directory in its record")
        return str(d)

    async def read_file(self, job: Job, name: str, offset: int = 0) -> bytes | None:
        """Bytes of ``RUN/name`` from ``offset`` (``ops/stat``, then ``ops/view`` in pieces of at
        most ``max_ops_file_size``); None when the file does not exist."""
        path = posixpath.join(self._run_dir(job), name)
        machine = self.site.machine

        def read() -> bytes | None:
            try:
                st = with_retries(lambda: self.client().stat(machine, path), f"firecREST stat {name}", tries=4,
                                  transient=firecrest_transient, secrets=self._secrets)
            except Exception as e:
                if status_of(e) in (404, 400):
                    return None
                raise
            size = int(st.get("size") or 0)
            out = b""
            pos = offset
            while pos < size:
                n = min(self._max_ops, size - pos)

                def view(pos: int = pos, n: int = n) -> str:
                    c = self.client()
                    resp = c._get_request(endpoint=f"/filesystem/{machine}/ops/view",
                                          params={"path": path, "offset": pos, "size": n})
                    return str(c._check_response(resp, 200)["output"])

                text = with_retries(view, f"firecREST view {name}", tries=4, transient=firecrest_transient,
                                   secrets=self._secrets)
                chunk = text.encode("utf-8")
                if not chunk:
                    break
                out += chunk
                pos += n
            return out

        return await asyncio.to_thread(read)

    # -- cancel ----------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[Job]) -> None:
        machine = self.site.machine

        def one(job: Job) -> None:
            try:
                with_retries(lambda: self.client().cancel_job(machine, str(job.native_id)),
                             f"firecREST cancel {job.native_id}", tries=4, transient=firecrest_transient,
                             secrets=self._secrets)
            except Exception as e:
                if status_of(e) in (500, 404):
                    # already final (eth-cscs/firecrest-v2#159): the next poll reports the real state
                    log.info("cancel of %s: %s (job already finished)", job.native_id, self._message(e))
                    return
                raise LaunchersError(f"firecREST cancel of {job.native_id}: {self._message(e)}") from None

        results = await asyncio.gather(*(asyncio.to_thread(one, j) for j in jobs if j.native_id),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                log.error("%s", r)
        self.tracker.wake(poll_now=True)


__all__ = ["FirecrestExecutor", "create_executor", "executor_from_record", "executor_key"]
