"""The Slurm executor's decisions on ``FakeSlurm`` and ``FakeClock`` (tests/fakes): what a fatal
pending reason, a submit limit, a purged job, a cancel during staging, a pending queue and a
cluster without accounting become (docs/design/runtime.md §4-§8). The same executor code runs
as against the real cluster; only the answers of Slurm are scripted, in their real formats
(tests/integration/slurm/test_fake_slurm_fidelity.py). Their real twins stay in
tests/integration/slurm/test_slurm_runtime.py (test_dependency_failing_later_is_unrunnable,
test_complete_fail_cancel...)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

import launchers.slurm.executor as sx
import launchers.slurm.files as slurm_files
from fakes import FakeClock, FakeJob, FakeSlurm, fake_executor, fake_launcher
from launchers import ExperimentFailed, JobState, command, experiment
from launchers.jobs.record import StateRecord, job_directory, now_iso, write_record


def test_fatal_pending_reason_unrunnable(fast_fakes: Any, tmp_path: Path) -> None:
    """A job whose dependency can never be satisfied: the reason seen twice ``fatal_confirm``
    (60 s of virtual time) apart makes it UNRUNNABLE, and it is cancelled in Slurm."""
    clock = FakeClock()
    fake = FakeSlurm(clock, tick=10.0)

    def never(job: FakeJob) -> None:
        fake.pend(job.job_id, "DependencyNeverSatisfied")

    fake.on_submit = never
    L = fake_launcher().config(sbatch_options={"dependency": "afterok:12345"})
    fake_executor(L, fake, clock)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        job = command(["true"]).submit()
    assert job.state is JobState.UNRUNNABLE
    assert "DependencyNeverSatisfied" in (job.reason or "")
    deadline = time.monotonic() + 5
    while fake.jobs[job.native_id or ""].state != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.01)  # the scancel runs in the background
    st = fake.jobs[job.native_id or ""].state
    assert "CANCELLED" in st


def test_pending_jobs_one_query_per_cycle(fast_fakes: Any, tmp_path: Path) -> None:
    """Held (pending) jobs: sacct alone in every cycle while they have pended for less than
    FATAL_CONFIRM / 2 (30 s); squeue's live reasons are read only for long-pending jobs."""
    from launchers.runtime.loop import run_sync

    clock = FakeClock()
    fake = FakeSlurm(clock)
    fake.on_submit = lambda job: fake.pend(job.job_id, "JobHeldUser")
    L = fake_launcher().config(sbatch_options={"hold": True})
    fake_executor(L, fake, clock)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L) as xp:
        jobs = [command(["true", str(i)]).submit() for i in range(5)]
        deadline = time.monotonic() + 30
        while any(j.state is not JobState.PENDING for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.01)
        ex = L.executor()
        assert isinstance(ex, sx.SlurmExecutor)
        before = dict(ex.commands)
        for _ in range(3):
            run_sync(ex.poll(jobs))
        assert ex.commands.get("sacct", 0) - before.get("sacct", 0) >= 3  # the tracker may poll too
        assert ex.commands.get("squeue", 0) == before.get("squeue", 0)
        xp.cancel()


def test_submit_limit_waits_then_submits(fast_fakes: Any, tmp_path: Path) -> None:
    """A QoS allowing 2 submitted jobs per user: the others wait (WAITING), then go in."""
    qos = "lnch_submit2"
    fake = FakeSlurm(max_submit=2, qos=qos)
    fake.on_query = FakeSlurm.step_all
    L = fake_launcher().config(qos=qos)
    fake_executor(L, fake)
    with experiment(tmp_path, L):
        jobs = [command(["sh", "-c", f"sleep 1; echo {i}"]).submit() for i in range(4)]
    assert [j.state for j in jobs] == [JobState.COMPLETED] * 4
    held = [
        j
        for j in jobs
        if any(h[1] == "WAITING" and h[2] == "submit limit" for h in j.record.history)
    ]
    assert held, "no job was held by the submit limit"
    assert len({j.native_id for j in jobs}) == 4
    # an array larger than the allowance is sized to it (read with sacctmgr/squeue: no sbatch
    # is refused), the rest waits with the limit named, then goes in
    ex = L.executor()
    assert isinstance(ex, sx.SlurmExecutor)
    sbatch_before = ex.commands.get("sbatch", 0)
    with experiment(tmp_path / "arr", L):
        elements = L.submit_array([command(["sh", "-c", f"sleep 1; echo e{i}"]) for i in range(5)])
        reasons: set[str] = set()
        while not all(j.state.is_final for j in elements):
            reasons.update(j.reason or "" for j in elements if j.state is JobState.WAITING)
            time.sleep(0.005)
    assert [j.state for j in elements] == [JobState.COMPLETED] * 5
    assert (
        f"waiting: submit limit reached (MaxSubmitJobsPerUser=2 of QoS {qos}, 2 queued)" in reasons
    )
    assert len({j.native_id for j in elements}) == 5
    masters = {(j.native_id or "").split("_")[0] for j in elements}
    assert len(masters) == 3  # 2 + 2 + 1
    assert ex.commands.get("sbatch", 0) - sbatch_before == 3


