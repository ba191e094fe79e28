"""Counter tokens (docs/design/runtime.md §11): across processes, dead holders, n > N, WAITING."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launchers.config.loader import load_config
from launchers.errors import LaunchersError
from launchers.jobs.experiment import experiment
from launchers.jobs.proc import ProcessId
from launchers.jobs.record import read_record
from launchers.jobs.task import command
from launchers.local import tokens
from launchers.local.launcher import DirectLauncher


def _config(tmp_path: Path, total: int, need: int) -> Path:
    path = tmp_path / "launchers.yaml"
    path.write_text(
        f"tokens: {{gpu: {total}}}\nlocal:\n  - id: here\n    tokens: {{gpu: {need}}}\n"
    )
    return path


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))


def test_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert tokens.token_dir("gpu") == tmp_path / "state" / "tokens" / "gpu"
    monkeypatch.delenv("LAUNCHERS_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", "/x/y")
    assert tokens.token_dir("gpu") == Path("/x/y/launchers/tokens/gpu")


def test_all_or_none_and_dead_holders(tmp_path: Path) -> None:
    started: list[str] = []

    def start() -> ProcessId:
        started.append("x")
        return ProcessId.current()

    # a dead holder (a finished process) keeps no units
    dead = subprocess.Popen(["true"])
    dead.wait()
    holder = tokens.holder_path("a", "dead-task")
    holder.parent.mkdir(parents=True)
    holder.write_text(
        json.dumps({"count": 1, "pid": dead.pid, "pid_start": 1, "boot_id": "", "host": ""})
    )
    assert isinstance(tokens.acquire_and_start({"a": 1}, {"a": 1}, "t1", "/d", start), ProcessId)
    assert not holder.exists()
    # "a" is now full: asking for a and b takes neither
    reason = tokens.acquire_and_start({"a": 1, "b": 1}, {"a": 1, "b": 5}, "t2", "/d", start)
    assert reason == "waiting for token a, 0 of 1 free"
    assert not tokens.holder_path("b", "t2").exists() and started == ["x"]
    # N read at each acquire: raising it lets the job start
    assert isinstance(
        tokens.acquire_and_start({"a": 1, "b": 1}, {"a": 2, "b": 5}, "t2", "/d", start), ProcessId
    )
    assert tokens.held("a")[0] == 2 and tokens.held("b")[0] == 1
    tokens.release(["a", "b"], "t2")
    assert tokens.held("a")[0] == 1


def test_more_than_total_is_refused_at_submission(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, total=3, need=3))
    _config(tmp_path, total=2, need=2)  # the total is edited after the launcher was found
    launcher = DirectLauncher(group=cfg.groups[0])  # type: ignore[arg-type]
    with (
        experiment(tmp_path / "xp", launcher),
        pytest.raises(LaunchersError, match="needs 3 units"),
    ):
        command(["true"]).submit()


_CLIENT = textwrap.dedent(
    """
    import sys, time
    from launchers.config.loader import load_config
    from launchers.jobs.experiment import experiment
    from launchers.jobs.task import command
    from launchers.local.launcher import DirectLauncher
    group = load_config({cfg!r}).groups[0]
    reasons = set()
    with experiment({xp!r}, DirectLauncher(group=group), progress=False):
        hold = "date +%s.%N; while [ ! -e {release} ]; do sleep 0.02; done; date +%s.%N"
        job = command(["sh", "-c", hold], name=sys.argv[1]).submit()
        while not job.state.is_final:
            if job.reason:
                reasons.add(job.reason)
            time.sleep(0.02)
    print(job.state.value, sorted(reasons))
    """
)


def _someone_waits_for_the_token(xp: Path) -> bool:
    for path in xp.glob("jobs/job*/*"):
        rec = read_record(path)
        if rec is not None and "waiting for token gpu" in (rec.reason or ""):
            return True
    return False


def test_tokens_across_processes(tmp_path: Path) -> None:
    cfg = _config(tmp_path, total=1, need=1)
    script = tmp_path / "client.py"
    release = tmp_path / "release"
    script.write_text(_CLIENT.format(cfg=str(cfg), xp=str(tmp_path / "xp"), release=str(release)))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), f"job{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for i in range(2)
    ]
    # the job that got the token runs until one waits for it (however slow the second start)
    deadline = time.monotonic() + 60
    while not _someone_waits_for_the_token(tmp_path / "xp"):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    release.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out)
    assert all(o.startswith("COMPLETED") for o in outs)
    assert any("waiting for token gpu, 0 of 1 free" in o for o in outs), outs
    spans = []
    for i in range(2):
        out = next((tmp_path / "xp" / "jobs" / f"job{i}").iterdir()) / "job.out"
        lines = out.read_text().splitlines()
        spans.append((float(lines[1]), float(lines[2])))
    spans.sort()
    assert spans[0][1] <= spans[1][0], f"the two jobs overlapped: {spans}"
    assert tokens.held("gpu") == (0, [])
    assert not list((tokens.token_dir("gpu") / "holders").iterdir())


def test_more_than_total_in_the_file_loads_and_is_refused_at_submission(tmp_path: Path) -> None:
    """docs/design/runtime.md §11: n > N is an error at submission (N may still be raised), not at load."""
    cfg = load_config(_config(tmp_path, total=2, need=3))
    launcher = DirectLauncher(group=cfg.groups[0])  # type: ignore[arg-type]
    with (
        experiment(tmp_path / "xp", launcher),
        pytest.raises(LaunchersError, match="needs 3 units"),
    ):
        command(["true"]).submit()


def test_tokens_on_a_remote_group_built_in_code_are_a_configuration_error(tmp_path: Path) -> None:
    from launchers.config.model import LocalGroup
    from launchers.errors import ConfigurationError

    launcher = DirectLauncher(group=LocalGroup(id="x", connector="cl", tokens=(("a", 1),)))
    with (
        experiment(tmp_path / "xp", launcher),
        pytest.raises(ConfigurationError, match="only with the local"),
    ):
        command(["true"]).submit()
