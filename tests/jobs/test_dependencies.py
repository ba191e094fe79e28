"""Jobs that wait for other jobs (docs/design/runtime.md §15): the pure decision as a table, the
edges and identities, then graphs on the direct launcher (results passed along, failures,
reruns, another experiment directory). The real Slurm's side: test_dependencies_slurm.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import dependencies_tasks as dt
import launchers
from launchers import command, experiment
from launchers.config.model import LocalGroup
from launchers.errors import ExperimentFailed, TaskError
from launchers.jobs.depends import (
    ANY,
    OK,
    DepState,
    Edge,
    End,
    Submit,
    Wait,
    decide_dependent,
    decide_tally,
    edges_of,
    finished,
    held_by_slurm,
    merge_edges,
    satisfied,
    slurm_dependency,
    slurm_directives,
)
from launchers.jobs.record import read_record
from launchers.jobs.state import JobState
from launchers.local.launcher import DirectLauncher
from paths import job_pythonpath

S = JobState


@pytest.fixture(autouse=True)
def _job_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Jobs import ``dependencies_tasks`` and ``launchers`` like this process does."""
    src = Path(launchers.__file__).parent.parent
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(src))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))


def direct() -> DirectLauncher:
    return DirectLauncher(group=LocalGroup())  # type: ignore[call-arg]


def edge(name: str, condition: str = OK) -> Edge:
    return Edge(f"{name}-0123456789abcdef", f"/xp/jobs/{name}/0123456789abcdef", condition)


A, B, C = edge("a"), edge("b"), edge("c")
AA = edge("a", ANY)


# -- the decision, as a table ------------------------------------------------------------------

