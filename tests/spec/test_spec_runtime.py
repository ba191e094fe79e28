"""Spec conformance of docs/design/runtime.md through the public API only (QA review of issue 3).

One small test per checkable rule of that page; the comment above it quotes the rule's wording
in the behaviour spec the page was first written from. Fast sentences use the direct
launcher; the Slurm sentences use the real sandbox cluster (``slurm_cluster``). Sentences found
not to hold when this file was written are ``xfail(strict=True)`` with the observed behaviour as
reason: the marker must go once the code is fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import launchers
from conftest import unavailable
from launchers import (
    DirectLauncher,
    ExperimentFailed,
    JobFailedError,
    JobState,
    LaunchersError,
    ScriptError,
    SlurmLauncher,
    TaskError,
    command,
    experiment,
    find_launcher,
    task,
)
from paths import SRC, job_pythonpath

BANNER = re.compile(
    r"^==== launchers: attempt (\d+), job (\S+), (\S+), (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) ====$"
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens state in tmp, the tests directory importable by job interpreters, no user config."""
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(SRC))
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "none.yaml"))


def local_launcher(tmp_path: Path, extra: str = "") -> Any:
    """A local group declared in a tmp launchers.yaml, chosen by the finder."""
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("local:\n  - id: here\n    cpu: {cores: 2, memory: 4G}\n" + extra)
    return find_launcher("cpu()", config=cfg)


