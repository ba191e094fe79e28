"""``FirecrestExecutor``: runs jobs through firecREST v2 with pyfirecrest 3.x (remote-sites.md §3.3, §5).

``firecrest.v2.Firecrest`` with ``ClientCredentialsAuth(..., min_token_validity=60)`` and
``num_retries_rate_limit=10``. Run directory ``BASE/<run id>`` (``site.workdir``, else the
system's default work file system + ``/<user>/launchers``); files up to ``max_ops_file_size``
go by direct ``ops/upload`` (pyfirecrest would stage those above 1 MiB); larger files are staged
through the system's transfer backend (``dataOperation.data_transfer``) with pyfirecrest's
``upload()``, and refused before anything is sent when the system declares none; submission with
``script_str`` + ``working_dir``; per cycle, ``GET jobs/{id}`` for each of a few tracked jobs, one
jobs listing (every job of the user in the site's window) for more; a ``404 Job not found.``
within 60 s of submission means "not visible yet". Outputs are copied byte-exactly although
firecREST decodes what it reads (``read_bytes_sync``); empty files are never uploaded (an empty
upload never ends there). pyfirecrest is synchronous: calls run in threads.
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
from ..errors import AuthenticationError, ConfigurationError, LaunchersError, SubmissionError
from ..fsutil import atomic_write_text
from ..jobs.record import epoch_iso, now_iso
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.executor import Executor
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
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

#: a crashed submission is looked up by name for up to this long before giving up (seconds)
RECONCILE_PATIENCE = 300.0
#: after a submit that timed out (408: sbatch outlived firecREST's command timeout, the job may
#: still appear), look for it by name this long before concluding it was not submitted
SUBMIT_SETTLE = 30.0
#: texts of firecREST's 500 when the site refuses its SSH connection
SSH_REFUSED = ("Connect call failed", "Connection refused")
#: bytes (``tail``) read from the end of a transfer job's log
TRANSFER_LOG_BYTES = 64 * 1024
#: a previous attempt's files in a reused run directory, removed before each submission
STALE_OUTPUTS = ("job.out", "job.err", "job.rc")
RECONCILE_FIRST_RETRY = 2.0
#: lookups by name, 2 s apart, for a job that evidently started but is not listed yet
RECONCILE_NAME_LAG_TRIES = 30

#: what a transfer job's log says when the file arrived (the texts pyfirecrest checks for)
_TRANSFER_DONE = (
    "Files were successfully",
    "File was successfully",
    "Multipart file upload successfully completed",
)
log = logging.getLogger("launchers.remote")

MIN_TOKEN_VALIDITY = 60
RATE_LIMIT_RETRIES = 10
NOT_VISIBLE_GRACE = 60.0
MANTIK_ID = "MANTIK_FIRECREST_CLIENT_ID"
MANTIK_SECRET = "MANTIK_FIRECREST_CLIENT_SECRET"
DEFAULT_MAX_OPS = 5 * 1024 * 1024
#: sbatch errors (in a 500 answer) that mean "not accepted, try again" (slurm-runtime.md §4)
SLURM_TRANSIENT = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "temporarily unable to accept job",
)
#: transfer backends through which pyfirecrest's ``upload()`` stages a file itself ("wormhole"
#: needs the external ``wormhole`` program and is not used)
STAGING_METHODS = ("s3", "streamer")


#: what ``FirecrestExecutor._get`` returns for a 404 and a 413
_MISSING = object()
_TOO_BIG = object()


class SubmitTimedOut(LaunchersError):
    """The submit timed out (408, or no answer): the job may exist all the same."""


def error_message(error: BaseException) -> str:
    """The ``message`` of the firecREST answer behind a pyfirecrest error (else its text)."""
    responses = getattr(error, "responses", None)
    if responses:
        try:
            body = responses[-1].json()
        except ValueError:
            return str(getattr(responses[-1], "text", ""))
        if isinstance(body, Mapping):
            return str(body.get("message") or body.get("error") or "")
    return str(error)


def ssh_unreachable(status: int | None, message: str) -> bool:
    """firecREST could not reach the site over SSH, so nothing ran there: its answer to a
    refused connection (500 with the OSError, ``Connect call failed``) or to a lost one (424)."""
    return status == 424 or (status == 500 and any(t in message for t in SSH_REFUSED))


def firecrest_transient(error: BaseException) -> bool:
    """Worth retrying here: pyfirecrest already waited out 429s (10 times, ``Retry-After``), so
    an API 429 that reaches us is final for this call; the token endpoint's 429/5xx are retried;
    the site's SSH being unreachable (500 refused, 424) passes (docs/remote-sites.md)."""
    # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
    from firecrest.FirecrestException import ClientsCredentialsException

    if isinstance(error, ClientsCredentialsException):
        return status_of(error) in TRANSIENT_STATUS
    if is_transient(error) and status_of(error) != 429:
        return True
    return ssh_unreachable(status_of(error), error_message(error))


