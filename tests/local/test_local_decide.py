"""The direct launcher's pure decisions and settings (docs/jobs.md, "The direct launcher"), in
milliseconds: the state a poll's observation means, what crash recovery makes of a job left in
SUBMITTING, the settings a local group gives, the script and environment of a job, and the
readers of the remote poll. Their real-process counterparts are in test_direct.py and
test_spec_runtime.py (named beside each table)."""

from __future__ import annotations

import signal
from typing import Any

import pytest

import jobs_tasks as tt
from launchers.config.model import CPUConfig, LocalGroup, Position
from launchers.jobs.proc import ProcessId
from launchers.jobs.record import RcRecord
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.jobs.update import StateUpdate
from launchers.local.decide import (
    CANCELLED_WHILE_WAITING,
    LOST_REASON,
    Adopt,
    Final,
    Lost,
    Seen,
    Submit,
    banner_seen,
    decide_direct,
    decide_found,
    started,
    submitting,
    waiting_for_slot,
)
from launchers.local.launcher import DirectLauncher
from launchers.local.processes import REMOTE_POLL, poll_request, remote_alive
from launchers.local.settings import (
    KILL_GRACE,
    NONE_VARS,
    connector_of,
    group_of,
    job_environment,
    resolve,
    script_spec,
)
from launchers.slurm.launcher import SlurmLauncher

OK = RcRecord(rc=0, attempt=1, start="2026-01-01T00:00:00+00:00", end="2026-01-01T00:00:01+00:00")
EXIT3 = RcRecord(rc=3, attempt=1)
KILLED = RcRecord(rc=None, signal=signal.SIGTERM.value, attempt=1)
USR1 = RcRecord(rc=None, signal=signal.SIGUSR1.value, attempt=1)
OTHER_ATTEMPT = RcRecord(rc=0, attempt=2)
NO_ATTEMPT = RcRecord(rc=0)


def brief(update: StateUpdate | None) -> tuple[Any, ...] | None:
    if update is None:
        return None
    return (update.state, update.detail, update.reason, update.exit_code, update.signal)


# test_direct::test_cancel_and_lost, test_spec_runtime::test_direct_lost_after_sigkill,
# ::test_direct_failed_by_signal, ::test_direct_cancel_sigterm_process_group,
# ::test_reused_pid_not_taken_for_the_job (a process with another start time is not alive)
@pytest.mark.parametrize(
    ("rc", "alive", "running", "cancel", "kill_signal", "expected"),
    [
        # job.rc ends it, whatever the process looks like; COMPLETED clears the reason
        (OK, True, True, False, 9, (JobState.COMPLETED, "job.rc", "", 0, None)),
        (OK, False, True, True, 9, (JobState.COMPLETED, "job.rc", "", 0, None)),
        (NO_ATTEMPT, None, True, False, 9, (JobState.COMPLETED, "job.rc", "", 0, None)),
        (EXIT3, False, True, False, 9, (JobState.FAILED, "job.rc", "exit code 3", 3, None)),
        # a signal: CANCELLED after our cancel, else FAILED with the signal
        (KILLED, False, True, True, 9, (JobState.CANCELLED, "job.rc", "cancelled on request", None, 15)),
        (USR1, False, True, False, 9, (JobState.FAILED, "job.rc", "killed by signal 10", None, 10)),
        # a job that failed on its own before the cancel reached it stays FAILED
        (EXIT3, False, True, True, 9, (JobState.FAILED, "job.rc", "exit code 3", 3, None)),
        # no job.rc (or another attempt's): the process decides
        (None, True, True, False, 9, None),
        (OTHER_ATTEMPT, True, True, False, 9, None),
        (None, True, False, False, 9, (JobState.RUNNING, "", None, None, None)),
        (None, False, True, False, 9, (JobState.LOST, "no process, no job.rc", LOST_REASON, None, None)),
        (OTHER_ATTEMPT, False, True, False, 9, (JobState.LOST, "no process, no job.rc", LOST_REASON, None, None)),
        # gone after our cancel: killed (this machine records SIGKILL; over SSH no signal)
        (None, False, True, True, 9, (JobState.CANCELLED, "killed", "cancelled on request", None, 9)),
        (None, False, True, True, None, (JobState.CANCELLED, "killed", "cancelled on request", None, None)),
        # over SSH a job.rc found first: the process was not looked at
        (None, None, True, False, None, None),
        (OTHER_ATTEMPT, None, False, False, None, None),
    ],
)  # fmt: skip
def test_decide_direct(
    rc: RcRecord | None,
    alive: bool | None,
    running: bool,
    cancel: bool,
    kill_signal: int | None,
    expected: tuple[Any, ...] | None,
) -> None:
    update = decide_direct(
        Seen(rc=rc, alive=alive),
        attempt=1,
        running=running,
        cancel_requested=cancel,
        kill_signal=kill_signal,
    )
    assert brief(update) == expected


