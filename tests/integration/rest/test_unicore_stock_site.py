"""Our UNICORE client against what a stock site does (docs/remote-sites.md, "UNICORE: server
behaviours we rely on and work around"): resources reach Slurm exactly through a raw job's BSS
file, ranges never start past the end, 403 and 404 are understood, aborts wait for the batch
job's end, file names arrive as written. Pure decisions first, then the loopback site on the
real Slurm."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import until_released
from launchers.cli.main import main
from launchers.remote.decide import read_start
from launchers.remote.storage import unicore_action_path, unicore_path
from remote_fixtures import make_project, unicore_server_fixture  # noqa: F401
from servers.common import slurm_env
from servers.unicore import UnicoreServer, java_url_decode, storage_path

NAMES = ["x%41.txt", "a b#c?d.txt", "50%.txt", "p+q=r&s.txt", "dir/ü é.txt", "%zz"]


@pytest.mark.parametrize("name", NAMES)
def test_names_arrive_as_written(name: str) -> None:
    """Item 8: quoted twice for file URLs (decoded twice), once in action bodies."""
    assert storage_path(unicore_path(name)) == name
    assert "#" not in unicore_path(name) and "?" not in unicore_path(name)
    assert java_url_decode(unicore_action_path(name)) == name


@pytest.mark.parametrize(
    ("offset", "size", "shift", "want"),
    [
        (0, 0, 0, (None, 0)),  # empty: nothing to read (no 206-empty round trip)
        (0, 10, 0, (0, 0)),
        (4, 10, 0, (4, 0)),
        (10, 10, 0, (None, 0)),  # at the end: never Range: bytes=SIZE- ...
        (12, 5, 0, (0, 12)),  # ... nor past it: truncated by a requeue, read again from 0
        (12, 0, 0, (None, 12)),  # truncated to nothing
        (15, 5, 12, (3, 12)),  # after a truncation, offsets are shifted
        (17, 5, 12, (None, 12)),
    ],
)
def test_read_start(offset: int, size: int, shift: int, want: tuple[int | None, int]) -> None:
    """Item 4: a range never starts at or past the last known size."""
    start, new_shift = read_start(offset, size, shift)
    assert (start, new_shift) == want
    assert start is None or start < size


def test_pyunicore_2_errors_are_understood() -> None:
    """Issue 15: pyunicore 2 raises a plain ``httpx.HTTPError`` for any error status (the code
    only in its text) and httpx's transport errors for no answer."""
    import httpx

    from launchers.remote.retry import is_transient, status_of

    for code, transient in ((403, False), (404, False), (416, False), (503, True), (429, True)):
        e = httpx.HTTPError(f"{code} Server Error: n/a for url: https://site/x")
        assert status_of(e) == code and is_transient(e) is transient
    for e in (
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("Server disconnected"),
        httpx.ConnectError("refused"),
    ):
        assert is_transient(e) and status_of(e) is None


# -- on the real Slurm ---------------------------------------------------------------------------


def slurm_job(bss_id: str) -> dict[str, str]:
    """``sacct`` of a real job: state and allocated TRES (cpu, mem, gres/gpu)."""
    deadline = time.monotonic() + 30
    while True:
        r = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", bss_id, "-o", "State,AllocTRES,ReqTRES"],
            capture_output=True,
            text=True,
            env=slurm_env(),
            timeout=30,
        )
        line = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
        if line and "cpu=" in line:
            state, alloc, req = line.split("|")
            return {"state": state, "alloc": alloc, "req": req}
        assert time.monotonic() < deadline, r
        time.sleep(0.3)


def tres(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


SRUN_PROJECT = """\
name: gpu
entry_points:
  main:
    command: "srun bash -c 'echo srun-ok cpus=$SLURM_CPUS_PER_TASK gpus=$CUDA_VISIBLE_DEVICES'"
"""


@pytest.mark.slurm
def test_run_gets_2_cores_8g_1_gpu(
    unicore_server: UnicoreServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Done-when of issue 22: a Compute Backend Config asking for 2 cores, 8G and 1 GPU gets
    exactly that from Slurm (a stock site would give no --mem, no GPU and 1 CPU), and an ``srun``
    in the job (SRUN_CPUS_PER_TASK=2, the Apptainer path) runs within the allocation."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "MLproject").write_text(SRUN_PROJECT)
    for name in ("x%41.txt", "a b#c?d.txt"):
        (proj / name).write_text(name)
    cfg = tmp_path / "backend.json"
    cfg.write_text(
        json.dumps(
            {
                "UnicoreApiUrl": unicore_server.base_url,
                "Resources": {
                    "Queue": "gpu",
                    "Runtime": "10m",
                    "CPUsPerNode": 2,
                    "MemoryPerNode": "8G",
                    "GPUsPerNode": 1,
                },
            }
        )
    )
    rc = main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(tmp_path / "runs")])
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    assert b"srun-ok cpus=2 gpus=0" in out, out
    (ujob,) = unicore_server.jobs.values()
    got = slurm_job(ujob.bss_id)
    alloc = tres(got["alloc"])
    assert (alloc["cpu"], alloc["mem"], alloc.get("gres/gpu")) == ("2", "8G", "1"), got
    assert "--time=0-00:10:00" in (ujob.workdir / "bss_submit_ID").read_text()
    for name in ("x%41.txt", "a b#c?d.txt"):  # item 8: names arrive as written
        assert (ujob.workdir / name).read_text() == name
    assert unicore_server.range_past_end == 0


