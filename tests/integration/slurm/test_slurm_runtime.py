"""The Slurm executor against the real cluster: submission, tracking, states, cancel, arrays,
fatal pending reasons, re-attach and reconciliation by name (docs/design/runtime.md §4-§8). The
decisions that need no real scheduler (a fatal reason confirmed, submit limits, purged jobs,
cancel while staging, queries per cycle) run on fakes in tests/slurm/test_slurm_fake_runtime.py."""

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

import launchers.slurm.executor as sx
from launchers import ExperimentFailed, JobState, SlurmLauncher, command, experiment
from launchers.config.model import SlurmGroup
from launchers.runtime.core import current as current_runtime
from paths import SRC, job_pythonpath

pytestmark = pytest.mark.slurm


def make_launcher(**group: Any) -> SlurmLauncher:
    return SlurmLauncher(
        group=SlurmGroup(id="sb", **group), options={"partition": "debug", "time": "00:05:00"}
    )


def reset_executors() -> None:
    """Executors are per process; tests that switch cluster (SLURM_CONF) start afresh."""
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


def sacct_names(name: str) -> list[str]:
    out = subprocess.run(["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%A"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return out.split()


@pytest.mark.slow
def test_complete_fail_cancel(cluster: dict[str, str], tmp_path: Path) -> None:
    L = make_launcher()
    with pytest.raises(ExperimentFailed) as info, experiment(tmp_path, L):
        ok = command(["sh", "-c", 'echo hello "$1"', "sh", "it's $(x)"]).submit()
        bad = command(["sh", "-c", "echo oops >&2; exit 3"]).submit()
        long = command(["sleep", "120"]).submit()
        deadline = time.monotonic() + 30
        while long.state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.1)
        long.cancel()
    assert ok.state is JobState.COMPLETED and ok.result() == 0
    assert "hello it's $(x)" in ok.stdout_path.read_text()
    assert (bad.state, bad.exit_code, bad.reason) == (JobState.FAILED, 3, "exit code 3")
    assert long.state is JobState.CANCELLED and long.reason == "cancelled on request"
    assert "2 job(s) did not complete" in str(info.value)
    rec = json.loads((ok.directory / "state.json").read_text())
    assert rec["native_id"] == ok.native_id and rec["job_name"].endswith("-a1")
    assert [h[1] for h in rec["history"]][:3] == ["WAITING", "SUBMITTING", "PENDING"]
    assert rec["launcher"]["options"] == ["--partition=debug", "--time=00:05:00"]


def test_callable_and_one_query_per_cycle(cluster: dict[str, str], tmp_path: Path) -> None:
    import jobs_tasks as tt

    L = make_launcher()
    with experiment(tmp_path, L):
        jobs = [tt.add(a=i, b=1).submit() for i in range(6)]
    assert [j.result() for j in jobs] == [i + 1 for i in range(6)]
    ex = L.executor()
    assert isinstance(ex, sx.SlurmExecutor)
    queries = ex.commands.get("sacct", 0) + ex.commands.get("squeue", 0)
    assert queries <= ex.tracker.cycles  # never more than one Slurm query per poll cycle


def test_rejection_fails_with_sbatch_message(cluster: dict[str, str], tmp_path: Path) -> None:
    L = make_launcher().config(qos="no-such-qos")
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        job = command(["true"]).submit()
    assert job.state is JobState.FAILED
    assert "qos" in (job.reason or "").lower()


@pytest.mark.slow
def test_dependency_failing_later_is_unrunnable(
    cluster: dict[str, str], tmp_path: Path, slurm_tuning: Any
) -> None:
    """The job it depends on fails after the submission: slurmdbd keeps the reason it was
    recorded with (Dependency), slurmctld says DependencyNeverSatisfied: the job ends UNRUNNABLE."""
    slurm_tuning(fatal_confirm=3.0)
    # held until the dependent is in Slurm's queue, however slow the machine: then it fails
    first = subprocess.run(["sbatch", "--parsable", "--hold", "-p", "debug", "-o", "/dev/null", "--wrap", "exit 1"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    L = make_launcher().config(sbatch_options={"dependency": f"afterok:{first}"})
    try:
        with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
            job = command(["true"]).submit()
            deadline = time.monotonic() + 60
            while job.native_id is None:
                assert time.monotonic() < deadline, "the dependent was never submitted"
                time.sleep(0.05)
            subprocess.run(["scontrol", "release", first], check=True)
    finally:
        subprocess.run(["scancel", first], capture_output=True)  # if the test failed holding it
    assert job.state is JobState.UNRUNNABLE
    assert "DependencyNeverSatisfied" in (job.reason or "")


def test_array(cluster: dict[str, str], tmp_path: Path) -> None:
    L = make_launcher()
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        jobs = sx.submit_array(L, [command(["sh", "-c", f"echo element {i}; exit {i % 2}"]) for i in range(3)],
                               max_parallel=2)  # fmt: skip
    master = {j.native_id.split("_")[0] for j in jobs if j.native_id}
    assert len(master) == 1
    assert [j.native_id for j in jobs] == [f"{next(iter(master))}_{i}" for i in range(3)]
    assert [j.state for j in jobs] == [JobState.COMPLETED, JobState.FAILED, JobState.COMPLETED]
    for i, j in enumerate(jobs):
        assert f"element {i}" in j.stdout_path.read_text()
    arrays = list((tmp_path / "arrays").iterdir())
    assert len(arrays) == 1 and (arrays[0] / "index").read_text().splitlines() == [
        str(j.directory) for j in jobs
    ]


def test_array_block_keeps_each_launchers_options(cluster: dict[str, str], tmp_path: Path) -> None:
    """Tasks submitted in one array() block with two configurations of the launcher go in as one
    array per configuration, each with its own options (docs/design/runtime.md §8)."""
    L = make_launcher()
    short = L.config(time="00:02:00")
    with experiment(tmp_path, L), sx.array(L):
        a = command(["true", "a"]).submit()
        b = command(["true", "b"]).submit(launcher=short)
        c = command(["true", "c"]).submit()
    assert [j.state for j in (a, b, c)] == [JobState.COMPLETED] * 3
    assert a.native_id and b.native_id and c.native_id
    assert a.native_id.split("_")[0] == c.native_id.split("_")[0] != b.native_id.split("_")[0]
    scripts = sorted(f.read_text() for f in (tmp_path / "arrays").glob("*/*.sh"))
    assert len(scripts) == 2
    assert sorted("--time=00:02:00" in t for t in scripts) == [False, True]


CLIENT = textwrap.dedent(
    """
    import sys
    from launchers import SlurmLauncher, command, experiment
    from launchers.config.model import SlurmGroup
    L = SlurmLauncher(group=SlurmGroup(id="sb"), options={"partition": "debug", "time": "00:05:00"})
    with experiment(sys.argv[1], L):
        job = command(["sh", "-c", "sleep 2; echo done", sys.argv[1]]).submit()
    print("STATE", job.state.value, job.native_id)
    """
)


def test_killed_after_sbatch_reconciled_by_name(cluster: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = dict(os.environ, **{sx.KILL_AFTER_SBATCH_ENV: "1"})
    first = subprocess.run([sys.executable, str(script), str(tmp_path / "xp")], env=env, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert first.returncode == -9, first.stderr
    [state_file] = (tmp_path / "xp").glob("jobs/*/*/state.json")
    rec = json.loads(state_file.read_text())
    assert rec["state"] == "SUBMITTING" and rec["native_id"] is None
    name = rec["job_name"]
    assert len(sacct_names(name)) == 1  # sbatch did submit it
    second = subprocess.run([sys.executable, str(script), str(tmp_path / "xp")], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert second.returncode == 0, second.stderr
    ids = sacct_names(name)
    assert len(ids) == 1  # nothing submitted twice
    assert f"STATE COMPLETED {ids[0]}" in second.stdout


def test_reconcile_keeps_to_its_own_workdir(cluster: dict[str, str], tmp_path: Path) -> None:
    """The same task in two experiment directories has the same job name; each, killed after
    sbatch, adopts its own job (Slurm's working directory tells them apart) and cancels neither."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT.replace(", sys.argv[1]]", ", sys.argv[2]]"))  # the same task in both
    env = dict(os.environ, **{sx.KILL_AFTER_SBATCH_ENV: "1"})
    ids: dict[str, str] = {}
    for xp in ("a", "b"):
        killed = subprocess.run([sys.executable, str(script), str(tmp_path / xp), str(tmp_path)], env=env,
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert killed.returncode == -9, killed.stderr
        [state_file] = (tmp_path / xp).glob("jobs/*/*/state.json")
        name = json.loads(state_file.read_text())["job_name"]
        [ids[xp]] = [i for i in sacct_names(name) if i not in ids.values()]
    for xp in ("a", "b"):
        again = subprocess.run([sys.executable, str(script), str(tmp_path / xp), str(tmp_path)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert f"STATE COMPLETED {ids[xp]}" in again.stdout
    assert sorted(sacct_names(name)) == sorted(ids.values())


@pytest.mark.slow
def test_timeout_and_resumable_requeue(cluster: dict[str, str], tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import os, signal, sys, time
        attempt = int(os.environ["LAUNCHERS_ATTEMPT"])
        print("attempt", attempt, flush=True)
        if attempt >= 2:
            sys.exit(0)
        signal.signal(signal.SIGUSR1, lambda *a: (print("saving", flush=True), sys.exit(0)))
        time.sleep(300)
        """
    )
    L = make_launcher().config(time="00:01:00")
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        timeout = command(["sleep", "300"]).submit()
        resumable = command([sys.executable, "-c", code], resumable=True).submit()
        # Slurm holds a requeued job with a begin time about two minutes ahead; start it now
        # (the requeue itself is what is tested, not Slurm's hold)
        deadline = time.monotonic() + 240
        while not resumable.state.is_final and time.monotonic() < deadline:
            if resumable.attempt >= 2 and resumable.state is JobState.PENDING:
                subprocess.run(
                    ["scontrol", "update", f"JobId={resumable.native_id}", "StartTime=now"],
                    capture_output=True,
                )
            time.sleep(0.5)
    assert timeout.state is JobState.TIMEOUT
    assert resumable.state is JobState.COMPLETED, resumable.reason
    assert resumable.attempt == 2
    out = resumable.stdout_path.read_text()
    assert (
        "==== launchers: attempt 1, " in out
        and "==== launchers: attempt 2, " in out
        and "saving" in out
    )


def test_each_group_keeps_its_own_settings_on_a_shared_executor(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """Two groups on one connector share an executor; each job still gets its own group's
    ``env:`` (docs/design/runtime.md §3) and ``fatal_pending`` / ``lost_after`` (docs/design/runtime.md §6, §5)."""
    a = make_launcher(env={"FROM_A": "a"})
    b = SlurmLauncher(
        group=SlurmGroup(id="sb2", env={"FROM_B": "b"}, fatal_pending="report"),
        options={"partition": "debug", "time": "00:05:00"},
    )
    assert a.executor() is b.executor()
    script = 'echo "A=${FROM_A:-unset} B=${FROM_B:-unset}"'
    with experiment(tmp_path, a):
        ja = command(["sh", "-c", script], name="ga").submit()
        jb = command(["sh", "-c", script], name="gb").submit(launcher=b)
    assert "A=a B=unset" in ja.stdout_path.read_text()
    assert "A=unset B=b" in jb.stdout_path.read_text()
    ex = a.executor()
    assert isinstance(ex, sx.SlurmExecutor)
    assert ex.settings(jb.launcher).fatal_pending == "report"
    assert ex.settings(ja.launcher).fatal_pending == "cancel"


def test_tracking_settings_give_groups_their_own_executor(cluster: dict[str, str]) -> None:
    """``status_source`` and ``poll_max`` shape an executor's single tracker: a group that sets
    them differently gets its own executor; groups that agree share one."""
    a = make_launcher()
    b = SlurmLauncher(
        group=SlurmGroup(id="sq", status_source="squeue"), options={"partition": "debug"}
    )
    c = SlurmLauncher(group=SlurmGroup(id="pm", poll_max=10), options={"partition": "debug"})
    d = SlurmLauncher(group=SlurmGroup(id="other"), options={"partition": "debug"})
    assert a.executor() is d.executor()
    assert len({id(x.executor()) for x in (a, b, c)}) == 3
    assert b.executor().status_source == "squeue"  # type: ignore[attr-defined]
    assert c.executor().poll_max == 10.0  # type: ignore[attr-defined]