DECISIONS: list[tuple[str, list[DepState], Any]] = [
    ("no dependency", [], Submit()),
    ("all completed", [DepState(A, S.COMPLETED), DepState(B, S.COMPLETED)], Submit()),
    ("one running", [DepState(A, S.COMPLETED), DepState(B, S.RUNNING)],
     Wait("waiting for b-0123456789abcdef (RUNNING)")),
    ("several open: the first named", [DepState(A, S.PENDING), DepState(B, S.WAITING),
                                       DepState(C, S.SUBMITTING)],
     Wait("waiting for a-0123456789abcdef (PENDING) and 2 more")),
    ("failed ends it", [DepState(A, S.RUNNING), DepState(B, S.FAILED)],
     End(S.CANCELLED, "dependency b-0123456789abcdef ended FAILED", "b-0123456789abcdef")),
    ("every unsuccessful end", [DepState(A, S.TIMEOUT)],
     End(S.CANCELLED, "dependency a-0123456789abcdef ended TIMEOUT", "a-0123456789abcdef")),
    ("lost", [DepState(A, S.LOST)],
     End(S.CANCELLED, "dependency a-0123456789abcdef ended LOST", "a-0123456789abcdef")),
    ("cancelled", [DepState(A, S.CANCELLED)],
     End(S.CANCELLED, "dependency a-0123456789abcdef ended CANCELLED", "a-0123456789abcdef")),
    ("a failure wins over waiting", [DepState(A, S.WAITING), DepState(B, S.UNRUNNABLE)],
     End(S.CANCELLED, "dependency b-0123456789abcdef ended UNRUNNABLE", "b-0123456789abcdef")),
    ("finished(): any final state", [DepState(AA, S.FAILED)], Submit()),
    ("finished(): still running", [DepState(AA, S.RUNNING)],
     Wait("waiting for a-0123456789abcdef (RUNNING)")),
    ("native: Slurm holds it", [DepState(A, S.PENDING, "12"), DepState(B, S.RUNNING, "13_4")],
     Submit(((A, "12"), (B, "13_4")))),
    ("native only for the open ones", [DepState(A, S.COMPLETED, "12"), DepState(B, S.RUNNING, "13")],
     Submit(((B, "13"),))),
    ("native and a non-native open one: wait", [DepState(A, S.RUNNING, "12"), DepState(B, S.RUNNING)],
     Wait("waiting for b-0123456789abcdef (RUNNING)")),
    ("native id but not yet in the queue", [DepState(A, S.SUBMITTING, "12")],
     Wait("waiting for a-0123456789abcdef (SUBMITTING)")),
    ("native and failed: ended here too", [DepState(A, S.FAILED, "12")],
     End(S.CANCELLED, "dependency a-0123456789abcdef ended FAILED", "a-0123456789abcdef")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("deps", "expected"), [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS]
)
def test_decide_dependent(deps: list[DepState], expected: Any) -> None:
    assert decide_dependent(deps) == expected


@pytest.mark.parametrize(
    ("deps", "expected"), [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS]
)
def test_decide_tally_agrees(deps: list[DepState], expected: Any) -> None:
    """The graph's incremental form (the open dependencies kept by index, one change read at
    a time) decides as ``decide_dependent`` does over all of them, whatever changed last."""
    open_ = {i: d for i, d in enumerate(deps) if not satisfied(d.edge, d.state)}
    waiting = {i for i, d in open_.items() if not held_by_slurm(d)}
    assert decide_tally(deps, open_, waiting) == expected
    broken_ = [d for d in deps if isinstance(decide_dependent([d]), End)]
    for d in deps:  # told of one change only: ends only for that one's failure
        assert decide_tally([d], open_, waiting) == (
            expected if not broken_ or d is broken_[0] else decide_tally([], open_, waiting)
        )


def test_slurm_dependency_text() -> None:
    assert slurm_dependency([(A, "12"), (B, "13_4")]) == "afterok:12:13_4"
    assert slurm_dependency([(AA, "12"), (B, "13")]) == "afterok:13,afterany:12"
    assert slurm_directives("afterok:12") == (
        "--dependency=afterok:12",
        "--kill-on-invalid-dep=yes",
    )
    assert slurm_directives(None) == ()


def test_edges_merge_and_round_trip() -> None:
    merged = merge_edges([(AA, "j"), (Edge(A.task_id, A.directory, OK, input=True), "j")])
    assert [e for e, _ in merged] == [Edge(A.task_id, A.directory, OK, input=True)]
    extra = {"after": [A.to_json(), AA.to_json()]}
    assert edges_of(extra) == (A, AA)
    with pytest.raises(launchers.LaunchersError, match="not an edge"):
        edges_of({"after": [{"task_id": 1}]})


# -- identities and bad input ------------------------------------------------------------------


def test_job_parameter_is_identity_after_is_not(tmp_path: Path) -> None:
    with experiment(tmp_path / "xp", direct()):
        p1 = dt.prepare(3, tmp_path / "d").submit()
        p2 = dt.prepare(4, tmp_path / "d").submit()
        t1, t2 = dt.train(p1, 0.1), dt.train(p2, 0.1)
        assert t1.params["data"] == {"$job": p1.task_id}
        assert t1.digest != t2.digest  # the same training of another data set: another job
        assert dt.evaluate([p1, {"x": p2}]).params["models"] == [
            {"$job": p1.task_id},
            {"x": {"$job": p2.task_id}},
        ]
        plain = command(["true"])
        j = plain.submit(after=[p1])
        assert j.task_id == plain.task_id  # after= is scheduling only
        assert read_record(j.directory).extra["after"] == [  # type: ignore[union-attr]
            {
                "task_id": p1.task_id,
                "directory": str(p1.directory),
                "condition": "ok",
                "input": False,
            }
        ]


def test_bad_input_is_a_task_error(tmp_path: Path) -> None:
    with experiment(tmp_path / "xp", direct()):
        job = command(["true"]).submit()
        with pytest.raises(TaskError, match=r"argv\[1\] is a Job.*\.directory"):
            command(["cat", job])  # type: ignore[list-item]
        with pytest.raises(TaskError, match=r"env: value of DATA is a Job"):
            command(["cat"], env={"DATA": job})  # type: ignore[dict-item]
        with pytest.raises(TaskError, match=r"after=\[1\]: str is not a Job"):
            command(["echo"]).submit(after=[job, "train-1"])
        with pytest.raises(TaskError, match="expected a list of jobs"):
            command(["echo"]).submit(after=job)  # type: ignore[arg-type]
        with pytest.raises(TaskError, match="finished"):
            finished("job")
        with pytest.raises(TaskError, match="reserved for jobs"):
            dt.evaluate([{"$job": "x"}])
        with pytest.raises(TaskError, match="finished"):
            dt.evaluate([finished(job)])  # finished() is for after= only
        job.wait(30)


# -- graphs on the direct launcher -------------------------------------------------------------


def test_three_stages_results_passed_along(tmp_path: Path) -> None:
    with experiment(tmp_path / "xp", direct()) as xp:
        prep = dt.prepare(4, tmp_path / "data").submit()  # 0+1+2+3 = 6
        trains = [dt.train(prep, lr).submit() for lr in (1.0, 10.0)]
        summary = dt.evaluate(trains, tag="s").submit()
        pairs = dt.pair(5).submit()
        picked = dt.first({"p": pairs}).submit()  # a pickled result, inside a dict
        assert summary.state is S.WAITING
        assert summary.reason is not None and summary.reason.startswith("waiting for train-")
    assert summary.result()["total"] == 66.0
    assert picked.result() == 5
    assert {j.state for j in xp.jobs} == {S.COMPLETED}


def test_failure_ends_dependents_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ExperimentFailed) as info, experiment(tmp_path / "xp", direct()):
        bad = dt.fail("no data").submit()
        mid = dt.mark(marker, bad).submit()
        last = dt.mark(marker, [mid, 1]).submit()
        cleanup = dt.mark(tmp_path / "cleanup").submit(after=[finished(bad)])
        other = command(["true"]).submit(after=[bad, finished(mid)])
    assert not marker.exists()  # nothing of them ran
    assert (tmp_path / "cleanup").exists() and cleanup.state is S.COMPLETED
    assert (bad.state, mid.state, last.state, other.state) == (S.FAILED, *[S.CANCELLED] * 3)
    assert mid.reason == f"dependency {bad.task_id} ended FAILED"
    assert last.reason == f"dependency {mid.task_id} ended CANCELLED"
    message = str(info.value)
    own, skipped = message.split("did not run because a dependency failed:")
    assert bad.task_id in own and mid.task_id not in own
    assert mid.task_id in skipped and last.task_id in skipped and other.task_id in skipped
    assert set(info.value.jobs) == {bad, mid, last, other}
    with pytest.raises(launchers.JobFailedError, match="dependency"):
        last.result()


