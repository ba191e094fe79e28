"""Two real clusters: the main sandbox (here) and a second instance of its own ports (over SSH),
whose nodes this module fills with running jobs. The ``earliest_start`` strategy sends the job
to the idle one, asks each cluster once for many calls, and falls back within its timeout when
the busy one's controller is stopped; ``discover`` writes what it can without accounting."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLUSTER_SCRIPTS, start_cluster
from launchers import find_launcher
from launchers.config.loader import clear_cache, load_config
from launchers.finder import estimate
from launchers.finder.search import explain_search

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.ssh,
    pytest.mark.slow,
    pytest.mark.xdist_group("second-cluster"),  # one worker starts and stops it
]

SECOND_DIR = "/tmp/slurm-second"
SECOND = dict(
    CLUSTER_NAME="second",
    CLUSTER_SLURMCTLD_PORT="12817",
    CLUSTER_SLURMDBD_PORT="12819",
    CLUSTER_SLURMD_PORT_BASE="12820",
    CLUSTER_MYSQL_PORT="5907",
    CLUSTER_SSH_PORT="3922",
)
REQUIREMENT = "cpu(cores=2) & duration=10m"


@pytest.fixture(scope="module")
def second(slurm_cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    info = start_cluster(SECOND_DIR, **SECOND)
    yield info
    subprocess.run(
        ["bash", str(CLUSTER_SCRIPTS / "stop.sh")],
        env={**os.environ, "CLUSTER_DIR": SECOND_DIR},
        capture_output=True,
        timeout=120,
        check=False,
    )


def on_second(info: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURM_CONF": info["SLURM_CONF"]}
    return subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=60, check=False,
        cwd=info["CLUSTER_JOBS_DIR"],
    )  # fmt: skip


def discover(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "discover", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def files(second: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with connectors.yaml (SSH to the second cluster) and launchers.yaml: the
    second cluster (weight 1: first in today's order), then the main one, both discovered."""
    d = tmp_path_factory.mktemp("two-clusters")
    (d / "connectors.yaml").write_text(
        "ssh:\n  second:\n"
        f"    hostname: 127.0.0.1\n    port: {second['CLUSTER_SSH_PORT']}\n    username: root\n"
        f"    identity_file: {second['CLUSTER_SSH_KEY']}\n"
        f"    known_hosts: {second['CLUSTER_SSH_KNOWN_HOSTS']}\n    ssh_config: false\n"
    )
    target = d / "launchers.yaml"
    for args in (["--connector", "second"], []):
        proc = discover(*args, "--update", str(target))
        assert proc.returncode == 0, proc.stderr
    text = target.read_text().replace("- id: second\n", "- id: second\n  weight: 1\n", 1)
    target.write_text(text)
    return d


def config_with(files: Path, extra: str, name: str) -> Path:
    out = files / name
    out.mkdir(exist_ok=True)
    (out / "connectors.yaml").write_text((files / "connectors.yaml").read_text())
    (out / "launchers.yaml").write_text(extra + (files / "launchers.yaml").read_text())
    return out


def test_an_idle_cluster_and_this_machine_tie(files: Path) -> None:
    """Both start now: today's order decides (the second cluster has the higher weight)."""
    only_second = (
        (files / "launchers.yaml")
        .read_text()
        .split(f"- id: {os.environ['SLURM_CLUSTER_NAME']}\n")[0]
    )
    d = files / "tie"
    d.mkdir()
    (d / "connectors.yaml").write_text((files / "connectors.yaml").read_text())
    (d / "launchers.yaml").write_text(only_second + "local:\n- id: here\n  cpu: {cores: 2}\n")
    estimate.clear_cache()
    found = find_launcher(REQUIREMENT, config=d, strategy="earliest_start")
    assert found.group.id == "second"
    text = explain_search(REQUIREMENT, config=d, strategy="earliest_start").explanation.text()
    assert "slurm group second: now (sbatch --test-only" in text
    assert "local group here: now (a local group runs the job at once)" in text
    assert "tied with it (less than 1m apart) but later in today's order: local group here" in text


