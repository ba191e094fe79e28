"""The Slurm executor through a connector, on ``FakeSlurm(remote=DIR)`` (tests/fakes): every poll
cycle is the one ``remote_cycle`` command, job directories live under the connector's
``workdir``, ``job.rc`` is read in that command, outputs are copied home when a job ends, and an
SSH outage changes no state (docs/slurm.md, "Over a connector"; docs/testing.md, "Fakes"). The
fake answers the cycle as the remote ``sh`` does
(tests/integration/slurm/test_fake_slurm_fidelity.py compares it with the real sshd and Slurm);
the real twins stay in tests/integration/ssh/ where a fact of sshd or Slurm is the point
(the argument limit of the remote shell, reconnecting after sshd restarts, sacct's time window,
the submit allowance read over SSH)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

import launchers.slurm.executor as sx
from fakes import FakeClock, FakeSlurm, fake_executor, fake_launcher
from fakes.slurm import FakeJob
from launchers import ExperimentFailed, JobState, command, experiment
from launchers.jobs.record import StateRecord, job_directory, now_iso, write_record
from launchers.slurm import commands as C


def run_script(fake: FakeSlurm, job: FakeJob) -> int:
    """What the job's script does as it ends: its ``echo`` lines in ``job.out`` (in the remote
    job directory) and ``job.rc``; returns its exit code (``exit N`` in the command, else 0)."""
    params = fake.params(job)
    directory = Path(fake.job_directory(job) or "")
    said = re.findall(r"echo ([^\"';]+)", params)
    (directory / "job.out").write_text("".join(f"{s}\n" for s in said))
    found = re.search(r"exit (\d+)", params)
    rc = int(found.group(1)) if found else 0
    fake.write_rc(job.job_id, rc)
    return rc


def play(fake: FakeSlurm) -> None:
    """Each query: a pending job starts; a running one (not ``sleep``) runs its script, and
    Slurm sees it ended at the next query, as on a real cluster."""
    for job in list(fake.jobs.values()):
        if job.state == "PENDING" and job.reason == "None":
            fake.start(job.job_id)
        elif job.state == "RUNNING" and "sleep" not in fake.params(job):
            if (Path(fake.job_directory(job) or "") / "job.rc").exists():
                fake.finish(job.job_id, job.exit_code, write_rc=False)
            else:
                job.exit_code = run_script(fake, job)


def test_every_poll_cycle_is_one_remote_command(fast_fakes: Any, tmp_path: Path) -> None:
    """Through a connector, states come from the one remote command of each cycle (no sacct or
    squeue of their own), job directories live under the connector's ``workdir``, and a
    finished job's outputs are copied home (the fake of the former real
    ``test_over_ssh_one_remote_command_per_cycle``; the real run end to end is
    tests/integration/ssh/test_slurm_over_ssh.py::test_submit_poll_cancel_and_read_outputs)."""
    fake = FakeSlurm(remote=tmp_path / "remote")
    fake.on_query = play
    L = fake_launcher("rm")
    fake_executor(L, fake)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", L):
        ok = command(["sh", "-c", "echo over ssh"]).submit()
        bad = command(["sh", "-c", "exit 6"]).submit()
    assert ok.state is JobState.COMPLETED and (bad.state, bad.exit_code) == (JobState.FAILED, 6)
    remote = ok.record.extra["remote_dir"]
    assert remote.startswith(str(tmp_path / "remote")) and remote != str(ok.directory)
    assert "over ssh" in ok.stdout_path.read_text()  # fetched back into the local directory
    ex = L.executor()
    assert isinstance(ex, sx.SlurmExecutor) and not ex.is_local
    assert set(ex.commands) <= {"sbatch", "remote-cycle"}  # every poll cycle is one remote command
    # what went through the connector: sbatch without sbatch's variables (the sh wrapper), the
    # user once, and the cycles; never a sacct or squeue alone
    assert set(fake.commands) <= {"sbatch", "sh", C.REMOTE_CYCLE}
    assert fake.commands["sh"] == 1 and fake.commands[C.REMOTE_CYCLE] >= 1
    assert all(clean for argv, _, clean in fake.calls if argv[0] == "sbatch")


def test_job_rc_read_in_the_cycle_ends_a_job_slurm_still_runs(
    fast_fakes: Any, tmp_path: Path
) -> None:
    """A job whose script wrote ``job.rc`` while Slurm still says RUNNING: a ``job.rc`` with rc
    0 read in the cycle's one command completes it, and its outputs come home at once; a
    failed one waits for Slurm's word (then FAILED with the exit code)."""
    fake = FakeSlurm(remote=tmp_path / "remote")
    fake.on_submit = lambda job: fake.start(job.job_id)

    def scripts_end(f: FakeSlurm) -> None:  # Slurm does not see them end
        for job in f.jobs.values():
            if not (Path(f.job_directory(job) or "") / "job.rc").exists():
                job.exit_code = run_script(f, job)

    fake.on_query = scripts_end
    L = fake_launcher("rm")
    ex = fake_executor(L, fake)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", L):
        ok = command(["sh", "-c", "echo from the rc"]).submit()
        bad = command(["sh", "-c", "exit 5"]).submit()
        deadline = time.monotonic() + 30
        while ok.state is not JobState.COMPLETED and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ok.state is JobState.COMPLETED
        assert "from the rc" in ok.stdout_path.read_text()
        cycles = ex.commands[C.REMOTE_CYCLE]
        while ex.commands[C.REMOTE_CYCLE] < cycles + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bad.state is JobState.RUNNING  # rc 5 alone ends nothing
        assert {j.state for j in fake.jobs.values()} == {"RUNNING"}
        fake.finish(bad.native_id or "", 5, write_rc=False)
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 5)
    assert json.loads((bad.directory / "job.rc").read_text())["rc"] == 5  # fetched home too
    assert "sacct" not in fake.commands and "squeue" not in fake.commands


