"""UNICORE executor and ``launchers run`` against the loopback UNICORE server on the real Slurm
(docs/design/sites.md §3.2, §4.1), with the real pyunicore client.

Client facts the server follows: pyunicore 2.0 sends ``Accept``/``Content-Type:
application/json`` on every request (``Accept: application/octet-stream`` for downloads and
``Range: bytes=A-B`` from ``raw()``), re-sends a request once without the session after a 432
with the same body (so a streamed upload would be sent empty: the executor uploads from memory),
and raises ``httpx.HTTPError("NNN Server Error: ...")`` with the status only in the message.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from launchers.cli.main import main
from launchers.runtime.core import current as current_runtime
from remote_fixtures import (  # noqa: F401 - fixtures
    UNICORE_PASSWORD,
    all_text,
    make_project,
    unicore_server_fixture,
)
from servers.unicore import UnicoreServer

pytestmark = pytest.mark.slurm


def backend(tmp_path: Path, server: UnicoreServer, extra: str = "") -> Path:
    cfg = tmp_path / "backend.json"
    cfg.write_text(
        json.dumps(
            {
                "UnicoreApiUrl": server.base_url,
                "Resources": {
                    "Queue": "debug",
                    "Runtime": "10m",
                    "MemoryPerNode": "256M",
                    "CPUsPerNode": 1,
                },
                "Environment": {"Variables": {"GREETING": "hi there"}},
                "Exclude": ["logs/"],
                **json.loads(extra or "{}"),
            }
        )
    )
    return cfg


def only_job(server: UnicoreServer) -> Path:
    assert len(server.jobs) == 1, server.jobs
    return next(iter(server.jobs.values())).workdir


def test_run_mlproject_end_to_end(
    unicore_server: UnicoreServer,
    tmp_path: Path,
    capfdbinary: pytest.CaptureFixture[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = unicore_server
    proj = make_project(tmp_path)
    workdir = tmp_path / "runs"
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(backend(tmp_path, server)),
            "-P",
            "lr=0.25",
            "--workdir",
            str(workdir),
        ]
    )
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
    assert job.desc["Executable"] == "./job.sh" and job.desc["Job type"] == "raw"
    bss = (remote / "bss_submit_ID").read_text()  # our BSS file, then the TSI's call of its script
    assert "#SBATCH --partition=debug\n" in bss and "#SBATCH --mem=256M\n" in bss
    assert bss.endswith(f"{remote}/UNICORE_Job_ID\n")
    assert UNICORE_PASSWORD not in all_text(workdir)
    assert UNICORE_PASSWORD not in caplog.text


def test_failing_entry_point_exit_code(
    unicore_server: UnicoreServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    proj = make_project(tmp_path)
    rc = main(
        [
            "run",
            str(proj),
            "-e",
            "fail",
            "--backend-config",
            str(backend(tmp_path, unicore_server)),
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    _, err = capfdbinary.readouterr()
    assert rc == 3, err.decode()
    assert b"going to fail" in err
    assert b"ended FAILED" in err


@pytest.mark.parametrize("fail", [False, True])
def test_login_node_commands_run_around_the_job(
    unicore_server: UnicoreServer,
    tmp_path: Path,
    capfdbinary: pytest.CaptureFixture[bytes],
    fail: bool,
) -> None:
    """docs/design/sites.md §3.1: login-node commands go to ``User precommand``/``User postcommand`` with
    ``RunUser...OnLoginNode``; the loopback site runs them as UNICORE does (in the working
    directory, the precommand before the batch job, the postcommand after a successful one), and a
    failing one fails the job."""
    proj = make_project(tmp_path)
    pre = ["echo pre > login-pre.txt", "false"] if fail else ["echo pre > login-pre.txt"]
    cfg = backend(
        tmp_path,
        unicore_server,
        json.dumps(
            {
                "Environment": {
                    "PreRunCommandOnLoginNode": pre,
                    "PostRunCommandOnLoginNode": "echo post > login-post.txt",
                }
            }
        ),
    )
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(cfg),
            "-P",
            "lr=1",
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    _, err = capfdbinary.readouterr()
    remote = only_job(unicore_server)
    assert (remote / "login-pre.txt").read_text() == "pre\n"
    if fail:
        assert (
            rc != 0
            and b"Pre-command(s) failed: [Command exited with non-zero exit code: <1>" in err
        ), err.decode()
        assert (remote / ".UNICORE_PRE_0" / "stdout").exists()  # where UNICORE puts its output
        assert not (remote / "login-post.txt").exists() and not (remote / "job.rc").exists()
    else:
        assert rc == 0, err.decode()
        assert (remote / "login-post.txt").read_text() == "post\n"


def run(proj: Path, cfg: Path, workdir: Path, *extra: str) -> int:
    return main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(workdir), *extra])


@pytest.mark.slow
def test_expired_sessions_and_503_bursts(
    unicore_server: UnicoreServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """432 (expired security session): pyunicore repeats without it; 503s are retried."""
    server = unicore_server
    server.session_lifetime_ms = 200
    server.faults.burst = [503, 503]
    proj = make_project(tmp_path)
    assert run(proj, backend(tmp_path, server), tmp_path / "runs") == 0, capfdbinary.readouterr()[
        1
    ].decode()
    assert server.sessions_expired > 0
    assert server.faults.status_counts.get(503) == 2


def test_upload_failing_halfway_destroys_the_job(
    unicore_server: UnicoreServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    server = unicore_server
    server.faults.fail_upload_at = 3
    proj = make_project(tmp_path)
    rc = run(proj, backend(tmp_path, server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    assert "upload of" in err and "destroyed before it started" in err
    assert server.jobs == {}  # DELETE was sent: no job, no working directory
    assert not any(m == "POST" and p.endswith("/actions/start") for m, p, _ in server.requests)
    assert any(m == "DELETE" and s == 204 for m, _, s in server.requests)


def test_wrong_password_is_an_authentication_error(
    unicore_server: UnicoreServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    monkeypatch.setenv("LAUNCHERS_UNICORE_PASSWORD", "not-" + UNICORE_PASSWORD)
    rc = run(make_project(tmp_path), backend(tmp_path, unicore_server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    # a UNICORE site answers 403 on every path to credentials it cannot verify
    assert (
        "LAUNCHERS_UNICORE_USERNAME and LAUNCHERS_UNICORE_PASSWORD" in err
        and "403 Forbidden" in err
    )
    assert UNICORE_PASSWORD not in err
    assert unicore_server.requests and all(code == 403 for _, _, code in unicore_server.requests)


def test_mantik_variables_for_a_standalone_config(
    unicore_server: UnicoreServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    from remote_fixtures import UNICORE_USER

    monkeypatch.delenv("LAUNCHERS_UNICORE_USERNAME")
    monkeypatch.delenv("LAUNCHERS_UNICORE_PASSWORD")
    monkeypatch.setenv("MANTIK_UNICORE_USERNAME", UNICORE_USER)
    monkeypatch.setenv("MANTIK_UNICORE_PASSWORD", UNICORE_PASSWORD)
    assert run(make_project(tmp_path), backend(tmp_path, unicore_server), tmp_path / "runs") == 0


@pytest.mark.slow
def test_many_jobs_status_in_flight_is_bounded(
    unicore_server: UnicoreServer, tmp_path: Path
) -> None:
    """One GET per unfinished job per cycle, at most 8 at once; abort of a running job."""
    from launchers import command, experiment
    from launchers.config.model import Position, UnicoreGroup, UnicoreSite
    from launchers.remote.unicore import UnicoreLauncher

    server = unicore_server
    site = UnicoreSite(url=server.base_url)
    launcher = UnicoreLauncher(
        group=UnicoreGroup(id="uc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug", "time": "0:05:00"},
    )
    from launchers.errors import ExperimentFailed

    with (
        pytest.raises(ExperimentFailed, match="CANCELLED"),
        experiment(tmp_path / "xp", launcher) as xp,
    ):
        jobs = [command(["bash", "-c", f"sleep 1; echo job {i}"]).submit() for i in range(12)]
        slow = command(["sleep", "300"]).submit()
        deadline = time.monotonic() + 30
        while any(j.native_id is None for j in [*jobs, slow]) and time.monotonic() < deadline:
            time.sleep(0.05)
        # from here on only the status polls GET the jobs (a submission GETs its job too)
        with server.lock:
            server.max_job_gets_in_flight = server._job_gets_in_flight
        while slow.state.value != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        slow.cancel()
        for j in jobs:
            j.wait(60)
    assert [j.state.value for j in jobs] == ["COMPLETED"] * 12
    assert slow.state.value == "CANCELLED" and slow.reason == "cancelled on request"
    assert len(xp.jobs) == 13
    assert jobs[5].stdout_path.read_text().strip().endswith("job 5")
    assert server.max_job_gets_in_flight <= 8


def test_bearer_token_and_callables_refused(
    unicore_server: UnicoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auth: bearer`` sends ``token_env``; a ``@task`` function cannot run at a remote site."""
    from launchers import command, experiment
    from launchers.config.model import Position, UnicoreGroup, UnicoreSite
    from launchers.errors import TaskError
    from launchers.remote.unicore import UnicoreLauncher

    server = unicore_server
    server.tokens["tok-abc-123"] = "alice"
    monkeypatch.setenv("UC_TOKEN", "tok-abc-123")
    site = UnicoreSite(url=server.base_url, auth="bearer", token_env="UC_TOKEN")
    launcher = UnicoreLauncher(
        group=UnicoreGroup(id="uc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug"},
    )
    with experiment(tmp_path / "xp", launcher):
        job = command(["echo", "it's a token"]).submit()
        with pytest.raises(TaskError, match="runs commands only"):
            launcher_task().submit()
    assert job.state.value == "COMPLETED"
    assert job.stdout_path.read_text().strip().endswith("it's a token")
    assert "tok-abc-123" not in all_text(tmp_path / "xp")