def wait_for(pred: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def rec(job: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((job.directory / "state.json").read_text())
    return data


# ===================================================================== docs/design/runtime.md §1 tasks, jobs, experiments


# "`argv` a non-empty list of strings"
def test_argv_must_be_nonempty_list_of_strings() -> None:
    with pytest.raises(TaskError):
        command([])
    with pytest.raises(TaskError):
        command("echo hi")
    with pytest.raises(TaskError):
        command(["echo", 3])


# "`cwd` defaults to the job directory, so identity never depends on where the experiment was started"
def test_cwd_defaults_to_job_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with experiment(tmp_path / "xp", DirectLauncher()):
        job = command(["pwd"]).submit()
    assert job.stdout_path.read_text().splitlines()[1] == str(job.directory)
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert command(["pwd"]).digest == job.task_id.rsplit("-", 1)[1]


# "lambdas, closures and `__main__` functions are refused at creation; code is never pickled"
def test_lambdas_closures_main_refused() -> None:
    with pytest.raises(TaskError):
        task(lambda x: x)

    def inner(x: int) -> int:
        return x

    with pytest.raises(TaskError):
        task(inner)
    main_fn = types.FunctionType(inner.__code__, {"__name__": "__main__"}, "mainfn")
    main_fn.__module__ = "__main__"
    main_fn.__qualname__ = "mainfn"
    with pytest.raises(TaskError):
        task(main_fn)


# "a call of a module-level function decorated with `@task` / `@task(name=None, resumable=False)`,
#  which returns a task instead of running"
def test_task_call_returns_task(tmp_path: Path) -> None:
    import jobs_tasks as tt

    marker = tmp_path / "m"
    t = tt.touch(marker, "x")
    assert isinstance(t, launchers.Task) and not marker.exists()
    assert t.name == "pathy"


# "Parameters are JSON values or `pathlib.Path`; anything else is a `TaskError` naming the parameter."
def test_bad_parameter_named() -> None:
    import jobs_tasks as tt

    with pytest.raises(TaskError, match=r"\bb\b"):
        tt.add(1, {1, 2})
    tt.touch(Path("/tmp/x"), "ok")  # a Path is fine


# "`name` (default: the function's qualname or the basename of `argv[0]`; characters outside
#  `[A-Za-z0-9_.-]` become `_`)"
def test_default_names() -> None:
    import jobs_tasks as tt

    assert command(["/usr/bin/my tool+x", "a"]).name == "my_tool_x"
    assert tt.add(1).name == "add"
    assert command(["echo"], name="a b").name == "a_b"


# "a digest, the first 16 hex digits of SHA-256 over the canonical JSON (sorted keys, no spaces,
#  a `Path` as `{"$path": "..."}`) of `{kind, target, params, env, cwd}`."
def test_digest_is_sha256_of_canonical_json() -> None:
    t = command(["echo", "x"], env={"B": "2", "A": "1"}, cwd=Path("/tmp"))
    text = '{"cwd":{"$path":"/tmp"},"env":{"A":"1","B":"2"},"kind":"command","params":{},"target":["echo","x"]}'
    alt = (
        '{"cwd":"/tmp","env":{"A":"1","B":"2"},"kind":"command","params":{},"target":["echo","x"]}'
    )
    digests = {hashlib.sha256(s.encode()).hexdigest()[:16] for s in (text, alt)}
    assert t.digest in digests
    assert re.fullmatch(r"[0-9a-f]{16}", t.digest)
    assert t.task_id == f"echo-{t.digest}"


# "The launcher and its options are not part of it."
def test_identity_independent_of_launcher(tmp_path: Path) -> None:
    a = command(["true"])
    with experiment(tmp_path / "a", DirectLauncher()):
        ja = a.submit()
    with experiment(tmp_path / "b", local_launcher(tmp_path)):
        jb = command(["true"]).submit()
    assert ja.task_id == jb.task_id
    assert ja.directory.relative_to(tmp_path / "a") == jb.directory.relative_to(tmp_path / "b")


# "`with experiment(workdir, ...)` creates `workdir`"
def test_experiment_creates_workdir(tmp_path: Path) -> None:
    wd = tmp_path / "deep" / "xp"
    with experiment(wd, DirectLauncher()):
        assert wd.is_dir()


# "A normal exit waits for all of them, then raises `ExperimentFailed` listing each unsuccessful
#  job with its state and reason (a failure never raises inside the block)."
def test_experiment_failed_lists_jobs(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed) as info, experiment(tmp_path, DirectLauncher()):
        bad = command(["sh", "-c", "exit 3"]).submit()
        slow_ok = command(["sh", "-c", "sleep 0.5"]).submit()
        bad.wait(20)  # the failure is final inside the block and raises nothing here
    assert slow_ok.state is JobState.COMPLETED  # waited for every job
    text = str(info.value)
    assert bad.task_id in text and "FAILED" in text and "exit code 3" in text
    assert slow_ok.task_id not in text


# "An exception or Ctrl-C leaves without cancelling anything: jobs keep running and a re-run
#  re-attaches."
def test_exception_leaves_jobs_running_and_rerun_reattaches(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), experiment(tmp_path, DirectLauncher()):
        job = command(["sleep", "2"]).submit()
        wait_for(lambda: job.state is JobState.RUNNING)
        raise RuntimeError("boom")
    pid = int(job.native_id or 0)
    os.kill(pid, 0)  # still alive
    with experiment(tmp_path, DirectLauncher()):
        again = command(["sleep", "2"]).submit()
        assert again.native_id == job.native_id and again.attempt == 1
    assert again.state is JobState.COMPLETED
    assert job.stdout_path.read_text().count("==== launchers: attempt") == 1


# "`xp.cancel()` cancels its unfinished jobs."
def test_xp_cancel(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()) as xp:
        done = command(["true"]).submit()
        done.wait(20)
        long = command(["sleep", "60"]).submit()
        wait_for(lambda: long.state is JobState.RUNNING)
        xp.cancel()
    assert long.state is JobState.CANCELLED
    assert done.state is JobState.COMPLETED


# "outside an experiment or with no launcher it raises `LaunchersError` saying which is missing."
def test_submit_without_experiment_or_launcher(tmp_path: Path) -> None:
    with pytest.raises(LaunchersError, match="experiment"):
        command(["true"]).submit(DirectLauncher())
    with pytest.raises(LaunchersError, match="launcher"), experiment(tmp_path):
        command(["true"]).submit()


# "`task.submit(launcher=None, *, force=False) -> Job` uses the given launcher, else the experiment's"
def test_submit_launcher_overrides_experiment(tmp_path: Path) -> None:
    with experiment(tmp_path / "xp", local_launcher(tmp_path)):
        a = command(["echo", "a"]).submit()
        b = command(["echo", "b"]).submit(DirectLauncher())
    assert rec(a)["launcher"]["group"] == "here"
    assert rec(b)["launcher"]["group"] != "here" and rec(b)["launcher"]["kind"] == "local"


# "`submit` does not wait for Slurm: it records the job and queues its submission."
@pytest.mark.timing
def test_submit_returns_at_once(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()) as xp:
        t0 = time.monotonic()
        job = command(["sleep", "30"]).submit()
        assert time.monotonic() - t0 < 1.0
        assert (job.directory / "state.json").exists()
        assert not job.state.is_final
        xp.cancel()


# "`Job`: `.task_id`, `.directory`, `.state`, `.native_id` (`"123"`, `"123_4"`, a pid), `.attempt`,
#  `.reason`, `.exit_code`, `.stdout_path`, `.stderr_path`, `.wait(timeout=None)`, `.cancel()`,
#  `.result()` (the return value, `0` for a command, ...)"
def test_job_members(tmp_path: Path) -> None:
    import jobs_tasks as tt

    with experiment(tmp_path, DirectLauncher()):
        c = command(["true"]).submit()
        f = tt.add(2, 3).submit()
    assert isinstance(c, launchers.Job)
    assert c.wait() is JobState.COMPLETED and c.wait(timeout=1) is JobState.COMPLETED
    assert c.result() == 0 and f.result() == 5
    assert isinstance(c.native_id, str) and c.native_id.isdigit()
    assert c.attempt == 1 and c.exit_code == 0 and c.reason is None
    assert c.stdout_path == c.directory / "job.out" and c.stderr_path == c.directory / "job.err"
    c.cancel()  # no-op once final
    assert c.state is JobState.COMPLETED


# "`.wait(timeout=None)`": a timeout does not block past it (jobs.md: `TimeoutError`)
@pytest.mark.timing
def test_wait_timeout(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()) as xp:
        job = command(["sleep", "30"]).submit()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            job.wait(timeout=0.3)
        assert time.monotonic() - t0 < 2
        xp.cancel()


# "`JobFailedError` with state, exit code, signal, reason and the last 20 lines of stderr"
def test_job_failed_error(tmp_path: Path) -> None:
    script = "for i in $(seq 1 30); do echo line$i >&2; done; exit 4"
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()):
        job = command(["sh", "-c", script]).submit()
    with pytest.raises(JobFailedError) as info:
        job.result()
    err = info.value
    assert getattr(err, "state", None) is JobState.FAILED
    assert getattr(err, "exit_code", None) == 4
    assert hasattr(err, "signal") and hasattr(err, "reason")
    tail = str(getattr(err, "stderr_tail", "") or "")
    assert tail.splitlines() == [f"line{i}" for i in range(11, 31)]


# "`JobState`, not final: WAITING ..., SUBMITTING, PENDING, RUNNING, SUSPENDED. Final: COMPLETED (the
#  only success), FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, BOOT_FAIL,
#  DEADLINE, UNRUNNABLE, LOST"
def test_job_states() -> None:
    names = [s.name for s in JobState]
    assert set(names) == {"WAITING", "SUBMITTING", "PENDING", "RUNNING", "SUSPENDED", "COMPLETED",
                          "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
                          "BOOT_FAIL", "DEADLINE", "UNRUNNABLE", "LOST"}  # fmt: skip
    assert {s.name for s in JobState if not s.is_final} == {
        "WAITING",
        "SUBMITTING",
        "PENDING",
        "RUNNING",
        "SUSPENDED",
    }
    assert [s for s in JobState if s.is_success] == [JobState.COMPLETED]


# ========================================================================== docs/design/runtime.md §2 the job directory


# "`<workdir>/jobs/<name>/<digest>/`" and the files of the table
def test_job_directory_layout_and_files(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        job = command(["sh", "-c", "echo out; echo err >&2"], env={"X": "1"}).submit()
    t = command(["sh", "-c", "echo out; echo err >&2"], env={"X": "1"})
    assert job.directory == tmp_path / "jobs" / t.name / t.digest
    params = json.loads((job.directory / "params.json").read_text())
    assert {"kind", "target", "params", "env", "cwd"} <= set(params)
    assert params["kind"] == "command" and params["env"] == {"X": "1"}
    assert (job.directory / "job.sh").read_text().startswith("#!/bin/bash")
    assert (job.directory / ".lock").exists()
    # no temporary file left behind ("written under a temporary name ... and renamed")
    leftovers = [p.name for p in job.directory.iterdir() if p.name not in
                 {"params.json", "job.sh", "job.out", "job.err", "job.rc", "state.json", ".lock"}]  # fmt: skip
    assert leftovers == []


# "each attempt starts with `==== launchers: attempt N, job ID, HOST, ISO-8601 time ====`"
def test_banner_in_both_outputs(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        job = command(["sh", "-c", "echo out; echo err >&2"]).submit()
    for path, line in ((job.stdout_path, "out"), (job.stderr_path, "err")):
        first, second = path.read_text().splitlines()[:2]
        m = BANNER.match(first)
        assert m, first
        assert m.group(1) == "1" and m.group(2) == job.native_id
        assert second == line


# "`job.rc` | the job, at its end | JSON `{"rc", "signal", "attempt", "native_id", "host", "start", "end"}`"
def test_job_rc_fields(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()):
        job = command(["sh", "-c", "exit 5"]).submit()
    rc = json.loads((job.directory / "job.rc").read_text())
    assert set(rc) == {"rc", "signal", "attempt", "native_id", "host", "start", "end"}
    assert (
        rc["rc"] == 5
        and rc["signal"] is None
        and rc["attempt"] == 1
        and rc["native_id"] == job.native_id
    )


# "`state.json`: `format` (1), `task_id`, `state`, `attempt`, `launcher` (kind, group id, connector,
#  exact sbatch options), `native_id`, `cluster`, `job_name`, `submitted_at`, `started_at`,
#  `ended_at`, `exit_code`, `signal`, `reason`, `slurm_state` (raw), `attempts`, `history`
#  (last 100 `[time, state, detail]`)."
def test_state_json_fields(tmp_path: Path) -> None:
    with experiment(tmp_path, local_launcher(tmp_path)):
        job = command(["true"]).submit()
    r = rec(job)
    for key in ("format", "task_id", "state", "attempt", "launcher", "native_id", "cluster", "job_name",
                "submitted_at", "started_at", "ended_at", "exit_code", "signal", "reason", "slurm_state",
                "attempts", "history"):  # fmt: skip
        assert key in r, key
    assert r["format"] == 1 and r["task_id"] == job.task_id and r["state"] == "COMPLETED"
    assert r["launcher"]["kind"] == "local" and r["launcher"]["group"] == "here"
    assert r["launcher"]["connector"] == "local"
    assert r["job_name"] == f"{job.task_id[:-4]}-a1"  # NAME-DIGEST12-aN
    assert all(isinstance(h, list) and len(h) == 3 for h in r["history"])
    assert r["history"][-1][1] == "COMPLETED"


# "`result.json` or `result.pickle`, `error.json` | callable runner | return value (JSON when
#  encodable, else pickle), or `{type, message, traceback}`"
def test_result_files(tmp_path: Path) -> None:
    import jobs_tasks as tt

    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()):
        js = tt.add(1, 2).submit()
        pk = tt.as_tuple(3).submit()
        er = tt.boom("bad thing").submit()
    assert json.loads((js.directory / "result.json").read_text()) == 3
    assert (pk.directory / "result.pickle").exists() and not (pk.directory / "result.json").exists()
    assert pk.result() == (3, 3)
    err = json.loads((er.directory / "error.json").read_text())
    assert set(err) >= {"type", "message", "traceback"}
    assert "ValueError" in err["type"] and err["message"] == "bad thing"
    with pytest.raises(JobFailedError, match="bad thing"):
        er.result()


# "`COMPLETED`: return it finished."
def test_reattach_completed_not_rerun(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        first = command(["sh", "-c", "echo run"]).submit()
    with experiment(tmp_path, DirectLauncher()):
        again = command(["sh", "-c", "echo run"]).submit()
        assert again.state is JobState.COMPLETED
    assert again.native_id == first.native_id and again.attempt == 1
    assert first.stdout_path.read_text().count("\nrun\n") == 1


# "Another final state: move the outputs to `attempts/N/` and submit attempt N+1"
def test_rerun_failed_moves_outputs(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    argv = [
        "sh",
        "-c",
        f"test -e {flag} || {{ touch {flag}; echo first >&2; exit 1; }}; echo second",
    ]
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", DirectLauncher()):
        command(argv).submit()
    with experiment(tmp_path / "xp", DirectLauncher()):
        job = command(argv).submit()
    assert job.state is JobState.COMPLETED and job.attempt == 2
    old = job.directory / "attempts" / "1"
    assert {"job.out", "job.err", "job.rc"} <= {p.name for p in old.iterdir()}
    assert "first" in (old / "job.err").read_text()
    assert json.loads((old / "job.rc").read_text())["rc"] == 1
    assert json.loads((job.directory / "job.rc").read_text())["attempt"] == 2
    assert BANNER.match(job.stdout_path.read_text().splitlines()[0]).group(1) == "2"  # type: ignore[union-attr]
    assert len(rec(job)["attempts"]) == 1
    # "`job.sh` | submitter | the script (docs/design/runtime.md §3), rewritten for each attempt"
    script = (job.directory / "job.sh").read_text()
    assert (
        f"--job-name={job.task_id[:-4]}-a2\n" in script
        and script.rstrip().count(", attempt 2") >= 1
    )
    assert rec(job)["job_name"].endswith("-a2")


# "(with `rerun_failed=False`, return the failed job)"
def test_rerun_failed_false(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()):
        command(["false"]).submit()
    with (
        pytest.raises(ExperimentFailed),
        experiment(tmp_path, DirectLauncher(), rerun_failed=False),
    ):
        job = command(["false"]).submit()
        assert job.state is JobState.FAILED
    assert job.attempt == 1 and not (job.directory / "attempts").exists()


# "`force=True` also resubmits a `COMPLETED` job and is an error while the job is not final."
def test_force(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        command(["true"]).submit()
    with experiment(tmp_path, DirectLauncher()):
        job = command(["true"]).submit(force=True)
    assert job.attempt == 2 and job.state is JobState.COMPLETED
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()) as xp:
        long = command(["sleep", "30"]).submit()
        with pytest.raises(LaunchersError):
            command(["sleep", "30"]).submit(force=True)
        xp.cancel()
    assert long.state is JobState.CANCELLED


# "The same task twice in one process gives the same `Job`"
def test_same_task_same_job(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        a = command(["sleep", "0.3"]).submit()
        b = command(["sleep", "0.3"]).submit()
    assert a is b


# "Not final: track the existing job, submit nothing" (from another process)
def test_reattach_running_from_another_process(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom launchers import command, experiment, DirectLauncher\n"
        "with experiment(sys.argv[1], DirectLauncher(), progress=False):\n"
        "    j = command(['sh', '-c', 'sleep 1.5; echo done']).submit()\n"
        "    if sys.argv[2] == 'leave':\n"
        "        import time; time.sleep(0.5); print(j.native_id, j.state.value); raise SystemExit(0)\n"
        "print(j.native_id, j.state.value)\n"
    )
    first = subprocess.run([sys.executable, "-c", code, str(tmp_path), "leave"], capture_output=True, text=True,
                           timeout=60).stdout.split()  # fmt: skip
    assert first[1] == "RUNNING"
    second = subprocess.run([sys.executable, "-c", code, str(tmp_path), "wait"], capture_output=True, text=True,
                            timeout=60).stdout.split()  # fmt: skip
    assert second == [first[0], "COMPLETED"]
    out = next((tmp_path / "jobs" / "sh").iterdir()) / "job.out"
    assert out.read_text().count("done") == 1


# docs/design/runtime.md §10 "The record keeps the pid, the process start time ... and the boot id, so a reused pid or a reboot is
# never taken for the job." A RUNNING record whose pid now belongs to another process becomes LOST.
def test_reused_pid_not_taken_for_the_job(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        job = command(["sh", "-c", "echo once"]).submit()
    r = rec(job)
    r["state"] = "RUNNING"
    r["ended_at"] = r["exit_code"] = None
    r["process"]["pid"] = os.getpid()  # alive, but not the job (another start time)
    r["process"]["pid_start"] = int(r["process"]["pid_start"]) + 12345
    r["owner"] = None
    (job.directory / "state.json").write_text(json.dumps(r))
    (job.directory / "job.rc").unlink()
    code = (
        "import sys\nfrom launchers import command, experiment, DirectLauncher, ExperimentFailed\n"
        "try:\n"
        "    with experiment(sys.argv[1], DirectLauncher(), progress=False):\n"
        "        j = command(['sh', '-c', 'echo once']).submit()\n"
        "except ExperimentFailed:\n"
        "    pass\n"
        "print(j.state.value, j.attempt, '|', j.reason)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert (
        res.stdout.strip()
        == "LOST 1 | ended without an exit record: SIGKILL, the OOM killer or a restart"
    )


# "two processes at once give one submission"
def test_two_processes_one_submission(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom launchers import command, experiment, DirectLauncher\n"
        "with experiment(sys.argv[1], DirectLauncher(), progress=False):\n"
        "    j = command(['sh', '-c', 'sleep 1; echo ran']).submit()\n"
        "print(j.native_id)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    out = next((tmp_path / "jobs" / "sh").iterdir()) / "job.out"
    assert out.read_text().count("ran") == 1


# ============================================================================ docs/design/runtime.md §3 script (direct)


# "The launcher adds `LAUNCHERS_JOB_DIR`, `LAUNCHERS_TASK_ID`, `LAUNCHERS_ATTEMPT`."
# "`env: {NAME: value}` becomes `export NAME='value'` lines"
def test_launcher_variables_and_env(tmp_path: Path) -> None:
    argv = ["sh", "-c", 'echo "$LAUNCHERS_JOB_DIR|$LAUNCHERS_TASK_ID|$LAUNCHERS_ATTEMPT|$MYVAR"']
    with experiment(tmp_path, DirectLauncher()):
        job = command(argv, env={"MYVAR": "a b,c='d'"}).submit()
    assert (
        job.stdout_path.read_text().splitlines()[1] == f"{job.directory}|{job.task_id}|1|a b,c='d'"
    )
    assert "export MYVAR=" in (job.directory / "job.sh").read_text()


# "Names match `[A-Za-z_][A-Za-z0-9_]*`."
def test_env_names_checked() -> None:
    with pytest.raises(TaskError):
        command(["true"], env={"1BAD": "x"})
    with pytest.raises(TaskError):
        command(["true"], env={"A-B": "x"})


# "A callable runs as `PYTHON -m launchers.run DIR`"
def test_callable_runs_launchers_run(tmp_path: Path) -> None:
    import jobs_tasks as tt

    with experiment(tmp_path, DirectLauncher()):
        job = tt.add(4).submit()
    body = (job.directory / "job.sh").read_text()
    assert re.search(r"-m'? '?launchers\.run'? '?" + re.escape(str(job.directory)), body), body
    # "`PYTHON` is the `python:` option, default `sys.executable` locally"
    assert re.search(rf"^'?{re.escape(sys.executable)}'? '?-m'? '?launchers\.run", body, re.M), body
    assert job.result() == 14


# "if `launchers` cannot be imported there, `job.err` says so."
def test_python_without_launchers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jobs_tasks as tt

    monkeypatch.setenv("PYTHONPATH", "")
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("local:\n  - id: bare\n    python: /usr/bin/python3\n")
    if (
        subprocess.run(
            ["/usr/bin/python3", "-c", "import launchers"], capture_output=True
        ).returncode
        == 0
    ):
        # the check needs an interpreter that cannot import launchers; under CI that must hold
        unavailable("the system python can import launchers")
    with (
        pytest.raises(ExperimentFailed),
        experiment(tmp_path / "xp", find_launcher("cpu()", config=cfg)),
    ):
        job = tt.add(1).submit()
    assert "launchers" in job.stderr_path.read_text()
    assert job.state is JobState.FAILED


# =========================================================================== docs/design/runtime.md §10 direct launcher


# "Runs the same `job.sh` ... as `setsid bash job.sh` (its own process group), stdin from
#  `/dev/null`, ... in the task's working directory."
def test_direct_process_group_stdin_cwd(tmp_path: Path) -> None:
    work = tmp_path / "w d"
    work.mkdir()
    argv = [
        "sh",
        "-c",
        'cut -d" " -f5 /proc/$$/stat; echo "$$"; readlink /proc/self/fd/0; pwd; cat',
    ]
    with experiment(tmp_path / "xp", DirectLauncher()):
        job = command(argv, cwd=work).submit()
    lines = job.stdout_path.read_text().splitlines()[1:]
    assert lines[2] == "/dev/null" and lines[3] == str(work)
    assert lines[0] == job.native_id  # the job script leads its own process group
    assert lines[0] != str(os.getpgrp())


# "The record keeps the pid, the process start time (field 22 of `/proc/PID/stat`) and the boot id"
def test_direct_record_pid_start_boot(tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        job = command(["sleep", "1"]).submit()
        wait_for(lambda: job.state is JobState.RUNNING)
        pid = int(job.native_id or 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
        start = int(stat.rsplit(")", 1)[1].split()[19])
    blob = json.dumps(rec(job))
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot in blob and str(start) in blob and str(pid) in blob


# "`export: ALL` passes the experiment's environment, `NONE` only `HOME`, `USER`, `LOGNAME`, `PATH`,
#  `LANG`, `LC_ALL`, `TMPDIR`; `env` is added"
def test_direct_export_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QA3_SECRET", "leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    allowed = {"HOME", "USER", "LOGNAME", "PATH", "LANG", "LC_ALL", "TMPDIR"}
    launcher_all = local_launcher(tmp_path)
    launcher_none = local_launcher(tmp_path, "    export: NONE\n")
    argv = ["sh", "-c", "env"]
    with experiment(tmp_path / "a", launcher_all):
        ja = command(argv, env={"MINE": "1"}).submit()
    with experiment(tmp_path / "b", launcher_none):
        jb = command(argv, env={"MINE": "1"}).submit()
    env_a = dict(
        line.split("=", 1) for line in ja.stdout_path.read_text().splitlines()[1:] if "=" in line
    )
    env_b = dict(
        line.split("=", 1) for line in jb.stdout_path.read_text().splitlines()[1:] if "=" in line
    )
    assert env_a.get("QA3_SECRET") == "leak" and env_a.get("MINE") == "1"
    assert "QA3_SECRET" not in env_b and env_b.get("MINE") == "1" and env_b.get("LANG") == "C.UTF-8"
    # the shell's own, and the script's `export SLURM_EXPORT_ENV=ALL` of the NONE policy (docs/design/runtime.md §3)
    shell_noise = {"PWD", "SHLVL", "_", "OLDPWD", "SLURM_EXPORT_ENV"}
    extra = (
        set(env_b)
        - allowed
        - shell_noise
        - {"MINE"}
        - {k for k in env_b if k.startswith("LAUNCHERS_")}
    )
    assert extra == set(), extra


# "`env` is added" (a local group's `env:` in launchers.yaml, with `export: NONE`)
def test_direct_group_env(tmp_path: Path) -> None:
    launcher = local_launcher(tmp_path, "    export: NONE\n    env: {GROUP_VAR: 'x y'}\n")
    with experiment(tmp_path / "xp", launcher):
        job = command(["sh", "-c", 'echo "$GROUP_VAR|$TASK_VAR"'], env={"TASK_VAR": "t"}).submit()
    assert job.stdout_path.read_text().splitlines()[1] == "x y|t"


# "At most `max_jobs` jobs of one local launcher run at once in a process (default the group's
#  `cpu.cores` when declared ...); the rest wait in order."
def test_direct_max_jobs_from_cores(tmp_path: Path) -> None:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("local:\n  - id: one\n    cpu: {cores: 1}\n")
    with experiment(tmp_path / "xp", find_launcher("cpu()", config=cfg)):
        a = command(["sleep", "2"]).submit()
        b = command(["sleep", "0.1"]).submit()
        wait_for(lambda: a.state is JobState.RUNNING)
        assert b.state is JobState.WAITING
    assert a.state is b.state is JobState.COMPLETED
    assert rec(b)["started_at"] >= rec(a)["ended_at"]


# "At most `max_jobs` jobs ... (default ... else the machine's CPU count)" (the implicit launcher)
def test_direct_implicit_max_jobs_is_cpu_count(tmp_path: Path) -> None:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with experiment(tmp_path, DirectLauncher()):
        jobs = [command(["sleep", f"1.{i}"]).submit() for i in range(n + 1)]
        wait_for(lambda: sum(j.state is JobState.RUNNING for j in jobs) == n)
        assert jobs[-1].state is JobState.WAITING
    assert all(j.state is JobState.COMPLETED for j in jobs)


# "State ...: `job.rc` ends it (rc 0 `COMPLETED`; after our cancel `CANCELLED`; else `FAILED` with
#  code or signal); ... else `LOST` ("ended without an exit record: SIGKILL, the OOM killer or a restart")."
def test_direct_lost_after_sigkill(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()):
        job = command(["sleep", "30"]).submit()
        wait_for(lambda: job.state is JobState.RUNNING)
        os.killpg(int(job.native_id or 0), signal.SIGKILL)
        job.wait(10)
    assert job.state is JobState.LOST
    assert job.reason == "ended without an exit record: SIGKILL, the OOM killer or a restart"


def test_direct_failed_by_signal(tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, DirectLauncher()):
        job = command(["sh", "-c", "kill -USR1 $$"]).submit()
    assert job.state is JobState.FAILED
    assert job.signal == signal.SIGUSR1 or job.exit_code == 128 + signal.SIGUSR1


# "Cancel: SIGTERM to the process group, SIGKILL after `kill_grace` (10 s)."
@pytest.mark.timing
def test_direct_cancel_sigterm_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "term"
    argv = ["sh", "-c", f"(trap 'echo child >> {marker}; exit 0' TERM; sleep 30 & wait) & "
                        f"trap 'echo parent >> {marker}; exit 1' TERM; sleep 30 & wait"]  # fmt: skip
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", DirectLauncher()):
        job = command(argv).submit()
        wait_for(lambda: job.state is JobState.RUNNING)
        time.sleep(0.3)
        t0 = time.monotonic()
        job.cancel()
        assert job.state is not JobState.CANCELLED or (job.directory / "job.rc").exists()
        job.wait(15)
        assert time.monotonic() - t0 < 5
    assert job.state is JobState.CANCELLED and job.reason == "cancelled on request"
    assert sorted(marker.read_text().split()) == ["child", "parent"]


# docs/design/runtime.md §7 "A `WAITING` job is cancelled at once"
def test_waiting_job_cancelled_at_once(tmp_path: Path) -> None:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("local:\n  - id: one\n    max_jobs: 1\n")
    with (
        pytest.raises(ExperimentFailed),
        experiment(tmp_path / "xp", find_launcher("cpu()", config=cfg)) as xp,
    ):
        a = command(["sleep", "30"]).submit()
        b = command(["sleep", "31"]).submit()
        wait_for(lambda: a.state is JobState.RUNNING)
        assert b.state is JobState.WAITING
        b.cancel()
        wait_for(lambda: b.state is JobState.CANCELLED, 3)
        assert a.state is JobState.RUNNING and b.native_id is None
        xp.cancel()


# ===================================================================================== docs/design/runtime.md §11 tokens


# "n > N is an error at submission." / "Waiting jobs are `WAITING` ("waiting for token NAME, k of N free")"
def test_tokens_wait_and_too_many(tmp_path: Path) -> None:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("tokens: {lic: 1}\nlocal:\n  - id: t\n    tokens: {lic: 1}\n")
    with experiment(tmp_path / "xp", find_launcher("cpu()", config=cfg)):
        a = command(["sleep", "2"]).submit()
        b = command(["true"]).submit()
        wait_for(lambda: a.state is JobState.RUNNING)
        wait_for(lambda: b.reason is not None, 3)
        assert b.state is JobState.WAITING
        assert b.reason == "waiting for token lic, 0 of 1 free"
        # "`holders/<task id>.json` `{count, pid, pid_start, boot_id, host, job_dir}`"
        holder = tmp_path / "state" / "tokens" / "lic" / "holders" / f"{a.task_id}.json"
        data = json.loads(holder.read_text())
        assert set(data) >= {"count", "pid", "pid_start", "boot_id", "host", "job_dir"}
        assert data["count"] == 1 and str(data["pid"]) == a.native_id
        assert (tmp_path / "state" / "tokens" / "lic" / "lock").exists()
    assert b.state is JobState.COMPLETED
    # "The job's exit handler deletes its holder file"
    assert list((tmp_path / "state" / "tokens" / "lic" / "holders").iterdir()) == []
    cfg.write_text("tokens: {lic: 1}\nlocal:\n  - id: t\n    tokens: {lic: 2}\n")
    with (
        pytest.raises(LaunchersError, match="lic"),
        experiment(tmp_path / "xp2", find_launcher("cpu()", config=cfg)),
    ):
        command(["true"]).submit()


# "Declared as in the older tool (`countertoken: {NAME: {tokens: N}}` in `tokens.yaml` ...)";
# "N is read at each acquire, so editing it takes effect at once."
def test_tokens_yaml_and_live_edit(tmp_path: Path) -> None:
    (tmp_path / "tokens.yaml").write_text("countertoken:\n  lic:\n    tokens: 1\n")
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("local:\n  - id: t\n    tokens: {lic: 1}\n")
    launcher = find_launcher("cpu()", config=cfg)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher) as xp:
        a = command(["sleep", "20"]).submit()
        b = command(["sleep", "21"]).submit()
        wait_for(lambda: a.state is JobState.RUNNING)
        wait_for(lambda: b.reason is not None, 3)
        assert b.state is JobState.WAITING
        (tmp_path / "tokens.yaml").write_text("countertoken:\n  lic:\n    tokens: 2\n")
        wait_for(lambda: b.state is JobState.RUNNING, 5)
        assert a.state is JobState.RUNNING
        xp.cancel()


# "a killed job's entry goes at the next acquire by anyone. A dead holder never keeps units."
def test_tokens_dead_holder_released(tmp_path: Path) -> None:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("tokens: {lic: 1}\nlocal:\n  - id: t\n    tokens: {lic: 1}\n")
    launcher = find_launcher("cpu()", config=cfg)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher):
        a = command(["sleep", "30"]).submit()
        wait_for(lambda: a.state is JobState.RUNNING)
        os.killpg(
            int(a.native_id or 0), signal.SIGKILL
        )  # no exit handler runs: the holder file stays
        a.wait(10)
        b = command(["true"]).submit()
        assert b.wait(10) is JobState.COMPLETED
    assert a.state is JobState.LOST
    assert list((tmp_path / "state" / "tokens" / "lic" / "holders").iterdir()) == []


# "`tokens:` on a group with an SSH connector is a `ConfigurationError`."
def test_tokens_with_ssh_connector_refused(tmp_path: Path) -> None:
    from launchers import ConfigurationError, load_config

    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("connectors:\n  ssh:\n    far: {hostname: example.org}\ntokens: {lic: 2}\n"
                   "local:\n  - id: remote\n    connector: far\n    tokens: {lic: 1}\n")  # fmt: skip
    with pytest.raises(ConfigurationError, match="tokens"):
        load_config(cfg)


# docs/design/runtime.md §9 "`max_requeues` (3) bounds extra attempts; `resume_signal` (`USR1`) and `resume_grace` (120 s ...)";
# docs/design/runtime.md §5 "`lost_after` (10 min)", "`poll_max` (60 s)"; docs/design/runtime.md §10 "`kill_grace` (10 s)": named settings a user
# must be able to set (on the group, like `status_source` and `fatal_pending`).
def test_named_runtime_settings_accepted(tmp_path: Path) -> None:
    from launchers import load_config

    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(SLURM_YAML + "    max_requeues: 2\n    resume_signal: USR2\n    resume_grace: 30\n"
                   "    lost_after: 300\n    poll_max: 30\n"
                   "local:\n  - id: here\n    kill_grace: 5\n")  # fmt: skip
    load_config(cfg)


# ================================================================================ CLI (jobs.md)


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launchers.cli.main", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


# "`launchers cancel`" (docs/design/runtime.md §7) and the job directory as seen by `launchers jobs|logs`
@pytest.mark.slow
def test_cli_submit_jobs_logs_cancel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "launchers.yaml").write_text("local:\n  - id: here\n    cpu: {cores: 2}\n")
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "launchers.yaml"))
    r = cli("submit", "--wait", "--workdir", "xp", "--", "sh", "-c", "echo hello", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    task_id, _native, directory = r.stdout.strip().split("\t")
    assert Path(directory).parent.parent == tmp_path / "xp" / "jobs"
    r = cli("logs", "--workdir", "xp", task_id, cwd=tmp_path)
    assert BANNER.match(r.stdout.splitlines()[0]) and r.stdout.splitlines()[1] == "hello"
    r = cli("submit", "--json", "--workdir", "xp", "--", "sleep", "60", cwd=tmp_path)
    info = json.loads(r.stdout)
    r = cli("cancel", "--workdir", "xp", info["task_id"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "CANCELLED" in r.stdout
    r = cli("jobs", "--json", "xp", cwd=tmp_path)
    states = {
        json.loads(line)["task_id"]: json.loads(line)["state"] for line in r.stdout.splitlines()
    }
    assert states == {task_id: "COMPLETED", info["task_id"]: "CANCELLED"}
    r = cli("logs", "--workdir", "xp", "no-such-job", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("launchers: ") and "Traceback" not in r.stderr
    r = cli("submit", "-r", "cuda(mem=999T)", "--", "true", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("launchers: ") and "Traceback" not in r.stderr


# ====================================================================================== Slurm

SLURM_YAML = "slurm:\n  - id: sb\n    query_slurm: true\n"


@pytest.fixture
def slurm(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """A Slurm launcher chosen by the finder from a tmp launchers.yaml (5 minutes, one core)."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(SLURM_YAML)
    launcher = find_launcher("duration=5min & cpu(cores=1)", config=cfg)
    assert isinstance(launcher, SlurmLauncher)
    yield launcher


def sbatch_quote(arg: str) -> str:
    """``--name=value`` as docs/design/runtime.md §3 says it is written: bare when made of the safe set, else double-quoted."""
    name, eq, value = arg.partition("=")
    if not eq or re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]*", value):
        return arg
    return name + '="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--array", "--format=%i|%T"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    for line in out.splitlines():
        jid, _, state = line.partition("|")
        if jid.strip() == job_id:
            return state.strip()
    return ""


# docs/design/runtime.md §3 "The sbatch script" (header layout), "Every directive precedes the first command",
# "Other tasks get `--no-requeue`", docs/design/runtime.md §4 "(3) `state.json` gets `PENDING` and the id",
# docs/design/runtime.md §2 banner "job ID" is the Slurm id, job.rc native_id.
@pytest.mark.slurm
def test_slurm_script_header_and_record(slurm: Any, tmp_path: Path) -> None:
    with experiment(tmp_path / "xp", slurm):
        job = command(["sh", "-c", "echo out; echo err >&2"]).submit()
        t = command(["sh", "-c", "echo out; echo err >&2"])
    assert job.state is JobState.COMPLETED and job.result() == 0
    assert re.fullmatch(r"\d+", job.native_id or "")
    lines = (job.directory / "job.sh").read_text().splitlines()
    d = job.directory
    assert lines[0] == "#!/bin/bash"
    assert lines[1:8] == [
        f"#SBATCH --job-name={t.name}-{t.digest[:12]}-a1",
        f"#SBATCH --output={d}/job.out",
        f"#SBATCH --error={d}/job.err",
        "#SBATCH --open-mode=append",
        f"#SBATCH --chdir={d}",
        "#SBATCH --export=ALL",
        "#SBATCH --no-requeue",
    ]
    first_cmd = next(
        i for i, line in enumerate(lines) if i and line.strip() and not line.startswith("#")
    )
    directives = [line for line in lines[:first_cmd] if line.startswith("#SBATCH ")]
    assert all(not line.startswith("#SBATCH") for line in lines[first_cmd:])
    assert directives[7:] == [
        f"#SBATCH {sbatch_quote(a)}" for a in slurm.sbatch_args()
    ]  # finder options follow
    assert re.fullmatch(
        rf"# generated by launchers \S+ for task {job.task_id}, attempt 1", lines[first_cmd - 1]
    )
    r = rec(job)
    assert r["job_name"] == f"{t.name}-{t.digest[:12]}-a1" and r["native_id"] == job.native_id
    assert r["launcher"]["kind"] == "slurm" and r["launcher"]["group"] == "sb"
    assert r["launcher"]["options"] == slurm.sbatch_args()
    assert [h[1] for h in r["history"]][:3] == ["WAITING", "SUBMITTING", "PENDING"]
    assert r["slurm_state"] in (None, "COMPLETED")
    m = BANNER.match(job.stdout_path.read_text().splitlines()[0])
    assert m and m.group(2) == job.native_id and m.group(1) == "1"
    assert job.stderr_path.read_text().splitlines()[1] == "err"
    assert json.loads((d / "job.rc").read_text())["native_id"] == job.native_id


# docs/design/runtime.md §6 "FAILED | FAILED | code and signal from `job.rc`"; docs/design/runtime.md §3 "`exit` with the task's code, so that
# Slurm's COMPLETED or FAILED agrees with `job.rc`"; docs/design/runtime.md §3 "Body values ... use POSIX single quotes"
@pytest.mark.slurm
def test_slurm_failed_exit_code_and_quoting(slurm: Any, tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, slurm):
        bad = command(["sh", "-c", "exit 3"]).submit()
        odd = command(["sh", "-c", 'printf "%s\\n" "$1"', "sh", 'it\'s $(x) `y` \\ "q"']).submit()
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 3)
    assert squeue_state(bad.native_id or "") in ("FAILED", "")
    assert odd.state is JobState.COMPLETED
    assert odd.stdout_path.read_text().splitlines()[1] == 'it\'s $(x) `y` \\ "q"'


# docs/design/runtime.md §3 "In `--output`/`--error` every `%` is doubled"; "any other in double quotes with `\` and `"`
# backslash-escaped" (a directory with a space, a `%` and a quote)
@pytest.mark.slurm
def test_slurm_directive_quoting_real(slurm: Any, tmp_path: Path) -> None:
    wd = tmp_path / 'a b%j "q"'
    with experiment(wd, slurm):
        job = command(["echo", "here"]).submit()
    assert job.state is JobState.COMPLETED
    assert job.stdout_path.read_text().splitlines()[1] == "here"  # sbatch wrote where we read
    text = (job.directory / "job.sh").read_text()
    out = (
        str(job.directory / "job.out").replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    )
    assert f'#SBATCH --output="{out}"' in text


# docs/design/runtime.md §3 "A newline, carriage return or NUL in a value is a `ScriptError` naming the option"
@pytest.mark.slurm
@pytest.mark.parametrize("bad", ["a\nb", "a\0b"])
def test_slurm_newline_in_value(slurm: Any, tmp_path: Path, bad: str) -> None:
    with pytest.raises(ScriptError, match="comment"):
        launcher = slurm.config(sbatch_options={"comment": bad})
        with experiment(tmp_path, launcher):
            job = command(["true"]).submit()
            job.wait(20)


# docs/design/runtime.md §3 "**Extra options**: ... checked against sbatch's options ("did you mean"); `true` writes the
# bare flag. Options the launcher owns (...) are refused."
@pytest.mark.slurm
def test_slurm_extra_options(slurm: Any, tmp_path: Path) -> None:
    with pytest.raises(LaunchersError, match="did you mean"):
        slurm.config(sbatch_options={"overcomit": True})
    for owned in ("job-name", "output", "error", "open-mode", "chdir", "export", "array", "parsable",
                  "requeue", "no-requeue", "signal"):  # fmt: skip
        with pytest.raises(LaunchersError):
            slurm.config(sbatch_options={owned: "x"})
    launcher = slurm.config(sbatch_options={"overcommit": True, "comment": "qa 3"})
    with experiment(tmp_path, launcher):
        job = command(["true"]).submit()
    text = (job.directory / "job.sh").read_text()
    assert "#SBATCH --overcommit\n" in text and '#SBATCH --comment="qa 3"\n' in text
    assert job.state is JobState.COMPLETED


# docs/design/runtime.md §3 "checked against sbatch's options ("did you mean")"; "Options the launcher owns ... are refused"
# (in launchers.yaml: a ConfigurationError naming the key)
def test_yaml_sbatch_options_checked(tmp_path: Path) -> None:
    from launchers import ConfigurationError, load_config

    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(SLURM_YAML + "    sbatch_options: {overcomit: true}\n")
    with pytest.raises(ConfigurationError, match="did you mean"):
        load_config(cfg)
    cfg.write_text(SLURM_YAML + "    sbatch_options: {output: /tmp/x}\n")
    with pytest.raises(ConfigurationError, match="output"):
        load_config(cfg)


# docs/design/runtime.md §3 "`ALL` (default, as sbatch): the environment of the process running sbatch, from which
# `SBATCH_*`, `SALLOC_*`, `SRUN_*` and `SLURM_*` (except `SLURM_CONF`) are first removed"
@pytest.mark.slurm
def test_slurm_export_all_strips_option_variables(
    slurm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBATCH_QOS", "no-such-qos")  # would make sbatch refuse the job
    monkeypatch.setenv("SLURM_QA3", "x")
    monkeypatch.setenv("SALLOC_QA3", "x")
    monkeypatch.setenv("SRUN_QA3", "x")
    monkeypatch.setenv("QA3_KEEP", "kept")
    with experiment(tmp_path, slurm):
        job = command(["sh", "-c", "env"]).submit()
    assert job.state is JobState.COMPLETED, job.reason
    env = job.stdout_path.read_text()
    assert "QA3_KEEP=kept" in env
    assert not re.search(r"^(SLURM_QA3|SALLOC_QA3|SRUN_QA3|SBATCH_QOS)=", env, re.M)


# docs/design/runtime.md §3 "`NONE`: `--export=NONE`, a login-shell shebang ..., and `export SLURM_EXPORT_ENV=ALL`"
# "`env: {NAME: value}` becomes `export NAME='value'` lines, never `--export=NAME=value`"
@pytest.mark.slurm
def test_slurm_export_none_and_env(
    slurm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QA3_LEAK", "leak")
    launcher = slurm.config(export="NONE", env={"QA3_SET": "a,b c"})
    with experiment(tmp_path, launcher):
        job = command(
            ["sh", "-c", "env; echo \"srun:$(srun --ntasks=1 sh -c 'echo $QA3_SET')\""]
        ).submit()
    text = (job.directory / "job.sh").read_text()
    assert text.startswith("#!/bin/bash -l\n")
    assert "#SBATCH --export=NONE\n" in text and "export SLURM_EXPORT_ENV=ALL\n" in text
    assert "export QA3_SET='a,b c'\n" in text and "--export=QA3" not in text
    out = job.stdout_path.read_text()
    assert job.state is JobState.COMPLETED, job.stderr_path.read_text()
    assert "QA3_SET=a,b c" in out and "QA3_LEAK" not in out
    assert "srun:a,b c" in out  # srun steps keep the script's environment


# docs/design/runtime.md §4 "**Other rejections** (bad partition, account or QoS, impossible request): `FAILED` with
# sbatch's message as reason"
@pytest.mark.slurm
def test_slurm_rejection(slurm: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR")
    with pytest.raises(ExperimentFailed), experiment(tmp_path, slurm.config(partition="nowhere")):
        job = command(["true"]).submit()
    assert job.state is JobState.FAILED and job.native_id is None
    assert "invalid partition" in (job.reason or "").lower()
    # "logged at ERROR at once"
    assert any(
        r.levelname == "ERROR" and "invalid partition" in r.getMessage().lower()
        for r in caplog.records
    )


# docs/design/runtime.md §3 "sbatch parses `#SBATCH` lines itself, not as a shell: quotes of either kind group, a backslash
# escapes the next character even inside single quotes, an unquoted `#` ends the line."
@pytest.mark.slurm
def test_slurm_directive_value_reaches_sbatch_intact(slurm: Any, tmp_path: Path) -> None:
    value = "a #b 'c' \"d\" \\e $f"
    with experiment(tmp_path, slurm.config(sbatch_options={"comment": value})):
        job = command(["true"]).submit()
    assert job.state is JobState.COMPLETED
    out = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job.native_id}", "--format=%k"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.rstrip("\n") == value


# docs/design/runtime.md §6 "PENDING (PD) | PENDING"; docs/design/runtime.md §7 "The state becomes `CANCELLED` when Slurm or `job.rc` says so";
# "the reason reads "cancelled on request" after `cancel()`"
@pytest.mark.slurm
def test_slurm_pending_then_cancel(slurm: Any, tmp_path: Path) -> None:
    launcher = slurm.config(partition="gpu", sbatch_options={"gres": "gpu:a100:1"}, constraint=None)
    with pytest.raises(ExperimentFailed), experiment(tmp_path, launcher):
        job = command(["true"]).submit()
        wait_for(lambda: job.state is JobState.PENDING)
        assert squeue_state(job.native_id or "") == "PENDING"
        job.cancel()
        job.wait(30)
    assert job.state is JobState.CANCELLED and job.reason == "cancelled on request"
    assert squeue_state(job.native_id or "") == "CANCELLED"


# docs/design/runtime.md §7 "(`job.cancel()`, `xp.cancel()`, `launchers cancel`)" on a running Slurm job, through the CLI
@pytest.mark.slurm
def test_slurm_cli_submit_and_cancel(
    slurm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "launchers.yaml"))
    r = cli(
        "submit",
        "--json",
        "-r",
        "duration=5min & cpu()",
        "--workdir",
        "xp",
        "--",
        "sleep",
        "120",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert re.fullmatch(r"\d+", str(info["native_id"]))
    r = cli("cancel", "--workdir", "xp", info["task_id"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "CANCELLED" in r.stdout
    assert squeue_state(str(info["native_id"])) == "CANCELLED"


# docs/design/runtime.md §9 "Its script has `--requeue` and `--signal=B:SIG@GRACE`"; "`resume_grace` (120 s, at most a
# quarter of the limit)" -> 75 s for a 5-minute job
@pytest.mark.slurm
def test_slurm_resumable_script(slurm: Any, tmp_path: Path) -> None:
    with experiment(tmp_path, slurm):
        job = command(["sh", "-c", 'echo "attempt $LAUNCHERS_ATTEMPT"'], resumable=True).submit()
    text = (job.directory / "job.sh").read_text()
    assert "#SBATCH --requeue\n" in text and "--no-requeue" not in text
    assert "#SBATCH --signal=B:USR1@75\n" in text
    assert job.state is JobState.COMPLETED and "attempt 1" in job.stdout_path.read_text()


# docs/design/runtime.md §1 callable over Slurm: "`.result()` (the return value ...)"
@pytest.mark.slurm
def test_slurm_callable(slurm: Any, tmp_path: Path) -> None:
    import jobs_tasks as tt

    with experiment(tmp_path, slurm):
        job = tt.add(20, 22).submit()
    assert job.result() == 42


# docs/design/runtime.md §8 "`launcher.submit_array(tasks)`, or `with launcher.array(max_parallel=None):` around `submit`
# calls, submits arrays. Each task keeps its directory, record and state, tracked as `ID_INDEX`."
@pytest.mark.slurm
def test_slurm_launcher_submit_array(slurm: Any, tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, slurm):
        jobs = slurm.submit_array(
            [command(["sh", "-c", f"echo e{i}; exit {i % 2}"]) for i in range(3)]
        )
    assert [j.state for j in jobs] == [JobState.COMPLETED, JobState.FAILED, JobState.COMPLETED]
    base = {(j.native_id or "").split("_")[0] for j in jobs}
    assert len(base) == 1 and [(j.native_id or "").split("_")[1] for j in jobs] == ["0", "1", "2"]
    assert [j.stdout_path.read_text().splitlines()[1] for j in jobs] == ["e0", "e1", "e2"]


@pytest.mark.slurm
def test_slurm_launcher_array_context(slurm: Any, tmp_path: Path) -> None:
    with experiment(tmp_path, slurm), slurm.array(max_parallel=2):
        jobs = [command(["echo", str(i)]).submit() for i in range(3)]
    assert all(j.state is JobState.COMPLETED for j in jobs)
    assert len({(j.native_id or "").split("_")[0] for j in jobs}) == 1
    # "its own `--output` is `<workdir>/arrays/<key>/%a.out`"; "`max_parallel=k` adds `%k`"
    scripts = list((tmp_path / "arrays").glob("*/*.sh")) + list(
        (tmp_path / "arrays").glob("*/job.sh")
    )
    text = "".join(p.read_text() for p in scripts)
    assert re.search(r"#SBATCH --array=0-2%2\n", text)
    assert re.search(r"#SBATCH --output=\S*/arrays/[^/\s]+/%a\.out\n", text)
    # "maps `SLURM_ARRAY_TASK_ID` to a task directory through `<workdir>/arrays/<key>/index` (one directory
    # per line)"; "Each task keeps its directory, record and state, tracked as `ID_INDEX`."
    (index,) = list((tmp_path / "arrays").glob("*/index"))
    assert index.read_text().splitlines() == [str(j.directory) for j in jobs]
    for i, j in enumerate(jobs):
        assert rec(j)["native_id"] == j.native_id and (j.native_id or "").endswith(f"_{i}")
        assert rec(j)["state"] == "COMPLETED" and j.stdout_path.read_text().splitlines()[1] == str(
            i
        )


# docs/design/runtime.md §4 "A record found in `SUBMITTING` (crash between 1 and 3, lost reply) is reconciled before anything
# else: ... the id found is adopted." "A job is never submitted twice"
@pytest.mark.slurm
def test_slurm_submitting_record_reconciled_by_name(slurm: Any, tmp_path: Path) -> None:
    t = command(["sleep", "1.0"])  # a task (job name) of this test alone: the lookup is by name
    with experiment(tmp_path, slurm):
        first = t.submit()
    name = rec(first)["job_name"]
    # simulate a crash after sbatch accepted attempt 2 but before its id was recorded
    d = first.directory
    r = rec(first)
    r["history"].append(
        [time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), "SUBMITTING", "attempt 2"]
    )
    argv = ["sbatch", "--parsable", "-p", "debug", "-t", "5", f"--job-name={name[:-3]}-a2", "-o", "/dev/null",
            "--wrap", "sleep 1"]  # fmt: skip
    jid = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    r.update(state="SUBMITTING", attempt=2, native_id=None, job_name=f"{name[:-3]}-a2", owner=None, ended_at=None,
             exit_code=None)  # fmt: skip
    (d / "state.json").write_text(json.dumps(r))
    (d / "job.rc").unlink()
    code = ("import sys\nfrom launchers import command, experiment, find_launcher\n"
            "L = find_launcher('duration=5min & cpu(cores=1)', config=sys.argv[2])\n"
            "with experiment(sys.argv[1], L, progress=False):\n"
            "    j = command(['sleep', '1.0']).submit()\n"
            "print(j.native_id, j.attempt, j.state.value)\n")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(tmp_path / "launchers.yaml")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [jid.split(";")[0], "2", "COMPLETED"]
    again_id = jid.split(";")[0]
    out = subprocess.run(["squeue", "--noheader", "--states=all", f"--name={name[:-3]}-a2", "--format=%A"],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    # the same task in another experiment has the same job name: only ours may be newer than the crash
    assert again_id in out and max(int(i) for i in out) == int(again_id)
    assert rec(first)["native_id"] == again_id


# docs/design/runtime.md §4 "a cluster after `;` is passed to every later command"; state.json `cluster`
@pytest.mark.slurm
def test_slurm_clusters_option(slurm: Any, tmp_path: Path, slurm_cluster: dict[str, str]) -> None:
    name = slurm_cluster.get("SLURM_CLUSTER_NAME", "sandbox")
    with (
        pytest.raises(ExperimentFailed),
        experiment(tmp_path, slurm.config(sbatch_options={"clusters": name})),
    ):
        ok = command(["true"]).submit()
        bad = command(["sh", "-c", "exit 2"]).submit()
    assert ok.state is JobState.COMPLETED and re.fullmatch(r"\d+", ok.native_id or "")
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 2)
    assert rec(ok)["cluster"] == name


# docs/design/runtime.md §5 "`status_source: auto | sacct | squeue` on a slurm group overrides."; "Without accounting, a job
# gone from squeue is decided by `job.rc`: rc 0 `COMPLETED`, else `FAILED` with code and signal"
@pytest.mark.slurm
def test_slurm_status_source_squeue(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(SLURM_YAML + "    status_source: squeue\n")
    launcher = find_launcher("duration=5min & cpu(cores=1)", config=cfg)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher):
        ok = command(["true"]).submit()
        bad = command(["sh", "-c", "kill -TERM $$"]).submit()
    assert ok.state is JobState.COMPLETED
    assert bad.state is JobState.FAILED
    assert bad.signal == signal.SIGTERM or bad.exit_code == 128 + signal.SIGTERM


# docs/design/runtime.md §6 "`CANCELLED by 1234` is CANCELLED with the uid recorded; the reason reads ... "cancelled by you"
# for the submitting user's uid"
@pytest.mark.slurm
def test_slurm_cancelled_outside(slurm: Any, tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, slurm):
        job = command(["sleep", "60"]).submit()
        wait_for(lambda: job.state is JobState.RUNNING, 30)
        subprocess.run(["scancel", job.native_id or ""], check=True)
    assert job.state is JobState.CANCELLED
    assert job.reason == "cancelled by you"


# docs/design/runtime.md §6 "SUSPENDED (S), STOPPED (ST) | SUSPENDED" (root may suspend on the sandbox)
@pytest.mark.slurm
def test_slurm_suspended(slurm: Any, tmp_path: Path) -> None:
    with pytest.raises(ExperimentFailed), experiment(tmp_path, slurm):
        job = command(["sleep", "60"]).submit()
        wait_for(lambda: job.state is JobState.RUNNING, 30)
        subprocess.run(["scontrol", "suspend", job.native_id or ""], check=True)
        wait_for(lambda: job.state is JobState.SUSPENDED, 20)
        job.cancel()
    assert job.state is JobState.CANCELLED
    assert "SUSPENDED" in [h[1] for h in rec(job)["history"]]


# docs/design/runtime.md §6 "REQUEUED (RQ) ... | PENDING | a new attempt is recorded"; docs/design/runtime.md §9 "Output is appended (one banner per
# attempt); the record keeps each attempt's id, times, cause."
# docs/design/runtime.md §9 "On the warning the script forwards the signal to the task's process group and waits for it; then,
# if `SLURM_RESTART_COUNT` ... is below `max_requeues`, it runs `scontrol requeue $SLURM_JOB_ID` and exits
# without writing `job.rc`." (the warning sent by hand with scancel --signal)
@pytest.mark.slurm
def test_slurm_resume_signal_requeues(slurm: Any, tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    argv = ["sh", "-c", f'trap "echo got-usr1; exit 0" USR1; echo "attempt $LAUNCHERS_ATTEMPT"; '
                        f'test -e {flag} && exit 0; touch {flag}; sleep 60 & wait']  # fmt: skip
    with experiment(tmp_path / "xp", slurm):
        job = command(argv, resumable=True).submit()
        wait_for(lambda: job.state is JobState.RUNNING and flag.exists(), 30)
        first_id = job.native_id
        subprocess.run(["scancel", "--batch", "--signal=USR1", job.native_id or ""], check=True)
        wait_for(lambda: job.attempt == 2, 30)
        deadline = time.monotonic() + 30
        while job.state is not JobState.COMPLETED and time.monotonic() < deadline:
            subprocess.run(
                ["scontrol", "update", f"JobId={job.native_id}", "StartTime=now"],
                capture_output=True,
            )
            time.sleep(0.3)
    assert job.state is JobState.COMPLETED and job.attempt == 2 and job.native_id == first_id
    out = job.stdout_path.read_text()
    assert "got-usr1" in out and "attempt 2" in out
    assert [m.group(1) for m in map(BANNER.match, out.splitlines()) if m] == ["1", "2"]
    assert json.loads((job.directory / "job.rc").read_text())["attempt"] == 2
    r = rec(job)
    states = [h[1] for h in r["history"]]
    assert "PENDING" in states[states.index("RUNNING") :]  # requeued: back to PENDING
    assert len(r["attempts"]) == 1 and r["attempts"][0]["native_id"] == first_id
    assert r["attempts"][0].get("cause")
    # the requeued attempt is summarised as ended, not left RUNNING
    assert r["attempts"][0]["state"] == "REQUEUED" and r["attempts"][0]["ended_at"]
