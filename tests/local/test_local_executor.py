"""The direct executor on a scripted host (docs/jobs.md, "The direct launcher"), in
milliseconds: the queue and the slots, cancel (waiting jobs at once, running ones SIGTERM then
SIGKILL), the poll path, crash recovery, a start in the background that fails, and the files
seam over SSH. ``Scripted`` stands for ``local.processes``; the jobs are real ``Job`` objects
writing their records in ``tmp_path``. The same behaviours with real processes are in
test_direct.py and test_spec_runtime.py (named beside each test)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from launchers.config.model import LocalGroup, Position
from launchers.connectors.local import LocalConnector
from launchers.errors import ConfigurationError, LaunchersError
from launchers.jobs.job import Job
from launchers.jobs.proc import ProcessId
from launchers.jobs.record import StateRecord, epoch_iso, read_record
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.local.decide import LOST_REASON, Seen
from launchers.local.executor import DirectExecutor
from launchers.local.files import ConnectorJobFiles
from launchers.local.launcher import DirectLauncher
from launchers.local.processes import (
    Collect,
    LocalProcesses,
    Processes,
    RemoteProcesses,
    Watched,
)
from launchers.protocols import JobHandle

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class FixedClock:
    def time(self) -> float:
        return NOW

    def monotonic(self) -> float:
        return 0.0


class Scripted(Processes):
    """A host whose processes live in a dict: started, alive or gone, signalled, found."""

    name = "scripted"
    default_python = "python-here"

    def __init__(self, *, inline: bool = True, kill_signal: int | None = 9) -> None:
        self.inline = inline
        self.kill_signal = kill_signal
        self.alive: dict[int, bool] = {}
        self.started: list[tuple[str, str, str]] = []
        self.signals: list[tuple[str, list[int]]] = []
        self.found: ProcessId | None = None
        self.refuse: Exception | None = None
        self._next = 100

    def _start(self, job: JobHandle, where: str, export: str) -> ProcessId:
        if self.refuse is not None:
            raise self.refuse
        pid, self._next = self._next, self._next + 1
        self.alive[pid] = True
        self.started.append((job.task_id, where, export))
        return ProcessId(pid, 1, "boot", self.name)

    def start_now(
        self, job: JobHandle, where: str, export: str, on_exit: Callable[[], None]
    ) -> ProcessId:
        return self._start(job, where, export)

    async def start(self, job: JobHandle, where: str, export: str) -> ProcessId:
        await asyncio.sleep(0)
        return self._start(job, where, export)

    async def observe(self, watched: Sequence[Watched], collect: Collect) -> dict[JobHandle, Seen]:
        out: dict[JobHandle, Seen] = {}
        for job, proc, where in watched:
            alive = proc is not None and self.alive.get(proc.pid, False)
            out[job] = Seen(rc=await collect(job, where), alive=alive)
        return out

    async def kill(self, processes: Sequence[ProcessId], sig: str) -> None:
        self.signals.append((sig, [p.pid for p in processes]))

    async def find(self, where: str, attempt: int) -> ProcessId | None:
        return self.found


def make_job(
    tmp_path: Path, name: str, group: LocalGroup, ex: DirectExecutor, argv: list[str] | None = None
) -> Job:
    task = command(argv or ["sh", "-c", f"echo {name}"], name=name)
    directory = tmp_path / "xp" / "jobs" / name / task.digest
    directory.mkdir(parents=True)
    (directory / "params.json").write_text(json.dumps(task.params_json()))
    record = StateRecord(task_id=task.task_id).transition(JobState.WAITING, "created")
    return Job(task, directory, record, launcher=DirectLauncher(group=group), executor=ex)


def end(job: Job, rc: int = 0, directory: Path | None = None) -> None:
    """The job's exit handler: ``job.rc`` in its directory."""
    data = {"rc": rc, "signal": None, "attempt": job.attempt, "native_id": job.native_id,
            "host": "h", "start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:00:01+00:00"}  # fmt: skip
    (directory or job.directory).joinpath("job.rc").write_text(json.dumps(data) + "\n")


def states(job: Job) -> list[str]:
    return [h[1] for h in job.record.history]


async def poll(ex: DirectExecutor, *jobs: Job) -> dict[Any, Any]:
    updates = await ex.poll(list(jobs))
    for job, update in updates.items():
        job.apply(update)
    return dict(updates)


