"""The job directory (docs/design/runtime.md §2) and its state record ``state.json``.

Layout of ``<workdir>/jobs/<name>/<digest>/``: ``params.json``, ``job.sh``, ``job.out``,
``job.err``, ``job.rc``, ``state.json``, ``result.json`` | ``result.pickle`` | ``error.json``,
``attempts/N/`` and ``.lock``. Everything but the output files is written atomically
(``launchers.fsutil``). ``state.json`` is written by the submitting side only.

``StateRecord`` is an immutable value; ``record.transition(...)`` returns the next value with a
history entry appended (last 100 kept); ``write_record``/``read_record`` do the file I/O.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import attrs

from ..errors import LaunchersError
from ..fsutil import atomic_write_json
from .state import JobState

RECORD_FORMAT = 1
HISTORY_LIMIT = 100

#: File names inside a job directory.
PARAMS = "params.json"
SCRIPT = "job.sh"
STDOUT = "job.out"
STDERR = "job.err"
RC = "job.rc"
STATE = "state.json"
RESULT_JSON = "result.json"
RESULT_PICKLE = "result.pickle"
ERROR = "error.json"
ATTEMPTS = "attempts"
LOCK = ".lock"

#: The outputs followed while a job runs (appended to the local copies as they grow).
FOLLOWED = (STDOUT, STDERR)
#: What a finished job leaves in its directory for this process: the one list of result files
#: copied home from another host (``runtime.files.fetch_outputs``).
RESULT_FILES = (*FOLLOWED, RC, RESULT_JSON, RESULT_PICKLE, ERROR)
#: Files moved to ``attempts/N/`` when a failed job is re-run (a failed attempt has no result).
ATTEMPT_FILES = tuple(n for n in RESULT_FILES if n not in (RESULT_JSON, RESULT_PICKLE))


def now_iso() -> str:
    """The current time as ISO-8601 with the local UTC offset, second precision."""
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def epoch_iso(seconds: float) -> str:
    """Epoch seconds as ISO-8601 with the local UTC offset, second precision (as ``now_iso``)."""
    return datetime.fromtimestamp(seconds, timezone.utc).astimezone().isoformat(timespec="seconds")


def iso_epoch(text: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 time: ours, Slurm's local ``2026-01-01T10:00:00``, or
    UNICORE's ``2021-10-05T11:39:46+0200``; None if it is none of these."""
    if not text:
        return None
    if len(text) > 5 and text[-5] in "+-" and text[-4:].isdigit():
        text = f"{text[:-2]}:{text[-2:]}"  # +0200 -> +02:00 (fromisoformat before Python 3.11)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return dt.timestamp()


def submitting_since(record: StateRecord) -> float | None:
    """When the last ``SUBMITTING`` was recorded (epoch), from the record's history."""
    for when, state, _detail in reversed(record.history):
        if state == JobState.SUBMITTING.value:
            return iso_epoch(when)
    return None


@attrs.frozen
class JobPaths:
    """Paths of the files of one job directory."""

    directory: Path

    @property
    def params(self) -> Path:
        return self.directory / PARAMS

    @property
    def script(self) -> Path:
        return self.directory / SCRIPT

    @property
    def stdout(self) -> Path:
        return self.directory / STDOUT

    @property
    def stderr(self) -> Path:
        return self.directory / STDERR

    @property
    def rc(self) -> Path:
        return self.directory / RC

    @property
    def state(self) -> Path:
        return self.directory / STATE

    @property
    def result_json(self) -> Path:
        return self.directory / RESULT_JSON

    @property
    def result_pickle(self) -> Path:
        return self.directory / RESULT_PICKLE

    @property
    def error(self) -> Path:
        return self.directory / ERROR

    @property
    def lock(self) -> Path:
        return self.directory / LOCK

    def attempt_dir(self, n: int) -> Path:
        """``attempts/N/``: the outputs of attempt ``n`` once it has been archived."""
        return self.directory / ATTEMPTS / str(n)


def job_directory(workdir: str | os.PathLike[str], name: str, digest: str) -> Path:
    """``<workdir>/jobs/<name>/<digest>``."""
    return Path(workdir) / "jobs" / name / digest


