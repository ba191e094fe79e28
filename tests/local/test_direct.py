"""The direct launcher end to end (docs/design/runtime.md §1, §2, §10): real bash processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import jobs_tasks as tt
from launchers.config.model import LocalGroup
from launchers.errors import ExperimentFailed, JobFailedError, LaunchersError
from launchers.jobs.experiment import experiment
from launchers.jobs.record import read_record, write_record
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.local.launcher import DirectLauncher
from launchers.runtime.core import current as current_runtime
from paths import job_pythonpath


@pytest.fixture(autouse=True)
def _job_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Jobs import ``jobs_tasks`` and ``launchers`` like this process does."""
    src = Path(__import__("launchers").__file__).parent.parent
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(src))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))


def direct(**group: object) -> DirectLauncher:
    return DirectLauncher(group=LocalGroup(**group))  # type: ignore[arg-type]


def test_command_and_callables(tmp_path: Path) -> None:
    out_file = tmp_path / "out.txt"
    with experiment(tmp_path / "xp", direct()) as xp:
        j1 = command(
            ["sh", "-c", 'echo "hello $WHO"; echo oops >&2'], env={"WHO": "world"}
        ).submit()
        j2 = tt.add(2, b=3).submit()
        j3 = tt.touch(out_file, "content").submit()
        j4 = tt.as_tuple(4).submit()
        assert j1.state in (
            JobState.WAITING,
            JobState.SUBMITTING,
            JobState.RUNNING,
            JobState.COMPLETED,
        )
    assert xp.jobs == [j1, j2, j3, j4]
    assert [j.state for j in xp.jobs] == [JobState.COMPLETED] * 4
    assert j1.result() == 0 and j2.result() == 5
    assert j3.result() == out_file and out_file.read_text() == "content"
    assert j4.result() == (4, 4) and (j4.directory / "result.pickle").exists()
    assert (j2.directory / "result.json").read_text().strip() == "5"
    out = j1.stdout_path.read_text().splitlines()
    assert out[0].startswith("==== launchers: attempt 1, job ") and out[0].endswith(" ====")
    assert out[1] == "hello world"
    assert j1.stderr_path.read_text().splitlines()[1] == "oops"
    rc = json.loads((j1.directory / "job.rc").read_text())
    assert rc["rc"] == 0 and rc["attempt"] == 1 and rc["native_id"] == j1.native_id
    rec = read_record(j1.directory)
    assert rec is not None and rec.state is JobState.COMPLETED
    assert (
        rec.launcher["kind"] == "local" and rec.job_name == f"sh-{j1.record.task_id[-16:][:12]}-a1"
    )
    assert rec.extra["process"]["pid"] == int(j1.native_id or 0)
    assert [h[1] for h in rec.history] == ["WAITING", "SUBMITTING", "RUNNING", "COMPLETED"]
    assert j1.directory == tmp_path / "xp" / "jobs" / "sh" / j1.task_id.rsplit("-", 1)[1]
    assert json.loads((j2.directory / "params.json").read_text())["target"] == "jobs_tasks:add"


def test_failures(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed) as info, experiment(tmp_path, direct()):
        bad = command(["sh", "-c", "echo line1 >&2; echo line2 >&2; exit 3"]).submit()
        err = tt.boom("it broke").submit()
        good = command(["true"]).submit()
    text = str(info.value)
    assert "2 job(s) did not complete" in text and bad.task_id in text and "FAILED" in text
    assert set(info.value.jobs) == {bad, err}
    assert good.state is JobState.COMPLETED
    assert bad.exit_code == 3 and bad.state is JobState.FAILED
    with pytest.raises(JobFailedError) as e:
        bad.result()
    assert e.value.state == "FAILED" and e.value.exit_code == 3
    assert e.value.stderr_tail.splitlines()[-2:] == ["line1", "line2"]
    with pytest.raises(JobFailedError, match="ValueError: it broke"):
        err.result()
    error = json.loads((err.directory / "error.json").read_text())
    assert (
        error["type"] == "ValueError"
        and error["message"] == "it broke"
        and "Traceback" in error["traceback"]
    )


def test_import_failure_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__import__("launchers").__file__).parent.parent))
    with pytest.raises(ExperimentFailed), experiment(tmp_path, direct()):
        job = tt.add(1).submit()
    assert "cannot import jobs_tasks:add" in job.stderr_path.read_text()