# test_spec_runtime::test_direct_max_jobs_from_cores, test_direct::test_max_jobs_and_export_none,
# test_direct::test_command_and_callables (the record's history and times)
def test_slots_keep_the_order_and_free_when_a_job_ends(tmp_path: Path) -> None:
    procs = Scripted()
    ex = DirectExecutor(processes=procs, clock=FixedClock())
    group = LocalGroup(id="one", max_jobs=1, export="NONE")

    async def go() -> None:
        a, b, c = (make_job(tmp_path, n, group, ex) for n in "abc")
        for job in (a, b, c):
            await ex.submit(job)
        assert [s[0] for s in procs.started] == [a.task_id]
        assert procs.started[0][1:] == (str(a.directory), "NONE")
        assert a.state is JobState.RUNNING and a.native_id == "100"
        assert states(a) == ["WAITING", "SUBMITTING", "RUNNING"]
        assert a.record.submitted_at == epoch_iso(NOW)  # read through the runtime's clock
        assert a.record.job_name == f"a-{a.task.digest[:12]}-a1"  # type: ignore[union-attr]
        assert b.state is JobState.WAITING
        assert b.reason == "waiting for a free slot (1 of 1 jobs running)"
        assert c.reason is None  # only the first waiting job of a full group is told why
        assert (a.directory / "job.sh").read_text().startswith("#!")
        assert await poll(ex, a) == {}  # running, nothing new
        end(a)
        procs.alive[100] = False
        await poll(ex, a)
        assert a.state is JobState.COMPLETED and a.exit_code == 0
        assert [s[0] for s in procs.started] == [a.task_id, b.task_id]  # b started in that poll
        assert b.state is JobState.RUNNING and c.state is JobState.WAITING

    asyncio.run(go())


# test_spec_runtime::test_waiting_job_cancelled_at_once, ::test_direct_cancel_sigterm_process_group,
# test_direct::test_cancel_and_lost
def test_cancel_drops_waiting_jobs_and_signals_running_ones(tmp_path: Path) -> None:
    procs = Scripted()
    ex = DirectExecutor(processes=procs, clock=FixedClock())
    group = LocalGroup(max_jobs=2, kill_grace=0)
    other = LocalGroup(id="other", max_jobs=1, kill_grace=30)

    async def go() -> None:
        a, b, c = (
            make_job(tmp_path, "a", group, ex),
            make_job(tmp_path, "b", group, ex),
            make_job(tmp_path, "c", other, ex),
        )
        d = make_job(tmp_path, "d", group, ex)
        for job in (a, b, c, d):
            await ex.submit(job)
        assert d.state is JobState.WAITING
        for job in (a, c, d):
            job.cancel_requested = True
        await ex.cancel([a, c, d])
        assert d.state is JobState.CANCELLED and d.reason == "cancelled on request"
        assert d.record.history[-1][2] == "cancelled while waiting" and d.native_id is None
        assert procs.signals == [("TERM", [100, 102])]  # one call for all running jobs
        await asyncio.sleep(0.05)
        assert procs.signals[1:] == [("KILL", [100])]  # after a's group's kill_grace (0)
        procs.alive[100] = False
        await poll(ex, a, b, c)
        assert a.state is JobState.CANCELLED and a.reason == "cancelled on request"
        assert a.signal == 9 and a.record.history[-1][2] == "killed"
        assert b.state is JobState.RUNNING and c.state is JobState.RUNNING

    asyncio.run(go())


# test_spec_runtime::test_direct_lost_after_sigkill, ::test_tokens_dead_holder_released
def test_a_vanished_process_is_lost_and_frees_its_slot(tmp_path: Path) -> None:
    procs = Scripted()
    ex = DirectExecutor(processes=procs, clock=FixedClock())
    group = LocalGroup(max_jobs=1)

    async def go() -> None:
        a, b = make_job(tmp_path, "a", group, ex), make_job(tmp_path, "b", group, ex)
        await ex.submit(a)
        await ex.submit(b)
        # an exit record of another attempt says nothing of this one
        (a.directory / "job.rc").write_text('{"rc": 0, "attempt": 7}\n')
        assert await poll(ex, a) == {}
        procs.alive[100] = False
        await poll(ex, a)
        assert a.state is JobState.LOST and a.reason == LOST_REASON
        assert b.state is JobState.RUNNING

    asyncio.run(go())


