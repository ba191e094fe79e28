"""The generic tracker (docs/design/runtime.md §5): one poll per cycle for all jobs, adaptive
interval, failed queries change nothing, cancels batched. Uses a small in-memory executor."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from launchers.jobs.job import Job
from launchers.jobs.progress import change_line, summary_line
from launchers.jobs.record import StateRecord
from launchers.jobs.state import JobState
from launchers.jobs.update import StateUpdate
from launchers.runtime.executor import Executor
from launchers.runtime.loop import call_soon, run_sync


class Scripted(Executor):
    """Answers polls from a list of planned outcomes; records every call."""

    kind = "test"
    poll_min = 0.05
    poll_max = 0.3

    def __init__(self) -> None:
        super().__init__(("test",))
        self.calls: list[tuple[float, int]] = []
        self.cancels: list[list[str]] = []
        self.fail_next = 0
        self.finish_after: float | None = None

    async def submit(self, job: Job) -> None:
        job.apply(StateUpdate(state=JobState.PENDING, native_id=job.task_id))

    async def poll(self, jobs: Sequence[Job]) -> Mapping[Job, StateUpdate]:
        self.calls.append((time.monotonic(), len(jobs)))
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("Socket timed out")
        if self.finish_after is not None and time.monotonic() >= self.finish_after:
            return {j: StateUpdate(state=JobState.COMPLETED) for j in jobs}
        return {}

    async def cancel(self, jobs: Sequence[Job]) -> None:
        self.cancels.append([j.task_id for j in jobs])
        for j in jobs:
            j.apply(StateUpdate(state=JobState.CANCELLED, reason="cancelled on request"))


def _jobs(tmp_path: Path, executor: Executor, n: int) -> list[Job]:
    jobs = []
    for i in range(n):
        d = tmp_path / f"j{i}"
        d.mkdir()
        rec = StateRecord(task_id=f"t{i}", state=JobState.RUNNING, native_id=str(i))
        jobs.append(Job(None, d, rec, executor=executor))
    return jobs


async def _add_all(ex: Executor, jobs: list[Job]) -> None:
    for j in jobs:
        ex.tracker.add(j)


@pytest.mark.timing  # the gaps are measured on the wall clock
def test_one_poll_per_cycle_and_backoff(tmp_path: Path) -> None:
    ex = Scripted()
    jobs = _jobs(tmp_path, ex, 50)
    run_sync(_add_all(ex, jobs))
    time.sleep(1.2)
    assert all(n == 50 for _, n in ex.calls)  # every cycle: one call with every job
    gaps = [b[0] - a[0] for a, b in zip(ex.calls, ex.calls[1:], strict=False)]
    assert gaps[0] < 0.2 and max(gaps) <= 0.3 + 0.2  # grows from poll_min, capped at poll_max
    assert gaps[-1] > gaps[0] * 2
    ex.finish_after = time.monotonic()
    assert all(j.wait(2) is JobState.COMPLETED for j in jobs)


def test_failed_poll_changes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ex = Scripted()
    ex.fail_next = 3
    (job,) = _jobs(tmp_path, ex, 1)
    call_soon(ex.tracker.add, job)
    time.sleep(0.5)
    assert job.state is JobState.RUNNING
    ex.finish_after = time.monotonic()
    assert job.wait(3) is JobState.COMPLETED
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed" in m for m in messages) == 1  # the outage is logged once
    assert any(m.startswith("status recovered after") for m in messages)


@pytest.mark.parametrize("gap", [0.0, 0.15])
def test_cancels_are_batched(tmp_path: Path, gap: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancels make one call, also when they keep arriving one by one (each recorded and fsynced
    before the next; 8 x 0.15 s is longer than the gather window): the window moves. The window
    is widened from 0.1 s to 0.6 s here, so that a loaded machine's late wake-up between two
    cancels does not close it."""
    from launchers.runtime import tracker

    monkeypatch.setattr(tracker, "CANCEL_GATHER", 0.6)
    monkeypatch.setattr(tracker, "CANCEL_GATHER_MAX", 30.0)
    ex = Scripted()
    ex.poll_min = ex.poll_max = 0.5
    jobs = _jobs(tmp_path, ex, 8)
    run_sync(_add_all(ex, jobs))
    for j in jobs:
        j.cancel()
        time.sleep(gap)
    for j in jobs:
        assert j.wait(5) is JobState.CANCELLED
    assert ex.cancels == [[j.task_id for j in jobs]]


def test_progress_lines(tmp_path: Path) -> None:
    ex = Scripted()
    jobs = _jobs(tmp_path, ex, 3)
    jobs[0].replace_record(jobs[0].record.transition(JobState.COMPLETED))
    jobs[1].replace_record(jobs[1].record.transition(started_at="2020-01-01T00:00:00+00:00"))
    line = summary_line(jobs, now=time.time())
    assert line.startswith("2 RUNNING, 1 COMPLETED | slowest: t1 (RUNNING ")
    assert change_line(jobs[1]) == "launchers: t1 RUNNING [1]"
    _ = asyncio  # the tracker runs on the background loop
