"""firecREST v1 (``api_version: 1``, docs/design/sites.md §3.3, §4.3) against the loopback v1 server on
the real Slurm, driven by the real ``firecrest.v1.Firecrest``: uploads through ``/utilities``,
submission as a task, status from ``/compute/acct``, outputs from ``/utilities/view``, cancel."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launchers.cli.main import main
from launchers.jobs.record import read_record
from launchers.jobs.state import JobState
from remote_fixtures import FIRECREST_ID, FIRECREST_SECRET, FIRECREST_USER, make_project
from servers.firecrest import cleanup
from servers.firecrest_v1 import FirecrestV1Server

pytestmark = pytest.mark.slurm


@pytest.fixture(name="v1_server")
def v1_server_fixture(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FirecrestV1Server]:
    from launchers.remote.firecrest_executor import FirecrestExecutor

    server = FirecrestV1Server(
        tmp_path / "fc1-fs", {FIRECREST_ID: (FIRECREST_SECRET, FIRECREST_USER)}
    )
    server.token_lifetime = 300
    server.start()
    monkeypatch.setenv("LAUNCHERS_FIRECREST_CLIENT_ID", FIRECREST_ID)
    monkeypatch.setenv("LAUNCHERS_FIRECREST_CLIENT_SECRET", FIRECREST_SECRET)
    monkeypatch.setattr(FirecrestExecutor, "poll_min", 1.0)
    monkeypatch.setattr(FirecrestExecutor, "poll_max", 2.0)
    try:
        yield server
    finally:
        cleanup(server)
        server.stop()


def config(tmp_path: Path, server: FirecrestV1Server) -> tuple[Path, Path]:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(
        "firecrest:\n  - id: old\n"
        f"    site: {{api_url: '{server.api_url}', token_url: '{server.token_url}', machine: cluster,\n"
        f"           api_version: 1, workdir: '{server.scratch}/{{user}}/launchers'}}\n"
        "    partitions: {debug: {configuration: {cpu: {cores: 8, memory: 16G}, max_duration: 1h}}}\n"
    )
    backend = tmp_path / "backend.yaml"
    backend.write_text(
        "Resources: {Queue: debug, Runtime: 5m}\nExclude: [logs/]\n"
        "Environment: {Variables: {GREETING: 'hi there'}}\n"
    )
    return cfg, backend


def test_v1_run_end_to_end(
    v1_server: FirecrestV1Server, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    proj = make_project(tmp_path)
    cfg, backend = config(tmp_path, v1_server)
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(backend),
            "--group",
            "old",
            "--config",
            str(cfg),
            "-P",
            "lr=0.5",
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    run_dir = next((v1_server.scratch / FIRECREST_USER / "launchers").iterdir())
    # the script ran from the server's own directory, and job.sh went to the run directory
    assert f"lr=0.5 data=hello-data cwd={run_dir}".encode() in out
    assert b"helper: nested-ok" in out and b"warning on stderr" in err
    assert not (run_dir / "logs").exists() and (run_dir / "pkg" / "helper.txt").exists()
    (script,) = v1_server.submitted_scripts
    assert (
        script.startswith("#!/bin/bash -l\n#SBATCH --job-name=") and f"cd '{run_dir}' ||" in script
    )
    assert json.loads((run_dir / "job.rc").read_text())["rc"] == 0
    paths = {p for _, p, _ in v1_server.requests}
    assert {
        "/utilities/mkdir",
        "/utilities/upload",
        "/compute/jobs/upload",
        "/compute/acct",
        "/tasks",
        "/utilities/view",
    } <= paths


def test_v1_failure_cancel_and_status(
    v1_server: FirecrestV1Server, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    proj = make_project(tmp_path)
    (proj / "MLproject").write_text(
        (proj / "MLproject").read_text() + '  slow:\n    command: "sleep 60"\n'
    )
    cfg, backend = config(tmp_path, v1_server)
    common = ["--backend-config", str(backend), "--group", "old", "--config", str(cfg)]
    assert main(["run", str(proj), "-e", "fail", *common, "--workdir", str(tmp_path / "a")]) == 3
    assert b"going to fail" in capfdbinary.readouterr()[1]
    assert (
        main(
            [
                "run",
                str(proj),
                "-e",
                "slow",
                *common,
                "--workdir",
                str(tmp_path / "b"),
                "--no-follow",
            ]
        )
        == 0
    )
    (job_dir,) = [p.parent for p in (tmp_path / "b").glob("jobs/*/*/state.json")]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        main(["status", str(job_dir)])
        if b"state:     RUNNING" in capfdbinary.readouterr()[0]:
            break
        time.sleep(0.5)
    assert main(["cancel", str(job_dir), "--timeout", "60"]) == 0
    rec = read_record(job_dir)
    assert rec is not None and rec.state is JobState.CANCELLED
    assert any(m == "DELETE" for m, _, _ in v1_server.requests)
