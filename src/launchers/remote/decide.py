"""What the answers of a UNICORE or firecREST site mean (docs/remote-sites.md, "Running"):
pure decisions, tested in milliseconds, that the site executors carry out.

A site's job state becomes a ``StateUpdate`` (with ``job.rc`` once the job is final); a job
URL answering 404 is a job gone; "Job aborted." waits a while for ``job.rc``; a recovery
chooses one job among those tagged or named like it; firecREST's readers start at places whose
bytes they know. Nothing here reads a file, calls a site or looks at a clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..jobs.record import RcRecord, epoch_iso, iso_epoch
from ..jobs.state import JobState
from ..jobs.update import StateUpdate, update_for_rc
from ..slurm.envscript import is_environment_step
from ..slurm.states import cancel_reason, map_state
from ..units import format_size

# -- both kinds ---------------------------------------------------------------------------------

#: a final job's outputs that cannot be read are tried again on the next cycles; the state is
#: decided without ``job.rc`` at this many failures
OUTPUT_TRIES = 3


def gives_up_outputs(failures: int) -> bool:
    """Whether ``failures`` failed reads of a final job's outputs are enough to decide its
    state without ``job.rc`` (earlier: try again next cycle)."""
    return failures >= OUTPUT_TRIES


def site_final(
    rc: RcRecord, *, cancel_requested: bool, failed_reason: str, **fields: Any
) -> StateUpdate:
    """The final update of a job that the site says ended well (UNICORE ``SUCCESSFUL``, Slurm's
    ``COMPLETED`` through firecREST) or that ended just before UNICORE's abort, judged by its
    ``job.rc`` with ``update_for_rc``, the one rule of every kind (docs/design/runtime.md §5):
    COMPLETED with the reason cleared, CANCELLED when signalled after a cancel request, else
    FAILED with ``failed_reason`` (the site's wording). ``fields`` (the site's detail, raw
    state, times) replace the rule's; the rc's times stay where the site gives none."""
    judged = update_for_rc(rc, attempt=None, cancelled=cancel_requested)
    assert judged is not None  # an rc of this run always gives a final update
    if judged.state is JobState.FAILED:
        fields["reason"] = step_reason(rc) or failed_reason
    return attrs.evolve(judged, **fields)


def step_reason(rc: RcRecord | None) -> str | None:
    """``exit code N in environment step S`` (the one rule's wording, as for Slurm jobs) when
    ``job.rc`` names a failed step of launchers.yaml's environment block; None otherwise (a
    Compute Backend Config's script names its own steps, and the site's wording stays)."""
    if rc is None or not is_environment_step(rc.step):
        return None
    judged = update_for_rc(rc, attempt=None, cancelled=False)
    return judged.reason if judged is not None else None


def oldest_in(
    rows: Sequence[Mapping[str, Any]], name: str, run_dir: str | None, *, id_key: str, dir_key: str
) -> str | None:
    """The oldest job id among site rows named ``name``. Rows that tell a working directory
    count only in ``run_dir`` (the same task of another experiment directory is not ours); rows
    that tell none count by name alone."""
    want = run_dir.rstrip("/") if run_dir else None
    ids = []
    for row in rows:
        if row.get("name") != name:
            continue
        where = row.get(dir_key)
        if want and isinstance(where, str) and where and where.rstrip("/") != want:
            continue
        ids.append(str(row.get(id_key)))
    return min(ids, key=lambda i: (len(i), i)) if ids else None


# -- UNICORE ------------------------------------------------------------------------------------

UNICORE_PENDING = ("READY", "STAGINGIN", "QUEUED")
UNICORE_RUNNING = ("RUNNING", "STAGINGOUT")
UNICORE_FINAL = ("SUCCESSFUL", "FAILED")
#: UNICORE's statusMessage of an aborted job (given at once, while the batch job may still run)
ABORTED = "Job aborted."
#: s to wait for ``job.rc`` of a job UNICORE reports aborted (last seen running, or not)
ABORT_WAIT_RUNNING = 40.0
ABORT_WAIT_QUEUED = 5.0
#: s: a UNICORE site's clock may differ from ours. A job tagged with this task id but created more
#: than this before our SUBMITTING record is another run's (the same task of another work
#: directory, or an earlier attempt), never the one a crash left unrecorded.
RECONCILE_CLOCK_SLACK = 3600.0
GONE_REASON = (
    "the UNICORE job no longer exists at the site (404): it expired (termination time) or was "
    "destroyed, with its working directory"
)


def unicore_progress(status: str) -> StateUpdate | None:
    """The update of a job UNICORE reports not final; None for a final or unknown state."""
    if status in UNICORE_PENDING:
        return StateUpdate(state=JobState.PENDING, slurm_state=status)
    if status in UNICORE_RUNNING:
        return StateUpdate(state=JobState.RUNNING, slurm_state=status)
    return None


def unicore_aborted(props: Mapping[str, Any]) -> bool:
    """UNICORE's "Job aborted.": said at once, while the Slurm job may still run its traps."""
    return (
        str(props.get("status", "")) == "FAILED"
        and str(props.get("statusMessage") or "") == ABORTED
    )