def test_reattach_and_rerun(tmp_path: Path) -> None:
    marker = tmp_path / "runs"
    argv = [
        "sh",
        "-c",
        f'echo run >> "{marker}"; exit "$(cat {tmp_path}/code 2>/dev/null || echo 0)"',
    ]
    with experiment(tmp_path / "xp", direct()):
        first = command(argv).submit()
        assert command(argv).submit() is first  # same task twice: the same Job
    # a second run (same process, fresh registry entry lookup) submits nothing
    current_runtime().forget_jobs()
    with experiment(tmp_path / "xp", direct()):
        again = command(argv).submit()
        assert again.state is JobState.COMPLETED and again.native_id == first.native_id
    assert marker.read_text() == "run\n"
    # force resubmits a COMPLETED job as attempt 2 (attempt 1's outputs archived)
    (tmp_path / "code").write_text("4")
    current_runtime().forget_jobs()
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", direct()):
        forced = command(argv).submit(force=True)
    assert forced.attempt == 2 and forced.state is JobState.FAILED
    assert (forced.directory / "attempts" / "1" / "job.rc").exists()
    assert "attempt 2" in forced.stdout_path.read_text()
    # rerun_failed=False returns the failed job without running it
    current_runtime().forget_jobs()
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", direct(), rerun_failed=False):
        kept = command(argv).submit()
        assert kept.state is JobState.FAILED and kept.attempt == 2
    # default: a failed job is re-run as attempt 3
    (tmp_path / "code").write_text("0")
    current_runtime().forget_jobs()
    with experiment(tmp_path / "xp", direct()):
        rerun = command(argv).submit()
    assert rerun.attempt == 3 and rerun.state is JobState.COMPLETED
    rec = read_record(rerun.directory)
    assert rec is not None and [a["attempt"] for a in rec.attempts] == [1, 2]
    assert rec.attempts[1]["state"] == "FAILED" and rec.attempts[1]["exit_code"] == 4
    assert marker.read_text() == "run\n" * 3


@pytest.mark.timing
def test_cancel_and_lost(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed) as info, experiment(tmp_path, direct(), progress=False):
        j = command(["sleep", "30"]).submit()
        lost = command(["sh", "-c", "sleep 30"], name="lost").submit()
        deadline = time.monotonic() + 10
        while not (j.state is JobState.RUNNING and lost.state is JobState.RUNNING):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        t0 = time.monotonic()
        j.cancel()
        assert j.wait(5) is JobState.CANCELLED
        assert time.monotonic() - t0 < 3
        os.killpg(int(lost.native_id or 0), signal.SIGKILL)
        assert lost.wait(5) is JobState.LOST
    assert j.reason == "cancelled on request"
    assert lost.reason == "ended without an exit record: SIGKILL, the OOM killer or a restart"
    assert "CANCELLED" in str(info.value) and "LOST" in str(info.value)


def test_max_jobs_and_export_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHERS_SECRET_VAR", "visible?")
    launcher = direct(max_jobs=1, export="NONE", env=(("FROM_GROUP", "g v"),))
    release = tmp_path / "release"  # a runs until b was seen waiting for its slot
    hold = f"while [ ! -e {release} ]; do sleep 0.02; done"
    with experiment(tmp_path / "xp", launcher):
        a = command(
            ["sh", "-c", hold + "; echo ${LAUNCHERS_SECRET_VAR:-unset} $FROM_GROUP $TASKV $HOME"],
            env={"TASKV": "t"},
        ).submit()
        b = command(["sh", "-c", "echo second"]).submit()
        deadline = time.monotonic() + 10
        while a.state is not JobState.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.1)
        assert b.state is JobState.WAITING and b.reason is not None and "free slot" in b.reason
        release.touch()
    assert a.stdout_path.read_text().splitlines()[1] == f"unset g v t {os.environ['HOME']}"
    assert b.record.started_at is not None and a.record.ended_at is not None


_CLIENT = textwrap.dedent(
    """
    import os, signal, sys, time
    sys.path.insert(0, {tests!r})
    from launchers.jobs.experiment import experiment
    from launchers.local.launcher import DirectLauncher
    import jobs_tasks as tt
    mode = sys.argv[1]
    with experiment({xp!r}, DirectLauncher()):
        if sys.argv[2] == "held":
            job = tt.held({marker!r}, {marker!r} + ".release").submit()
        else:
            job = tt.sleeper(float(sys.argv[2]), {marker!r}).submit()
        if mode == "kill-now":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "kill-running":
            while job.state.value != "RUNNING":
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
    print(job.state.value, job.result())
    """
)