def test_rerun_reruns_the_failed_job_then_its_dependents(
    tmp_path: Path, fresh_runtime: Any
) -> None:
    flag = tmp_path / "ok"
    script = [  # a task that fails until the flag file exists
        "sh", "-c", f'test -e {flag}',
    ]  # fmt: skip
    marker = tmp_path / "ran"
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", direct()):
        gate = command(script, name="gate").submit()
        after = dt.mark(marker, 1).submit(after=[gate])
    assert after.state is S.CANCELLED and not marker.exists()
    flag.touch()
    fresh_runtime.reset()  # a new run of the script
    with experiment(tmp_path / "xp", direct()):
        gate = command(script, name="gate").submit()
        after = dt.mark(marker, 1).submit(after=[gate])
    assert (gate.attempt, after.attempt) == (2, 2)
    assert after.state is S.COMPLETED and marker.read_text().count("\n") == 1


def test_dependency_in_another_experiment_directory(tmp_path: Path, fresh_runtime: Any) -> None:
    with experiment(tmp_path / "xp1", direct()):
        prep = dt.prepare(3, tmp_path / "data").submit()
    with experiment(tmp_path / "xp2", direct()):
        model = dt.train(prep, 2.0).submit()
    assert model.result() == 6.0
    edges = edges_of(read_record(model.directory).extra)  # type: ignore[union-attr]
    assert edges[0].directory == str(prep.directory) and Path(edges[0].directory).is_absolute()
    # a new run finds both again: nothing is submitted twice
    fresh_runtime.reset()
    with experiment(tmp_path / "xp1", direct()):
        prep = dt.prepare(3, tmp_path / "data").submit()
    with experiment(tmp_path / "xp2", direct()):
        model = dt.train(prep, 2.0).submit()
        assert model.state is S.COMPLETED and model.attempt == 1


