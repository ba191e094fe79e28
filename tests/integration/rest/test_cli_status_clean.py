"""``launchers status`` and ``launchers clean`` (the commands printed by ``launchers run`` on Ctrl-C,
docs/design/sites.md §3.2, §3.4): records read from disk, one refresh through the executor, and
UNICORE jobs destroyed at the loopback site on the real Slurm."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchers.cli.main import main
from launchers.jobs.record import StateRecord, read_record, write_record
from launchers.jobs.state import JobState
from remote_fixtures import make_project, unicore_server_fixture  # noqa: F401 - fixtures
from servers.unicore import UnicoreServer


def fake_job(workdir: Path, kind: str = "local", state: JobState = JobState.COMPLETED) -> Path:
    """A job directory with a hand-written record (no process, no site)."""
    d = workdir / "jobs" / "train" / "0123456789abcdef"
    d.mkdir(parents=True)
    rec = StateRecord(
        task_id="train-0123456789abcdef",
        state=state,
        launcher={"kind": kind, "group": "g1"},
        native_id="4242",
        exit_code=3,
        reason="exit code 3",
    )
    write_record(d, rec)
    return d


def test_status_of_a_final_job_shows_every_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = fake_job(tmp_path, state=JobState.FAILED)
    assert main(["status", str(d)]) == 0
    out = capsys.readouterr().out
    for text in (
        "task id:   train-0123456789abcdef",
        "state:     FAILED",
        "native id: 4242",
        "attempt:   1",
        "reason:    exit code 3",
        "exit code: 3",
        "launcher:  local (group g1)",
        f"stdout:    {d / 'job.out'}",
        f"stderr:    {d / 'job.err'}",
    ):
        assert text in out, out


def test_status_by_task_id_prefix_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_job(tmp_path)
    assert main(["status", "train-0123", "--workdir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "COMPLETED" and data["exit_code"] == 3 and data["launcher"] == "local"


def test_status_unknown_job_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "nope", "--workdir", str(tmp_path)]) == 2
    assert "launchers: no job 'nope'" in capsys.readouterr().err


def test_clean_other_kinds_is_a_noop_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = fake_job(tmp_path, kind="slurm")
    assert main(["clean", str(d)]) == 0
    assert "nothing to clean at a site for a slurm job" in capsys.readouterr().out
    assert read_record(d) == StateRecord.from_json(json.loads((d / "state.json").read_text()))


@pytest.mark.slurm
@pytest.mark.slow
def test_status_refresh_then_clean_at_the_unicore_site(
    unicore_server: UnicoreServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = unicore_server
    proj = make_project(tmp_path)
    (proj / "MLproject").write_text(
        (proj / "MLproject").read_text() + '  slow:\n    command: "sleep 60"\n'
    )
    cfg = tmp_path / "backend.json"
    cfg.write_text(
        json.dumps(
            {
                "UnicoreApiUrl": server.base_url,
                "Resources": {"Queue": "debug", "Runtime": "5m"},
                "Exclude": ["logs/"],
            }
        )
    )
    workdir = tmp_path / "runs"
    assert (
        main(
            [
                "run",
                str(proj),
                "-e",
                "slow",
                "--backend-config",
                str(cfg),
                "--workdir",
                str(workdir),
                "--no-follow",
            ]
        )
        == 0
    )
    capsys.readouterr()
    (job_dir,) = [p.parent for p in workdir.glob("jobs/*/*/state.json")]
    # a job that is not final is asked about through the executor: the site's state is recorded
    deadline = time.monotonic() + 30
    while True:
        assert main(["status", str(job_dir)]) == 0
        out = capsys.readouterr().out
        if "state:     RUNNING" in out or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "state:     RUNNING" in out, out
    # as after Ctrl-C: another process, with only the record (executor rebuilt from state.json)
    proc = subprocess.run(
        [sys.executable, "-m", "launchers", "status", str(job_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["state"] == "RUNNING" and data["site"] == server.base_url and proc.stderr == ""
    assert f"site:      {server.base_url}" in out
    (ujob,) = server.jobs.values()
    assert f"native id: {ujob.id}" in out
    # not final: clean refuses and keeps the job
    assert main(["clean", str(job_dir)]) == 1
    assert "cancel it first" in capsys.readouterr().err
    assert server.jobs
    assert main(["cancel", str(job_dir), "--timeout", "60"]) == 0
    capsys.readouterr()
    remote = ujob.workdir
    assert remote.exists()
    assert main(["clean", str(job_dir)]) == 0
    out = capsys.readouterr().out
    assert "removed" in out and "working directory" in out
    assert server.jobs == {} and not remote.exists()
    assert any(m == "DELETE" and s == 204 for m, _, s in server.requests)
    # the record remembers it; a second clean sends nothing
    rec = read_record(job_dir)
    assert (
        rec is not None and rec.state is JobState.CANCELLED and rec.extra.get("unicore_destroyed")
    )
    _no_tracking()  # a poll of this process's tracker that was under way may still land
    n = len(server.requests)
    assert main(["clean", str(job_dir)]) == 0
    assert "already removed" in capsys.readouterr().out
    assert len(server.requests) == n


def _no_tracking(timeout: float = 10.0) -> None:
    """Wait until no tracker of this process follows a job any more (their loops have ended)."""
    from launchers.registry import all_executors

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trackers = [ex._tracker for ex in all_executors() if ex._tracker is not None]
        if all(t._task is None or t._task.done() for t in trackers):
            return
        time.sleep(0.05)