def fabricate(workdir: Path, argv: list[str], native_id: str, *, rc: dict[str, Any] | None) -> Path:
    """A job directory as a crashed client would leave it: PENDING with an id Slurm forgot."""
    task = command(argv)
    d = job_directory(workdir, task.name, task.digest)
    d.mkdir(parents=True)
    (d / "params.json").write_text(json.dumps(task.params_json()))
    old = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 3600))
    rec = StateRecord(task_id=task.task_id, state=JobState.PENDING, native_id=native_id, submitted_at=old,
                      job_name=f"{task.name}-{task.digest[:12]}-a1", launcher={"kind": "slurm"})  # fmt: skip
    write_record(d, rec)
    if rc is not None:
        (d / "job.rc").write_text(json.dumps({"attempt": 1, "native_id": native_id, "host": "h", "start": now_iso(),
                                              "end": now_iso(), **rc}))  # fmt: skip
    return d


def test_purged_jobs_decided_by_job_rc(fast_fakes: Any, tmp_path: Path) -> None:
    """Jobs Slurm forgot: their ``job.rc`` decides; without one, LOST once ``lost_polls`` polls
    span ``lost_after`` (600 s of virtual time: each poll moves the fake clock a minute)."""
    clock = FakeClock()
    fake = FakeSlurm(clock, tick=60.0)
    fabricate(tmp_path, ["purged-ok"], "9999001", rc={"rc": 0, "signal": None})
    fabricate(tmp_path, ["purged-bad"], "9999002", rc={"rc": 2, "signal": None})
    fabricate(tmp_path, ["purged-gone"], "9999003", rc=None)
    L = fake_launcher()
    fake_executor(L, fake, clock)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        ok = command(["purged-ok"]).submit()
        bad = command(["purged-bad"]).submit()
        gone = command(["purged-gone"]).submit()
    assert ok.state is JobState.COMPLETED and ok.native_id == "9999001"
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 2)
    assert gone.state is JobState.LOST
    assert gone.reason == "Slurm has no record of the job and it left no exit record"
    assert "sbatch" not in fake.commands  # re-attached, never submitted again


