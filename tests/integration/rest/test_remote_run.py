"""``launchers run`` end to end (docs/design/sites.md §3.4): ``-r`` choosing among groups of any
kind, ``--no-follow``, and Ctrl-C (detach, or cancel with ``--cancel-on-interrupt``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launchers.cli.main import main
from remote_fixtures import (  # noqa: F401 - fixtures
    FIRECREST_ID,
    FIRECREST_SECRET,
    FIRECREST_USER,
    firecrest_server_fixture,
    make_project,
)
from servers.common import query_jobs, slurm_final
from servers.firecrest import FirecrestServer

pytestmark = pytest.mark.slurm

YAML = """\
slurm:
  - id: here
    partitions:
      debug: {{configuration: {{cpu: {{cores: 8, memory: 16G}}, max_duration: 1h}}}}
firecrest:
  - id: fc
    weight: {weight}
    site: {{api_url: "{api}", token_url: "{token}", machine: cluster}}
    environment: {{Variables: {{WHERE: "on-firecrest"}}}}
    partitions:
      debug: {{configuration: {{cpu: {{cores: 8, memory: 16G}}, max_duration: 1h}}}}
"""


def config(tmp_path: Path, server: FirecrestServer, weight: int) -> Path:
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(YAML.format(api=server.api_url, token=server.token_url, weight=weight))
    return cfg


def test_requirement_picks_the_firecrest_group(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    proj = make_project(tmp_path)
    (proj / "MLproject").write_text(
        (proj / "MLproject").read_text() + '  where:\n    command: "echo $WHERE"\n'
    )
    rc = main(
        [
            "run",
            str(proj),
            "-e",
            "where",
            "-r",
            "cpu(cores=1) & duration=5m",
            "--config",
            str(config(tmp_path, firecrest_server, 10)),
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    assert b"on-firecrest" in out
    assert len(firecrest_server.jobs) == 1


def test_requirement_picks_the_slurm_group(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    """A slurm group wins: the task runs in the project directory through the Slurm executor."""
    proj = make_project(tmp_path)
    rc = main(
        [
            "run",
            str(proj),
            "-P",
            "lr=7",
            "-r",
            "cpu(cores=1) & duration=5m",
            "--config",
            str(config(tmp_path, firecrest_server, -10)),
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    assert f"lr=7 data=hello-data cwd={proj.resolve()}".encode() in out
    assert firecrest_server.jobs == {}


@pytest.mark.slow
def test_no_follow_returns_after_submission(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    from launchers.jobs.job import registered_job

    monkeypatch.setenv("TRAIN_SLEEP", "4")
    proj = make_project(tmp_path)
    cfg = tmp_path / "b.yaml"
    cfg.write_text(
        f"Firecrest: {{ApiUrl: '{firecrest_server.api_url}', TokenUrl: '{firecrest_server.token_url}', "
        "Machine: cluster}\nResources: {Queue: debug}\n"
    )
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(cfg),
            "--no-follow",
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 0, err
    assert "launchers cancel" in err
    (job_dir,) = list((tmp_path / "runs" / "jobs").glob("*/*"))
    job = registered_job(job_dir.absolute())
    assert job is not None and job.native_id is not None
    assert not job.state.is_final  # returned once submitted, not at the end
    assert job.wait(90).value == "COMPLETED"


def _interrupt(server: FirecrestServer, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    proj = make_project(tmp_path)
    cfg = tmp_path / "b.yaml"
    cfg.write_text(
        f"Firecrest: {{ApiUrl: '{server.api_url}', TokenUrl: '{server.token_url}', "
        "Machine: cluster}\nResources: {Queue: debug}\n"
    )
    env = dict(
        os.environ,
        LAUNCHERS_FIRECREST_CLIENT_ID=FIRECREST_ID,
        LAUNCHERS_FIRECREST_CLIENT_SECRET=FIRECREST_SECRET,
    )
    proc = subprocess.Popen(
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
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the job's first line: it is running
    if b"lr=" not in line:
        proc.kill()
        pytest.fail(f"the run printed no output: {proc.communicate()[1].decode()}")
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:  # a failed test leaves no run behind on the machine
            proc.kill()
            proc.communicate()
    return proc.returncode, (line + out).decode(), err.decode()


def test_ctrl_c_detaches(
    firecrest_server: FirecrestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAIN_SLEEP", "20")
    rc, _, err = _interrupt(firecrest_server, tmp_path)
    assert rc == 130, err
    assert "launchers status " in err and "launchers cancel " in err
    (jid,) = firecrest_server.jobs
    assert not slurm_final(query_jobs([jid])[jid]["state"])  # detached: still there
    # the printed cancel command works from another process (the executor comes from the record)
    job_dir = err.split("launchers cancel ")[1].split()[0]
    assert main(["cancel", job_dir]) == 0
    assert query_jobs([jid])[jid]["state"].startswith("CANCELLED")


def test_ctrl_c_cancels_with_cancel_on_interrupt(
    firecrest_server: FirecrestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAIN_SLEEP", "20")
    rc, _, err = _interrupt(firecrest_server, tmp_path, "--cancel-on-interrupt")
    assert rc == 130, err
    assert "cancelling run" in err
    (jid,) = firecrest_server.jobs
    assert query_jobs([jid])[jid]["state"].startswith("CANCELLED")


def test_http_helpers() -> None:
    """Retry-After as seconds or an HTTP date; transient statuses; secrets redacted."""
    import httpx

    from launchers.remote.retry import (
        backoff,
        is_transient,
        redact,
        retry_after_of,
        status_of,
        with_retries,
    )
    from servers.firecrest import http_date

    def error(code: int, **headers: str) -> httpx.HTTPStatusError:
        req = httpx.Request("GET", "http://x/")
        return httpx.HTTPStatusError(
            "boom", request=req, response=httpx.Response(code, headers=headers, request=req)
        )

    assert (
        status_of(error(503)) == 503 and is_transient(error(503)) and not is_transient(error(404))
    )
    assert status_of(httpx.HTTPError("432 Server Error: expired for url: http://x")) == 432
    assert retry_after_of(error(429, **{"Retry-After": "3"})) == 3.0
    assert 0.0 <= (retry_after_of(error(429, **{"Retry-After": http_date(5)})) or 0) <= 6.0
    assert all(0.4 <= backoff(0) <= 0.6 for _ in range(50)) and backoff(20) <= 12.0
    assert redact("user:s3cret-pw at x", ["s3cret-pw"]) == "user:*** at x"
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise error(502)
        return "ok"

    assert with_retries(flaky, "test") == "ok" and len(calls) == 3
    from launchers.errors import ConnectorError

    with pytest.raises(ConnectorError, match=r"gave up after 2 tries"):
        with_retries(lambda: (_ for _ in ()).throw(error(503)), "always 503", tries=2)