@attrs.frozen
class RcRecord:
    """Contents of ``job.rc``, written by the job's exit handler."""

    rc: int | None
    signal: int | None = None
    attempt: int | None = None
    native_id: str | None = None
    host: str | None = None
    start: str | None = None
    end: str | None = None
    #: the environment step that failed (``modules[0]``, ``venv``, ``setup[1]``...), if one did
    step: str | None = None

    @property
    def success(self) -> bool:
        return self.rc == 0 and not self.signal

    @property
    def signalled(self) -> bool:
        """The wrapper saw a signal (it records one on TERM/INT, or when the task died of one):
        after a cancel request this tells a cancel that took effect from a job that had already
        failed on its own, whose real state is kept (docs/design/runtime.md §7)."""
        return self.signal is not None


def _opt_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def parse_rc(text: str) -> RcRecord | None:
    """Parse ``job.rc`` text; None when it is not a JSON object (never raises)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    nid = data.get("native_id")
    return RcRecord(
        rc=_opt_int(data.get("rc")),
        signal=_opt_int(data.get("signal")) or None,
        attempt=_opt_int(data.get("attempt")),
        native_id=None if nid is None else str(nid),
        host=data.get("host"),
        start=data.get("start"),
        end=data.get("end"),
        step=data.get("step") if isinstance(data.get("step"), str) else None,
    )


def read_rc(directory: str | os.PathLike[str]) -> RcRecord | None:
    """``job.rc`` of a job directory, or None when absent or unreadable."""
    try:
        text = (Path(directory) / RC).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return parse_rc(text)


def _history_entry(value: Any) -> tuple[str, str, str]:
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        detail = value[2] if len(value) > 2 and value[2] is not None else ""
        return (str(value[0]), str(value[1]), str(detail))
    return ("", str(value), "")


@attrs.frozen
class StateRecord:
    """The value stored in ``state.json`` (docs/design/runtime.md §2).

    ``launcher``: {kind, group, connector, options (exact sbatch options), ...}.
    ``attempts``: one dict per *previous* attempt ({attempt, native_id, state, exit_code,
    signal, reason, submitted_at, started_at, ended_at, cause}).
    ``history``: ``(time, state, detail)`` triples, newest last, at most 100.
    ``extra``: executor-specific keys (e.g. ``process`` for the direct launcher, ``owner``,
    ``remote_dir``) stored as further top-level keys of the JSON object.
    """

    task_id: str
    state: JobState = JobState.WAITING
    attempt: int = 1
    launcher: Mapping[str, Any] = attrs.field(factory=dict)
    native_id: str | None = None
    cluster: str | None = None
    job_name: str | None = None
    submitted_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    slurm_state: str | None = None
    attempts: tuple[Mapping[str, Any], ...] = ()
    history: tuple[tuple[str, str, str], ...] = ()
    extra: Mapping[str, Any] = attrs.field(factory=dict)
    format: int = RECORD_FORMAT

    def transition(
        self, state: JobState | None = None, detail: str = "", **changes: Any
    ) -> StateRecord:
        """The next record: ``changes`` applied, and a history entry when the state changes
        (or when ``detail`` is given). ``extra`` in changes is merged, not replaced."""
        if "extra" in changes:
            merged = dict(self.extra)
            merged.update(changes.pop("extra"))
            changes["extra"] = merged
        new_state = self.state if state is None else state
        history = self.history
        if new_state is not self.state or detail:
            history = (*history, (now_iso(), new_state.value, detail))[-HISTORY_LIMIT:]
        return attrs.evolve(self, state=new_state, history=history, **changes)

    def archived(self, cause: str = "") -> Mapping[str, Any]:
        """This attempt's summary, for the ``attempts`` list of the next attempt."""
        return {
            "attempt": self.attempt,
            "native_id": self.native_id,
            "job_name": self.job_name,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "cause": cause or self.state.value,
        }

    def next_attempt(self, cause: str = "") -> StateRecord:
        """A fresh record for attempt N+1 (this one archived in ``attempts``), state WAITING."""
        return attrs.evolve(
            self,
            attempt=self.attempt + 1,
            native_id=None,
            job_name=None,
            submitted_at=None,
            started_at=None,
            ended_at=None,
            exit_code=None,
            signal=None,
            reason=None,
            slurm_state=None,
            attempts=(*self.attempts, self.archived(cause)),
        ).transition(JobState.WAITING, f"attempt {self.attempt + 1}")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``state.json`` (listed keys first, then ``extra``)."""
        data: dict[str, Any] = {
            "format": self.format,
            "task_id": self.task_id,
            "state": self.state.value,
            "attempt": self.attempt,
            "launcher": dict(self.launcher),
            "native_id": self.native_id,
            "cluster": self.cluster,
            "job_name": self.job_name,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "slurm_state": self.slurm_state,
            "attempts": [dict(a) for a in self.attempts],
            "history": [list(h) for h in self.history],
        }
        for key, value in self.extra.items():
            if key not in data:
                data[key] = value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "state.json") -> StateRecord:
        """Read a record; a malformed one is a ``LaunchersError`` naming ``where``."""
        if not isinstance(data, Mapping):
            raise LaunchersError(f"{where}: not a JSON object")
        fmt = data.get("format", RECORD_FORMAT)
        if fmt != RECORD_FORMAT:
            raise LaunchersError(f"{where}: unsupported record format {fmt!r} (expected 1)")
        try:
            state = JobState.parse(str(data.get("state", "WAITING")))
        except ValueError as e:
            raise LaunchersError(f"{where}: state: {e}") from None
        known = set(attrs.fields_dict(cls)) - {"extra"}
        nid = data.get("native_id")
        return cls(
            task_id=str(data.get("task_id", "")),
            state=state,
            attempt=_opt_int(data.get("attempt")) or 1,
            launcher=dict(data.get("launcher") or {}),
            native_id=None if nid is None else str(nid),
            cluster=data.get("cluster"),
            job_name=data.get("job_name"),
            submitted_at=data.get("submitted_at"),
            started_at=data.get("started_at"),
            ended_at=data.get("ended_at"),
            exit_code=_opt_int(data.get("exit_code")),
            signal=_opt_int(data.get("signal")),
            reason=data.get("reason"),
            slurm_state=data.get("slurm_state"),
            attempts=tuple(dict(a) for a in data.get("attempts") or () if isinstance(a, Mapping)),
            history=tuple(_history_entry(h) for h in data.get("history") or ())[-HISTORY_LIMIT:],
            extra={k: v for k, v in data.items() if k not in known},
        )


def read_record(directory: str | os.PathLike[str]) -> StateRecord | None:
    """``state.json`` of a job directory, or None when there is none yet."""
    path = Path(directory) / STATE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise LaunchersError(f"{path}: not valid JSON: {e}") from None
    return StateRecord.from_json(data, where=str(path))


def write_record(
    directory: str | os.PathLike[str],
    record: StateRecord,
    *,
    sync_dir: bool = True,
    sync: bool = True,
) -> None:
    """Write ``state.json`` atomically (temporary name, fsync, rename, fsync of the directory
    unless ``sync_dir=False``; ``sync=False``: no fsync, the caller makes it durable later)."""
    atomic_write_json(Path(directory) / STATE, record.to_json(), sync_dir=sync_dir, sync=sync)


def archive_attempt(directory: str | os.PathLike[str], attempt: int) -> Path:
    """Move the outputs of ``attempt`` (job.out, job.err, job.rc, error.json) to ``attempts/N/``."""
    paths = JobPaths(Path(directory))
    dest = paths.attempt_dir(attempt)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ATTEMPT_FILES:
        src = paths.directory / name
        if src.exists():
            target = dest / name
            if target.exists():
                target.unlink()
            shutil.move(str(src), str(target))
    for name in (RESULT_JSON, RESULT_PICKLE):
        try:
            (paths.directory / name).unlink()
        except FileNotFoundError:
            pass
    return dest


def wall_clock() -> float:
    """Seconds since the epoch (one place to read the clock for records)."""
    return time.time()


__all__ = [
    "ATTEMPTS",
    "ATTEMPT_FILES",
    "ERROR",
    "FOLLOWED",
    "HISTORY_LIMIT",
    "LOCK",
    "PARAMS",
    "RC",
    "RECORD_FORMAT",
    "RESULT_FILES",
    "RESULT_JSON",
    "RESULT_PICKLE",
    "SCRIPT",
    "STATE",
    "STDERR",
    "STDOUT",
    "JobPaths",
    "RcRecord",
    "StateRecord",
    "archive_attempt",
    "job_directory",
    "now_iso",
    "parse_rc",
    "read_rc",
    "read_record",
    "write_record",
]
