"""Tasks, identities, the state record and experiment rules (docs/design/runtime.md §1, §2); fast."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import jobs_tasks as tt
import launchers
from launchers.errors import LaunchersError, TaskError
from launchers.jobs.record import HISTORY_LIMIT, StateRecord, read_record, write_record
from launchers.jobs.state import JobState
from launchers.jobs.task import canonical_json, command, sanitize_name, task
from launchers.local.launcher import DirectLauncher


def test_public_names() -> None:
    assert launchers.JobState is JobState
    assert launchers.command is command
    assert launchers.task is task
    for name in ("Job", "Task", "experiment"):
        assert getattr(launchers, name) is not None


def test_states() -> None:
    final = {s.value for s in JobState if s.is_final}
    assert final == {
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
        "PREEMPTED", "BOOT_FAIL", "DEADLINE", "UNRUNNABLE", "LOST",
    }  # fmt: skip
    assert {s.value for s in JobState if not s.is_final} == {
        "WAITING", "SUBMITTING", "PENDING", "RUNNING", "SUSPENDED",
    }  # fmt: skip


def test_command_identity_is_sha256_of_canonical_json() -> None:
    t = command(["/usr/bin/python3", "-c", "print(1)"], env={"A": "1"})
    assert t.name == "python3"
    ident = {"kind": "command", "target": ["/usr/bin/python3", "-c", "print(1)"], "params": {},
             "env": {"A": "1"}, "cwd": None}  # fmt: skip
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    assert canonical_json(t.identity()) == text
    assert t.digest == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert t.task_id == f"python3-{t.digest}"
    # the digest does not depend on the name or the launcher
    assert (
        command(["/usr/bin/python3", "-c", "print(1)"], env={"A": "1"}, name="x").digest == t.digest
    )
    assert command(["echo"], cwd="/tmp").digest != command(["echo"]).digest


def test_callable_identity_and_paths() -> None:
    t = tt.touch(Path("/tmp/a b"), "x")
    assert t.kind == "callable"
    assert t.name == "pathy"
    assert t.target == "jobs_tasks:touch"
    assert t.params == {"path": {"$path": "/tmp/a b"}, "text": "x"}
    assert tt.add(1).params == {"a": 1, "b": 10}
    assert tt.add(1).digest == tt.add(a=1, b=10).digest
    assert tt.add(1).digest != tt.add(2).digest
    assert tt.add(1).name == "add"


def test_name_sanitised() -> None:
    assert sanitize_name("a b/c$d-é.x") == "a_b_c_d-_.x"
    assert sanitize_name("..") == "__"
    assert command(["./my tool"]).name == "my_tool"


def test_bad_parameters_name_the_parameter() -> None:
    with pytest.raises(TaskError, match=r"parameter b: a value of type object"):
        tt.add(1, object())
    with pytest.raises(TaskError, match=r"parameter a\[1\]"):
        tt.add([1, {2}])
    with pytest.raises(TaskError, match="NaN"):
        tt.add(float("nan"))
    with pytest.raises(TaskError, match="unexpected keyword"):
        tt.add(1, c=2)


def test_refused_functions() -> None:
    with pytest.raises(TaskError, match="lambda"):
        task(lambda: 1)

    def inner() -> None:
        pass

    with pytest.raises(TaskError, match="closure"):
        task(inner)

    def fake_main() -> None:
        pass

    fake_main.__module__ = "__main__"
    fake_main.__qualname__ = "fake_main"
    with pytest.raises(TaskError, match="__main__"):
        task(name="x")(fake_main)


def test_command_validation() -> None:
    with pytest.raises(TaskError, match="non-empty"):
        command([])
    with pytest.raises(TaskError, match="single string"):
        command("echo hi")  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="argv\\[1\\]"):
        command(["echo", 3])  # type: ignore[list-item]
    with pytest.raises(TaskError, match="variable name"):
        command(["echo"], env={"1X": "a"})


def test_record_roundtrip_and_history_limit(tmp_path: Path) -> None:
    rec = StateRecord(task_id="t-1")
    for i in range(HISTORY_LIMIT + 20):
        rec = rec.transition(JobState.RUNNING if i % 2 else JobState.PENDING, f"step {i}")
    assert len(rec.history) == HISTORY_LIMIT
    assert rec.history[-1][2] == f"step {HISTORY_LIMIT + 19}"
    rec = rec.transition(extra={"process": {"pid": 1}})
    write_record(tmp_path, rec)
    data = json.loads((tmp_path / "state.json").read_text())
    for key in ("format", "task_id", "state", "attempt", "launcher", "native_id", "cluster",
                "job_name", "submitted_at", "started_at", "ended_at", "exit_code", "signal",
                "reason", "slurm_state", "attempts", "history"):  # fmt: skip
        assert key in data, key
    assert data["format"] == 1
    assert read_record(tmp_path) == rec
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary file left behind


def test_submit_needs_experiment_and_launcher(tmp_path: Path) -> None:
    t = command(["true"])
    with pytest.raises(LaunchersError, match="no experiment and no launcher"):
        t.submit()
    with pytest.raises(LaunchersError, match="no experiment is active"):
        t.submit(DirectLauncher())
    with launchers.experiment(tmp_path), pytest.raises(LaunchersError, match="no launcher"):
        t.submit()


def test_relative_cwd_is_refused() -> None:
    """A relative cwd would be resolved on the node, not where the experiment started."""
    import pytest

    from launchers import TaskError, command

    with pytest.raises(TaskError, match="relative"):
        command(["true"], cwd="data")
    assert command(["true"], cwd="/tmp").cwd == "/tmp"


def test_params_json_holds_exactly_the_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/design/runtime.md §2: params.json is ``{kind, target, params, env, cwd}``, nothing else."""
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    from launchers.config.model import LocalGroup

    with launchers.experiment(tmp_path / "xp", DirectLauncher(group=LocalGroup()), progress=False):
        job = command(["true"], env={"A": "1"}).submit()
    data = json.loads((job.directory / "params.json").read_text())
    assert set(data) == {"kind", "target", "params", "env", "cwd"}
    assert data["target"] == ["true"] and data["env"] == {"A": "1"}


def test_non_ascii_identity_is_json_dumps_default() -> None:
    """The digest is recomputable with ``json.dumps(sort_keys=True, separators=(",", ":"))``
    also for non-ASCII values and a lone surrogate (an argv that was not UTF-8)."""
    t = command(["echo", "héllo wörld", "\udcff"], env={"E": "ü"})
    text = json.dumps(t.identity(), sort_keys=True, separators=(",", ":"))
    assert t.digest == hashlib.sha256(text.encode()).hexdigest()[:16]
