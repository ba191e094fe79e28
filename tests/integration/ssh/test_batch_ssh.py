"""BatchLauncher over an SSH-reached Slurm: the queue lives under the connector's workdir, the
pilot is a Slurm job submitted over SSH, outputs come back into the local job directories."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Leftovers, cancel_in_another_process, one_slot_taken
from launchers import ExperimentFailed, JobState, SlurmLauncher, command, experiment, task
from launchers.batch.executor import BatchExecutor
from launchers.config.loader import load_config
from launchers.connectors import registry
from launchers.errors import LaunchersError
from launchers.runtime.core import current as current_runtime

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]


@task
def answer() -> int:
    return 42


def reset() -> None:
    current_runtime().forget_executors("slurm")
    registry.forget_all()


@pytest.fixture
def clean(slurm_cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    reset()
    yield slurm_cluster
    reset()


def ssh_launcher(tmp_path: Path, info: dict[str, str], remote: Path) -> SlurmLauncher:
    lines = [
        "connectors:",
        "  ssh:",
        "    cluster:",
        "      hostname: 127.0.0.1",
        f"      port: {info['CLUSTER_SSH_PORT']}",
        "      username: root",
        f"      identity_file: {info['CLUSTER_SSH_KEY']}",
        f"      known_hosts: {info['CLUSTER_SSH_KNOWN_HOSTS']}",
        "      ssh_config: false",
        f"      workdir: {remote}",
        "slurm:",
        "  - id: over-ssh",
        "    connector: cluster",
        "    partitions:",
        "      debug: {}",
    ]
    path = tmp_path / "launchers.yaml"
    path.write_text("\n".join(lines) + "\n")
    group = load_config(path).groups[0]
    return SlurmLauncher(
        group=group, options={"partition": "debug", "cpus_per_task": 1, "mem": "256M"}
    )


@pytest.mark.slow
def test_batch_over_ssh(clean: dict[str, str], tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    batch = ssh_launcher(tmp_path, clean, remote).batched(
        slots=1, linger=3, walltime="10m", drain_margin="1m"
    )
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    before = ex.pilots_submitted
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "exp", batch):
        jobs = [
            command(["sh", "-c", f"echo out{i}; echo err{i} >&2"], name=f"t{i}").submit()
            for i in range(3)
        ]
        bad = command(["sh", "-c", "exit 3"], name="bad").submit()
        # long sleeps: only the cancels end them, however slow the machine
        sleepers = [command(["sleep", "300"], name=n).submit() for n in ("long", "late")]
        long, late = one_slot_taken(sleepers)
        assert late.state is JobState.PENDING  # cancelled while still queued
        late.cancel()
        long.cancel()
        for j in jobs:
            assert j.wait(40) is JobState.COMPLETED
    assert ex.pilots_submitted - before == 1
    for i, j in enumerate(jobs):
        assert f"out{i}" in j.stdout_path.read_text()  # copied back from the remote queue
        assert f"err{i}" in (j.directory / "job.err").read_text()
        assert (j.directory / "job.rc").exists()
        info = j.record.extra["batch"]
        assert info["remote_queue"].startswith(str(remote / "batch"))
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 3)
    assert long.state is JobState.CANCELLED and late.state is JobState.CANCELLED
    assert list(
        (remote / "batch").glob("*/runner.py")
    )  # the queue lives under the connector's workdir


def test_callable_refused_over_ssh(clean: dict[str, str], tmp_path: Path) -> None:
    batch = ssh_launcher(tmp_path, clean, tmp_path / "remote").batched(slots=1)
    with (
        pytest.raises(LaunchersError, match="runs commands only"),
        experiment(tmp_path / "exp", batch),
    ):
        answer().submit()


@pytest.mark.slow
def test_cancelled_pilot_tasks_requeued_over_ssh(clean: dict[str, str], tmp_path: Path) -> None:
    batch = ssh_launcher(tmp_path, clean, tmp_path / "remote").batched(
        slots=1, linger=2, walltime="10m", drain_margin="1m"
    )
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    before = ex.pilots_submitted
    with experiment(tmp_path / "exp", batch):
        job = command(
            ["sh", "-c", 'if [ "$LAUNCHERS_ATTEMPT" = 1 ]; then sleep 60; fi; echo ok'], name="s"
        ).submit()
        deadline = time.monotonic() + 40
        while not (job.state is JobState.RUNNING and job.pilot):
            assert time.monotonic() < deadline, "the task never ran"
            time.sleep(0.1)
        first = job.pilot
        assert first is not None
        subprocess.run(["scancel", first], check=True)
        assert job.wait(60) is JobState.COMPLETED
    assert ex.pilots_submitted - before == 2
    assert job.pilot != first
    assert "ok" in job.stdout_path.read_text()


def test_home_relative_workdir_is_expanded(clean: dict[str, str], tmp_path: Path) -> None:
    """The connector's default workdir starts with ``~``: the remote queue path is expanded with
    the remote home, since remote commands get it as an argument no shell expands."""
    import shutil
    import uuid

    name = f".launchers-test-{uuid.uuid4().hex[:8]}"
    remote = Path.home() / name  # the sshd runs on this machine, as root
    try:
        batch = ssh_launcher(tmp_path, clean, f"~/{name}").batched(  # type: ignore[arg-type]
            slots=2, linger=2, walltime="10m", drain_margin="1m"
        )
        with experiment(tmp_path / "exp", batch):
            jobs = [command(["echo", f"home{i}"], name=f"h{i}").submit() for i in range(2)]
        for i, j in enumerate(jobs):
            assert j.state is JobState.COMPLETED
            assert f"home{i}" in j.stdout_path.read_text()
            assert j.record.extra["batch"]["remote_queue"].startswith(str(remote / "batch"))
        assert list((remote / "batch").glob("*/runner.py"))
    finally:
        shutil.rmtree(remote, ignore_errors=True)


@pytest.mark.slow
def test_cancel_from_another_process_reaches_the_remote_queue(
    clean: dict[str, str], tmp_path: Path, leaves_nothing: Leftovers
) -> None:
    """`launchers cancel` in another process knows the job only from its record: the record
    says how to reach the queue (connector and configuration), so the cancel is not lost. The
    runner on the far side kills the running task: neither it nor the pilot is left behind."""

    remote = tmp_path / "remote"
    batch = ssh_launcher(tmp_path, clean, remote).batched(
        slots=1, linger=1, walltime="10m", drain_margin="1m", kill_grace=2
    )
    leaves_nothing.watch(batch.executor())
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "exp", batch):
        # long sleeps: only the cancels end them, however slow the two `launchers cancel` are
        long, late = (command(["sleep", "300"], name=n).submit() for n in ("long", "late"))
        deadline = time.monotonic() + 40
        while long.state is not JobState.RUNNING and late.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, "no sleeper ran"
            time.sleep(0.1)
        running, queued = (long, late) if long.state is JobState.RUNNING else (late, long)
        assert running.record.extra["batch"]["locator"]["kind"] == "ssh"
        for job in (
            queued,
            running,
        ):  # one queued (taken out of pending/), one running (cancel/<id>)
            cancel_in_another_process(job, 60)
        assert running.wait(60) is JobState.CANCELLED and queued.wait(30) is JobState.CANCELLED
    assert running.exit_code != 0  # killed, not run to its end