def test_restart_reattaches_waiting_dependents(tmp_path: Path, fresh_runtime: Any) -> None:
    """A client gone while a dependent waits: the next run finds the dependency ended and
    submits the dependent once."""
    release = tmp_path / "release"
    slow = ["sh", "-c", f"while ! test -e {release}; do sleep 0.1; done"]
    xp = experiment(tmp_path / "xp", direct()).__enter__()
    gate = command(slow, name="slow").submit()
    after = dt.mark(tmp_path / "ran", 7).submit(after=[gate])
    assert after.state is S.WAITING
    xp.leave()  # the client "dies": nothing waits for its jobs
    fresh_runtime.reset()
    release.touch()
    with experiment(tmp_path / "xp", direct()):
        gate = command(slow, name="slow").submit()
        after = dt.mark(tmp_path / "ran", 7).submit(after=[gate])
    assert gate.attempt == 1 and after.result() == 7
    assert (tmp_path / "ran").read_text().count("\n") == 1


def test_cancel_of_a_waiting_dependent(tmp_path: Path) -> None:
    release = tmp_path / "release"
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", direct()):
        gate = command(["sh", "-c", f"while ! test -e {release}; do sleep 0.1; done"]).submit()
        after = command(["true"]).submit(after=[gate])
        later = command(["echo"]).submit(after=[after])
        after.cancel()
        assert after.state is S.CANCELLED and after.reason == "cancelled on request"
        release.touch()
    assert gate.state is S.COMPLETED
    assert (
        later.state is S.CANCELLED and later.reason == f"dependency {after.task_id} ended CANCELLED"
    )


