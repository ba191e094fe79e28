"""BatchLauncher over the direct launcher: ordinary Jobs, one pilot per shape, cancel, refusal."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import jobs_tasks as tt
from conftest import Leftovers, cancel_in_another_process
from launchers.batch import queue as Q
from launchers.batch.executor import (
    BatchExecutor,
    auto_slots,
    pilot_walltime,
    shape_of,
    task_resources,
)
from launchers.batch.launcher import BatchLauncher
from launchers.config.model import CPUConfig, LocalGroup
from launchers.errors import ConfigurationError, ExperimentFailed, LaunchersError
from launchers.jobs.experiment import experiment
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.local.launcher import DirectLauncher
from launchers.slurm.launcher import SlurmLauncher
from paths import job_pythonpath


@pytest.fixture(autouse=True)
def _job_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    src = Path(__import__("launchers").__file__).parent.parent
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(src))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))


def batch(**options: object) -> BatchLauncher:
    inner = DirectLauncher(group=LocalGroup(max_jobs=4))
    options.setdefault("linger", 1)
    options.setdefault("slots", 4)
    return inner.batched(**options)


def executor() -> BatchExecutor:
    ex = batch().executor()
    assert isinstance(ex, BatchExecutor)
    return ex


def test_options_and_errors() -> None:
    b = DirectLauncher().batched()
    assert (b.slots, b.linger, b.walltime, b.task_timeout, b.max_attempts) == (
        "auto",
        120,
        None,
        None,
        3,
    )
    assert (b.drain_margin, b.max_pilots, b.scale_after, b.kill_grace) == (300, 1, 300, 30)
    assert BatchLauncher(DirectLauncher(), linger="90s", walltime="2h").walltime == 7200
    with pytest.raises(ConfigurationError, match="linger"):
        BatchLauncher(DirectLauncher(), linger="soon")
    with pytest.raises(ConfigurationError, match="slots"):
        BatchLauncher(DirectLauncher(), slots=0)
    assert b.kind == "batch" and b.batched(slots=2).slots == 2


def test_shapes_slots_walltime() -> None:
    s1 = SlurmLauncher(
        options={"partition": "cpu", "cpus_per_task": 2, "mem": "1G", "time": "1:00:00"}
    )
    s2 = SlurmLauncher(
        options={"partition": "cpu", "cpus_per_task": 2, "mem": "1G", "time": "2:00:00"}
    )
    s3 = SlurmLauncher(options={"partition": "cpu", "cpus_per_task": 4, "mem": "1G"})
    assert shape_of(s1) == shape_of(s2) != shape_of(s3)
    res = task_resources(s1)
    assert (res.cpus, res.memory, res.gpus, res.duration) == (2, 1 << 30, 0, 3600)
    assert auto_slots(s1, res) == 1  # nothing known about the nodes
    local = DirectLauncher(group=LocalGroup(cpu=CPUConfig(cores=6)))
    assert auto_slots(local, task_resources(local)) == 6
    big = DirectLauncher(group=LocalGroup(cpu=CPUConfig(cores=64)))
    assert auto_slots(big, task_resources(big)) == 8
    assert pilot_walltime(BatchLauncher(s1), 3600) == 7200
    assert pilot_walltime(BatchLauncher(s1), 60) == 3600
    assert pilot_walltime(BatchLauncher(s1, walltime=600), 60) == 600


def test_refuses_a_task_that_can_never_fit(tmp_path: Path) -> None:
    b = batch(walltime="10m", task_timeout="8m", drain_margin="5m")
    with (
        experiment(tmp_path / "xp", b),
        pytest.raises(LaunchersError, match=r"8m.*5m.*10m|8 ?min.*5 ?min.*10 ?min"),
    ):
        command(["true"]).submit()


def test_default_walltime_follows_declared_durations_not_task_timeout(tmp_path: Path) -> None:
    """docs/design/pilots.md §3.2: the default walltime is the larger of 1 h and twice the longest declared
    duration; a task_timeout does not stretch it, so 2 h + 5 min can never fit in 1 h."""
    b = batch(task_timeout="2h", drain_margin="5m")
    with (
        experiment(tmp_path / "xp", b),
        pytest.raises(LaunchersError, match="exceeds the pilot walltime 1h"),
    ):
        command(["true"]).submit()


def test_many_tasks_one_pilot(tmp_path: Path) -> None:
    b = batch()
    ex = executor()
    before = ex.pilots_submitted
    with pytest.raises(ExperimentFailed, match="bad"), experiment(tmp_path / "xp", b):
        jobs = [command(["sh", "-c", f"echo task {i}"], name=f"t{i}").submit() for i in range(12)]
        call = tt.add(2, b=3).submit(launcher=b)
        bad = command(["sh", "-c", "exit 4"], name="bad").submit()
        for j in jobs:
            assert j.wait(60) is JobState.COMPLETED
    assert call.result() == 5
    assert bad.state is JobState.FAILED and bad.exit_code == 4
    assert ex.pilots_submitted - before == 1
    for i, j in enumerate(jobs):
        assert j.result() == 0
        assert j.stdout_path.read_text().splitlines()[1] == f"task {i}"
        assert j.pilot is not None and j.native_id is not None
    queue = Path(jobs[0].record.extra["batch"]["queue"])
    assert queue.parent == (tmp_path / "xp" / "batch").absolute()
    assert len(os.listdir(queue / "done")) == 14
    pilot_dirs = os.listdir(queue / "pilots")
    assert pilot_dirs == ["1"]


def test_failed_job_reports(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", batch()):
        command(["sh", "-c", "echo boom >&2; exit 2"], name="boom").submit()


@pytest.mark.timing
def test_task_arriving_while_pilot_lingers(tmp_path: Path) -> None:
    b = batch(linger=5)
    ex = executor()
    before = ex.pilots_submitted
    with experiment(tmp_path / "xp", b):
        first = command(["true"], name="first").submit()
        assert first.wait(30) is JobState.COMPLETED
        t0 = time.monotonic()
        second = command(["true"], name="second").submit()
        assert second.wait(30) is JobState.COMPLETED
        assert time.monotonic() - t0 < 4
    assert ex.pilots_submitted - before == 1
    assert first.pilot == second.pilot


def test_cancel_pending_and_running(tmp_path: Path) -> None:
    b = batch(slots=1, kill_grace=1)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", b):
        running = command(["sleep", "300"], name="long").submit()  # only the cancel ends it
        queued = command(["true"], name="queued").submit()
        deadline = time.monotonic() + 20
        while running.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, running.state
            time.sleep(0.05)
        queued.cancel()
        running.cancel()
        assert queued.wait(10) is JobState.CANCELLED
        assert running.wait(10) is JobState.CANCELLED
    queue = Path(running.record.extra["batch"]["queue"])
    assert Q.read_done(queue, queued.task_id)["state"] == "CANCELLED"  # type: ignore[index]
    assert Q.read_done(queue, running.task_id)["state"] == "CANCELLED"  # type: ignore[index]


def test_cancel_from_another_process(tmp_path: Path, leaves_nothing: Leftovers) -> None:
    """`launchers cancel` in another process: a queued task is cancelled at once, a running one
    is stopped by the runner; the CLI follows each to its final state and exits 0. The runner
    kills the task: no process of it is left (``leaves_nothing``)."""

    b = batch(slots=1, kill_grace=1)
    leaves_nothing.watch(b.executor())
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", b):
        running = command(["sleep", "300"], name="long").submit()  # only the cancel ends it
        queued = command(["true"], name="queued").submit()
        deadline = time.monotonic() + 20
        while running.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, running.state
            time.sleep(0.05)
        for job in (queued, running):
            cancel_in_another_process(job, 30)
        assert queued.wait(10) is JobState.CANCELLED and running.wait(10) is JobState.CANCELLED


def test_timeout_through_batch(tmp_path: Path) -> None:
    b = batch(task_timeout=1, kill_grace=1)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", b):
        j = command(["sleep", "30"], name="slow").submit()
        assert j.wait(20) is JobState.TIMEOUT


@pytest.mark.timing
def test_cancel_the_batch_launcher(tmp_path: Path) -> None:
    b = batch(slots=1, kill_grace=1, linger=30)
    ex = executor()
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", b):
        jobs = [command(["sleep", "30"], name=f"c{i}").submit() for i in range(3)]
        deadline = time.monotonic() + 20
        while jobs[0].state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        b.cancel()
        for j in jobs:
            assert j.wait(20) is JobState.CANCELLED
        assert time.monotonic() - t0 < 10
    queue = Path(jobs[0].record.extra["batch"]["queue"])
    pilots = [p for s in ex.shapes.values() if s.queue == queue for p in s.pilots]
    assert len(pilots) == 1
    assert pilots[0].wait(20).is_final and pilots[0].state is JobState.CANCELLED
    assert all(Q.read_done(queue, j.task_id)["state"] == "CANCELLED" for j in jobs)  # type: ignore[index]


REATTACH = """
import os, signal, sys, time
from launchers.config.model import LocalGroup
from launchers.jobs.experiment import experiment
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.local.launcher import DirectLauncher
b = DirectLauncher(group=LocalGroup(max_jobs=4)).batched(slots=2, linger=1)
with experiment(sys.argv[1], b):
    j = command(["sleep", "2"], name="ra").submit()
    while j.state is not JobState.RUNNING:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_reattach_after_the_submitter_died(tmp_path: Path) -> None:
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-c", REATTACH, str(tmp_path / "xp")], timeout=60, check=False
    )
    assert p.returncode == -9
    ex = executor()
    before = ex.pilots_submitted
    with experiment(tmp_path / "xp", batch(slots=2, linger=1)):
        j = command(["sleep", "2"], name="ra").submit()
        assert j.wait(30) is JobState.COMPLETED
    assert ex.pilots_submitted == before  # tracked, not submitted again
    out = j.stdout_path.read_text()
    assert out.count("==== launchers: attempt") == 1


def test_gres_gpus_count_and_scale_with_slots() -> None:
    """docs/design/pilots.md §3.2: a group with ``gpu_option: gres`` asks ``--gres=gpu[:TYPE]:N``; those GPUs
    count for the task, and the pilot asks slots times as many in the same form."""
    from launchers.batch.executor import _pilot_slurm_launcher

    inner = SlurmLauncher(options={"partition": "gpu", "gres": "gpu:a100:2", "cpus_per_task": 1})
    res = task_resources(inner)
    assert res.gpus == 2
    pilot = _pilot_slurm_launcher(inner, BatchLauncher(inner), res, 3, 3600)
    assert pilot.options.gres == "gpu:a100:6" and pilot.options.gpus_per_node is None
    plain = SlurmLauncher(options={"partition": "gpu", "gpus_per_node": 1})
    assert (
        _pilot_slurm_launcher(
            plain, BatchLauncher(plain), task_resources(plain), 2, 3600
        ).options.gpus_per_node
        == 2
    )
