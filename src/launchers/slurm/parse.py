"""Reading Slurm command output: sbatch ``--parsable``, sacct, squeue, array ranges, errors.

Pure (docs/design/runtime.md §4, §5, §8): text in, values out. Lines that cannot be read are
returned apart, so that one bad line leaves only its own job unchanged.
"""

from __future__ import annotations

import logging
import re

import attrs

from ..errors import ConnectorError, SubmissionError

log = logging.getLogger("launchers.slurm")

# --- sbatch -----------------------------------------------------------------------------------

_PARSABLE_RE = re.compile(r"^(\d+)(;(\S+))?$")


def parse_sbatch_id(stdout: str, stderr: str = "") -> tuple[str, str | None]:
    """The job id (and cluster, after ``;``) from ``sbatch --parsable``: the last matching line."""
    found: tuple[str, str | None] | None = None
    for line in stdout.splitlines():
        m = _PARSABLE_RE.match(line.strip())
        if m:
            found = (m.group(1), m.group(3))
    if found is None:
        text = "\n".join(p for p in (stdout.strip(), stderr.strip()) if p)
        raise SubmissionError(f"sbatch gave no job id: {text or '(no output)'}")
    return found


TRANSIENT = "transient"
SUBMIT_LIMIT = "submit_limit"
REJECTED = "rejected"

_TRANSIENT_PATTERNS = (
    "socket timed out",
    "unable to contact slurm controller",
    "temporarily unable to accept job",
    "slurm_persist_conn_open_without_init",
    "connection refused",
    "communication connection failure",
    "zero bytes were transmitted or received",
    "slurmctld not responding",
    "slurm backup controller in standby mode",
    "resource temporarily unavailable",
    "unable to establish connection",
)
_SUBMIT_LIMIT_PATTERNS = (
    "qosmaxsubmitjobperuserlimit",
    "assocmaxsubmitjoblimit",
    "qosmaxsubmitjobperaccountlimit",
    "job submit limit",
    "job violates accounting/qos policy (job submit limit",
)


def classify_sbatch_error(text: str) -> str:
    """``transient`` (retry), ``submit_limit`` (wait) or ``rejected`` (the job fails)."""
    low = text.lower()
    if any(p in low for p in _SUBMIT_LIMIT_PATTERNS):
        return SUBMIT_LIMIT
    if any(p in low for p in _TRANSIENT_PATTERNS):
        return TRANSIENT
    return REJECTED


def sbatch_message(stdout: str, stderr: str) -> str:
    """sbatch's complaint as one string (stderr lines, else stdout), verbatim but trimmed."""
    text = stderr.strip() or stdout.strip()
    return text or "sbatch failed with no output"


# --- array ids --------------------------------------------------------------------------------

_RANGE_ID_RE = re.compile(r"^(\d+)_\[([^\]]*)\]$")


class ArrayRangeError(ValueError):
    """An array index expression that cannot be read."""


def expand_indices(spec: str) -> list[int]:
    """``5-9,12%4`` -> [5, 6, 7, 8, 9, 12]; steps (``1-9:2``) are honoured, ``%k`` ignored."""
    body = spec.split("%", 1)[0].strip()
    out: list[int] = []
    if not body:
        raise ArrayRangeError(f"empty array index list {spec!r}")
    for part in body.split(","):
        part = part.strip()
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            if not step_text.isdigit() or int(step_text) < 1:
                raise ArrayRangeError(f"bad array step in {spec!r}")
            step = int(step_text)
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ArrayRangeError(f"bad array range {part!r} in {spec!r}")
            out.extend(range(int(lo), int(hi) + 1, step))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise ArrayRangeError(f"bad array index {part!r} in {spec!r}")
    return out


def expand_job_id(job_id: str) -> list[str]:
    """``123_[5-9,12%4]`` -> ``123_5`` ... ``123_12``; any other id is returned alone."""
    m = _RANGE_ID_RE.match(job_id.strip())
    if not m:
        return [job_id.strip()]
    master = m.group(1)
    return [f"{master}_{i}" for i in expand_indices(m.group(2))]