def fill(second: dict[str, str]) -> None:
    """Every CPU of the second cluster's three nodes, for a day."""
    for node, partition, limit in (
        ("cpu01", "long", "2-00:00:00"), ("gpu01", "gpu", "1-00:00:00"), ("gpu02", "gpu", "1-00:00:00"),
    ):  # fmt: skip
        done = on_second(
            second, "sbatch", "-p", partition, "-w", node, "-c", "8", "-t", limit,
            "--wrap", "sleep 100000",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while on_second(second, "squeue", "-h", "-t", "RUNNING", "-o", "%i").stdout.count("\n") < 3:
        assert time.monotonic() < deadline, on_second(second, "squeue").stdout
        time.sleep(0.3)


def test_the_job_goes_where_it_starts_first(files: Path, second: dict[str, str]) -> None:
    fill(second)
    estimate.clear_cache()
    assert find_launcher(REQUIREMENT, config=files).group.id == "second"  # today's order
    found = find_launcher(REQUIREMENT, config=files, strategy="earliest_start")
    assert found.group.id == os.environ["SLURM_CLUSTER_NAME"]
    text = explain_search(REQUIREMENT, config=files, strategy="earliest_start").explanation.text()
    assert re.search(r"slurm group second: in (2[0-3]h|1d)", text), text
    assert f"chosen: slurm group {os.environ['SLURM_CLUSTER_NAME']}: it starts first" in text


def next_job_id(second: dict[str, str]) -> int:
    done = on_second(second, "sbatch", "--test-only", "-p", "debug", "--wrap", "true")
    m = re.search(r"Job (\d+) to start", done.stderr)
    assert m is not None, done.stderr
    return int(m.group(1))


def test_a_loop_asks_each_cluster_once(files: Path, second: dict[str, str]) -> None:
    """Each ``sbatch --test-only`` takes a job id: 300 calls in a loop took one."""
    config = config_with(files, "strategy: earliest_start\n", "loop")
    estimate.clear_cache()
    before = next_job_id(second)
    for _ in range(300):
        assert find_launcher(REQUIREMENT, config=config).group.id != "second"
    assert next_job_id(second) - before - 1 == 1


def test_discover_without_accounting(files: Path, second: dict[str, str]) -> None:
    pid = int(Path(SECOND_DIR, "run", "slurmdbd.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while on_second(second, "sacctmgr", "-n", "show", "qos").returncode == 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc = discover("--connector", "second", "--config", str(files / "launchers.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "launchers: warning: `sacctmgr show qos` failed: exit 1: " in proc.stderr
    assert "no accounting read" in proc.stdout
    cfg = load_config_text_of(proc.stdout)
    (group,) = [g for g in cfg.groups if g.kind == "slurm"]
    parts = {p.name for p in group.partitions}  # type: ignore[union-attr]
    assert {"debug", "gpu", "long"} <= parts and "restricted" not in parts
    assert not group.qos  # type: ignore[union-attr]


def load_config_text_of(text: str) -> object:
    from launchers.config.loader import load_config_text

    return load_config_text(text, "noacct.yaml")


def test_a_stopped_controller_falls_back_within_the_timeout(
    files: Path, second: dict[str, str]
) -> None:
    pid = int(Path(SECOND_DIR, "run", "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while on_second(second, "scontrol", "ping").returncode == 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    config = config_with(files, "estimate: {timeout: 2s}\n", "stopped")
    clear_cache()
    estimate.clear_cache()
    start = time.monotonic()
    found = find_launcher(REQUIREMENT, config=load_config(config), strategy="earliest_start")
    assert time.monotonic() - start < 2 + 3  # the timeout, and a margin for a loaded machine
    assert found.group.id == os.environ["SLURM_CLUSTER_NAME"]
    text = explain_search(REQUIREMENT, config=config, strategy="earliest_start").explanation.text()
    assert "slurm group second: unknown (no answer within 2 s)" in text