def abort_grace(was_running: bool) -> float:
    """Seconds to wait for ``job.rc`` after UNICORE reported "Job aborted.": the Slurm job may
    still be running its traps (scancel's SIGTERM, KillWait before SIGKILL)."""
    return ABORT_WAIT_RUNNING if was_running else ABORT_WAIT_QUEUED


def reached_batch_system(props: Mapping[str, Any]) -> bool:
    """Whether the job was handed to the batch system (no wait for a job that never was)."""
    return str(props.get("batchSystemID") or "N/A") != "N/A"


def waits_for_rc(seen: tuple[float, bool], now: float) -> bool:
    """After "Job aborted." first seen at ``seen[0]`` (the job then RUNNING: ``seen[1]``), with
    no ``job.rc`` yet: whether to wait longer (the state is decided on a later cycle)."""
    return now - seen[0] < abort_grace(seen[1])


def unicore_exit_code(props: Mapping[str, Any]) -> int | None:
    """``exitCode`` (a string at UNICORE) as an int; None when absent or not a number."""
    text = props.get("exitCode")
    if isinstance(text, (str, int)) and str(text).strip().lstrip("-").isdigit():
        return int(text)
    return None


def unicore_final(
    props: Mapping[str, Any], rc: RcRecord | None, *, cancel_requested: bool
) -> StateUpdate:
    """The final update of a ``SUCCESSFUL`` or ``FAILED`` job, ``job.rc`` (if it came home)
    deciding where the site cannot: a job that completed just before an abort stays COMPLETED,
    a cancel request with a signal (or no ``job.rc``) is CANCELLED, a SUCCESSFUL job whose
    ``job.rc`` says otherwise FAILED."""
    status = str(props.get("status", ""))
    aborted = unicore_aborted(props)
    exit_code = unicore_exit_code(props)
    if (
        rc is not None
        and (status == "SUCCESSFUL" or aborted)
        and (status == "SUCCESSFUL" or rc.success or (cancel_requested and rc.signalled))
    ):
        if rc.success:
            detail = (
                "UNICORE SUCCESSFUL"
                if status == "SUCCESSFUL"
                else "completed before UNICORE's abort"
            )
        else:
            detail = f"UNICORE {status}"
        return site_final(
            rc,
            cancel_requested=cancel_requested,
            failed_reason=f"UNICORE reported SUCCESSFUL but job.rc says exit code {rc.rc}",
            detail=detail,
            slurm_state=status,
        )
    if status == "SUCCESSFUL":
        return StateUpdate(
            state=JobState.COMPLETED,
            detail="UNICORE SUCCESSFUL",
            slurm_state=status,
            exit_code=0,
            reason="",
        )
    times: dict[str, Any] = {"started_at": rc.start, "ended_at": rc.end} if rc else {}
    if cancel_requested and (rc is None or rc.signalled):
        return StateUpdate(
            state=JobState.CANCELLED,
            detail=f"UNICORE {status}",
            slurm_state=status,
            reason="cancelled on request",
            exit_code=exit_code if exit_code is not None else (rc.rc if rc else None),
            **times,
        )
    if rc is not None and not rc.success and exit_code is None:
        exit_code = rc.rc
    reason = (
        step_reason(rc)
        or str(props.get("statusMessage") or "")
        or (f"exit code {exit_code}" if exit_code is not None else "failed")
    )
    return StateUpdate(
        state=JobState.FAILED,
        detail=f"UNICORE {status}",
        slurm_state=status,
        reason=reason,
        exit_code=exit_code,
        signal=rc.signal if rc else None,
        **times,
    )


def unicore_gone(*, cancel_requested: bool) -> StateUpdate:
    """A job whose URL answers 404: UNICORE destroyed it (its termination time passed, or it
    was deleted), its working directory with it; it will never change again."""
    if cancel_requested:
        return StateUpdate(state=JobState.CANCELLED, detail="UNICORE job gone", reason=GONE_REASON)
    return StateUpdate(
        state=JobState.FAILED, detail="UNICORE job gone", slurm_state="GONE", reason=GONE_REASON
    )