def test_the_rc_times_are_recorded() -> None:
    update = decide_direct(
        Seen(rc=OK, alive=False), attempt=1, running=True, cancel_requested=False
    )
    assert update is not None and (update.started_at, update.ended_at) == (OK.start, OK.end)


PROC = ProcessId(4242, 777, "boot-1", "far")


# test_direct::test_crash_between_start_and_record_is_reconciled,
# ::test_client_killed_then_rerun_submits_once (never submitted twice)
@pytest.mark.parametrize(
    ("process", "rc", "banner", "expected"),
    [
        (PROC, OK, True, Adopt),  # a live process wins over anything on disk
        (None, OK, True, Final),
        (None, EXIT3, False, Final),
        (None, OTHER_ATTEMPT, True, Lost),  # another attempt's job.rc is not this one's end
        (None, None, True, Lost),
        (None, OTHER_ATTEMPT, False, Submit),
        (None, None, False, Submit),  # nothing shows it started: submit it
    ],
)
def test_decide_found(
    process: ProcessId | None, rc: RcRecord | None, banner: bool, expected: type
) -> None:
    found = decide_found(process, rc, banner_seen=banner, attempt=1)
    assert type(found) is expected


def test_decide_found_records() -> None:
    adopted = decide_found(PROC, None, banner_seen=False, attempt=1, extra={"remote_dir": "/r"})
    assert isinstance(adopted, Adopt)
    assert adopted.update == StateUpdate(
        state=JobState.RUNNING,
        detail="adopted after a crash",
        native_id="4242",
        extra={"process": PROC.to_json(), "remote_dir": "/r"},
    )
    lost = decide_found(None, None, banner_seen=True, attempt=1)
    assert isinstance(lost, Lost)
    assert brief(lost.update) == (JobState.LOST, "found after a crash", LOST_REASON, None, None)
    final = decide_found(None, KILLED, banner_seen=True, attempt=1, cancel_requested=True)
    assert isinstance(final, Final) and final.update.state is JobState.CANCELLED


def test_banner_and_records_on_the_way() -> None:
    out = b"x\n==== launchers: attempt 2, job 12, host, 2026-01-01T00:00:00 ====\n"
    assert banner_seen(out, 2) and not banner_seen(out, 1) and not banner_seen(b"", 2)
    assert started(PROC) == StateUpdate(
        state=JobState.RUNNING,
        detail="pid 4242",
        native_id="4242",
        reason="",
        extra={"process": PROC.to_json()},
    )
    assert submitting("n-a1", "T") == StateUpdate(
        state=JobState.SUBMITTING, job_name="n-a1", submitted_at="T", reason=""
    )
    assert waiting_for_slot(2, 2).reason == "waiting for a free slot (2 of 2 jobs running)"
    assert brief(CANCELLED_WHILE_WAITING) == (
        JobState.CANCELLED,
        "cancelled while waiting",
        "cancelled on request",
        None,
        None,
    )


# -- settings -------------------------------------------------------------------------------------


# test_spec_runtime::test_direct_max_jobs_from_cores, ::test_direct_implicit_max_jobs_is_cpu_count,
# test_direct::test_max_jobs_and_export_none
@pytest.mark.parametrize(
    ("group", "max_jobs"),
    [
        (LocalGroup(max_jobs=3, cpu=CPUConfig(cores=8)), 3),
        (LocalGroup(cpu=CPUConfig(cores=8)), 8),
        (LocalGroup(), 5),
        (LocalGroup(max_jobs=0, cpu=CPUConfig(cores=0)), 5),  # 0 counts as unset
        (LocalGroup(implicit=True), 5),
    ],
)
def test_max_jobs_group_then_cores_then_cpu_count(group: LocalGroup, max_jobs: int) -> None:
    assert resolve(DirectLauncher(group=group), cpu_count=5).max_jobs == max_jobs


def test_settings_launcher_then_group_then_default() -> None:
    group = LocalGroup(
        id="box",
        connector="far",
        export="NONE",
        env=(("A", "1"),),
        python="/opt/py",
        kill_grace=0,
        tokens=(("lic", 1),),
        position=Position(file="/etc/launchers.yaml"),
    )
    s = resolve(DirectLauncher(group=group), cpu_count=2, kill_grace=7.0)
    assert (s.group, s.label, s.connector, s.config_file) == (
        group,
        "box",
        "far",
        "/etc/launchers.yaml",
    )
    assert (s.export, s.env, s.python, s.tokens) == (
        "NONE",
        (("A", "1"),),
        "/opt/py",
        (("lic", 1),),
    )
    assert s.kill_grace == 0.0  # a group's 0 is a setting, not "unset"
    # defaults: the executor's kill_grace, no python (the executor's default), this host
    d = resolve(DirectLauncher(group=LocalGroup(python="")), cpu_count=2, kill_grace=7.0)
    assert (d.kill_grace, d.python, d.connector, d.config_file, d.export) == (
        7.0,
        None,
        "local",
        None,
        "ALL",
    )
    assert resolve(DirectLauncher(), cpu_count=1).kill_grace == KILL_GRACE


