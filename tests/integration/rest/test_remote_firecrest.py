"""firecREST v2 executor and ``launchers run`` against the loopback server on the real Slurm
(docs/design/sites.md §3.3, §4.2, §5), with the real pyfirecrest client.

Where the client and docs/design/sites.md §4.2 differ, the client wins and the server follows it: pyfirecrest 3.10
sends ``allusers=false`` on every jobs query and ``dereference=false`` on ``ops/stat`` (not in
docs/design/sites.md §4.2's table; the server accepts and ignores them), and its ``view()`` has no ``offset``/``size``
(the executor sends that request itself through the client's session and token).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from launchers.cli.main import main
from launchers.runtime.core import current as current_runtime
from remote_fixtures import (  # noqa: F401 - fixtures
    FIRECREST_SECRET,
    FIRECREST_USER,
    SECRETS,
    all_text,
    firecrest_server_fixture,
    make_project,
)
from servers.firecrest import FirecrestServer

pytestmark = pytest.mark.slurm


def backend(tmp_path: Path, server: FirecrestServer, extra: str = "") -> Path:
    cfg = tmp_path / "backend.yaml"
    cfg.write_text(
        f"Firecrest:\n  ApiUrl: {server.api_url}\n  TokenUrl: {server.token_url}\n  Machine: {server.machine}\n"
        "Resources:\n  Queue: debug\n  Runtime: 10m\n  MemoryPerNode: 256M\n"
        "Environment:\n  Variables: {GREETING: 'hi there'}\n"
        "Exclude: [logs/]\n" + extra
    )
    return cfg


def run_dir(server: FirecrestServer, workdir: Path) -> Path:
    runs = list((server.scratch / FIRECREST_USER / "launchers").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_run_mlproject_end_to_end(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = firecrest_server
    monkeypatch.setenv("TRAIN_SLEEP", "2.5")  # outlives the first token (62 s, renewed 60 s early)
    proj = make_project(tmp_path)
    workdir = tmp_path / "runs"
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(backend(tmp_path, server)),
            "-P",
            "lr=0.5",
            "--workdir",
            str(workdir),
        ]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    text = out.decode()
    remote = run_dir(server, workdir)
    assert f"lr=0.5 data=hello-data cwd={remote}" in text
    assert "helper: nested-ok" in text
    assert b"warning on stderr" in err
    # the project tree minus Exclude, and job.sh, are in the run directory
    assert (remote / "pkg" / "helper.txt").read_text() == "nested-ok\n"
    assert not (remote / "logs").exists()
    assert (remote / "job.sh").exists() and (remote / "job.rc").exists()
    # the local record mirrors the outputs
    job_dirs = list((workdir / "jobs").glob("*/*"))
    assert len(job_dirs) == 1
    assert "lr=0.5" in (job_dirs[0] / "job.out").read_text()
    # submitted as script_str + working_dir only (no env: it would break at commas)
    body = server.submitted_bodies[-1]
    assert body["working_directory"] == str(remote) and "env" not in body
    assert "#SBATCH --partition=debug" in body["script"]
    # tokens live 62 s and are renewed 60 s ahead: several were issued, none was refused
    assert server.tokens_issued >= 2, server.tokens_issued
    assert server.auth_failures == []
    # no secret in any file or log line
    assert FIRECREST_SECRET not in all_text(workdir)
    assert FIRECREST_SECRET not in caplog.text


def run(proj: Path, cfg: Path, workdir: Path, *extra: str) -> int:
    return main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(workdir), *extra])


@pytest.mark.slow
def test_rate_limit_and_bursts_are_retried(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """429 with Retry-After (seconds, then an HTTP date) and 502/503 bursts: retried, never fatal."""
    from servers.firecrest import http_date

    server = firecrest_server
    server.faults.only = ("/status", "/filesystem", "/compute")
    server.faults.rate_limited = 2
    server.faults.retry_after = "1"
    server.faults.burst = [503, 502, 503]
    proj = make_project(tmp_path)
    t0 = time.monotonic()
    assert run(proj, backend(tmp_path, server), tmp_path / "runs") == 0, capfdbinary.readouterr()[
        1
    ].decode()
    assert server.faults.status_counts.get(429) == 2
    assert server.faults.status_counts.get(503) == 2 and server.faults.status_counts.get(502) == 1
    assert time.monotonic() - t0 >= 2.0  # Retry-After was honoured
    # an HTTP-date Retry-After during status polling
    server.faults.retry_after = http_date(1)
    server.faults.rate_limited = 1
    proj2 = tmp_path / "p2"
    make_project(proj2)
    assert run(proj2 / "project", backend(tmp_path, server), tmp_path / "runs2") == 0, (
        capfdbinary.readouterr()[1].decode()
    )
    assert server.faults.status_counts.get(429) == 3


def test_job_not_visible_right_after_submit(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """``404 Job not found.`` within 60 s of submission means pending (pyfirecrest#199)."""
    server = firecrest_server
    server.visibility_delay = 3.0
    proj = make_project(tmp_path)
    assert run(proj, backend(tmp_path, server), tmp_path / "runs") == 0, capfdbinary.readouterr()[
        1
    ].decode()
    assert (
        "GET",
        f"/compute/{server.machine}/jobs/{next(iter(server.jobs))}",
        404,
    ) in server.requests


def test_upload_failing_halfway_submits_nothing(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    server = firecrest_server
    server.faults.fail_upload_at = 3
    proj = make_project(tmp_path)
    rc = run(proj, backend(tmp_path, server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    assert (
        "upload of" in err and "nothing was submitted" in err and "was not submitted (FAILED" in err
    )
    assert "submitted (firecrest" not in err  # never claimed before (or without) the site taking it
    assert server.jobs == {}  # never a job started with missing files


def test_big_file_without_transfer_backend_is_refused(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    server = firecrest_server
    server.max_ops_file_size = 64 * 1024
    proj = make_project(tmp_path)
    (proj / "data" / "big.bin").write_bytes(b"x" * (200 * 1024))
    (proj / "data" / "medium.bin").write_bytes(b"y" * (60 * 1024))  # direct, below the limit
    rc = run(proj, backend(tmp_path, server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    assert (
        "data/big.bin (200 KiB)" in err
        and "max_ops_file_size 64 KiB" in err
        and "exclude it" in err
    )
    assert server.jobs == {}


def test_short_token_lifetime_is_an_error(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    firecrest_server.token_lifetime = 60
    rc = run(make_project(tmp_path), backend(tmp_path, firecrest_server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1 and "expires_in=60" in err


def test_wrong_secret_names_variables_not_secret(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    monkeypatch.setenv("LAUNCHERS_FIRECREST_CLIENT_SECRET", "wrong-" + FIRECREST_SECRET)
    rc = run(make_project(tmp_path), backend(tmp_path, firecrest_server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    assert "LAUNCHERS_FIRECREST_CLIENT_SECRET" in err and FIRECREST_SECRET not in err
    assert FIRECREST_SECRET not in all_text(tmp_path / "runs")


LAUNCHERS_YAML = """\
firecrest:
  - id: fc
    site: {{api_url: "{api}", token_url: "{token}", machine: cluster,
           client_id_env: FC_ID, client_secret_env: FC_SECRET}}
    environment: {{Variables: {{FROM_GROUP: "group-env"}}}}
    partitions:
      debug: {{configuration: {{cpu: {{cores: 8, memory: 16G}}, max_duration: 1h}}}}
"""


def test_experiment_with_find_launcher_firecrest_group(
    firecrest_server: FirecrestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An experiment script whose firecrest group is chosen by ``find_launcher``; cancelling a
    job that just finished is not an error (firecrest-v2#159: 500)."""
    from launchers import command, experiment, find_launcher
    from launchers.runtime.loop import run_sync

    server = firecrest_server
    from remote_fixtures import FIRECREST_ID

    monkeypatch.setenv("FC_ID", FIRECREST_ID)
    monkeypatch.setenv("FC_SECRET", FIRECREST_SECRET)
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(LAUNCHERS_YAML.format(api=server.api_url, token=server.token_url))
    launcher = find_launcher("cpu(cores=2) & duration=10m", config=str(cfg))
    assert launcher.kind == "firecrest"
    with experiment(tmp_path / "xp", launcher) as xp:
        job = command(
            ["bash", "-c", 'echo "hello $FROM_GROUP $MINE"'], env={"MINE": "a,b=c"}
        ).submit()
    assert xp.jobs == [job]
    assert job.state.value == "COMPLETED"
    assert job.stdout_path.read_text().strip().endswith("hello group-env a,b=c")
    script = server.submitted_bodies[-1]["script"]
    assert "#SBATCH --partition=debug" in script and "--cpus-per-task=2" in script
    # cancel after the end: the server answers 500, which is not an error
    run_sync(job.executor.cancel([job]), timeout=30)
    assert server.faults.status_counts.get(500) == 1
    assert job.state.value == "COMPLETED"


def test_local_apptainer_image_is_uploaded(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The local image goes to the run directory's root (even if excluded); this machine has no
    apptainer, so srun fails (exit code 2) and that is the run's exit status."""
    server = firecrest_server
    proj = make_project(tmp_path)
    (tmp_path / "image.sif").write_bytes(b"SIF" * 1000)
    cfg = backend(tmp_path, server, "")
    cfg.write_text(
        cfg.read_text().replace(
            "Environment:\n", "Environment:\n  Apptainer: {Path: ../image.sif}\n"
        )
    )
    rc = run(proj, cfg, tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 2, err
    assert (
        "apptainer: No such file or directory" in err
        and "the command failed with exit code 2" in err
    )
    remote = run_dir(server, tmp_path / "runs")
    assert (remote / "image.sif").read_bytes() == b"SIF" * 1000
    assert "apptainer" in (remote / "job.sh").read_text()


def test_reconcile_after_a_crash_adopts_the_named_job(
    firecrest_server: FirecrestServer, tmp_path: Path
) -> None:
    """A record left SUBMITTING adopts the job found by its unique name (no second submission)."""
    from launchers import command, experiment
    from launchers.config.model import FirecrestGroup, FirecrestSite, Position
    from launchers.jobs.record import read_record, write_record
    from launchers.jobs.state import JobState
    from launchers.remote.firecrest import FirecrestLauncher

    server = firecrest_server
    site = FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    launcher = FirecrestLauncher(
        group=FirecrestGroup(id="fc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug"},
    )
    task = command(["echo", "once"])
    with experiment(tmp_path / "xp", launcher):
        first = task.submit()
    assert first.state is JobState.COMPLETED and len(server.jobs) == 1
    record = read_record(first.directory)
    assert record is not None and record.job_name
    write_record(
        first.directory, record.transition(JobState.SUBMITTING, "simulated crash", native_id=None)
    )
    current_runtime().forget_job(first.directory)
    with experiment(tmp_path / "xp", launcher):
        again = task.submit()
    assert again.state is JobState.COMPLETED and again.native_id == first.native_id
    assert len(server.jobs) == 1


def test_two_workdirs_never_share_a_run_directory_or_a_job(
    firecrest_server: FirecrestServer, tmp_path: Path
) -> None:
    """The same task from two experiment directories runs in two run directories, and a crash
    recovery in one adopts its own job, not the other's older job of the same name."""
    from launchers import command, experiment
    from launchers.config.model import FirecrestGroup, FirecrestSite, Position
    from launchers.jobs.record import read_record, write_record
    from launchers.jobs.state import JobState
    from launchers.remote.firecrest import FirecrestLauncher

    server = firecrest_server
    site = FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    launcher = FirecrestLauncher(
        group=FirecrestGroup(id="fc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug"},
    )
    task = command(["bash", "-c", 'echo "ran in $PWD"'])
    with experiment(tmp_path / "a", launcher):
        a = task.submit()
    with experiment(tmp_path / "b", launcher):
        b = task.submit()
    assert a.state is JobState.COMPLETED and b.state is JobState.COMPLETED
    assert a.record.job_name == b.record.job_name  # NAME-DIGEST12-aN: the same task and attempt
    run_a, run_b = a.record.extra["run_dir"], b.record.extra["run_dir"]
    assert run_a != run_b and run_a.startswith(run_b.rsplit("-", 1)[0])
    assert a.stdout_path.read_text().strip().endswith(f"ran in {run_a}")
    assert b.stdout_path.read_text().strip().endswith(f"ran in {run_b}")
    record = read_record(b.directory)
    assert record is not None
    write_record(
        b.directory, record.transition(JobState.SUBMITTING, "simulated crash", native_id=None)
    )
    current_runtime().forget_job(b.directory)
    with experiment(tmp_path / "b", launcher):
        again = task.submit()
    assert again.native_id == b.native_id != a.native_id
    assert len(server.jobs) == 2


def test_unset_credentials_fail_before_anything_is_recorded(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    monkeypatch.delenv("LAUNCHERS_FIRECREST_CLIENT_SECRET")
    rc = run(make_project(tmp_path), backend(tmp_path, firecrest_server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 2
    assert (
        "set the environment variable LAUNCHERS_FIRECREST_CLIENT_SECRET or MANTIK_FIRECREST_CLIENT_SECRET"
        in err
    )
    assert not (tmp_path / "runs" / "jobs").exists() or not list(
        (tmp_path / "runs" / "jobs").rglob("state.json")
    )
    assert firecrest_server.requests == []
