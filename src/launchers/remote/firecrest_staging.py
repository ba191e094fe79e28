"""Staged uploads to firecREST v2 (docs/remote-sites.md, "firecREST (v2)"): a file larger than
the system's ``max_ops_file_size`` goes through its transfer backend as pyfirecrest's
``upload()`` stages it, and the transfer job that moves it into place is awaited."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LaunchersError
from ..units import format_size
from .decide import transfer_method
from .retry import is_transient, status_of

if TYPE_CHECKING:
    from .firecrest_executor import FirecrestExecutor

log = logging.getLogger("launchers.remote")

#: bytes (``tail``) read from the end of a transfer job's log
TRANSFER_LOG_BYTES = 64 * 1024
#: what a transfer job's log says when the file arrived (the texts pyfirecrest checks for)
TRANSFER_DONE = (
    "Files were successfully",
    "File was successfully",
    "Multipart file upload successfully completed",
)


def stage_upload(
    ex: FirecrestExecutor, local: Path, directory: str, filename: str, rel: str
) -> None:
    """A file above ``max_ops_file_size`` through the transfer backend, as pyfirecrest's
    ``upload()`` stages it: ``POST /filesystem/{machine}/transfer/upload`` (a transfer job and
    the presigned part URLs), the parts and the completion call, then the transfer job that
    moves the file into place is awaited (its log must report success). A failure after the
    transfer job exists cancels that job (it would otherwise wait for the file for hours)."""
    # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
    from firecrest.FirecrestException import MultipartUploadException

    machine, method = ex.site.machine, str(transfer_method(ex._transfer))
    size = local.stat().st_size

    def start(c: Any) -> Any:
        # pyfirecrest stages from 1 MiB; a system whose direct limit is lower needs it from there
        c.MAX_DIRECT_UPLOAD_SIZE = min(type(c).MAX_DIRECT_UPLOAD_SIZE, ex._max_ops + 1)
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
    ext = ex._call(f"{what}: transfer/upload", start, transient=accepted_or_refused)
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

            ex._call(f"{what}: parts", parts, tries=3)
        else:
            ext.wait_for_streamer_job_to_listen()
            ext.upload_file_streamer()
        ex._call(
            f"{what}: transfer job {job_id}",
            lambda c: _wait_transfer(ex, c, ext, what),
            tries=3,
        )
    except BaseException:
        _cancel_transfer(ex, job_id)
        raise


def _wait_transfer(ex: FirecrestExecutor, c: Any, ext: Any, what: str) -> None:
    """Wait for a staged upload's transfer job, then read the end of its log with ``ops/tail``
    (pyfirecrest's own wait views it without a size, which a site whose
    ``max_ops_file_size`` is under 5 MiB refuses)."""
    # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
    from firecrest.FirecrestException import JobTimeoutException

    tj = (getattr(ext, "transfer_data", None) or {}).get("transferJob") or {}
    system, job_id = str(tj.get("system") or ex.site.machine), str(tj.get("jobId"))
    try:
        c.wait_for_job(system, job_id, timeout=ex.staged_timeout)
    except JobTimeoutException:
        raise LaunchersError(
            f"{what}: transfer job {job_id} did not end within {ex.staged_timeout:.0f} s"
        ) from None
    log_path = (tj.get("logs") or {}).get("outputLog")
    text = ex.files.tail_text(str(log_path), TRANSFER_LOG_BYTES) if log_path else None
    if text is None:
        raise LaunchersError(
            f"{what}: transfer job {job_id} left no log (cancelled before it ran?)"
        )
    if not any(mark in text for mark in TRANSFER_DONE):
        raise LaunchersError(
            f"{what}: transfer job {job_id} did not report success: {text.strip()[-300:]!r}"
        )


def _cancel_transfer(ex: FirecrestExecutor, job_id: Any) -> None:
    if job_id is None:
        return
    try:
        ex.client().cancel_job(ex.site.machine, str(job_id))
    except Exception as e:  # already over, or unreachable: nothing more to do
        log.info("cancel of transfer job %s: %s", job_id, ex._message(e))


__all__ = ["stage_upload"]
