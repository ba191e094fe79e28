"""The Slurm executor on a cluster WITHOUT accounting (squeue + job.rc,
docs/design/runtime.md §5) during a slurmctld outage while jobs run. Uses its own cluster
instance (/tmp/slurm-noacct), never the shared one. What "accounting disabled" makes the
executor do is decided on FakeSlurm: tests/slurm/test_slurm_fake_runtime.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import unavailable
from launchers import JobState, SlurmLauncher, command, experiment
from launchers.config.model import SlurmGroup
from launchers.runtime.core import current as current_runtime
from paths import TESTS

CLUSTER = TESTS / "cluster"
NOACCT = {
    "CLUSTER_DIR": "/tmp/slurm-noacct",
    "CLUSTER_ACCOUNTING": "none",
    "CLUSTER_SSH": "0",
    "CLUSTER_SLURMCTLD_PORT": "8817",
    "CLUSTER_SLURMD_PORT_BASE": "8820",
}

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("noacct")]  # its own cluster, fixed ports


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTER_", "SLURM_"))}
    env.update(NOACCT)
    return env


@pytest.fixture(scope="session")
def noacct_cluster() -> Iterator[dict[str, str]]:
    """Our own accounting-less cluster, started for this session and stopped at its end."""
    try:
        out = subprocess.run(["bash", str(CLUSTER / "start.sh")], env=_clean_env(), check=True, capture_output=True,
                             text=True, stdin=subprocess.DEVNULL, timeout=300).stdout  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        msg = f"cannot start the accounting-less cluster: {e} {getattr(e, 'stderr', '')[-1500:]}"
        unavailable(msg)
    info = dict(
        ln[len("export ") :].split("=", 1) for ln in out.splitlines() if ln.startswith("export ")
    )
    try:
        yield info
    finally:
        subprocess.run(["bash", str(CLUSTER / "stop.sh")], env=_clean_env(), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300)  # fmt: skip


def _reset() -> None:
    current_runtime().forget_executors("slurm")


@pytest.fixture
def noacct(
    noacct_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("SLURM_CONF", noacct_cluster["SLURM_CONF"])
    _reset()
    yield noacct_cluster
    _reset()


def make_launcher() -> SlurmLauncher:
    return SlurmLauncher(
        group=SlurmGroup(id="na"), options={"partition": "debug", "time": "00:05:00"}
    )


def _ctld_pid(info: dict[str, str]) -> int:
    return int(Path(info["CLUSTER_DIR"], "run", "slurmctld.pid").read_text().split()[0])


@pytest.mark.slow
def test_slurmctld_outage_fails_nothing(noacct: dict[str, str], tmp_path: Path) -> None:
    L = make_launcher()
    conf = noacct["SLURM_CONF"]
    with experiment(tmp_path, L):
        running = [command(["sh", "-c", f"sleep 8; echo {i}"]).submit() for i in range(2)]
        deadline = time.monotonic() + 30
        while any(j.state is not JobState.RUNNING for j in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = _ctld_pid(noacct)
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        down_at = time.monotonic()
        late = command(["sh", "-c", "echo submitted during the outage"]).submit()
        time.sleep(30)
        assert all(not j.state.is_final or j.state is JobState.COMPLETED for j in [*running, late])
        assert late.state in (JobState.WAITING, JobState.SUBMITTING)
        subprocess.run(["slurmctld"], env=dict(os.environ, SLURM_CONF=conf), check=True, timeout=60)
        assert time.monotonic() - down_at >= 30
    assert [j.state for j in running] == [JobState.COMPLETED, JobState.COMPLETED]
    assert late.state is JobState.COMPLETED and late.native_id
