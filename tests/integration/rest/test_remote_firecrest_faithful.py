"""``launchers`` against firecREST as the real server behaves (docs/remote-sites.md, "firecREST:
server behaviours we rely on and work around"): empty files never uploaded, outputs copied
byte-exactly although ``ops/view``/``ops/tail`` decode with replacement, jobs found by name on
API 2.5.6 (no ``name`` filter), ``'`` refused in the plan, a slow sbatch (408) adopted, an SSH
outage at the site outlived; both the released 2.5.6 and 2.6.0, over the real Slurm.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launchers.cli.main import main
from launchers.remote.decide import block_at, download_fits, exact_prefix, view_window
from launchers.remote.plan import plan_run
from launchers.remote.script import attempt_job_name, empty_files_line
from launchers.runtime.core import current as current_runtime
from remote_fixtures import (  # noqa: F401 - fixtures
    FIRECREST_USER,
    firecrest_server_fixture,
    make_project,
)
from servers.firecrest import FirecrestServer

VERSIONS = ["2.5.6", "2.6.0"]


# -- pure decisions ---------------------------------------------------------------------------------


def test_exact_prefix_stops_at_the_first_replacement() -> None:
    assert exact_prefix("caf\u00e9 ok") == "café ok".encode()
    assert exact_prefix("ab\ufffdcd") == b"ab"
    assert exact_prefix("\ufffd") == b"" and exact_prefix("") == b""


def test_download_fits_its_base64_under_the_limit() -> None:
    assert download_fits(765, 1024) and not download_fits(768, 1024)  # 1020 / 1024 characters
    assert download_fits(0, 1) and not download_fits(3 * 1024 * 1024 * 5 // 4, 5 * 1024 * 1024)


def test_view_window_starts_on_a_block_boundary_and_fits_the_buffer() -> None:
    assert view_window(0, 10, 1024) == (0, 10)
    start, size = view_window(1000, 10**6, 1024)
    assert size == 511 and start == 1000 - 1000 % 511 and 2 * size < 1024
    assert (
        block_at(2005, 2047) == 2005 and block_at(4096, 1000) == 512 and block_at(2003, 1000) == 1
    )


def test_attempt_names_and_empty_file_lines() -> None:
    assert attempt_job_name("train-3f2a", 2) == "train-3f2a-a2"
    long = attempt_job_name("x" * 80, 12)
    assert len(long) == 64 and long.endswith("-a12")
    assert (
        empty_files_line(["a/b/__init__.py", "top", "a/c"])
        == "mkdir -p -- 'a' 'a/b' && : > 'a/b/__init__.py' && : > 'top' && : > 'a/c'"
    )


def test_plan_creates_empty_files_in_job_sh_and_refuses_quotes(tmp_path: Path) -> None:
    from launchers.errors import ConfigurationError

    proj = make_project(tmp_path)
    (proj / "pkg" / "__init__.py").write_text("")
    cfg = tmp_path / "b.yaml"
    cfg.write_text(
        "Firecrest: {ApiUrl: 'https://f.example', TokenUrl: 'https://t.example', Machine: m}\n"
        "Resources: {Queue: debug}\n"
    )
    plan = plan_run(proj, backend_config=cfg, workdir=tmp_path / "runs")
    assert plan.empty_files == ("pkg/__init__.py",)
    assert "pkg/__init__.py" not in {u.relpath for u in plan.all_uploads}
    script = plan.script("/scratch/run")
    assert "mkdir -p -- 'pkg' && : > 'pkg/__init__.py'" in script
    assert f"#SBATCH --job-name={plan.job_name}-a1\n" in script
    (proj / "data" / "it's.txt").write_text("x")
    with pytest.raises(
        ConfigurationError,
        match=r"data/it's.txt: firecREST cannot create a file whose path "
        r"contains '",
    ):
        plan_run(proj, backend_config=cfg, workdir=tmp_path / "runs")
    # a UNICORE site takes such names (no shell quoting there)
    ucfg = tmp_path / "u.yaml"
    ucfg.write_text("UnicoreApiUrl: https://u.example/SITE/rest/core\nResources: {Queue: debug}\n")
    assert plan_run(proj, backend_config=ucfg, workdir=tmp_path / "runs").kind == "unicore"


def test_dry_run_shows_the_quote_refusal(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    proj = make_project(tmp_path)
    (proj / "it's.py").write_text("x")
    cfg = tmp_path / "b.yaml"
    cfg.write_text(
        "Firecrest: {ApiUrl: 'https://f.example', TokenUrl: 'https://t.example', Machine: m}\n"
        "Resources: {Queue: debug}\n"
    )
    rc = main(["run", str(proj), "--backend-config", str(cfg), "--dry-run"])
    err = capfd.readouterr().err
    assert rc != 0 and "it's.py: firecREST cannot create a file whose path contains '" in err


# -- over the faithful loopback server and the real Slurm -------------------------------------------

EMIT = r"""
import os, sys, time
out = sys.stdout.buffer
assert os.path.getsize("pkg/__init__.py") == 0 and os.path.getsize("only_empty/sub/__init__.py") == 0
out.write("empty files ok\nnon-ASCII: é ü 日本語 ✓\n".encode()); out.flush()
time.sleep(1.2)
out.write("half a character: \xe6\x97".encode("latin-1")); out.flush()  # the first 2 bytes of 日
time.sleep(1.2)
out.write(b"\xa5 (completed)\ninvalid UTF-8: \xff\xfe\xc3( end\n"); out.flush()
time.sleep(1.2)
out.write("after the invalid bytes: ñ\n".encode()); out.flush()
err = sys.stderr.buffer
line = "ligne accentuée ü ✓ 日本\n".encode()
err.write(line * (1300 * 1024 // len(line)))  # 1.3 MiB: beyond ops/download of a 1 MiB system
err.write(b"end of err\n")
"""

MLPROJECT = 'name: faithful\nentry_points:\n  main:\n    command: "python3 emit.py"\n'


def faithful_project(root: Path) -> Path:
    proj = root / "project"
    (proj / "pkg").mkdir(parents=True)
    (proj / "only_empty" / "sub").mkdir(parents=True)
    (proj / "MLproject").write_text(MLPROJECT)
    (proj / "emit.py").write_text(EMIT)
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "only_empty" / "sub" / "__init__.py").write_text("")
    return proj


def backend(tmp_path: Path, server: FirecrestServer) -> Path:
    cfg = tmp_path / "backend.yaml"
    cfg.write_text(
        f"Firecrest:\n  ApiUrl: {server.api_url}\n  TokenUrl: {server.token_url}\n"
        f"  Machine: {server.machine}\nResources:\n  Queue: debug\n  Runtime: 10m\n"
    )
    return cfg


def remote_runs(server: FirecrestServer) -> list[Path]:
    return list((server.scratch / FIRECREST_USER / "launchers").iterdir())


@pytest.mark.slurm
@pytest.mark.parametrize("version", VERSIONS)
def test_run_with_empty_files_and_non_utf8_output_is_byte_exact(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    version: str,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    """Done when of issue 15: empty project files, non-ASCII and invalid UTF-8 output, a 1 MiB
    ``max_ops_file_size``: the run completes and the local outputs are the remote bytes."""
    from servers.common import run_slurm

    server = firecrest_server
    server.app_version = version
    server.max_ops_file_size = 1024 * 1024
    proj = faithful_project(tmp_path)
    workdir = tmp_path / "runs"
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(backend(tmp_path, server)),
            "--workdir",
            str(workdir),
        ]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode(errors="replace")[-3000:]
    (remote,) = remote_runs(server)
    (local,) = (workdir / "jobs").glob("*/*")
    remote_out = (remote / "job.out").read_bytes()
    assert b"\xe6\x97\xa5 (completed)" in remote_out and b"\xff\xfe\xc3(" in remote_out
    assert (
        local / "job.out"
    ).read_bytes() == remote_out  # byte for byte, although firecREST decodes
    assert out == remote_out  # and printed as it came
    assert (local / "job.err").read_bytes() == (remote / "job.err").read_bytes()
    assert (remote / "job.err").stat().st_size > 1024 * 1024
    ops = {r[1].rsplit("/", 1)[-1] for r in server.requests if "/ops/" in r[1] and r[2] == 200}
    assert {"tail", "download", "view"} <= ops  # new bytes; whole files; beyond ops/download
    # the empty files were created by job.sh, never uploaded (an empty upload never closes the
    # command's stdin: 408 after the command timeout). The upload commands are what says it: a
    # 408 of another operation on a loaded machine is retried and proves nothing here.
    assert (remote / "pkg" / "__init__.py").read_bytes() == b""
    assert (remote / "only_empty" / "sub" / "__init__.py").read_bytes() == b""
    assert not [c for c in server.commands if "base64 -d" in c and "__init__.py" in c]
    # "submitted" said once the site took it; the site's start time recorded
    text = err.decode(errors="replace")
    record = json.loads((local / "state.json").read_text())
    jid = record["native_id"]
    assert f"submitted (firecrest, job {jid})" in text
    start = run_slurm(["sacct", "-X", "-n", "-P", "--format=Start", f"--jobs={jid}"]).stdout.strip()
    from launchers.jobs.record import epoch_iso

    assert record["started_at"] == epoch_iso(int(start))
    assert record["job_name"].endswith("-a1")


@pytest.mark.slurm
@pytest.mark.parametrize("version", VERSIONS)
def test_reconcile_finds_the_job_by_name_on_both_versions(
    firecrest_server: FirecrestServer, tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the submission and its record: the job is found by its name (listed and
    filtered here on 2.5.6, where pyfirecrest refuses ``name``), among every job of the user;
    its status then read from the list of every job (as with many tracked jobs)."""
    from launchers import command, experiment
    from launchers.remote.firecrest_executor import FirecrestExecutor

    monkeypatch.setattr(FirecrestExecutor, "list_from", 1)
    from launchers.config.model import FirecrestGroup, FirecrestSite, Position
    from launchers.jobs.record import read_record, write_record
    from launchers.jobs.state import JobState
    from launchers.remote.firecrest import FirecrestLauncher
    from servers.common import run_slurm

    server = firecrest_server
    server.app_version = version
    site = FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    launcher = FirecrestLauncher(
        group=FirecrestGroup(id="fc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug"},
    )
    task = command(["sleep", "3"])
    with experiment(tmp_path / "xp", launcher):
        first = task.submit()
    record = read_record(first.directory)
    assert record is not None and record.job_name
    # a job of the same name elsewhere (another directory), not submitted by us: never adopted
    other = run_slurm(
        [
            "sbatch",
            "--parsable",
            f"--job-name={record.job_name}",
            "--chdir=/tmp",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ]
    ).stdout.strip()
    write_record(
        first.directory, record.transition(JobState.SUBMITTING, "simulated crash", native_id=None)
    )
    current_runtime().forget_job(first.directory)
    with experiment(tmp_path / "xp", launcher):
        again = task.submit()
    assert again.state is JobState.COMPLETED and again.native_id == first.native_id != other
    assert len(server.jobs) == 1


@pytest.mark.slurm
def test_slow_sbatch_408_is_adopted_not_failed(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """sbatch outlived firecREST's command timeout (408) and submitted the job all the same:
    found by name and followed, never submitted twice."""
    server = firecrest_server
    server.command_timeout, server.slow_sbatch = 1.5, 3.0
    proj = make_project(tmp_path)
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(backend(tmp_path, server)),
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    assert b"lr=0.1" in out
    # one 408, the submission's (file operations share the command timeout: on a loaded
    # machine one may time out too, and is retried), and one job
    submits = [r for r in server.requests if r[0] == "POST" and r[1].endswith("/jobs")]
    assert [r[2] for r in submits] == [408] and len(server.jobs) == 1


@pytest.mark.slurm
@pytest.mark.slow
def test_run_outlives_an_ssh_outage_at_the_site(
    firecrest_server: FirecrestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    """While the site's SSH is down firecREST answers 500, then 503 until a health check sees
    it back: the run waits it out and its outputs arrive whole."""
    import threading

    server = firecrest_server
    server.health_interval = 1.0
    monkeypatch.setenv("TRAIN_SLEEP", "6")
    proj = make_project(tmp_path)

    def outage() -> None:
        deadline = time.monotonic() + 60
        while not server.jobs and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        server.set_ssh(False)
        time.sleep(3.0)
        server.set_ssh(True)

    t = threading.Thread(target=outage, daemon=True)
    t.start()
    rc = main(
        [
            "run",
            str(proj),
            "--backend-config",
            str(backend(tmp_path, server)),
            "--workdir",
            str(tmp_path / "runs"),
        ]
    )
    out, err = capfdbinary.readouterr()
    t.join()
    assert rc == 0, err.decode()
    assert server.faults.status_counts.get(500, 0) + server.faults.status_counts.get(503, 0) > 0
    (remote,) = remote_runs(server)
    assert out == (remote / "job.out").read_bytes()


@pytest.mark.slurm
def test_reads_beyond_ops_download_are_exact_but_for_non_utf8_bytes(
    firecrest_server: FirecrestServer,
) -> None:
    """A file too big for ``ops/download`` is read through ``ops/view`` from block boundaries:
    exact for UTF-8 text, a ``?`` for each byte that is not UTF-8 (firecREST cannot send it),
    whatever the offset (also when the block before it holds such bytes)."""
    from launchers.config.model import FirecrestSite
    from launchers.remote.firecrest_executor import FirecrestExecutor

    server = firecrest_server
    server.max_ops_file_size = 4096
    site = FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    ex = FirecrestExecutor(site)
    f = server.scratch / "big.txt"
    text = ("é" * 1000).encode() + b"\xff\xfe" + ("ü ✓ " * 900).encode()  # 9202 bytes
    f.write_bytes(text)
    assert not download_fits(len(text), 4096)
    lossy = text.replace(b"\xff\xfe", b"??")
    assert ex.read_bytes_sync(str(f)) == lossy
    for offset in (1, 2001, 2004, 5000):
        assert ex.read_bytes_sync(str(f), offset) == lossy[offset:], offset
    assert ex.read_bytes_sync(str(f), len(text)) == b""
    assert ex.read_bytes_sync(str(server.scratch / "missing.txt")) is None
    small = server.scratch / "small.bin"
    small.write_bytes(b"\x00\xff\xfe\x80 ok")  # fits ops/download: exact whatever the bytes
    assert ex.read_bytes_sync(str(small)) == small.read_bytes()
    assert ex.read_bytes_sync(str(small), 2) == small.read_bytes()[2:]