def launcher_task() -> object:
    from launchers import task

    return task(_remote_noop)()


def _remote_noop() -> int:
    return 1


def test_reconcile_after_a_crash_adopts_the_tagged_job(
    unicore_server: UnicoreServer, tmp_path: Path
) -> None:
    """A record left SUBMITTING (crash between record and reply) adopts the UNICORE job tagged
    with its run id instead of submitting a second one."""
    from launchers import command, experiment
    from launchers.config.model import Position, UnicoreGroup, UnicoreSite
    from launchers.jobs.record import read_record, write_record
    from launchers.jobs.state import JobState
    from launchers.remote.unicore import UnicoreLauncher

    server = unicore_server
    site = UnicoreSite(url=server.base_url)
    launcher = UnicoreLauncher(
        group=UnicoreGroup(id="uc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug"},
    )
    task = command(["echo", "once"])
    with experiment(tmp_path / "xp", launcher):
        first = task.submit()
    assert first.state is JobState.COMPLETED and len(server.jobs) == 1
    record = read_record(first.directory)
    assert record is not None
    write_record(
        first.directory,
        record.transition(
            JobState.SUBMITTING, "simulated crash", native_id=None, extra={"unicore_url": None}
        ),
    )
    current_runtime().forget_job(first.directory)  # a new process would not know the job
    with experiment(tmp_path / "xp", launcher):
        again = task.submit()
    assert again is not first and again.state is JobState.COMPLETED
    assert len(server.jobs) == 1  # adopted, not submitted twice
    assert any("adopted by tag" in h[2] for h in again.record.history)