def test_a_job_without_a_local_launcher_gets_the_implicit_group() -> None:
    assert group_of(None) == group_of(SlurmLauncher()) == LocalGroup(implicit=True)
    assert connector_of(None) == "local"
    assert connector_of(DirectLauncher(group=LocalGroup(connector="box"))) == "box"
    assert resolve(None, cpu_count=4).label == "local[0]"


# test_spec_runtime::test_direct_export_none
def test_job_environment() -> None:
    environ = {"HOME": "/h", "PATH": "/bin", "SECRET": "x", "LC_ALL": "C"}
    assert job_environment("ALL", environ) == environ
    assert job_environment("none", environ) == {"HOME": "/h", "PATH": "/bin", "LC_ALL": "C"}
    assert set(NONE_VARS) == {"HOME", "USER", "LOGNAME", "PATH", "LANG", "LC_ALL", "TMPDIR"}


# test_spec_runtime::test_launcher_variables_and_env, ::test_callable_runs_launchers_run,
# ::test_direct_group_env
def test_script_spec() -> None:
    group = LocalGroup(env=(("G", "group"), ("BOTH", "group")), export="NONE")
    settings = resolve(DirectLauncher(group=group), cpu_count=1)
    task = command(["echo", "hi"], env={"BOTH": "task"}, name="hello")
    spec = script_spec(
        task, settings, task_id="t-1", attempt=2, job_dir="/j", default_python="py", cleanup=("c",)
    )
    assert spec.argv == ("echo", "hi") and spec.python is None and not spec.slurm
    assert dict(spec.env) == {"G": "group", "BOTH": "task"}  # the task's env wins
    assert (spec.export, spec.attempt, spec.cleanup, spec.job_dir) == ("NONE", 2, ("c",), "/j")
    assert spec.job_name == f"hello-{task.digest[:12]}-a2"
    callable_task = tt.add(1)
    spec = script_spec(
        callable_task, settings, task_id="t-2", attempt=1, job_dir="/j", default_python="py"
    )
    assert spec.argv == ("py", "-m", "launchers.run", "/j") and spec.python == "py"
    with_python = resolve(DirectLauncher(group=LocalGroup(python="/opt/py")), cpu_count=1)
    spec = script_spec(
        callable_task, with_python, task_id="t-2", attempt=1, job_dir="/j", default_python="py"
    )
    assert spec.argv[0] == "/opt/py"


# -- the remote poll's request and answers ----------------------------------------------------------


# test_ssh_poll_scale::test_direct_remote_poll_of_1500_jobs_is_one_small_command
def test_poll_request_keeps_the_jobs_off_argv() -> None:
    procs = [ProcessId(i, 1000 + i, "b", "far") for i in range(1500)]
    dirs = [f"/remote/xp/jobs/task/{i:016x}" for i in range(1500)]
    dirs[7] = "/remote/new\nline"
    argv, stdin = poll_request(list(zip(procs, dirs, strict=True)))
    assert argv == ["sh", "-c", REMOTE_POLL, "sh", "/remote/new\nline"]
    lines = stdin.decode().split("\n")
    assert lines[:4] == ["0 0 1000", dirs[0], "1 1 1001", dirs[1]]
    assert lines[14:16] == ["7 7 1007", ""]  # the empty line stands for the next argument
    assert stdin.count(b"\n") == 3000


# test_spec_runtime::test_reused_pid_not_taken_for_the_job, over SSH
@pytest.mark.parametrize(
    ("start", "state", "boot", "alive"),
    [
        ("777", "S", "boot-1", True),
        ("777", "R", "boot-1", True),
        ("778", "S", "boot-1", False),  # the pid was reused
        ("777", "Z", "boot-1", False),  # a zombie has ended
        ("777", "X", "boot-1", False),
        ("-", "-", "boot-1", False),  # no such pid
        ("777", "S", "boot-2", False),  # the host rebooted
    ],
)
def test_remote_alive(start: str, state: str, boot: str, alive: bool) -> None:
    assert remote_alive(PROC, start, state, boot) is alive
    assert remote_alive(ProcessId(4242, 777, "", "far"), "777", "S", "other")  # boot unknown