def master_id(native_id: str) -> str:
    """The id Slurm commands accept for the whole job: ``123_4`` -> ``123``."""
    return native_id.split("_", 1)[0]


# --- sacct ------------------------------------------------------------------------------------

SACCT_FIELDS = ("JobIDRaw", "JobID", "State", "ExitCode", "Submit", "Start", "End", "Reason")
SACCT_FORMAT = ",".join(SACCT_FIELDS)


@attrs.frozen
class SacctRow:
    """One sacct allocation row; ``job_id`` is the id we track (``123`` or ``123_4``)."""

    job_id: str
    raw_id: str
    state: str
    exit_code: int | None
    exit_signal: int | None
    submit: str | None
    start: str | None
    end: str | None
    reason: str | None


def _time_field(text: str) -> str | None:
    t = text.strip()
    return None if t in ("", "Unknown", "None", "N/A") else t


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """sacct's ``ExitCode`` ``rc:signal`` -> (rc, signal); empty -> (None, None)."""
    t = text.strip()
    if not t:
        return None, None
    rc_text, _, sig_text = t.partition(":")
    try:
        rc = int(rc_text)
        sig = int(sig_text) if sig_text else 0
    except ValueError:
        return None, None
    return rc, sig


def parse_sacct(stdout: str) -> tuple[list[SacctRow], list[str]]:
    """Rows of ``sacct --noheader --parsable2 --format=SACCT_FORMAT``: (rows, unreadable lines).

    Fields are split at ``|`` from the left, so a ``|`` inside the last field (Reason) stays in it.
    A pending array range yields one row per listed index.
    """
    rows: list[SacctRow] = []
    bad: list[str] = []
    n = len(SACCT_FIELDS)
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) != n or not parts[0].strip():
            bad.append(line)
            continue
        raw_id, job_id, state, exit_code, submit, start, end, reason = parts
        if "." in job_id:  # a step, not an allocation (when --allocations is not honoured)
            continue
        rc, sig = parse_exit_code(exit_code)
        try:
            ids = expand_job_id(job_id)
        except ArrayRangeError:
            bad.append(line)
            continue
        for jid in ids:
            rows.append(
                SacctRow(
                    job_id=jid,
                    raw_id=raw_id.strip(),
                    state=state.strip(),
                    exit_code=rc,
                    exit_signal=sig,
                    submit=_time_field(submit),
                    start=_time_field(start),
                    end=_time_field(end),
                    reason=(reason.strip() or None),
                )
            )
    return rows, bad


def sacct_accounting_disabled(returncode: int, stderr: str, stdout: str = "") -> bool:
    """Whether sacct failed because the cluster has no accounting storage."""
    text = f"{stderr}\n{stdout}".lower()
    return returncode != 0 and "accounting storage is disabled" in text


# --- squeue -----------------------------------------------------------------------------------

SQUEUE_FORMAT = "%A|%i|%T|%r"


@attrs.frozen
class SqueueRow:
    """One squeue line: ``job_id`` is the id we track (``123`` or ``123_4``)."""

    job_id: str
    raw_id: str
    state: str
    reason: str | None


def parse_squeue(stdout: str) -> tuple[list[SqueueRow], list[str]]:
    """Rows of ``squeue --noheader --array --format=%A|%i|%T|%r``: (rows, unreadable lines)."""
    rows: list[SqueueRow] = []
    bad: list[str] = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0].strip().isdigit():
            bad.append(line)
            continue
        raw_id, job_id, state, reason = (p.strip() for p in parts)
        try:
            ids = expand_job_id(job_id)
        except ArrayRangeError:
            bad.append(line)
            continue
        r = None if reason in ("", "None", "(null)") else reason
        for jid in ids:
            rows.append(SqueueRow(job_id=jid, raw_id=raw_id, state=state, reason=r))
    return rows, bad