def test_cancel_while_staging_submits_nothing(
    fast_fakes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel that arrives while ``job.sh`` is still being written (slow over SSH) stops the
    submission before sbatch: no Slurm job runs that nothing follows (docs/design/runtime.md §4, §7)."""
    real = slurm_files.blocking

    async def slow(fn: Any, *args: Any, **kw: Any) -> Any:
        if args and str(args[0]).endswith("/job.sh"):
            await asyncio.sleep(1.0)
        return await real(fn, *args, **kw)

    monkeypatch.setattr(slurm_files, "blocking", slow)
    fake = FakeSlurm()
    L = fake_launcher()
    fake_executor(L, fake)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        job = command(["sleep", "60"], name="stagecancel").submit()
        time.sleep(0.2)
        job.cancel()
    assert job.state is JobState.CANCELLED and job.native_id is None
    time.sleep(1.0)
    rec = json.loads((job.directory / "state.json").read_text())
    assert rec["state"] == "CANCELLED" and "SUBMITTING" not in [h[1] for h in rec["history"]]
    assert not [j for j in fake.jobs.values() if j.name == (rec["job_name"] or "stagecancel-x")]
    assert not [j for j in fake.jobs.values() if j.name.startswith("stagecancel-")]
    assert "sbatch" not in fake.commands


def test_squeue_and_job_rc_without_accounting(fast_fakes: Any, tmp_path: Path) -> None:
    """sacct says "accounting storage is disabled" (docs/design/runtime.md §5): squeue and
    ``job.rc`` for the process lifetime, sacct never asked again. The real cluster without
    accounting is tests/integration/slurm/test_slurm_runtime_noacct.py."""
    fake = FakeSlurm(accounting=False)

    exited: set[str] = set()

    def play(f: FakeSlurm) -> None:
        """Each query: pending jobs start; a short job's script exits (job.rc), and Slurm
        sees it ended at the next query, as on a real cluster."""
        for job in list(f.jobs.values()):
            params = f.params(job)
            rc = 4 if "exit 4" in params else 0
            if job.state == "PENDING":
                f.start(job.job_id)
            elif job.state == "RUNNING" and job.job_id in exited:
                f.finish(job.job_id, rc, write_rc=False)
            elif job.state == "RUNNING" and "sleep" not in params:
                f.write_rc(job.job_id, rc)
                exited.add(job.job_id)

    fake.on_query = play
    L = fake_launcher(id="na")
    fake_executor(L, fake)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        ok = command(["sh", "-c", "echo fine"]).submit()
        bad = command(["sh", "-c", "exit 4"]).submit()
        long = command(["sleep", "120"]).submit()
        deadline = time.monotonic() + 30
        while long.state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.01)
        long.cancel()
    ex = L.executor()
    assert isinstance(ex, sx.SlurmExecutor)
    assert ex.slurm.accounting is False
    assert ex.commands.get("sacct", 0) <= 1  # tried once, then squeue for the process lifetime
    assert ok.state is JobState.COMPLETED
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 4)
    assert long.state is JobState.CANCELLED


def test_a_job_that_ends_between_job_rc_and_squeue_keeps_its_exit_code(
    fast_fakes: Any, tmp_path: Path
) -> None:
    """Without accounting, a cycle reads ``job.rc`` first, then asks squeue. A job whose script
    exits in between shows FAILED in squeue (no exit code there) while this cycle saw no
    job.rc: the next cycle reads it, so the job ends FAILED with its exit code, not "None"."""
    fake = FakeSlurm(accounting=False)

    def play(f: FakeSlurm) -> None:
        for job in list(f.jobs.values()):
            if job.state == "PENDING":
                f.start(job.job_id)
            elif job.state == "RUNNING":
                f.finish(job.job_id, 7)  # job.rc written and FAILED at once, during the query

    fake.on_query = play
    L = fake_launcher(id="na")
    fake_executor(L, fake)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, L):
        job = command(["sh", "-c", "exit 7"]).submit()
    assert (job.state, job.exit_code, job.reason) == (JobState.FAILED, 7, "exit code 7")


def test_slurmctld_outage_fails_nothing(fast_fakes: Any, tmp_path: Path) -> None:
    """slurmctld down for 30 s of virtual time on a cluster without accounting: failed
    queries change nothing, jobs that end meanwhile are decided by their job.rc, and a job
    submitted during the outage is retried until sbatch answers. The real twin (own cluster,
    slurmctld stopped) is tests/integration/slurm/test_slurm_runtime_noacct.py."""
    clock = FakeClock()
    fake = FakeSlurm(clock, tick=5.0, accounting=False)
    fake.on_submit = lambda job: fake.start(job.job_id)
    exited: set[str] = set()

    def play(f: FakeSlurm) -> None:  # after the outage: the late job runs, then ends
        for job in list(f.jobs.values()):
            if f.down or job.state != "RUNNING":
                continue
            if job.job_id in exited:
                f.finish(job.job_id, 0, write_rc=False)
            elif "outage" in f.params(job):
                f.write_rc(job.job_id, 0)
                exited.add(job.job_id)

    fake.on_query = play
    L = fake_launcher(id="na")
    fake_executor(L, fake, clock)
    with experiment(tmp_path, L):
        running = [command(["sh", "-c", f"sleep 8; echo {i}"]).submit() for i in range(2)]
        deadline = time.monotonic() + 30
        while any(j.state is not JobState.RUNNING for j in running) and time.monotonic() < deadline:
            time.sleep(0.01)
        fake.down = True
        down_at = clock.monotonic()
        late = command(["sh", "-c", "echo submitted during the outage"]).submit()
        for j in running:  # their scripts end during the outage
            fake.write_rc(j.native_id or "", 0)
            exited.add(j.native_id or "")
        while clock.monotonic() - down_at < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(not j.state.is_final or j.state is JobState.COMPLETED for j in [*running, late])
        assert late.state in (JobState.WAITING, JobState.SUBMITTING)
        assert fake.commands.get("sbatch", 0) >= 2  # tried again
        fake.down = False
        assert clock.monotonic() - down_at >= 30
    assert [j.state for j in running] == [JobState.COMPLETED, JobState.COMPLETED]
    assert late.state is JobState.COMPLETED and late.native_id
