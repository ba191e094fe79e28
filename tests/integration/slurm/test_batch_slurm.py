"""BatchLauncher over the real Slurm cluster: pilots are ordinary Slurm jobs of the inner launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Leftovers
from launchers import JobState, SlurmLauncher, command, experiment
from launchers.batch import queue as Q
from launchers.batch.executor import BatchExecutor
from launchers.config.model import SlurmGroup
from launchers.runtime.core import current as current_runtime
from paths import SRC, job_pythonpath

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.xdist_group("batch-slurm"),
]  # pilots found by name in the queue


def inner() -> SlurmLauncher:
    return SlurmLauncher(
        group=SlurmGroup(id="sb"), options={"partition": "debug", "cpus_per_task": 1, "mem": "256M"}
    )


def reset_executors() -> None:
    current_runtime().forget_executors("slurm")


@pytest.fixture
def cluster(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(SRC))
    reset_executors()
    yield slurm_cluster
    reset_executors()


def pilot_ids(prefix: str) -> list[str]:
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%A %j"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line.split()[0] for line in out.splitlines() if line.split()[1].startswith(prefix)]


def banners(job: Any) -> list[str]:
    return [
        line
        for line in job.stdout_path.read_text().splitlines()
        if line.startswith("==== launchers: attempt")
    ]


def test_many_tasks_one_pilot_and_late_arrivals(
    cluster: dict[str, str], tmp_path: Path, leaves_nothing: Leftovers
) -> None:
    # a linger far longer than a loaded CI needs between the twelfth completion and the late
    # tasks' publication; the fixture cancels the lingering pilot at the end
    batch = inner().batched(slots=4, linger=120, walltime="10m", drain_margin="1m")
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    leaves_nothing.watch(ex, lingering=True)
    before = ex.pilots_submitted
    with experiment(tmp_path, batch):
        jobs = [
            command(["sh", "-c", f"echo n{i} $SLURM_JOB_ID"], name=f"t{i}").submit()
            for i in range(12)
        ]
        for j in jobs:
            assert j.wait(60) is JobState.COMPLETED
        late = [command(["echo", f"late{i}"], name=f"late{i}").submit() for i in range(3)]
        for j in late:
            assert j.wait(30) is JobState.COMPLETED
    assert ex.pilots_submitted - before == 1
    pilots = {j.pilot for j in jobs + late}
    assert len(pilots) == 1 and None not in pilots
    pilot = pilots.pop()
    for i, j in enumerate(jobs):
        assert j.stdout_path.read_text().splitlines()[1] == f"n{i} {pilot}"
        assert len(banners(j)) == 1
    shape = next(
        iter(s for s in ex.shapes.values() if s.queue.parent == (tmp_path / "batch").absolute())
    )
    script = (shape.pilots[0].directory / "job.sh").read_text()
    assert "#SBATCH --cpus-per-task=4" in script and "#SBATCH --mem=1024M" in script
    assert "#SBATCH --time=00:10:00" in script and "#SBATCH --signal=B:USR1@60" in script
    assert "#SBATCH --job-name=lxpilot-" in script


def test_cancelled_pilot_tasks_reclaimed(cluster: dict[str, str], tmp_path: Path) -> None:
    batch = inner().batched(slots=2, linger=2, walltime="10m", drain_margin="1m")
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    before = ex.pilots_submitted
    with experiment(tmp_path, batch):
        jobs = [
            command(
                ["sh", "-c", 'if [ "$LAUNCHERS_ATTEMPT" = 1 ]; then sleep 60; fi; echo ok'],
                name=f"s{i}",
            ).submit()
            for i in range(2)
        ]
        deadline = time.monotonic() + 60
        while "batch" not in jobs[0].record.extra:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        queue = Path(jobs[0].record.extra["batch"]["queue"])
        while not ({j.task_id for j in jobs} <= Q.scan(queue).running and jobs[0].pilot):
            assert time.monotonic() < deadline, "the tasks never ran"
            time.sleep(0.1)
        first = jobs[0].pilot
        assert first is not None
        subprocess.run(["scancel", first], check=True)
        for j in jobs:
            assert j.wait(90) is JobState.COMPLETED
    assert ex.pilots_submitted - before == 2
    for j in jobs:
        assert [b.split(",")[0] for b in banners(j)] == [
            "==== launchers: attempt 1",
            "==== launchers: attempt 2",
        ]
        assert j.pilot != first
    assert all(Q.read_done(queue, j.task_id)["attempt"] == 2 for j in jobs)  # type: ignore[index]


SUBMITTER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from launchers import SlurmLauncher, command, experiment
    from launchers.config.model import SlurmGroup
    inner = SlurmLauncher(group=SlurmGroup(id="sb"), options={"partition": "debug", "cpus_per_task": 1, "mem": "256M"})
    # the pilot lingers longer than the other submitter could lag; the test ends it
    batch = inner.batched(slots=4, linger=120, walltime="10m", drain_margin="1m")
    tag = sys.argv[2]
    # a barrier after the imports: both submit at the same time, whatever their start-ups took
    barrier = Path(sys.argv[1], "barrier")
    (barrier / tag).mkdir(parents=True)
    deadline = time.monotonic() + 60
    while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    with experiment(sys.argv[1], batch):
        jobs = [command(["sh", "-c", "echo $LAUNCHERS_TASK_ID >> " + sys.argv[1] + "/runs"], name=tag + str(i)).submit()
                for i in range(8)]
    print(batch.executor().pilots_submitted)
    """
)


