"""``launchers run`` on UNICORE and firecREST: each attempt is its own job at the site (a crash
recovery never adopts an earlier attempt's job), and ``launchers logs --follow`` of a detached
run follows it through the site until it ends (docs/design/sites.md §3.4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launchers.cli.main import main
from launchers.jobs.record import archive_attempt, read_record, write_record
from launchers.jobs.state import JobState
from launchers.runtime.core import current as current_runtime
from remote_fixtures import (  # noqa: F401 - fixtures
    firecrest_server_fixture,
    make_project,
    unicore_server_fixture,
)

pytestmark = pytest.mark.slurm


@pytest.fixture(params=["unicore", "firecrest"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Any, Path]:
    """(kind, loopback server, Compute Backend Config) for each REST transport."""
    kind = request.param
    server = request.getfixturevalue(f"{kind}_server")
    cfg = tmp_path / "backend.json"
    head: dict[str, Any] = (
        {"UnicoreApiUrl": server.base_url}
        if kind == "unicore"
        else {
            "Firecrest": {
                "ApiUrl": server.api_url,
                "TokenUrl": server.token_url,
                "Machine": server.machine,
            }
        }
    )
    cfg.write_text(json.dumps({**head, "Resources": {"Queue": "debug", "Runtime": "10m"}}))
    return kind, server, cfg


def site_jobs(kind: str, server: Any) -> int:
    return len(server.jobs)


@pytest.mark.slow
def test_a_crash_in_attempt_2_never_adopts_attempt_1(
    site: tuple[str, Any, Path], tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Attempt 1 completed; attempt 2 was recorded SUBMITTING and its process died before the
    site answered. Running again submits attempt 2 (its own name or tag), never taking attempt
    1's finished job, of the same run directory, for it."""
    kind, server, cfg = site
    proj = make_project(tmp_path)
    workdir = tmp_path / "runs"
    args = ["run", str(proj), "--backend-config", str(cfg), "--workdir", str(workdir)]
    assert main(args) == 0, capfdbinary.readouterr()[1].decode()
    (directory,) = (workdir / "jobs").glob("*/*")
    first = read_record(directory)
    assert first is not None and first.state is JobState.COMPLETED and first.job_name
    assert first.job_name.endswith("-a1")
    # attempt 2 recorded SUBMITTING, then the process died (as ``begin_attempt`` + submit do)
    archive_attempt(directory, 1)
    name2 = first.job_name[: -len("-a1")] + "-a2"
    extra: dict[str, Any] = {"owner": None}
    if kind == "unicore":
        extra["unicore_tag"] = f"{first.extra['run_id']}-a2"
    write_record(
        directory,
        first.next_attempt("forced re-run").transition(
            JobState.SUBMITTING, "simulated crash", job_name=name2, extra=extra
        ),
    )
    current_runtime().forget_job(directory.absolute())  # as in a new process
    rc = main(args)
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 0, err
    second = read_record(directory)
    assert second is not None and second.attempt == 2 and second.state is JobState.COMPLETED
    assert second.native_id != first.native_id
    assert site_jobs(kind, server) == 2


def test_logs_follow_of_a_detached_run_follows_it_through_the_site(
    site: tuple[str, Any, Path], tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """``--no-follow`` returns once the site took the job and tells to run ``launchers logs
    --follow``: with no process left following the run, that command asks the site itself,
    prints the output as it comes and ends with the run (exit 0: COMPLETED)."""
    kind, _server, cfg = site
    proj = make_project(tmp_path)
    env = dict(os.environ, TRAIN_SLEEP="3")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "launchers",
            "run",
            str(proj),
            "--backend-config",
            str(cfg),
            "--workdir",
            str(tmp_path / "runs"),
            "--no-follow",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "launchers logs --follow " in proc.stderr and f"submitted ({kind}, job " in proc.stderr
    directory = proc.stderr.split("launchers logs --follow ")[1].split("`")[0]
    record = read_record(Path(directory))
    assert record is not None and not record.state.is_final
    rc = main(["logs", "--follow", directory])
    out = capfdbinary.readouterr()[0]
    assert rc == 0
    assert b"lr=0.1 data=hello-data" in out and b"helper: nested-ok" in out
    record = read_record(Path(directory))
    assert record is not None and record.state is JobState.COMPLETED
    # the local copy is whole: job.err too, though logs printed only job.out
    assert b"warning on stderr" in (Path(directory) / "job.err").read_bytes()