# test_direct::test_crash_between_start_and_record_is_reconciled,
# ::test_client_killed_then_rerun_submits_once
def test_reconcile_adopts_ends_loses_or_submits(tmp_path: Path) -> None:
    procs = Scripted()
    ex = DirectExecutor(processes=procs, clock=FixedClock())
    group = LocalGroup()

    async def go() -> None:
        adopted, ended, lost, fresh = (
            make_job(tmp_path, n, group, ex) for n in ("p", "q", "r", "s")
        )
        procs.found = ProcessId(4242, 5, "boot", "scripted")
        await ex.reconcile(adopted)
        procs.found = None
        assert adopted.state is JobState.RUNNING and adopted.native_id == "4242"
        assert adopted.record.extra["process"]["pid"] == 4242
        assert adopted.record.history[-1][2] == "adopted after a crash"
        end(ended, rc=2)
        await ex.reconcile(ended)
        assert ended.state is JobState.FAILED and ended.exit_code == 2
        (lost.directory / "job.out").write_text("==== launchers: attempt 1, job 9, h, T ====\n")
        await ex.reconcile(lost)
        assert lost.state is JobState.LOST and lost.record.history[-1][2] == "found after a crash"
        await ex.reconcile(fresh)
        assert fresh.state is JobState.RUNNING
        assert [s[0] for s in procs.started] == [fresh.task_id]  # submitted once, only it

    asyncio.run(go())


# The direct launcher over SSH: a start in the background that fails (test_direct::test_direct_over_ssh
# shows the real one); the start command may have run, so the slot is given back and the job FAILED.
def test_a_failed_background_start_fails_the_job_and_frees_its_slot(tmp_path: Path) -> None:
    procs = Scripted(inline=False)
    ex = DirectExecutor(processes=procs, clock=FixedClock())
    group = LocalGroup(max_jobs=1)

    async def go() -> None:
        a, b = make_job(tmp_path, "a", group, ex), make_job(tmp_path, "b", group, ex)
        procs.refuse = LaunchersError("cannot start the job in /x on scripted: exit 97")
        await ex.submit(a)
        await ex.submit(b)
        await asyncio.sleep(0.01)
        assert a.state is JobState.FAILED and a.reason == str(procs.refuse)
        assert states(a) == ["WAITING", "SUBMITTING", "FAILED"]
        assert a.record.history[-1][2] == "start failed"
        procs.refuse = None
        ex._dispatch()  # the waiter's next round (once a second)
        await asyncio.sleep(0.01)
        assert b.state is JobState.RUNNING

    asyncio.run(go())


# test_direct::test_direct_over_ssh: the job directory elsewhere (the SSH layout, recorded as
# remote_dir), job.sh there and here, outputs copied home before the ending is decided; a kill
# there records no signal. The files seam is the real one, over a connector to this machine.
def test_over_a_connector_the_outputs_come_home_before_the_decision(tmp_path: Path) -> None:
    procs = Scripted(inline=False, kill_signal=None)
    far = tmp_path / "far"
    files = ConnectorJobFiles(lambda: LocalConnector("box"), root=str(far))
    ex = DirectExecutor(processes=procs, files=files, clock=FixedClock())
    group = LocalGroup(connector="box")

    async def go() -> None:
        a, b = make_job(tmp_path, "a", group, ex), make_job(tmp_path, "b", group, ex)
        await ex.submit(a)
        await ex.submit(b)
        await asyncio.sleep(0.01)
        tag = hashlib.sha256(str(tmp_path / "xp").encode()).hexdigest()[:12]
        where = f"{far}/{tag}/jobs/a/{a.directory.name}"
        assert a.record.extra["remote_dir"] == where and procs.started[0][1] == where
        assert Path(where, "job.sh").read_text() == (a.directory / "job.sh").read_text()
        assert os.access(Path(where, "job.sh"), os.X_OK)
        assert Path(where, "params.json").read_bytes() == (a.directory / "params.json").read_bytes()
        Path(where, "job.out").write_text("out\n")
        end(a, directory=Path(where))
        procs.alive[100] = False
        b.cancel_requested = True
        procs.alive[101] = False
        await poll(ex, a, b)
        assert a.state is JobState.COMPLETED and (a.directory / "job.out").read_text() == "out\n"
        assert b.state is JobState.CANCELLED and b.signal is None

    asyncio.run(go())