def test_server_life_ends_with_stagingout(unicore_server: UnicoreServer) -> None:
    """The loopback site follows UNICORE's life (docs/design/sites.md §4.1): ... -> RUNNING ->
    STAGINGOUT -> SUCCESSFUL, seen by the real pyunicore client polling fast."""
    from pyunicore.client import Client, Transport
    from pyunicore.credentials import UsernamePassword

    from remote_fixtures import UNICORE_USER

    transport = Transport(UsernamePassword(UNICORE_USER, UNICORE_PASSWORD))
    job = Client(transport, unicore_server.base_url).new_job(
        {"Executable": "sleep 2", "Resources": {"Queue": "debug"}}
    )
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while not seen or seen[-1] not in ("SUCCESSFUL", "FAILED"):
        assert time.monotonic() < deadline, seen
        status = str(transport.get(url=job.resource_url)["status"])
        if not seen or seen[-1] != status:
            seen.append(status)
        time.sleep(0.02)
    assert seen[-2:] == ["STAGINGOUT", "SUCCESSFUL"], seen
    # in life order (a loaded machine may answer no poll while the short job runs)
    life = ["READY", "STAGINGIN", "QUEUED", "RUNNING", "STAGINGOUT", "SUCCESSFUL"]
    assert [life.index(x) for x in seen] == sorted(life.index(x) for x in seen), seen