def parse_id_lines(stdout: str) -> list[str]:
    """Job ids, one per line (``squeue --format=%A`` or ``%i``); other lines are ignored."""
    out: list[str] = []
    for line in stdout.splitlines():
        t = line.strip()
        if re.fullmatch(r"\d+(_\d+)?", t):
            out.append(t)
    return out


# --- rows: one job's line of sacct or squeue, as the executor's decisions read it --------------

#: ``Row.source`` of a job whose line of output could not be read.
UNREADABLE = "unreadable"
_LEADING_ID = re.compile(r"\s*(\d+(?:_\d+)?)\s*$")


@attrs.frozen
class Row:
    """One job's line, from sacct or squeue, normalised."""

    job_id: str
    state: str
    reason: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    start: str | None = None
    end: str | None = None
    source: str = "sacct"


def _unreadable(command: str, bad: list[str], any_read: bool) -> dict[str, Row]:
    """Rows standing for the jobs named by lines that could not be read: those jobs stay
    unchanged for the cycle, not taken for gone (docs/slurm.md, Tracking). Output with no
    readable line at all is a failed query (``ConnectorError``): it changes nothing either."""
    rows = [line for line in bad if "|" in line]  # not a message (over SSH stderr is merged)
    if rows and not any_read:
        raise ConnectorError(f"{command} printed nothing readable: {rows[0][:200]!r}")
    out: dict[str, Row] = {}
    for line in rows:
        log.debug("unreadable %s line: %r", command, line)
        for field in line.split("|")[:2]:  # JobIDRaw|JobID, or %A|%i
            m = _LEADING_ID.match(field)
            if m:
                out[m.group(1)] = Row(m.group(1), "", source=UNREADABLE)
    return out


def sacct_rows(stdout: str) -> dict[str, Row]:
    """The rows of sacct's output by job id (unreadable lines as ``UNREADABLE`` rows)."""
    rows, bad = parse_sacct(stdout)
    out = _unreadable("sacct", bad, bool(rows))
    out.update(
        (r.job_id, Row(r.job_id, r.state, r.reason, r.exit_code, r.exit_signal, r.start, r.end))
        for r in rows
    )
    return out


def squeue_rows(stdout: str) -> dict[str, Row]:
    """The rows of squeue's output by job id (unreadable lines as ``UNREADABLE`` rows)."""
    rows, bad = parse_squeue(stdout)
    out = _unreadable("squeue", bad, bool(rows))
    out.update((r.job_id, Row(r.job_id, r.state, r.reason, source="squeue")) for r in rows)
    return out


# --- scontrol / scancel -----------------------------------------------------------------------


def parse_config_value(stdout: str, key: str) -> str | None:
    """A value of ``scontrol show config`` (``MaxArraySize = 1001``)."""
    for line in stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip().lower() == key.lower():
            return value.strip()
    return None


def scancel_harmless(stderr: str) -> bool:
    """Whether every complaint of scancel is about jobs that already ended."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    harmless = (
        "already completing or completed",
        "invalid job id specified",
        "job has already finished",
    )
    return all(any(h in ln.lower() for h in harmless) for ln in lines)


__all__ = [
    "REJECTED",
    "SACCT_FIELDS",
    "SACCT_FORMAT",
    "SQUEUE_FORMAT",
    "SUBMIT_LIMIT",
    "TRANSIENT",
    "UNREADABLE",
    "ArrayRangeError",
    "Row",
    "SacctRow",
    "SqueueRow",
    "classify_sbatch_error",
    "expand_indices",
    "expand_job_id",
    "master_id",
    "parse_config_value",
    "parse_exit_code",
    "parse_id_lines",
    "parse_sacct",
    "parse_sbatch_id",
    "parse_squeue",
    "sacct_accounting_disabled",
    "sacct_rows",
    "sbatch_message",
    "scancel_harmless",
    "squeue_rows",
]