FINDER_CONFIG = """\
unicore:
  - id: sandbox
    site: {{url: "{url}"}}
    partitions:
      gpu: {{configuration: {{gpu: {{count: 2, memory: 48G}}, cpu: {{cores: 8, memory: 31G}}, max_duration: 1d}}}}
"""


@pytest.mark.slurm
def test_finder_experiment_gets_2_cores_8g_1_gpu(
    unicore_server: UnicoreServer, tmp_path: Path
) -> None:
    """Done-when of issue 22: a finder-matched experiment gets exactly its request."""
    from launchers import command, experiment, find_launcher

    config = tmp_path / "launchers.yaml"
    config.write_text(FINDER_CONFIG.format(url=unicore_server.base_url))
    launcher = find_launcher("cuda(mem=24G) & cpu(mem=8G, cores=2) & duration=10m", config=config)
    with experiment(tmp_path / "xp", launcher):
        job = command(["bash", "-c", "echo cpus=$SLURM_CPUS_PER_TASK"]).submit()
    assert job.state.value == "COMPLETED", job.reason
    (ujob,) = unicore_server.jobs.values()
    alloc = tres(slurm_job(ujob.bss_id)["alloc"])
    assert (alloc["cpu"], alloc["mem"], alloc.get("gres/gpu")) == ("2", "8G", "1"), alloc
    assert job.stdout_path.read_text().strip() == "cpus=2"


def uc_launcher(server: UnicoreServer) -> Any:
    from launchers.config.model import Position, UnicoreGroup, UnicoreSite
    from launchers.remote.unicore import UnicoreLauncher

    site = UnicoreSite(url=server.base_url)
    return UnicoreLauncher(
        group=UnicoreGroup(id="uc", site=site, position=Position("launchers.yaml", 1)),
        options={"partition": "debug", "time": "0:05:00"},
    )


@pytest.mark.slurm
def test_an_expired_job_fails_with_the_reason(
    unicore_server: UnicoreServer, tmp_path: Path
) -> None:
    """Item 6: a job whose URL answers 404 (termination time passed) is FAILED, not RUNNING
    forever."""
    from launchers import command, experiment
    from launchers.errors import ExperimentFailed

    unicore_server.job_lifetime = 4.0
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", uc_launcher(unicore_server)):
        job = command(["sleep", "60"]).submit()
    assert job.state.value == "FAILED" and "no longer exists" in (job.reason or ""), job.reason


@pytest.mark.slurm
def test_abort_waits_for_the_batch_job(unicore_server: UnicoreServer, tmp_path: Path) -> None:
    """Item 7: UNICORE says FAILED "Job aborted." at once; the job is final only once job.rc
    (written last by the dying script) is home: CANCELLED with its signal and outputs."""
    from launchers import command, experiment
    from launchers.errors import ExperimentFailed

    with (
        pytest.raises(ExperimentFailed, match="CANCELLED"),
        experiment(tmp_path / "xp", uc_launcher(unicore_server)),
    ):
        job = command(["bash", "-c", "echo started; exec sleep 60"]).submit()
        deadline = time.monotonic() + 60
        while not any(
            "started" in (j.workdir / "job.out").read_text()
            for j in unicore_server.jobs.values()
            if (j.workdir / "job.out").exists()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        job.cancel()
        job.wait(60)
    assert job.state.value == "CANCELLED"
    rc = json.loads((job.directory / "job.rc").read_text())
    assert rc["signal"] == 15 and job.stdout_path.read_text() == "started\n"


@pytest.mark.slurm
def test_a_job_completed_before_the_abort_stays_completed(
    unicore_server: UnicoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 7: the site had not yet seen the batch job end when the abort came (it reads batch
    states periodically): it says "Job aborted.", job.rc says rc 0: COMPLETED."""
    import threading

    from launchers import command, experiment

    server = unicore_server
    release = tmp_path / "release"
    # the site's batch-state reads under way: one begun before the freeze below may answer
    # after the job's end, so the job is released only once none is left (and once the site
    # has read the batch state at all: its first read ignores the update interval)
    reading, lock, refresh = [0], threading.Lock(), server.refresh

    def counted(ujob: Any) -> None:
        with lock:
            reading[0] += 1
        try:
            refresh(ujob)
        finally:
            with lock:
                reading[0] -= 1

    monkeypatch.setattr(server, "refresh", counted)
    with experiment(tmp_path / "xp", uc_launcher(server)):
        # runs until released, after the site stopped learning batch states (a job that ended
        # first would be seen ending, and the cancel would come after the end)
        job = command(["bash", "-c", f"{until_released(release)}; echo done"]).submit()
        deadline = time.monotonic() + 60
        while not any(j.bss_id != "N/A" for j in server.jobs.values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        server.bss_update_interval = 1e9  # the site stops learning batch states
        (ujob,) = server.jobs.values()
        while reading[0] or ujob.bss_checked == float("-inf"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not job.state.is_final, "the job ended before the site stopped learning batch states"
        release.touch()
        while (
            slurm_job(ujob.bss_id)["state"] != "COMPLETED" or not (ujob.workdir / "job.rc").exists()
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        job.cancel()
        job.wait(60)
    assert ujob.status_message == "Job aborted."
    assert job.state.value == "COMPLETED", job.reason
    assert job.stdout_path.read_text() == "done\n"
