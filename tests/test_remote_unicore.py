"""UNICORE executor and ``launchers run`` against the loopback UNICORE server on the real Slurm
(remote-sites.md §3.2, §4.1), with the real pyunicore client."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from remote_fixtures import (  # noqa: F401 - fixtures
    UNICORE_PASSWORD,
    all_text,
    make_project,
    unicore_server,
)
from servers.unicore import UnicoreServer

from launchers.cli.main import main

pytestmark = pytest.mark.slurm


def backend(tmp_path: Path, server: UnicoreServer, extra: str = "") -> Path:
    cfg = tmp_path / "backend.json"
    cfg.write_text(json.dumps({
        "UnicoreApiUrl": server.base_url,
        "Resources": {"Queue": "debug", "Runtime": "10m", "MemoryPerNode": "256M", "CPUsPerNode": 1},
        "Environment": {"Variables": {"GREETING": "hi there"}},
        "Exclude": ["logs/"],
        **json.loads(extra or "{}"),
    }))
    return cfg


def only_job(server: UnicoreServer) -> Path:
    assert len(server.jobs) == 1, server.jobs
    return next(iter(server.jobs.values())).workdir


def test_run_mlproject_end_to_end(unicore_server: UnicoreServer, tmp_path: Path,
                                  capfdbinary: pytest.CaptureFixture[bytes], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = unicore_server
    proj = make_project(tmp_path)
    workdir = tmp_path / "runs"
    t0 = time.monotonic()
    rc = main(["run", str(proj), "--backend-config", str(backend(tmp_path, server)), "-P", "lr=0.25",
               "--workdir", str(workdir)])
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    remote = only_job(server)
    assert f"lr=0.25 data=hello-data cwd={remote}" in out.decode()
    assert "helper: nested-ok" in out.decode()
    assert b"warning on stderr" in err
    # relative destinations keep the tree; Exclude applies; UNICORE's own files are there
    assert (remote / "pkg" / "helper.txt").read_text() == "nested-ok\n"
    assert not (remote / "logs").exists()
    for name in ("UNICORE_Job_ID", "bss_submit_ID", "UNICORE_SCRIPT_EXIT_CODE", "job.rc"):
        assert (remote / name).exists(), name
    job = next(iter(server.jobs.values()))
    assert job.desc["Executable"] == "./job.sh" and job.desc["Resources"]["Queue"] == "debug"
    assert job.desc["Resources"]["MemoryPerNode"] == "256M"
    assert UNICORE_PASSWORD not in all_text(workdir)
    assert UNICORE_PASSWORD not in caplog.text
    assert time.monotonic() - t0 < 40


def test_failing_entry_point_exit_code(unicore_server: UnicoreServer, tmp_path: Path,
                                       capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    proj = make_project(tmp_path)
    rc = main(["run", str(proj), "-e", "fail", "--backend-config", str(backend(tmp_path, unicore_server)),
               "--workdir", str(tmp_path / "runs")])
    out, err = capfdbinary.readouterr()
    assert rc == 3, err.decode()
    assert b"going to fail" in err
    assert b"ended FAILED" in err