def test_two_submitters_one_pilot_each_task_once(cluster: dict[str, str], tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SUBMITTER, str(tmp_path), tag], stdout=subprocess.PIPE, text=True
        )
        for tag in ("a", "b")
    ]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for pilot in tmp_path.glob("batch/*/pilots/*/state.json"):  # end the lingering pilot
            native = json.loads(pilot.read_text()).get("native_id")
            if native:
                subprocess.run(["scancel", str(native)], check=False)
    assert [p.returncode for p in procs] == [0, 0]
    assert sorted(int(o.split()[-1]) for o in outs) == [0, 1]  # one pilot for the shape
    runs = (tmp_path / "runs").read_text().split()
    assert len(runs) == 16 and len(set(runs)) == 16
    shapes = os.listdir(tmp_path / "batch")
    assert len(shapes) == 1
    assert os.listdir(tmp_path / "batch" / shapes[0] / "pilots") == ["1"]


def test_gpus_split_between_slots(cluster: dict[str, str], tmp_path: Path) -> None:
    gpu = SlurmLauncher(group=SlurmGroup(id="sb"),
                        options={"partition": "gpu", "gpus_per_node": 1, "cpus_per_task": 1, "mem": "256M"})  # fmt: skip
    batch = gpu.batched(slots=2, linger=1, walltime="10m", drain_margin="1m")
    with experiment(tmp_path, batch):
        jobs = [
            command(
                ["sh", "-c", 'echo "gpu=$CUDA_VISIBLE_DEVICES"; sleep 1'], name=f"g{i}"
            ).submit()
            for i in range(2)
        ]
    seen = sorted(j.stdout_path.read_text().splitlines()[1] for j in jobs)
    assert seen == ["gpu=0", "gpu=1"]


def test_refused_pilot_fails_the_tasks_with_sbatch_message(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    bad = SlurmLauncher(
        group=SlurmGroup(id="sb"), options={"partition": "nosuchpartition", "cpus_per_task": 1}
    )
    batch = bad.batched(slots=2, linger=1, walltime="10m", drain_margin="1m")
    with pytest.raises(Exception, match="did not complete"), experiment(tmp_path, batch):
        job = command(["true"], name="never").submit()
    assert job.state is JobState.FAILED
    assert "the batch pilot could not be submitted" in (job.reason or "")
    assert "partition" in (job.reason or "").lower()