def read_start(offset: int, size: int, shift: int) -> tuple[int | None, int]:
    """Where to read a remote file that has ``size`` bytes, ``offset`` bytes being already
    copied home of which the first ``shift`` came before the file was last truncated: the
    remote start (None: nothing new) and the new shift. A start is never past ``size``: UNICORE
    loops forever on such a ``Range``, and answers 206 with no body for one equal to it. A file
    smaller than what was read (a requeue truncated it) is read again from 0."""
    start = offset - shift
    if start > size:  # truncated: the new content follows what was copied
        return (0 if size > 0 else None), offset
    return (start if start < size else None), shift


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


# -- firecREST ----------------------------------------------------------------------------------

#: texts of firecREST's 500 when the site refuses its SSH connection
SSH_REFUSED = ("Connect call failed", "Connection refused")
#: sbatch errors (in a 500 answer) that mean "not accepted, try again"
SLURM_TRANSIENT = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "temporarily unable to accept job",
)
#: a job firecREST does not know this long after its submission is worth a warning (before, it
#: is only not visible yet)
NOT_VISIBLE_GRACE = 60.0


def ssh_unreachable(status: int | None, message: str) -> bool:
    """firecREST could not reach the site over SSH, so nothing ran there: its answer to a
    refused connection (500 with the OSError, ``Connect call failed``) or to a lost one (424)."""
    return status == 424 or (status == 500 and any(t in message for t in SSH_REFUSED))


def firecrest_state(row: Mapping[str, Any]) -> tuple[JobState | None, str]:
    """The state of a firecREST job row (Slurm's text, mapped as for Slurm) and that text;
    None for a state Slurm does not define."""
    raw = str((row.get("status") or {}).get("state") or "")
    st = map_state(raw)
    return (JobState[st.state] if st.state is not None else None), raw


def firecrest_update(
    row: Mapping[str, Any], rc: RcRecord | None, *, cancel_requested: bool
) -> StateUpdate | None:
    """The update a firecREST job row gives (None: a state Slurm does not define). The site's
    ``time.start``/``time.end`` become the job's; ``job.rc`` (read once the job is final)
    gives the code where the row has none, and a COMPLETED job whose ``job.rc`` failed FAILED."""
    status = row.get("status") or {}
    raw = str(status.get("state") or "")
    st = map_state(raw)
    if st.state is None:
        return None
    state = JobState[st.state]
    reason = str(status.get("stateReason") or "")
    exit_code = status.get("exitCode")
    signal = status.get("interruptSignal") or None
    common: dict[str, Any] = {"slurm_state": raw, "extra": {"state_reason": reason}}
    times = row.get("time") or {}
    start, end = times.get("start"), times.get("end")
    if state is not JobState.PENDING and isinstance(start, int) and start > 0:
        common["started_at"] = epoch_iso(start)  # the site's; squeue's for a PENDING job is a guess
    if state.is_final and isinstance(end, int) and end > 0:
        common["ended_at"] = epoch_iso(end)
    if not state.is_final:
        if state is JobState.PENDING and reason and reason.lower() != "none":
            common["reason"] = reason
        return StateUpdate(state=state, **common)
    if state is JobState.CANCELLED:
        return StateUpdate(
            state=state,
            detail=raw,
            reason=cancel_reason(st.cancelled_by, requested=cancel_requested, my_uid=None),
            **common,
        )
    if state is JobState.COMPLETED:
        if rc is not None:
            return site_final(
                rc,
                cancel_requested=cancel_requested,
                failed_reason=f"exit code {rc.rc}",
                detail=raw,
                **common,
            )
        return StateUpdate(state=state, detail=raw, exit_code=0, reason="", **common)
    code = (
        rc.rc
        if rc is not None and rc.rc
        else (int(exit_code) if isinstance(exit_code, int) else None)
    )
    why = step_reason(rc) or (f"exit code {code}" if code is not None else raw)
    return StateUpdate(
        state=state,
        detail=raw,
        exit_code=code,
        signal=(rc.signal if rc else None) or signal,
        reason=why,
        **common,
    )


def lookup_failed(name: str, error: str) -> StateUpdate:
    """A job found ``SUBMITTING`` after a crash whose name the site could not be asked about
    for the whole patience: FAILED, never submitted again (it may exist at the site)."""
    return StateUpdate(
        state=JobState.FAILED,
        detail="reconcile failed",
        reason=f"could not tell whether job {name} exists on the site ({error}); "
        "not submitted again",
    )


