"""After a cancel request, the state recorded is the real one (docs/design/runtime.md §7): a job that
failed on its own before the cancel reached it stays FAILED; one the cancel ended is CANCELLED."""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest

from launchers.config.model import LocalGroup
from launchers.errors import ExperimentFailed
from launchers.jobs.experiment import experiment
from launchers.jobs.job import Job
from launchers.jobs.record import StateRecord, read_record, write_record
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.jobs.update import StateUpdate
from launchers.local.launcher import DirectLauncher
from launchers.runtime.executor import update_from_rc


def _job(tmp_path: Path, rc: int, signal: int | None, *, cancel: bool) -> types.SimpleNamespace:
    (tmp_path / "job.rc").write_text(json.dumps({"rc": rc, "signal": signal, "attempt": 1}))
    return types.SimpleNamespace(directory=tmp_path, attempt=1, cancel_requested=cancel)


@pytest.mark.parametrize(
    ("rc", "signal", "cancel", "state", "reason"),
    [
        (3, None, True, JobState.FAILED, "exit code 3"),  # failed before the cancel arrived
        (143, 15, True, JobState.CANCELLED, "cancelled on request"),  # the cancel's TERM ended it
        (0, 15, True, JobState.CANCELLED, "cancelled on request"),  # the task caught TERM, exit 0
        (0, None, True, JobState.COMPLETED, ""),  # the job won (the reason cleared)
        (143, 15, False, JobState.FAILED, "killed by signal 15"),  # someone else's signal
    ],
)
def test_update_from_rc_after_cancel(
    tmp_path: Path, rc: int, signal: int | None, cancel: bool, state: JobState, reason: str | None
) -> None:
    update = update_from_rc(_job(tmp_path, rc, signal, cancel=cancel))  # type: ignore[arg-type]
    assert update is not None and update.state is state and update.reason == reason
    assert update.exit_code == rc


def test_direct_job_that_failed_before_its_cancel_stays_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    launcher = DirectLauncher(group=LocalGroup())
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher, progress=False):
        job = command(["sh", "-c", "exit 3"]).submit()
        rc = job.directory / "job.rc"
        deadline = time.monotonic() + 30
        while not rc.exists():
            assert time.monotonic() < deadline, f"no job.rc: {job.record}"
            time.sleep(0.01)
        job.cancel()  # too late: the job has ended on its own
        assert job.wait(10) is JobState.FAILED, f"{job.record}"
    assert job.exit_code == 3 and job.reason == "exit code 3"


@pytest.mark.parametrize(
    ("update", "state"),
    [
        (StateUpdate(state=JobState.FAILED, exit_code=3, reason="exit code 3"), JobState.FAILED),
        (StateUpdate(state=JobState.FAILED, exit_code=143, signal=15), JobState.CANCELLED),
        (StateUpdate(state=JobState.LOST, reason="no exit record"), JobState.CANCELLED),
        (StateUpdate(state=JobState.TIMEOUT, reason="time limit reached"), JobState.TIMEOUT),
        (StateUpdate(state=JobState.COMPLETED, exit_code=0), JobState.COMPLETED),
    ],
)
def test_cancel_asked_by_another_process_keeps_real_ends(
    tmp_path: Path, update: StateUpdate, state: JobState
) -> None:
    """``launchers cancel`` (another process) marks state.json; this process's tracker then sees
    the end: only an end the cancel caused becomes CANCELLED."""
    record = StateRecord(task_id="t-0", state=JobState.RUNNING, attempt=1)
    write_record(tmp_path, record)
    Job(None, tmp_path, record).mark_cancel_requested()  # the other process
    mine = Job(None, tmp_path, record)
    mine.apply(update)
    assert mine.state is state
    assert read_record(tmp_path).state is state  # type: ignore[union-attr]
