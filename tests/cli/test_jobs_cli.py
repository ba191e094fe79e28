"""``launchers submit``, ``jobs``, ``cancel`` and ``logs`` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launchers.cli.main", *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "launchers.yaml").write_text(
        "local:\n  - id: here\n    cpu: {cores: 2, memory: 4G}\n"
    )
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "launchers.yaml"))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_submit_wait_jobs_logs(here: Path) -> None:
    r = cli(
        "submit",
        "--wait",
        "--workdir",
        "xp",
        "--env",
        "A=b c",
        "--",
        "sh",
        "-c",
        'echo "out $A"; echo e >&2',
        cwd=here,
    )
    assert r.returncode == 0, r.stderr
    task_id, native_id, directory = r.stdout.strip().split("\t")
    assert task_id.startswith("sh-") and native_id.isdigit() and Path(directory).is_dir()
    r = cli("submit", "--wait", "--workdir", "xp", "--", "sh", "-c", "exit 7", cwd=here)
    assert r.returncode == 1 and "ended FAILED (exit code 7)" in r.stderr
    r = cli("jobs", "xp", cwd=here)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["TASK", "ID", "STATE", "NATIVE", "ID", "ATTEMPT", "REASON"]
    assert any(task_id in line and "COMPLETED" in line for line in lines)
    assert any("FAILED" in line and line.rstrip().endswith("exit code 7") for line in lines)
    r = cli("logs", "--workdir", "xp", task_id, cwd=here)
    assert r.stdout.splitlines()[1] == "out b c"
    r = cli("logs", "--err", directory, cwd=here)
    assert r.stdout.splitlines()[1] == "e"
    r = cli("jobs", "--json", "xp", cwd=here)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert {row["state"] for row in rows} == {"COMPLETED", "FAILED"}


@pytest.mark.timing
def test_submit_then_cancel(here: Path) -> None:
    r = cli("submit", "--json", "--", "sleep", "60", cwd=here)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["state"] == "RUNNING"
    pid = int(info["native_id"])
    os.kill(pid, 0)  # still running after the client left
    t0 = time.monotonic()
    r = cli("cancel", "--all", ".", cwd=here)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [info["task_id"], "CANCELLED"]
    assert time.monotonic() - t0 < 10
    r = cli("jobs", cwd=here)
    assert "cancelled on request" in r.stdout
    r = cli("cancel", info["task_id"][:6], cwd=here)
    assert "already final" in r.stdout


@pytest.mark.slow
def test_usage_errors(here: Path) -> None:
    r = cli("submit", cwd=here)
    assert r.returncode == 2 and r.stderr.startswith("launchers: submit: no command given")
    r = cli("submit", "--env", "1=2", "--", "true", cwd=here)
    assert r.returncode == 2 and "--env '1=2'" in r.stderr
    r = cli("logs", "nope", cwd=here)
    assert r.returncode == 2 and "no job 'nope'" in r.stderr
    r = cli("submit", "-r", "cuda(mem=80G)*8", "--", "true", cwd=here)
    assert r.returncode == 2 and "Traceback" not in r.stderr


@pytest.mark.slurm
def test_cancel_slurm_job_from_the_command_line(here: Path, slurm_cluster: dict[str, str]) -> None:
    """A job submitted by a process that has left is cancelled by ``launchers cancel``."""
    script = here / "submit.py"
    script.write_text(
        "from launchers import experiment, command\n"
        "from launchers.slurm.launcher import SlurmLauncher\n"
        "from launchers.config.model import SlurmGroup\n"
        "xp = experiment('xp', SlurmLauncher(group=SlurmGroup(id='sandbox')), progress=False)\n"
        "xp.__enter__()\n"
        "job = command(['sleep', '120']).submit()\n"
        "import time\n"
        "while not job.native_id and not job.state.is_final:\n"
        "    time.sleep(0.05)\n"
        "print(job.native_id, job.state.value)\n"
        "xp.leave()\n"
    )
    r = subprocess.run(
        [sys.executable, str(script)], cwd=here, text=True, capture_output=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    native_id, state = r.stdout.split()
    # Slurm took it; the tracker may have seen it start before the script printed
    assert state in ("PENDING", "RUNNING") and native_id.isdigit()
    r = cli("cancel", "--all", "xp", cwd=here)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[1] == "CANCELLED"
    # a job cancelled while running shows COMPLETING in squeue until its node has cleaned up
    deadline = time.monotonic() + 60
    while True:
        squeue = subprocess.run(
            ["squeue", "--noheader", "--states=all", "--format=%i %T", "--jobs", native_id],
            text=True,
            capture_output=True,
            env=dict(os.environ, **slurm_cluster),
        )
        if "COMPLETING" not in squeue.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "CANCELLED" in squeue.stdout


def test_a_job_is_named_by_its_run_id_too(tmp_path: Path) -> None:
    """``launchers status RUN`` accepts the run id ``launchers run`` prints (NAME-DIGEST-PLACE)."""
    from launchers.cli.jobs import resolve_job
    from launchers.errors import LaunchersError
    from launchers.remote.script import run_id_for

    d = tmp_path / "runs" / "jobs" / "train" / "0123456789abcdef"
    d.mkdir(parents=True)
    (d / "state.json").write_text("{}")
    run_id = run_id_for("train-0123456789abcdef", d)
    assert resolve_job(run_id, tmp_path / "runs") == d
    assert resolve_job("train-0123", tmp_path / "runs") == d
    with pytest.raises(LaunchersError, match="no job"):
        resolve_job("train-0123456789abcdef-00000000", tmp_path / "runs")


@pytest.mark.slurm
def test_submit_refused_by_sbatch_exits_2(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch refusing the job is a submission error: exit 2 with sbatch's message."""
    (tmp_path / "launchers.yaml").write_text(
        "slurm:\n  - id: refused\n    partitions:\n      nosuchpart:\n        nodes:\n"
        "          - {count: 1, configuration: {cpu: {cores: 2, memory: 2G}}}\n"
    )
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "launchers.yaml"))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    r = cli("submit", "--workdir", "xp", "--", "true", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "could not be submitted" in r.stderr and "partition" in r.stderr.lower()