def download_fits(size: int, max_ops: int) -> bool:
    """Whether ``ops/download`` can send a file of ``size`` bytes: firecREST reads it as base64
    (4 characters per 3 bytes) into a buffer of ``max_ops_file_size`` that it may not fill."""
    return 4 * ((size + 2) // 3) < max_ops


def exact_prefix(text: str) -> bytes:
    """The bytes of a file that ``text`` (firecREST's UTF-8 decoding with replacement) gives
    exactly: all of it up to its first U+FFFD, behind which the original bytes are unknown."""
    cut = text.find("\ufffd")
    return (text if cut < 0 else text[:cut]).encode("utf-8")


def view_window(offset: int, want: int, max_ops: int) -> tuple[int, int]:
    """(offset, size) of an ``ops/view`` whose answer starts at a byte we know: firecREST's view
    ``dd``s two blocks of ``size`` from the block holding ``offset``, then slices *characters*
    from ``offset % size``, so only a block boundary is a known place. Two blocks must stay
    under ``max_ops_file_size`` (its output buffer)."""
    size = max(1, min(want, max_ops // 2 - 1))
    return offset - offset % size, size


def block_at(offset: int, cap: int) -> int:
    """The largest block size up to ``cap`` that ``offset`` is a multiple of (an ``ops/view``
    block starting exactly there)."""
    best, d = 1, 1
    while d * d <= offset:
        if offset % d == 0:
            for size in (d, offset // d):
                if best < size <= cap:
                    best = size
        d += 1
    return best


def _auth_class() -> Any:
    # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
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
        self._lossy: set[str] = set()

    # -- client ----------------------------------------------------------------------------------

    def _names(self) -> tuple[list[str], list[str]]:
        ids = [self.site.client_id_env] + ([MANTIK_ID] if self.mantik else [])
        secrets = [self.site.client_secret_env] + ([MANTIK_SECRET] if self.mantik else [])
        return ids, secrets

    def _client_class(self) -> Any:
        """The pyfirecrest client class of this API version."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
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
                auth = _auth_class()(
                    cid, secret, self.site.token_url, min_token_validity=MIN_TOKEN_VALIDITY
                )
                client = Firecrest(self.site.api_url, auth, verify=self.site.verify_tls)
                client.num_retries_rate_limit = RATE_LIMIT_RETRIES
                self._configure(client)
                self._client = client
            return self._client

    def _call(
        self, what: str, fn: Any, *, tries: int = 8, transient: Any = firecrest_transient
    ) -> Any:
        """``fn(client)`` with retries on transient failures; errors become ``LaunchersError``s."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        from firecrest.FirecrestException import ClientsCredentialsException

        try:
            return with_retries(
                lambda: fn(self.client()),
                what,
                tries=tries,
                transient=transient,
                secrets=self._secrets,
            )
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

    # -- submission ------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Before anything is recorded: a command task, a work directory firecREST can write, and
        the credential variables are set."""
        check_task(task, "firecrest")
        if self.site.workdir and "'" in self.site.workdir:
            raise ConfigurationError(
                f"firecREST site {self.site.api_url}: workdir {self.site.workdir!r} contains ', "
                "which firecREST's shell quoting cannot take"
            )
        ids, secrets = self._names()
        where = f"firecREST site {self.site.api_url}"
        require_env(ids, f"{where}: no client id", os.environ)
        require_env(secrets, f"{where}: no client secret", os.environ)

    async def submit(self, job: JobHandle) -> None:
        payload = attached_payload(job.directory) or task_payload(job, "firecrest")
        base = await asyncio.to_thread(self.base_dir)
        run_dir = posixpath.join(base, payload.run_id)
        name = payload.name_for(job.attempt)  # per attempt: a recovery never adopts an earlier one
        script = payload.script(run_dir, name)
        atomic_write_text(job.paths.script, script)
        job.apply(
            StateUpdate(
                state=JobState.SUBMITTING,
                detail="submitting to firecREST",
                job_name=name,
                extra={
                    "firecrest_site": self._site_record(),
                    "run_dir": run_dir,
                    "run_id": payload.run_id,
                },
            )
        )
        jid = await asyncio.to_thread(self._submit_sync, run_dir, script, payload.uploads, name)
        job.runtime["submitted_mono"] = time.monotonic()
        job.apply(
            StateUpdate(
                state=JobState.PENDING,
                detail="submitted to firecREST",
                native_id=jid,
                submitted_at=now_iso(),
                extra={"firecrest_submitted": time.time()},
            )
        )

    def _site_record(self) -> dict[str, Any]:
        s = self.site
        return {
            "api_url": s.api_url,
            "token_url": s.token_url,
            "machine": s.machine,
            "client_id_env": s.client_id_env,
            "client_secret_env": s.client_secret_env,
            "workdir": s.workdir,
            "verify_tls": s.verify_tls,
            "mantik": self.mantik,
        }

    #: why a file above ``max_ops_file_size`` is refused (v1 says it in its own words)
    too_big_advice = (
        "the system declares no transfer backend (dataOperation.data_transfer) to stage it "
        "through; exclude it (Exclude) and copy it to the site another way"
    )
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
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        from firecrest.FirecrestException import MultipartUploadException

        machine, method = self.site.machine, str(self._transfer_method())
        size = local.stat().st_size

        def start(c: Any) -> Any:
            # pyfirecrest stages from 1 MiB; a system whose direct limit is lower needs it from there
            c.MAX_DIRECT_UPLOAD_SIZE = min(type(c).MAX_DIRECT_UPLOAD_SIZE, self._max_ops + 1)
            return c.upload(
                machine,
                str(local),
                directory,
                filename,
                blocking=False,
                transfer_method=method,
                file_size=size,
            )

        def accepted_or_refused(
            e: BaseException,
        ) -> bool:  # repeat the POST only if nothing was created
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
                        raise LaunchersError(
                            f"{what}: {getattr(e, '_msg', None) or 'multipart upload failed'}"
                        ) from None

                self._call(f"{what}: parts", parts, tries=3)
            else:
                ext.wait_for_streamer_job_to_listen()
                ext.upload_file_streamer()
            self._call(
                f"{what}: transfer job {job_id}",
                lambda c: self._wait_transfer(c, ext, what),
                tries=3,
            )
        except BaseException:
            self._cancel_transfer(job_id)
            raise

    def _wait_transfer(self, c: Any, ext: Any, what: str) -> None:
        """Wait for a staged upload's transfer job, then read its log with ``ops/view`` and an
        explicit ``size`` (pyfirecrest's own wait views it without one, which a site whose
        ``max_ops_file_size`` is under 5 MiB refuses: remote-sites §5)."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
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
            raise LaunchersError(
                f"{what}: transfer job {job_id} left no log (cancelled before it ran?)"
            )
        if not any(mark in text for mark in _TRANSFER_DONE):
            raise LaunchersError(
                f"{what}: transfer job {job_id} did not report success: {text.strip()[-300:]!r}"
            )

    def _cancel_transfer(self, job_id: Any) -> None:
        if job_id is None:
            return
        try:
            self.client().cancel_job(self.site.machine, str(job_id))
        except Exception as e:  # already over, or unreachable: nothing more to do
            log.info("cancel of transfer job %s: %s", job_id, self._message(e))

    def _mkdir(self, client: Any, path: str) -> None:
        self._call(
            f"firecREST mkdir {path}",
            lambda c: c.mkdir(self.site.machine, path, create_parents=True),
        )

    def _upload_one(self, client: Any, directory: str, filename: str, data: bytes) -> None:
        self._upload(client, directory, filename, data)

    def _submit_script(self, run_dir: str, script: str) -> str:
        """POST the job; the site's job id. ``SubmitTimedOut`` when it may exist all the same."""
        # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
        import httpx

        def refused_before_processing(e: BaseException) -> bool:
            if status_of(e) == 500 and any(t in self._message(e) for t in SLURM_TRANSIENT):
                return True  # sbatch failed to reach the controller: the job was not accepted
            if status_of(e) == 500 and any(t in error_message(e) for t in SSH_REFUSED):
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
        machine = self.site.machine
        too_big = [
            (rel, local.stat().st_size)
            for local, rel in uploads
            if local.stat().st_size > self._max_ops
        ]
        method = self._transfer_method()
        if too_big and method not in STAGING_METHODS:
            rel, size = too_big[0]
            advice = (
                self.too_big_advice
                if method is None
                else (
                    f"its transfer backend {method!r} is not one launchers stages through "
                    f"({', '.join(STAGING_METHODS)}); exclude it (Exclude) and copy it to the site another way"
                )
            )
            raise SubmissionError(
                f"{rel} ({format_size(size)}) is larger than the direct upload limit of {machine} "
                f"(max_ops_file_size {format_size(self._max_ops)}); {advice}"
                + ("" if len(too_big) == 1 else f" ({len(too_big) - 1} more such files)")
            )
        empty = [rel for local, rel in uploads if local.stat().st_size == 0]
        if empty:  # job.sh creates the project's empty files; an empty upload never ends (408)
            raise SubmissionError(
                f"{empty[0]} is empty: firecREST cannot upload an empty file (it never answers); "
                "it was not empty when the run was planned, run it again"
            )
        staged = {rel for rel, _ in too_big}
        dirs = sorted(
            {run_dir} | {posixpath.dirname(posixpath.join(run_dir, rel)) for _, rel in uploads}
        )
        for d in dirs:
            self._mkdir(None, d)
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
                self._stage(source, posixpath.dirname(target), posixpath.basename(target), rel)
                return
            data = source if isinstance(source, bytes) else source.read_bytes()
            self._call(
                f"upload of {rel}",
                lambda c: self._upload_one(
                    c, posixpath.dirname(target), posixpath.basename(target), data
                ),
            )

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
        machine = self.site.machine
        try:
            with_retries(
                lambda: self.client().rm(machine, path),
                f"firecREST rm {path}",
                transient=firecrest_transient,
                secrets=self._secrets,
            )
        except LaunchersError:
            raise
        except Exception as e:
            if status_of(e) == 404:
                return
            raise LaunchersError(
                f"removing the previous attempt's {posixpath.basename(path)}: {self._message(e)}"
            ) from None

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
                    job.apply(
                        StateUpdate(
                            state=JobState.FAILED,
                            detail="reconcile failed",
                            reason=f"could not tell whether job {name} exists on the site ({e}); "
                            "not submitted again",
                        )
                    )
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
                job.apply(
                    StateUpdate(
                        state=JobState.FAILED,
                        detail="reconcile failed",
                        reason=f"job {name} ran on the site (its outputs are there) but the site does "
                        "not list it by name; not submitted again",
                    )
                )
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
                if await asyncio.to_thread(self._size_of, posixpath.join(run_dir, name)):
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
        if not isinstance(record, Mapping) or not record.get("native_id"):
            return None, False
        nid, writer = str(record["native_id"]), record.get("job_name")
        if writer:
            return (nid, False) if writer == name else (None, True)
        try:
            rows = self._call(
                f"firecREST job {nid}", lambda c: c.job_info(self.site.machine, nid), tries=3
            )
        except LaunchersError:
            return None, False
        found = oldest_in(rows, name, run_dir, id_key="jobId", dir_key="workingDirectory")
        # right after a job ends, accounting may name it "allocation" for a while: not a verdict
        others = [r for r in rows if r.get("name") not in (name, "allocation", "", None)]
        return found, found is None and bool(others)

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

        return oldest_in(
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

    def _upload(self, client: Any, directory: str, filename: str, data: bytes) -> None:
        """``POST /filesystem/{machine}/ops/upload?path=DIR``, multipart ``file``: direct, whatever
        the size up to ``max_ops_file_size`` (pyfirecrest's ``upload`` stages files from 1 MiB).
        Never an empty file: firecREST sends it nothing and never closes its input, the answer
        is 408 after its command timeout."""
        if not data:
            raise LaunchersError(
                f"{posixpath.join(directory, filename)}: an empty file cannot be uploaded through "
                "firecREST (it never answers); launchers creates empty files another way"
            )
        resp = client._post_request(
            endpoint=f"/filesystem/{self.site.machine}/ops/upload",
            params={"path": directory},
            files={"file": (filename, data)},
        )
        client._check_response(resp, 204, return_json=False)

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

    def _one_job(self, job: JobHandle) -> Mapping[str, Any] | None:
        """``GET .../jobs/{id}`` for a job missing from the listing; None while not visible yet."""
        machine = self.site.machine
        try:
            found = with_retries(
                lambda: self.client().job_info(machine, str(job.native_id)),
                f"firecREST job {job.native_id}",
                tries=3,
                transient=firecrest_transient,
                secrets=self._secrets,
            )
        except Exception as e:
            if status_of(e) == 404:
                since = time.time() - float(job.record.extra.get("firecrest_submitted") or 0)
                if since > NOT_VISIBLE_GRACE:
                    log.warning(
                        "firecREST does not know job %s (%s), submitted %.0f s ago",
                        job.native_id,
                        job.task_id,
                        since,
                    )
                return None
            raise
        return found[0] if found else None

    async def _update_for(self, job: JobHandle, row: Mapping[str, Any]) -> StateUpdate | None:
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
        times = row.get("time") or {}
        start, end = times.get("start"), times.get("end")
        if state is not JobState.PENDING and isinstance(start, int) and start > 0:
            common["started_at"] = epoch_iso(
                start
            )  # the site's; squeue's for a PENDING job is a guess
        if state.is_final and isinstance(end, int) and end > 0:
            common["ended_at"] = epoch_iso(end)
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
        if state is JobState.CANCELLED:
            return StateUpdate(
                state=state,
                detail=raw,
                reason=cancel_reason(st.cancelled_by, requested=job.cancel_requested, my_uid=None),
                **common,
            )
        if state is JobState.COMPLETED:
            if rc is not None and not rc.success:
                return StateUpdate(
                    state=JobState.FAILED,
                    detail=raw,
                    exit_code=rc.rc,
                    signal=rc.signal,
                    reason=f"exit code {rc.rc}",
                    **common,
                )
            return StateUpdate(state=state, detail=raw, exit_code=0, reason="", **common)
        code = (
            rc.rc
            if rc is not None and rc.rc
            else (int(exit_code) if isinstance(exit_code, int) else None)
        )
        why = f"exit code {code}" if code is not None else raw
        return StateUpdate(
            state=state,
            detail=raw,
            exit_code=code,
            signal=(rc.signal if rc else None) or signal,
            reason=why,
            **common,
        )

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

    def _get(self, what: str, op: str, params: Mapping[str, Any], *, as_json: bool = True) -> Any:
        """``GET /filesystem/{machine}/ops/OP`` with retries: its JSON ``output`` (or its body);
        ``_MISSING`` for 404, ``_TOO_BIG`` for 413 (the output did not fit firecREST's buffer)."""
        machine = self.site.machine

        def get() -> Any:
            c = self.client()
            resp = c._get_request(endpoint=f"/filesystem/{machine}/ops/{op}", params=dict(params))
            if resp.status_code == 404:
                return _MISSING
            if resp.status_code == 413:
                return _TOO_BIG
            if as_json:
                return c._check_response(resp, 200)["output"]
            c._check_response(resp, 200, return_json=False)
            return resp.content

        try:
            return with_retries(
                get, what, tries=4, transient=firecrest_transient, secrets=self._secrets
            )
        except LaunchersError:
            raise
        except Exception as e:
            raise LaunchersError(f"{what}: {self._message(e)}") from None

    def _size_of(self, path: str) -> int | None:
        """``ops/stat``'s size of ``path``; None when it does not exist."""
        out = self._get(f"firecREST stat {path}", "stat", {"path": path})
        return None if out is _MISSING else int(out.get("size") or 0)

    def read_bytes_sync(self, path: str, offset: int = 0) -> bytes | None:
        """The bytes of the remote ``path`` from ``offset``, byte-exact (None: no such file).

        firecREST decodes what it reads as UTF-8 with replacement (``ops/tail``, ``ops/view``),
        slices ``ops/view`` in characters, and refuses any output of ``max_ops_file_size`` bytes
        (413): a whole file goes by ``ops/download`` (binary) while its base64 fits; new bytes
        by ``tail --bytes=+N``, kept up to a U+FFFD; what follows one comes by ``download``; a
        file too big for that goes by ``ops/view`` from block boundaries, and a byte there that
        is not UTF-8 becomes ``?`` (logged once)."""
        self.base_dir()  # max_ops_file_size of the system
        if offset == 0:
            data = self._get(
                f"firecREST download {path}", "download", {"path": path}, as_json=False
            )
            if data is _MISSING:
                return None
            if data is not _TOO_BIG:
                return bytes(data)
        else:
            out = self._get(
                f"firecREST tail {path}",
                "tail",
                {"path": path, "bytes": offset + 1, "skipHeading": True},
            )
            if out is _MISSING:
                return None
            if out is not _TOO_BIG:
                text = str(out.get("content") or "")
                good = exact_prefix(text)
                if good or not text:
                    return good
                # not UTF-8 right at ``offset`` (or a character still being written)
                data = self._get(
                    f"firecREST download {path}", "download", {"path": path}, as_json=False
                )
                if data is _MISSING:
                    return None
                if data is not _TOO_BIG:
                    return bytes(data)[offset:]
        size = self._size_of(path)
        if size is None:
            return None
        out_bytes, pos = bytearray(), offset
        while pos < size:
            chunk = self._view_from(path, pos, size - pos)
            if not chunk:
                if path not in self._lossy:
                    self._lossy.add(path)
                    log.warning(
                        "%s: byte %d is not UTF-8 and the file is too big for ops/download: firecREST "
                        "cannot send it exactly, written as '?'",
                        path,
                        pos,
                    )
                chunk = b"?"
            out_bytes += chunk
            pos += len(chunk)
        return bytes(out_bytes)

    def _view_from(self, path: str, offset: int, want: int) -> bytes:
        """Exact bytes from ``offset`` through ``ops/view`` (about ``want`` at most); b"" when
        the byte at ``offset`` is not UTF-8."""
        start, size = view_window(offset, want, self._max_ops)
        while True:
            text = self._get(
                f"firecREST view {path}", "view", {"path": path, "offset": start, "size": size}
            )
            if text is _MISSING or text is _TOO_BIG:
                raise LaunchersError(f"firecREST view {path}: the file is gone or cannot be read")
            good = exact_prefix(str(text))
            if len(good) > offset - start:
                return good[offset - start :]
            if start == offset:
                return b""
            # bytes before ``offset`` in the block are not UTF-8: a block that starts at offset
            start, size = offset, block_at(offset, max(1, self._max_ops // 2 - 1))

    def _tail_text(self, c: Any, system: str, path: str) -> str | None:
        """The end of a small remote text file (``ops/tail``); None if absent."""
        out = self._get(
            f"firecREST tail {path}", "tail", {"path": path, "bytes": TRANSFER_LOG_BYTES}
        )
        return None if out is _MISSING or out is _TOO_BIG else str(out.get("content") or "")

    # -- cancel ----------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        machine = self.site.machine

        def one(job: JobHandle) -> None:
            try:
                with_retries(
                    lambda: self.client().cancel_job(machine, str(job.native_id)),
                    f"firecREST cancel {job.native_id}",
                    tries=4,
                    transient=firecrest_transient,
                    secrets=self._secrets,
                )
            except Exception as e:
                if status_of(e) in (500, 404):
                    # already final (eth-cscs/firecrest-v2#159): the next poll reports the real state
                    log.info(
                        "cancel of %s: %s (job already finished)", job.native_id, self._message(e)
                    )
                    return
                raise LaunchersError(
                    f"firecREST cancel of {job.native_id}: {self._message(e)}"
                ) from None

        results = await asyncio.gather(
            *(asyncio.to_thread(one, j) for j in jobs if j.native_id), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                log.error("%s", r)
        self.tracker.wake(poll_now=True)


__all__ = ["FirecrestExecutor"]
