"""End to end: a slurm group with ``connector: NAME`` submits, polls, cancels and reads outputs
over the SSH connector (the sandbox's sshd on 127.0.0.1), and survives an sshd outage. The
decisions of this path on a fake connector (no sshd, no Slurm) are
tests/slurm/test_slurm_fake_remote.py."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ssh_connector import OWN_SSHD_PORT, OwnSSHD, host_key_line

from conftest import until_released
from launchers import ExperimentFailed, JobState, SlurmLauncher, command, experiment
from launchers.config.loader import load_config
from launchers.connectors import registry
from launchers.connectors.ssh import SSHConnector
from launchers.runtime.core import current as current_runtime
from launchers.runtime.loop import run_sync

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]


def reset() -> None:
    current_runtime().forget_executors("slurm")
    registry.forget_all()


@pytest.fixture
def clean(slurm_cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    reset()
    yield slurm_cluster
    reset()


def write_config(
    tmp_path: Path, info: dict[str, str], port: int, known_hosts: str, **extra: Any
) -> Path:
    lines = [
        "connectors:",
        "  ssh:",
        "    cluster:",
        "      hostname: 127.0.0.1",
        f"      port: {port}",
        "      username: root",
        f"      identity_file: {info['CLUSTER_SSH_KEY']}",
        f"      known_hosts: {known_hosts}",
        "      ssh_config: false",
        *(f"      {k}: {v}" for k, v in extra.items()),
        "slurm:",
        "  - id: over-ssh",
        "    connector: cluster",
        "    partitions:",
        "      debug: {}",
    ]
    path = tmp_path / "launchers.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def launcher(path: Path) -> SlurmLauncher:
    group = load_config(path).groups[0]
    assert group.connector == "cluster"
    return SlurmLauncher(group=group, options={"partition": "debug", "time": "00:05:00"})


def executor_commands() -> dict[str, int]:
    (ex,) = current_runtime().executors_of("slurm")
    return dict(ex.commands)


def test_submit_poll_cancel_and_read_outputs(clean: dict[str, str], tmp_path: Path) -> None:
    info = clean
    remote_root = tmp_path / "remote"
    conf = write_config(
        tmp_path,
        info,
        int(info["CLUSTER_SSH_PORT"]),
        info["CLUSTER_SSH_KNOWN_HOSTS"],
        workdir=str(remote_root),
    )
    L = launcher(conf)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "exp", L):
        ok = command(["sh", "-c", 'echo "hello $1"; echo warn >&2', "sh", "over 'ssh'"]).submit()
        bad = command(["sh", "-c", "exit 3"]).submit()
        long = command(["sleep", "120"]).submit()
        deadline = time.monotonic() + 30
        while long.state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.1)
        long.cancel()
    assert ok.state is JobState.COMPLETED and ok.result() == 0
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 3)
    assert long.state is JobState.CANCELLED
    # every Slurm command went over SSH: sbatch x3, scancel, and one remote command per poll cycle
    cmds = executor_commands()
    assert cmds.get("sbatch") == 3 and cmds.get("scancel") == 1
    assert cmds.get("remote-cycle", 0) >= 1
    assert set(cmds) <= {"sbatch", "scancel", "remote-cycle"}  # no sacct or squeue of their own
    # one SSH connection for the whole run; outputs readable over SFTP
    conn = registry.get_connector("cluster", load_config(conf))
    assert isinstance(conn, SSHConnector) and conn.connections_opened == 1
    remote = str(ok.record.extra.get("remote_dir") or ok.directory)
    assert remote.startswith(str(remote_root))  # job directories live under the connector's workdir
    out = run_sync(conn.read_file(f"{remote}/job.out"))
    assert b"hello over 'ssh'" in out
    err = run_sync(conn.read_file(f"{remote}/job.err"))
    assert b"warn" in err
    assert "hello over 'ssh'" in ok.stdout_path.read_text()  # fetched back into the local directory


def test_job_tracked_across_an_sshd_outage(clean: dict[str, str], tmp_path: Path) -> None:
    """sshd killed and started again under a running job: the connector reconnects and the job
    is followed to its end. The decisions alone (failed cycles change no state, the first one
    through decides) are tests/slurm/test_slurm_fake_remote.py on the fake connector."""
    info = clean
    server = OwnSSHD(info["CLUSTER_DIR"], tmp_path)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{OWN_SSHD_PORT} {host_key_line(info)}\n")
    server.start()
    try:
        conf = write_config(
            tmp_path,
            info,
            OWN_SSHD_PORT,
            str(kh),
            keepalive_interval="1s",
            command_timeout="10s",
            workdir=str(tmp_path / "remote"),
        )
        L = launcher(conf)
        with experiment(tmp_path / "exp", L):
            release = tmp_path / "release"  # the job runs until after the outage
            job = command(["sh", "-c", until_released(release)]).submit()
            deadline = time.monotonic() + 20
            while job.native_id is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert job.native_id is not None, job.state
            server.kill()  # the cluster stays up; only the way to it is gone
            time.sleep(2)
            assert not job.state.is_final  # an outage never fails (nor finishes) a job
            server.start()
            release.touch()
            assert job.wait(timeout=60) is JobState.COMPLETED
        assert job.state is JobState.COMPLETED
        conn = registry.get_connector("cluster", load_config(conf))
        assert isinstance(conn, SSHConnector) and conn.connections_opened >= 2
    finally:
        server.kill()


@pytest.mark.slow
def test_array_sized_to_the_submit_allowance_over_ssh(
    clean: dict[str, str], tmp_path: Path
) -> None:
    """docs/design/runtime.md §8 over SSH: the allowance (sacctmgr + squeue, one remote command) sizes
    each chunk, so no sbatch is refused; the rest waits and goes in as elements leave."""
    import subprocess

    qos = "lnch_submit2ssh"  # its own QoS: the per-user count is shared with test_slurm_runtime
    subprocess.run(
        ["sacctmgr", "-i", "add", "qos", qos, "MaxSubmitJobsPerUser=2"], capture_output=True
    )
    subprocess.run(
        ["sacctmgr", "-i", "modify", "user", "root", "set", f"qos+={qos}"], capture_output=True
    )
    info = clean
    conf = write_config(tmp_path, info, int(info["CLUSTER_SSH_PORT"]), info["CLUSTER_SSH_KNOWN_HOSTS"],
                        workdir=str(tmp_path / "remote"))  # fmt: skip
    L = launcher(conf).config(qos=qos)
    with experiment(tmp_path / "exp", L):
        elements = L.submit_array(
            [command(["sh", "-c", f"sleep 1; echo e{i} over ssh"]) for i in range(5)]
        )
    assert [j.state for j in elements] == [JobState.COMPLETED] * 5
    chunks = Counter((j.native_id or "").split("_")[0] for j in elements)
    # 2 + 2 + 1 when a chunk's elements end together; a chunk of 1 when the allowance was read
    # between the ends of two elements: never more than the allowance, never a refused sbatch
    assert max(chunks.values()) <= 2 and 3 <= len(chunks) <= 5, chunks
    cmds = executor_commands()
    assert cmds.get("sbatch") == len(chunks) and cmds.get("sh", 0) >= len(chunks)
    assert "e4" in elements[4].stdout_path.read_text()