def test_jobs_and_status_commands_show_what_a_job_waits_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from launchers.cli.main import main

    release = tmp_path / "release"
    with experiment(tmp_path / "xp", direct()):
        gate = command(["sh", "-c", f"while ! test -e {release}; do sleep 0.1; done"]).submit()
        done = command(["true"], name="quick").submit()
        done.wait(30)
        after = command(["echo"], name="after").submit(after=[gate, finished(done)])
        deadline = time.monotonic() + 30
        while gate.state is not S.RUNNING and time.monotonic() < deadline:
            time.sleep(0.02)
        assert main(["jobs", str(tmp_path / "xp")]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if "after-" in line)
        assert f"waiting for {gate.task_id} (" in row
        assert f"after {gate.task_id} (RUNNING), {done.task_id} (COMPLETED, any end)" in row
        assert main(["jobs", "--json", str(tmp_path / "xp")]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        (mine,) = [r for r in rows if r["task_id"] == after.task_id]
        assert [(a["task_id"], a["condition"], a["state"]) for a in mine["after"]] == [
            (gate.task_id, "ok", "RUNNING"),
            (done.task_id, "any", "COMPLETED"),
        ]
        # launchers status: why this job is not running, one line
        assert main(["status", "--no-refresh", str(after.directory)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert f"waits for: {gate.task_id} (RUNNING), {done.task_id} (COMPLETED, any end)" in lines
        assert main(["status", "--no-refresh", "--json", str(after.directory)]) == 0
        data = json.loads(capsys.readouterr().out)
        assert [a["state"] for a in data["after"]] == ["RUNNING", "COMPLETED"]
        release.touch()
    assert after.state is S.COMPLETED


def test_a_job_slurm_cancelled_first_gets_the_dependency_reason(tmp_path: Path) -> None:
    """Slurm's own cancel of a natively held dependent (--kill-on-invalid-dep) may be read
    before its dependency's failure: the reason becomes the dependency's, and later answers
    about the ended job change nothing."""
    from launchers.jobs.graph import FOLLOW, Graph
    from launchers.jobs.job import Job
    from launchers.jobs.record import StateRecord, write_record
    from launchers.jobs.update import StateUpdate

    def job(name: str, state: S) -> Job:
        d = tmp_path / name
        d.mkdir()
        record = StateRecord(task_id=f"{name}-0123456789abcdef", state=state, native_id="7")
        write_record(d, record)
        return Job(None, d, record)

    dep, dependent = job("dep", S.RUNNING), job("dependent", S.PENDING)
    graph = Graph()
    graph.hold(dependent, [(Edge(dep.task_id, str(dep.directory)), dep)], FOLLOW)
    dependent.apply(StateUpdate(state=S.CANCELLED, reason="cancelled by uid 0"))
    dep.apply(StateUpdate(state=S.FAILED, reason="exit code 1"))
    assert (dependent.state, dependent.reason) == (
        S.CANCELLED,
        f"dependency {dep.task_id} ended FAILED",
    )
    assert read_record(dependent.directory).extra["dependency_failed"] == dep.task_id  # type: ignore[union-attr]
    dependent.apply(
        StateUpdate(state=S.CANCELLED, reason="cancelled by uid 0", slurm_state="CANCELLED")
    )
    assert dependent.reason == f"dependency {dep.task_id} ended FAILED"
    assert not graph.waiting_for(dependent)


def test_a_cancel_from_another_process_reaches_a_held_dependent(tmp_path: Path) -> None:
    """``launchers cancel`` in another process marks the record; the process holding the
    dependent ends it when it next decides, and never submits it."""
    from launchers.jobs.record import write_record

    release = tmp_path / "release"
    marker = tmp_path / "ran"
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", direct()):
        gate = command(["sh", "-c", f"while ! test -e {release}; do sleep 0.1; done"]).submit()
        after = dt.mark(marker, 1).submit(after=[gate])
        disk = read_record(after.directory)
        assert disk is not None
        write_record(after.directory, disk.transition(extra={"cancel_requested": disk.attempt}))
        release.touch()
    assert after.state is S.CANCELLED and after.reason == "cancelled on request"
    assert not marker.exists()


def test_launchers_cancel_of_a_waiting_dependent(tmp_path: Path) -> None:
    """``launchers cancel`` (another process) of a job held for its dependencies: the holding
    process ends it within a second, and the command sees it end."""
    import subprocess
    import sys

    release = tmp_path / "release"
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", direct()):
        gate = command(["sh", "-c", f"while ! test -e {release}; do sleep 0.1; done"]).submit()
        after = command(["echo", "hi"], name="after").submit(after=[gate])
        out = subprocess.run([sys.executable, "-m", "launchers", "cancel", str(after.directory),
                              "--timeout", "10"], capture_output=True, text=True, timeout=30)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"{after.task_id}\tCANCELLED"
        assert after.state is S.CANCELLED and after.reason == "cancelled on request"
        release.touch()
    assert gate.state is S.COMPLETED and not after.stdout_path.exists()


def test_a_waiting_dependents_newer_reasons_are_written_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dependent of N jobs is decided again at each of their changes: its first reason is
    written at once, the newer ones are kept in memory and written by the graph's record check
    (at most once per RECORD_CHECK s), so a fan-in of N costs no N record writes of N edges;
    a cancel another process recorded meanwhile is never overwritten."""
    import launchers.jobs.job as job_module
    from launchers.jobs import graph as graph_module
    from launchers.jobs.graph import Graph
    from launchers.jobs.job import Job
    from launchers.jobs.record import StateRecord, write_record
    from launchers.jobs.update import StateUpdate

    monkeypatch.setattr(graph_module, "RECORD_CHECK", 0.05)

    def job(name: str, state: S) -> Job:
        d = tmp_path / name
        d.mkdir()
        record = StateRecord(task_id=f"{name}-0123456789abcdef", state=state)
        write_record(d, record)
        return Job(None, d, record)

    deps = [job(f"dep{i}", S.PENDING) for i in range(20)]
    dependent = job("dependent", S.WAITING)
    writes: list[Path] = []
    real_write = job_module.write_record

    def counting(directory: Any, record: Any, **kw: Any) -> None:
        writes.append(Path(directory))
        real_write(directory, record, **kw)

    monkeypatch.setattr(job_module, "write_record", counting)
    check = Graph._watch_records
    monkeypatch.setattr(Graph, "_watch_records", lambda self: None)  # the check, by hand first
    graph = Graph()
    graph.hold(dependent, [(Edge(d.task_id, str(d.directory)), d) for d in deps])
    first = f"waiting for {deps[0].task_id} (PENDING) and 19 more"
    assert dependent.reason == first == read_record(dependent.directory).reason  # type: ignore[union-attr]
    for d in deps[:10]:  # 20 changes, 20 new reasons
        d.apply(StateUpdate(state=S.RUNNING))
        d.apply(StateUpdate(state=S.COMPLETED))
    newest = f"waiting for {deps[10].task_id} (PENDING) and 9 more"
    assert dependent.reason == newest  # in memory at once
    assert writes.count(dependent.directory) == 1  # the first reason only
    assert read_record(dependent.directory).reason == first  # type: ignore[union-attr]
    assert dependent.write_pending() and not dependent.write_pending()  # what the check does
    assert read_record(dependent.directory).reason == newest  # type: ignore[union-attr]
    assert writes.count(dependent.directory) == 2
    monkeypatch.setattr(Graph, "_watch_records", check)
    graph._watch_records()  # the real check, every RECORD_CHECK s, from now on
    deps[10].apply(StateUpdate(state=S.RUNNING))
    running = f"waiting for {deps[10].task_id} (RUNNING) and 9 more"
    deadline = time.monotonic() + 10
    while read_record(dependent.directory).reason != running and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.02)
    assert read_record(dependent.directory).reason == running  # type: ignore[union-attr]
    # another process asks for a cancel: a newer reason never overwrites its mark
    disk = read_record(dependent.directory)
    assert disk is not None
    write_record(dependent.directory, disk.transition(extra={"cancel_requested": disk.attempt}))
    deps[10].apply(StateUpdate(state=S.COMPLETED))
    assert not dependent.write_pending()
    deadline = time.monotonic() + 10
    while dependent.state is not S.CANCELLED and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dependent.state is S.CANCELLED and dependent.reason == "cancelled on request"
    assert not graph.holds(dependent)


_GRAPH_CLIENT = """
import sys, time
from pathlib import Path
import dependencies_tasks as dt
from launchers import command, experiment
from launchers.local.launcher import DirectLauncher
tmp = Path(sys.argv[1])
slow = ["sh", "-c", f"while ! test -e {tmp / 'release'}; do sleep 0.1; done"]
with experiment(tmp / "xp", DirectLauncher(), progress=False):
    gate = command(slow, name="slow").submit()
    after = dt.mark(tmp / "ran", 7).submit(after=[gate])
    (tmp / f"attached-{sys.argv[2]}").touch()
    if sys.argv[2] == "owner":
        time.sleep(600)  # killed by the test while the dependent waits
print(after.state.value, after.result())
"""


def test_an_observer_takes_over_a_waiting_dependent_when_its_owner_dies(tmp_path: Path) -> None:
    """Two runs of one script: the first holds the dependent, the second observes it. The first
    is SIGKILLed: the second takes the dependent over, still waits for its dependency (it is
    not submitted early), then runs it once."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "client.py"
    script.write_text(_GRAPH_CLIENT)

    def start(role: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(script), str(tmp_path), role],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

    def wait_for(what: Any, why: str) -> None:
        deadline = time.monotonic() + 60
        while not what():
            assert time.monotonic() < deadline, why
            time.sleep(0.05)

    owner = start("owner")
    wait_for((tmp_path / "attached-owner").exists, "the owner never submitted")
    observer = start("observer")
    wait_for((tmp_path / "attached-observer").exists, "the observer never attached")
    after_dir = next((tmp_path / "xp" / "jobs" / "mark").iterdir())
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(10)

    def taken_over() -> bool:
        rec = read_record(after_dir)
        return rec is not None and (rec.extra.get("owner") or {}).get("pid") == observer.pid

    wait_for(taken_over, "the observer did not take the dependent over")
    time.sleep(0.5)  # a wrong takeover would submit it now, before its dependency ended
    rec = read_record(after_dir)
    assert rec is not None and rec.state is JobState.WAITING and rec.reason
    assert "waiting for" in rec.reason and not (tmp_path / "ran").exists()
    (tmp_path / "release").touch()
    out, err = observer.communicate(timeout=60)
    assert observer.returncode == 0, err
    assert out.split() == ["COMPLETED", "7"]
    assert (tmp_path / "ran").read_text().count("\n") == 1