def fabricate(
    workdir: Path, remote: Path, argv: list[str], native_id: str, *, rc: int | None
) -> Path:
    """A job as a crashed client left it over a connector: PENDING with an id Slurm forgot, its
    job directory under the connector's workdir (``remote_dir``), maybe a ``job.rc`` there."""
    task = command(argv)
    d = job_directory(workdir, task.name, task.digest)
    d.mkdir(parents=True)
    (d / "params.json").write_text(json.dumps(task.params_json()))
    rd = remote / task.name / task.digest
    rd.mkdir(parents=True)
    old = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 3600))
    rec = StateRecord(task_id=task.task_id, state=JobState.PENDING, native_id=native_id, submitted_at=old,
                      job_name=f"{task.name}-{task.digest[:12]}-a1", launcher={"kind": "slurm"},
                      extra={"remote_dir": str(rd)})  # fmt: skip
    write_record(d, rec)
    if rc is not None:
        (rd / "job.rc").write_text(json.dumps({"rc": rc, "signal": None, "attempt": 1, "native_id": native_id,
                                               "host": "h", "start": now_iso(), "end": now_iso()}))  # fmt: skip
        (rd / "job.out").write_text(f"out of {native_id}\n")
    return rd


def test_jobs_slurm_forgot_are_decided_by_the_remote_job_rc(
    fast_fakes: Any, tmp_path: Path
) -> None:
    """Jobs Slurm no longer knows, over a connector: the ``job.rc`` in their remote directory
    decides (and their outputs come home); without one, LOST once ``lost_polls`` polls span
    ``lost_after`` (600 s of virtual time: each cycle moves the fake clock a minute)."""
    clock = FakeClock()
    fake = FakeSlurm(clock, tick=60.0, remote=tmp_path / "remote")
    remote = tmp_path / "remote" / "xp"
    fabricate(tmp_path, remote, ["forgot-ok"], "9999001", rc=0)
    fabricate(tmp_path, remote, ["forgot-bad"], "9999002", rc=2)
    fabricate(tmp_path, remote, ["forgot-gone"], "9999003", rc=None)
    L = fake_launcher("rm")
    fake_executor(L, fake, clock)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        ok = command(["forgot-ok"]).submit()
        bad = command(["forgot-bad"]).submit()
        gone = command(["forgot-gone"]).submit()
    assert ok.state is JobState.COMPLETED and ok.native_id == "9999001"
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 2)
    assert gone.state is JobState.LOST
    assert gone.reason == "Slurm has no record of the job and it left no exit record"
    assert ok.stdout_path.read_text() == "out of 9999001\n"  # fetched home
    assert "sbatch" not in fake.commands  # re-attached, never submitted again
    assert set(fake.commands) <= {"sh", C.REMOTE_CYCLE}


def test_ssh_outage_during_polls_changes_no_state(fast_fakes: Any, tmp_path: Path) -> None:
    """The way to the cluster is down for 30 s of virtual time while a job ends there: every
    cycle fails (no state changes, nothing fails), then the first cycle that gets through
    completes it from its ``job.rc`` and copies its outputs home. The real twin (sshd killed and
    restarted, the connector reconnecting) is
    tests/integration/ssh/test_slurm_over_ssh.py::test_job_tracked_across_an_sshd_outage."""
    clock = FakeClock()
    fake = FakeSlurm(clock, tick=5.0, remote=tmp_path / "remote")
    fake.on_submit = lambda job: fake.start(job.job_id)
    L = fake_launcher("rm")
    ex = fake_executor(L, fake, clock)
    with experiment(tmp_path / "xp", L):
        job = command(["sh", "-c", "echo after the outage"]).submit()
        deadline = time.monotonic() + 30
        while job.state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert job.state is JobState.RUNNING
        fake.unreachable = True
        (fake_job,) = fake.jobs.values()
        run_script(fake, fake_job)  # the job ends while nothing reaches the cluster
        fake.finish(fake_job.job_id, 0, write_rc=False)
        tried = ex.commands.get(C.REMOTE_CYCLE, 0)
        while ex.commands.get(C.REMOTE_CYCLE, 0) < tried + 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        clock.advance(30)
        assert ex.commands.get(C.REMOTE_CYCLE, 0) >= tried + 5  # polls kept trying
        assert job.state is JobState.RUNNING  # an outage never fails (nor finishes) a job
        assert not job.stdout_path.exists() or not job.stdout_path.read_text()
        fake.unreachable = False
    assert job.state is JobState.COMPLETED
    assert "after the outage" in job.stdout_path.read_text()


def test_array_elements_find_their_remote_directories(fast_fakes: Any, tmp_path: Path) -> None:
    """A job array over a connector: each element's directory is found through the remote
    index file, its ``job.rc`` is read in the cycle and its outputs come home."""
    fake = FakeSlurm(remote=tmp_path / "remote")
    fake.on_query = play
    L = fake_launcher("rm")
    fake_executor(L, fake)
    with experiment(tmp_path / "xp", L):
        elements = L.submit_array([command(["sh", "-c", f"echo e{i}"]) for i in range(3)])
    assert [j.state for j in elements] == [JobState.COMPLETED] * 3
    assert len({(j.native_id or "").split("_")[0] for j in elements}) == 1
    for i, j in enumerate(elements):
        assert str(j.record.extra["remote_dir"]).startswith(str(tmp_path / "remote"))
        assert j.stdout_path.read_text() == f"e{i}\n"