def _client(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "client.py"
    script.write_text(
        _CLIENT.format(
            tests=job_pythonpath(), xp=str(tmp_path / "xp"), marker=str(tmp_path / "marker")
        )
    )
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("mode", ["kill-now", "kill-running"])
def test_client_killed_then_rerun_submits_once(tmp_path: Path, mode: str) -> None:
    p = _client(tmp_path, mode, "1")
    p.wait(30)
    assert p.returncode == -signal.SIGKILL
    p = _client(tmp_path, "normal", "1")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.split() == ["COMPLETED", "1"]
    assert len((tmp_path / "marker").read_text().splitlines()) == 1


def test_crash_between_start_and_record_is_reconciled(tmp_path: Path) -> None:
    """A record left in SUBMITTING while the process runs: the re-run adopts the process (which
    runs until the test releases it, after the adoption, however slow the machine)."""
    p = _client(tmp_path, "kill-running", "held")
    p.wait(30)
    job_dir = next((tmp_path / "xp" / "jobs" / "held").iterdir())
    rec = read_record(job_dir)
    assert rec is not None and rec.state is JobState.RUNNING
    write_record(
        job_dir,
        rec.transition(
            JobState.SUBMITTING, "simulated crash", native_id=None, extra={"process": None}
        ),
    )
    p = _client(tmp_path, "normal", "held")
    deadline = time.monotonic() + 30
    while True:
        now = read_record(job_dir)
        if now is not None and any(h[2] == "adopted after a crash" for h in now.history):
            break
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    (tmp_path / "marker.release").touch()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.split() == ["COMPLETED", "1"]
    assert len((tmp_path / "marker").read_text().splitlines()) == 1


def test_two_processes_one_submission(tmp_path: Path) -> None:
    procs = [_client(tmp_path, "normal", "1.5") for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert out.split() == ["COMPLETED", "1"]
    assert len((tmp_path / "marker").read_text().splitlines()) == 1


def test_force_while_running_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, direct()) as xp:
        j = command(["sleep", "5"]).submit()
        with pytest.raises(LaunchersError, match="force=True needs a finished job"):
            command(["sleep", "5"]).submit(force=True)
        xp.cancel()
        assert j.wait(5) is JobState.CANCELLED


def test_find_launcher_result_runs_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from launchers import find_launcher

    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(
        "local:\n  - id: box\n    cpu: {cores: 2, memory: 2G}\n    env: {GROUP_VAR: from-group}\n"
    )
    monkeypatch.setenv(
        "EXPERIMENT_VAR", "passed"
    )  # export: ALL passes the experiment's environment
    launcher = find_launcher("cpu(cores=1)", config=cfg)
    with experiment(tmp_path / "xp", launcher, progress=False):
        job = tt.echo_env(["EXPERIMENT_VAR", "GROUP_VAR", "LAUNCHERS_ATTEMPT"]).submit()
    assert job.result() == {
        "EXPERIMENT_VAR": "passed",
        "GROUP_VAR": "from-group",
        "LAUNCHERS_ATTEMPT": "1",
    }
    assert job.record.launcher["group"] == "box"


@pytest.mark.ssh
def test_direct_over_ssh(tmp_path: Path, slurm_cluster: dict[str, str]) -> None:
    """The same job through an SSH connector: started, followed and cancelled remotely, its
    outputs and result copied back."""
    from launchers.config.loader import load_config

    env = slurm_cluster
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(
        textwrap.dedent(f"""
        connectors:
          ssh:
            box:
              hostname: {env["CLUSTER_SSH_HOST"]}
              port: {env["CLUSTER_SSH_PORT"]}
              username: {env.get("CLUSTER_SSH_USER", "root")}
              identity_file: {env["CLUSTER_SSH_KEY"]}
              known_hosts: {env["CLUSTER_SSH_KNOWN_HOSTS"]}
              ssh_config: false
              workdir: {tmp_path / "remote"}
        local:
          - id: remote
            connector: box
            env: {{PYTHONPATH: "{job_pythonpath(Path(__import__("launchers").__file__).parent.parent)}"}}
    """)
    )
    launcher = DirectLauncher(group=load_config(cfg).groups[0])  # type: ignore[arg-type]
    with (
        pytest.raises(ExperimentFailed) as info,
        experiment(tmp_path / "xp", launcher, progress=False),
    ):
        hello = command(["sh", "-c", "echo remote $LAUNCHERS_ATTEMPT; exit 0"]).submit()
        added = tt.add(20, b=22).submit()
        slow = command(["sleep", "30"]).submit()
        deadline = time.monotonic() + 20
        while slow.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, slow.state
            time.sleep(0.05)
        slow.cancel()
        assert slow.wait(15) is JobState.CANCELLED
    assert [j.task_id for j in info.value.jobs] == [slow.task_id]
    assert hello.result() == 0 and added.result() == 42
    assert hello.stdout_path.read_text().splitlines()[1] == "remote 1"
    remote = hello.record.extra["remote_dir"]
    assert remote.startswith(str(tmp_path / "remote")) and Path(remote, "job.rc").exists()
    assert (hello.directory / "job.sh").exists()


def test_exception_leaves_jobs_running(tmp_path: Path) -> None:
    marker, release = tmp_path / "m", tmp_path / "release"  # the job runs until released
    argv = ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.02; done; echo done >> {marker}"]
    with pytest.raises(KeyboardInterrupt), experiment(tmp_path / "xp", direct(), progress=False):
        job = command(argv).submit()
        while job.state is not JobState.RUNNING:
            time.sleep(0.02)
        raise KeyboardInterrupt  # as a Ctrl-C would: nothing is cancelled, nothing waited for
    assert not job.state.is_final
    release.touch()
    current_runtime().forget_jobs()  # as in a new process
    with experiment(tmp_path / "xp", direct(), progress=False):
        again = command(argv).submit()
        assert again.native_id == job.native_id  # re-attached, not resubmitted
    assert again.state is JobState.COMPLETED and marker.read_text() == "done\n"