# test_spec_runtime::test_tokens_with_ssh_connector_refused, ::test_tokens_wait_and_too_many (n > N)
def test_validate_refuses_what_could_never_run(tmp_path: Path) -> None:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("tokens: {lic: 1}\nlocal:\n  - id: t\n    tokens: {lic: 1}\n")
    ex = DirectExecutor(processes=Scripted(), clock=FixedClock())
    task = command(["true"])
    far = LocalGroup(id="far", connector="box", tokens=(("lic", 1),))
    with pytest.raises(ConfigurationError, match="local group far: counter tokens work only"):
        ex.validate(DirectLauncher(group=far), task)
    too_many = LocalGroup(tokens=(("lic", 2),), position=Position(file=str(cfg)))
    with pytest.raises(LaunchersError, match="needs 2 units of token 'lic', which has only 1"):
        ex.validate(DirectLauncher(group=too_many), task)
    ex.validate(DirectLauncher(group=LocalGroup()), task)
    ex.validate(
        DirectLauncher(group=LocalGroup(tokens=(("lic", 1),), position=Position(file=str(cfg)))),
        task,
    )


# test_spec_runtime::test_reused_pid_not_taken_for_the_job, on this machine: a recorded process
# is alive only with the same start time (no process is started here)
def test_this_machine_tells_a_reused_pid(tmp_path: Path) -> None:
    me = ProcessId.of(os.getpid())
    reused = ProcessId(me.pid, (me.start or 0) + 12345, me.boot_id, me.host)
    rebooted = ProcessId(me.pid, me.start, "another-boot", me.host)
    jobs = [Job(None, tmp_path / n, StateRecord(task_id=n)) for n in ("me", "reused", "rebooted")]

    async def collect(job: JobHandle, where: str) -> None:
        return None

    watched: list[Watched] = [(jobs[0], me, "/"), (jobs[1], reused, "/"), (jobs[2], rebooted, "/")]
    seen = asyncio.run(LocalProcesses(default_python="py").observe(watched, collect))
    assert [seen[j].alive for j in jobs] == [True, False, False]
    assert read_record(tmp_path / "me") is None  # observing writes nothing


async def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


# The scripts the direct launcher sends over SSH (start, one poll command for all jobs, kill,
# find), run on this machine through a local connector: what test_direct::test_direct_over_ssh
# shows through the sandbox's sshd, without it. Real processes: about a second.
def test_the_remote_scripts_through_a_local_connector(tmp_path: Path) -> None:
    connector = LocalConnector("box")
    ex = DirectExecutor(
        processes=RemoteProcesses("box", lambda: connector),
        files=ConnectorJobFiles(lambda: connector, root=str(tmp_path / "far")),
    )
    group = LocalGroup(connector="box", kill_grace=0)

    async def go() -> None:
        hello = make_job(tmp_path, "hello", group, ex, ["sh", "-c", "echo hi $LAUNCHERS_ATTEMPT"])
        slow = make_job(tmp_path, "slow", group, ex, ["sleep", "30"])
        await ex.submit(hello)
        await ex.submit(slow)
        await until(lambda: slow.state is JobState.RUNNING, "slow started")
        process = ProcessId.from_json(slow.record.extra["process"])
        assert process is not None and process.host == "box" and process.start is not None
        assert await ex.processes.find(slow.record.extra["remote_dir"], 1) == process
        assert await ex.processes.find(slow.record.extra["remote_dir"], 2) is None

        deadline = time.monotonic() + 10
        while hello.state is not JobState.COMPLETED:
            assert time.monotonic() < deadline, hello.state
            await asyncio.sleep(0.05)
            await poll(ex, *[j for j in (hello, slow) if not j.state.is_final])
        assert (hello.directory / "job.out").read_text().splitlines()[1] == "hi 1"
        assert slow.state is JobState.RUNNING
        slow.cancel_requested = True
        await ex.cancel([slow])
        deadline = time.monotonic() + 10
        while not slow.state.is_final:
            assert time.monotonic() < deadline, slow.state
            await asyncio.sleep(0.05)
            await poll(ex, slow)
        assert slow.state is JobState.CANCELLED and slow.reason == "cancelled on request"

    asyncio.run(go())
