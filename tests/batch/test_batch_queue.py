"""The queue protocol and the runner, run directly as local subprocesses (no Slurm)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launchers.batch import queue as Q
from launchers.batch import runner as R


def entry(tmp: Path, task_id: str, argv: list[str], **more: Any) -> dict[str, Any]:
    d = tmp / "jobs" / task_id
    d.mkdir(parents=True, exist_ok=True)
    return {
        "id": task_id,
        "dir": str(d),
        "argv": argv,
        "env": {},
        "cwd": None,
        "max_attempts": 3,
        **more,
    }


def start_runner(queue: Path, *args: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(queue / "runner.py"), "--queue", str(queue), *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def done(queue: Path, task_id: str) -> dict[str, Any]:
    value = Q.read_done(queue, task_id)
    assert value is not None, f"{task_id} not done: {sorted(os.listdir(queue / 'running'))}"
    return value


def wait_for(pred: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


@pytest.mark.timing
def test_runs_tasks_in_parallel_and_lingers(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    for i in range(6):
        Q.publish(
            queue,
            entry(tmp_path, f"t{i}", ["sh", "-c", f"sleep 0.3; echo out{i}; echo err{i} >&2"]),
        )
    t0 = time.monotonic()
    p = start_runner(queue, "--slots", "3", "--linger", "0.5")
    assert p.wait(20) == 0
    elapsed = time.monotonic() - t0
    assert elapsed < 3.5  # 2 waves of 0.3 s + linger, not 6 x 0.3 s sequentially
    for i in range(6):
        d = done(queue, f"t{i}")
        assert d["state"] == "COMPLETED" and d["rc"] == 0 and d["attempt"] == 1
        jd = tmp_path / "jobs" / f"t{i}"
        rc = json.loads((jd / "job.rc").read_text())
        assert rc["rc"] == 0 and rc["attempt"] == 1
        out = (jd / "job.out").read_text()
        assert out.startswith("==== launchers: attempt 1, job ") and f"out{i}" in out
        assert f"err{i}" in (jd / "job.err").read_text()
    assert not os.listdir(queue / "pending") and not os.listdir(queue / "running")
    beats = Q.read_runners(queue)
    assert len(beats) == 1 and beats[0]["slots"] == 3


def test_failure_is_final_and_not_retried(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "bad", ["sh", "-c", "exit 3"]))
    assert start_runner(queue, "--linger", "0.2").wait(20) == 0
    d = done(queue, "bad")
    assert d["state"] == "FAILED" and d["rc"] == 3 and d["attempt"] == 1


def test_two_runners_claim_each_task_exactly_once(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    log = tmp_path / "log"
    n = 40
    for i in range(n):
        Q.publish(
            queue, entry(tmp_path, f"t{i}", ["sh", "-c", f"echo t{i} $LAUNCHERS_RUNNER >> {log}"])
        )
    a = start_runner(queue, "--slots", "4", "--linger", "0.5", "--runner-id", "A")
    b = start_runner(queue, "--slots", "4", "--linger", "0.5", "--runner-id", "B")
    assert a.wait(30) == 0 and b.wait(30) == 0
    lines = log.read_text().split()
    ids = lines[0::2]
    assert sorted(ids) == sorted(f"t{i}" for i in range(n))
    runners = {done(queue, f"t{i}")["runner"] for i in range(n)}
    assert runners <= {"A", "B"}


@pytest.mark.timing
def test_timeout_term_then_kill(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "stubborn", ["sh", "-c", "trap '' TERM; sleep 30"], timeout=1))
    t0 = time.monotonic()
    assert start_runner(queue, "--linger", "0.2", "--kill-grace", "1").wait(20) == 0
    assert time.monotonic() - t0 < 6
    d = done(queue, "stubborn")
    assert d["state"] == "TIMEOUT" and d["signal"] == signal.SIGKILL


@pytest.mark.timing
def test_drain_never_starts_a_task_that_cannot_finish(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "long", ["true"], duration=8))
    t0 = time.monotonic()
    p = start_runner(queue, "--walltime", "10", "--drain-margin", "5", "--linger", "30")
    assert p.wait(20) == 0
    assert time.monotonic() - t0 < 5  # drained at once instead of lingering
    assert "long" in Q.scan(queue).pending  # still pending for a fresh pilot


def test_cancel_running_task(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "c", ["sleep", "30"]))
    Q.publish(queue, entry(tmp_path, "p", ["true"], seq=time.time_ns() + 10**12))
    p = start_runner(queue, "--linger", "0.2", "--kill-grace", "1", "--slots", "1")
    wait_for(lambda: "c" in Q.scan(queue).running)
    assert Q.cancel_task(queue, "c") == "requested"
    assert p.wait(20) == 0
    assert done(queue, "c")["state"] == "CANCELLED"
    assert done(queue, "p")["state"] == "COMPLETED"


def test_cancel_pending_task(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "x", ["true"]))
    assert Q.cancel_task(queue, "x") == "cancelled"
    assert done(queue, "x")["state"] == "CANCELLED"
    assert not Q.scan(queue).pending


def test_truncated_entry_is_never_run(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    e = entry(tmp_path, "trunc", ["sh", "-c", "echo ran > ran"])
    text = json.dumps(e)
    (queue / "pending" / R.pending_name(1, "trunc")).write_text(text[: len(text) // 2])
    t0 = time.monotonic()
    assert start_runner(queue, "--linger", "1.5").wait(20) == 0
    assert time.monotonic() - t0 >= 1.5  # lingered: a truncated entry is no reason to drain
    assert not (tmp_path / "jobs" / "trunc" / "ran").exists()
    assert "trunc" in Q.scan(queue).pending


def test_usr1_stops_claiming(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "first", ["sleep", "1"]))
    p = start_runner(queue, "--linger", "30", "--slots", "1")
    wait_for(lambda: "first" in Q.scan(queue).running)
    p.send_signal(signal.SIGUSR1)
    Q.publish(queue, entry(tmp_path, "second", ["true"]))
    assert p.wait(20) == 0  # finished "first", claimed nothing more, did not linger
    assert done(queue, "first")["state"] == "COMPLETED"
    assert "second" in Q.scan(queue).pending


def test_sigkill_mid_task_gives_attempt_two(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    marker = tmp_path / "alive"
    Q.publish(
        queue,
        entry(
            tmp_path,
            "k",
            ["sh", "-c", f"if [ $LAUNCHERS_ATTEMPT = 1 ]; then sleep 30; touch {marker}; fi"],
        ),
    )
    a = start_runner(queue, "--linger", "30", "--runner-id", "A")
    out_file = tmp_path / "jobs" / "k" / "job.out"
    # the claim names its runner and the task started (its banner): only then is A mid-task
    wait_for(lambda: (Q.read_running(queue, "k") or {}).get("runner") == "A", timeout=30)
    wait_for(lambda: out_file.exists() and "attempt 1," in out_file.read_text(), timeout=30)
    a.kill()
    a.wait()
    # the pilot is final: the manager re-queues its claims once
    assert Q.recover(queue, final_natives=[str(os.getpid())]) == ["k"]
    assert Q.recover(queue, final_natives=[str(os.getpid())]) == []
    b = start_runner(queue, "--linger", "0.2", "--runner-id", "B")
    assert b.wait(20) == 0
    d = done(queue, "k")
    assert d["state"] == "COMPLETED" and d["attempt"] == 2 and d["runner"] == "B"
    out = out_file.read_text()
    assert "attempt 1," in out and "attempt 2," in out
    assert "runner A lost, task re-queued" in (tmp_path / "jobs" / "k" / "job.err").read_text()
    time.sleep(0.2)
    assert not marker.exists()  # the orphan died with its runner (PR_SET_PDEATHSIG)


def test_sigkill_of_the_runner_kills_what_the_task_started(tmp_path: Path) -> None:
    """The parent-death signal reaches the task's first process only; the runner's guard kills
    the task's whole process group, grandchildren included (docs/design/pilots.md §3.4: a task never
    outlives a killed runner, even where Slurm does not track processes by cgroup)."""
    queue = Q.ensure_queue(tmp_path / "q")
    pidfile = tmp_path / "grandchild.pid"
    Q.publish(queue, entry(tmp_path, "g", ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"]))
    runner = start_runner(queue, "--linger", "30", "--runner-id", "A")
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
    grandchild = int(pidfile.read_text())
    runner.kill()
    runner.wait()

    def gone() -> bool:
        try:
            with open(f"/proc/{grandchild}/stat") as f:
                return f.read().split(") ")[-1].split()[0] == "Z"  # a zombie is dead
        except FileNotFoundError:
            return True

    wait_for(gone, timeout=10)


def test_stale_heartbeat_is_recovered_by_next_runner(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(
        queue,
        entry(tmp_path, "s2", ["sh", "-c", "[ $LAUNCHERS_ATTEMPT != 1 ] || exec sleep 30"], seq=1),
    )
    a = start_runner(queue, "--linger", "30", "--runner-id", "A", "--slots", "1")
    # the claim is complete once the running entry names its runner (the rename comes first;
    # a runner killed in between leaves a claim aged by its file, not by A's heartbeat)
    wait_for(lambda: (Q.read_running(queue, "s2") or {}).get("runner") == "A", timeout=30)
    Q.publish(queue, entry(tmp_path, "s", ["true"]))
    a.kill()
    a.wait()
    old = time.time() - 100
    os.utime(queue / "runners" / "A.json", (old, old))
    b = start_runner(queue, "--linger", "0.5", "--runner-id", "B", "--lost-after", "50")
    assert b.wait(60) == 0
    assert done(queue, "s")["state"] == "COMPLETED"
    assert done(queue, "s2")["attempt"] == 2


def test_gives_up_after_max_attempts(tmp_path: Path) -> None:
    queue = Q.ensure_queue(tmp_path / "q")
    Q.publish(queue, entry(tmp_path, "g", ["true"], attempt=3, max_attempts=3))
    assert start_runner(queue, "--linger", "0.2").wait(20) == 0
    d = done(queue, "g")
    assert d["state"] == "FAILED"
    assert d["reason"] == "gave up after 3 attempts, the runner was lost each time"


def test_runner_script_is_python38_compatible() -> None:
    import ast

    source = Q.runner_source().decode()
    ast.parse(source, feature_version=(3, 8))
    imports = {
        n.names[0].name.split(".")[0]
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Import)
    }
    imports |= {
        n.module.split(".")[0]
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ImportFrom) and n.module
    }
    assert imports <= set(sys.stdlib_module_names)


def test_pending_names_round_trip_and_sort_fifo() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    names = st.text(alphabet="abcXYZ019_.-", min_size=1, max_size=12)
    ids = st.builds(
        lambda n, d: f"{n}-{d:016x}", names, st.integers(min_value=0, max_value=2**64 - 1)
    )

    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(st.tuples(st.integers(min_value=0, max_value=2**63), ids), min_size=1, max_size=20)
    )
    def check(items: list[tuple[int, str]]) -> None:
        names = [R.pending_name(seq, tid) for seq, tid in items]
        assert [R.split_pending(n) for n in names] == items
        assert R.split_pending(".tmp-" + items[0][1]) is None

    check()