def ran_unlisted(name: str) -> StateUpdate:
    """A job found ``SUBMITTING`` after a crash that began at the site (its outputs are there)
    but that the site never listed under its name: FAILED, never submitted again."""
    return StateUpdate(
        state=JobState.FAILED,
        detail="reconcile failed",
        reason=f"job {name} ran on the site (its outputs are there) but the site does "
        "not list it by name; not submitted again",
    )


def rc_names(record: Mapping[str, Any] | None, name: str) -> tuple[str | None, bool | None]:
    """What a run directory's ``job.rc`` says about the job named ``name``: (its id, whether
    another job wrote it). ``(None, None)`` when it cannot tell: no ``native_id``, or no
    ``job_name`` (then the site is asked about the id)."""
    if not isinstance(record, Mapping) or not record.get("native_id"):
        return None, None
    nid, writer = str(record["native_id"]), record.get("job_name")
    if not writer:
        return nid, None
    return (nid, False) if writer == name else (None, True)


def other_jobs_named(rows: Sequence[Mapping[str, Any]], name: str) -> bool:
    """Whether ``rows`` name a job other than ``name``; right after a job ends, accounting may
    name it "allocation" for a while, which is not a verdict."""
    return any(r.get("name") not in (name, "allocation", "", None) for r in rows)


def transfer_method(declared: Any) -> str | None:
    """The ``service_type`` (``s3``, ``streamer``...) of a system's declared transfer backend
    (``dataOperation.data_transfer``), or None when it declares none."""
    if not declared:
        return None
    if isinstance(declared, Mapping):
        kind = declared.get("service_type") or declared.get("serviceType") or declared.get("name")
        return str(kind) if kind else None
    return str(declared)


#: transfer backends through which pyfirecrest's ``upload()`` stages a file itself ("wormhole"
#: needs the external ``wormhole`` program and is not used)
STAGING_METHODS = ("s3", "streamer")


def upload_plan(
    sizes: Sequence[tuple[str, int]],
    *,
    machine: str,
    max_ops: int,
    method: str | None,
    no_backend: str,
) -> tuple[str | None, frozenset[str]]:
    """Whether a run's files (relative path, size) can go to a firecREST machine: why not (None:
    they can), and which go staged through its transfer backend (those above
    ``max_ops_file_size``). A file too big with no backend to stage it through, or an empty file
    (firecREST never answers an empty upload; ``job.sh`` creates the project's empty files), is
    refused before anything is sent; ``no_backend`` says what to do when there is no backend."""
    too_big = [(rel, size) for rel, size in sizes if size > max_ops]
    if too_big and method not in STAGING_METHODS:
        rel, size = too_big[0]
        advice = (
            no_backend
            if method is None
            else (
                f"its transfer backend {method!r} is not one launchers stages through "
                f"({', '.join(STAGING_METHODS)}); exclude it (Exclude) and copy it to the site another way"
            )
        )
        return (
            f"{rel} ({format_size(size)}) is larger than the direct upload limit of {machine} "
            f"(max_ops_file_size {format_size(max_ops)}); {advice}"
            + ("" if len(too_big) == 1 else f" ({len(too_big) - 1} more such files)")
        ), frozenset()
    empty = [rel for rel, size in sizes if size == 0]
    if empty:
        return (
            f"{empty[0]} is empty: firecREST cannot upload an empty file (it never answers); "
            "it was not empty when the run was planned, run it again"
        ), frozenset()
    return None, frozenset(rel for rel, _ in too_big)


# -- firecREST's readers: where an exact read may start ------------------------------------------


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


__all__ = [
    "ABORTED",
    "OUTPUT_TRIES",
    "RECONCILE_CLOCK_SLACK",
    "abort_grace",
    "attempt_tag",
    "block_at",
    "download_fits",
    "exact_prefix",
    "firecrest_state",
    "firecrest_update",
    "gives_up_outputs",
    "lookup_failed",
    "oldest_in",
    "other_jobs_named",
    "ran_unlisted",
    "rc_names",
    "read_start",
    "site_final",
    "ssh_unreachable",
    "step_reason",
    "tagged_choice",
    "transfer_method",
    "unicore_aborted",
    "unicore_exit_code",
    "unicore_final",
    "unicore_gone",
    "unicore_progress",
    "upload_plan",
    "view_window",
    "waits_for_rc",
]
