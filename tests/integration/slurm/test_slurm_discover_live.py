"""``launchers slurm discover`` on the real test cluster, here and over SSH: the file loads
unchanged, leaves out what root may not use, reads QoS limits and accounts, and every option
set the finder then emits is accepted by ``sbatch --test-only``; ``--update`` keeps what a
person wrote (docs/discover.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launchers import find_launcher
from launchers.config.loader import load_config, load_config_text
from launchers.config.model import SlurmGroup

pytestmark = pytest.mark.slurm


def discover(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "discover", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=env,
    )


def sbatch_test_only(args: list[str], jobs_dir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sbatch", "--test-only", *args, "--wrap", "true"],
        capture_output=True, text=True, timeout=30, cwd=jobs_dir, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def discovered(site_cluster: dict[str, str]) -> str:
    proc = discover()
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def group_of(text: str) -> SlurmGroup:
    (group,) = load_config_text(text, "discovered.yaml").groups
    assert isinstance(group, SlurmGroup)
    return group


def test_the_group_describes_what_root_may_use(
    discovered: str, site_cluster: dict[str, str]
) -> None:
    group = group_of(discovered)
    assert group.id == site_cluster["SLURM_CLUSTER_NAME"]
    parts = {p.name: p for p in group.partitions}
    assert list(parts) == ["debug", "gpu", "long", "restricted", "maint"]
    assert parts["restricted"].accounts == ("physics",)  # AllowAccounts=physics
    assert set(parts["restricted"].qos) >= {"normal", "short", "multigpu"}
    assert "high" not in parts["restricted"].qos  # not in root's physics association
    assert parts["maint"].disabled and not parts["debug"].disabled
    assert parts["debug"].configuration.max_duration == 3600
    assert {"normal", "high", "short", "multigpu", "extended"} <= set(parts["debug"].qos)
    assert group.qos["high"].max_duration == 4 * 3600 and group.qos["high"].priority == 1000
    assert group.qos["short"].max_duration == 30 * 60
    assert group.qos["multigpu"].min_gpu == 2
    assert group.qos["extended"].partition_time_limit
    gpus = {ng.hosts[0]: ng.configuration.gpu for ng in parts["gpu"].nodes}
    assert (gpus["gpu01"].count, gpus["gpu01"].memory, gpus["gpu01"].model) == (
        2,
        48 * 2**30,
        "a6000",
    )
    assert gpus["gpu-a100-01"].memory == 80 * 2**30  # from the feature GPUM80G
    assert "# discover: partition hidden left out: Hidden=YES" in discovered
    assert "    # discover: disabled: State=DOWN" in discovered
    assert group.configuration.cpu.mem_per_cpu == 256 * 2**20  # DefMemPerCPU=256


# requirement -> the node sbatch --test-only must place the job on (None: any)
RUNNABLE = [
    ("cpu(cores=2)", None),
    ("cpu(cores=4, mem=8G) & duration=30m", None),
    ("duration=2h & cpu(cores=2)", None),
    ("duration=3 days & cpu()", "cpu01"),
    ("cuda(mem=40G)*2", "gpu01"),
    ("cuda(mem=20G)*4", "gpu02"),
    ("cuda(mem=20G)*3 & duration=20h", "gpu02"),
    ("cuda(mem=40G) & cpu(cores=6, mem=20G)", "gpu01"),
    ("cuda(mem=100G)*2 | cuda(mem=20G)*2", None),
]


@pytest.mark.parametrize(("requirement", "node"), RUNNABLE)
def test_found_options_are_accepted_by_slurm(
    discovered: str, site_cluster: dict[str, str], requirement: str, node: str | None
) -> None:
    launcher = find_launcher(requirement, config=load_config_text(discovered, "d.yaml"))
    args = launcher.sbatch_args()
    proc = sbatch_test_only(args, site_cluster["CLUSTER_JOBS_DIR"])
    assert proc.returncode == 0, (args, proc.stderr)
    if node is not None:
        assert f"on nodes {node} " in proc.stderr, (args, proc.stderr)


def with_priorities(text: str, **priorities: int) -> Any:
    doc = yaml.safe_load(text)
    for name, priority in priorities.items():
        doc["slurm"][0]["partitions"][name]["priority"] = priority
    return load_config_text(yaml.safe_dump(doc, sort_keys=False), "prio.yaml")


def test_an_account_restricted_partition_gets_its_account(
    discovered: str, site_cluster: dict[str, str]
) -> None:
    launcher = find_launcher(
        "cpu() & duration=20m", config=with_priorities(discovered, restricted=5000)
    )
    options = launcher.options
    assert (options.partition, options.account, options.qos) == ("restricted", "physics", "short")
    proc = sbatch_test_only(launcher.sbatch_args(), site_cluster["CLUSTER_JOBS_DIR"])
    assert proc.returncode == 0, proc.stderr


def test_a_partition_time_limit_qos_runs_past_the_partition_limit(
    discovered: str, site_cluster: dict[str, str]
) -> None:
    """QoS extended (MaxWall 2 days, Flags=PartitionTimeLimit) on debug (MaxTime 1 hour)."""
    launcher = find_launcher("cpu() & duration=10h", config=with_priorities(discovered, debug=5000))
    assert launcher.options.partition.split(",")[0] == "debug"
    assert launcher.options.qos == "extended" and launcher.options.time == "10:00:00"
    proc = sbatch_test_only(launcher.sbatch_args(), site_cluster["CLUSTER_JOBS_DIR"])
    assert proc.returncode == 0, proc.stderr


def test_update_keeps_a_persons_keys(site_cluster: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "launchers.yaml"
    first = discover("--update", str(target))
    assert first.returncode == 0, first.stderr
    name = site_cluster["SLURM_CLUSTER_NAME"]
    text = target.read_text()
    text = text.replace(
        f"- id: {name}\n", f"- id: {name}\n  weight: 7    # mine\n  tags: [big]\n", 1
    )
    text = text.replace(
        "    debug:\n", "    # the default partition\n    debug:\n      priority: 9\n", 1
    )
    text = text.replace(
        "partitions:\n", "features_regex: ['GPUM(?P<cuda_memory>\\d+G)']\n  partitions:\n", 1
    )
    target.write_text(text)
    # (other tests add and remove QoS of root meanwhile: only what is checked here is stable)
    mine = [line for line in text.splitlines() if "mine" in line or "priority: 9" in line]
    mine += ["  tags: [big]", "    # the default partition", "  features_regex: ['GPUM"]
    same = discover("--update", str(target), "--cluster", name)
    assert same.returncode == 0, same.stderr
    for line in mine:
        assert line in target.read_text(), line
    # an owned value a person changed is Slurm's again; the diff says so first
    target.write_text(target.read_text().replace("max_duration: 1h", "max_duration: 3h", 1))
    diff = discover("--update", str(target), "--diff")
    assert diff.returncode == 0 and "-      configuration: {max_duration: 3h}" in diff.stdout
    assert "+      configuration: {max_duration: 1h}" in diff.stdout
    assert "max_duration: 3h" in target.read_text()  # --diff writes nothing
    assert discover("--update", str(target)).returncode == 0
    after = target.read_text()
    assert "max_duration: 3h" not in after and all(line in after for line in mine)
    group = load_config(target).groups[0]
    assert (group.weight, group.tags) == (7, ("big",))


@pytest.mark.ssh
def test_discover_over_an_ssh_connector(
    discovered: str, site_cluster: dict[str, str], tmp_path: Path
) -> None:
    c = site_cluster
    (tmp_path / "connectors.yaml").write_text(
        "ssh:\n  front:\n"
        f"    hostname: {c['CLUSTER_SSH_HOST']}\n    port: {c['CLUSTER_SSH_PORT']}\n"
        f"    username: {c['CLUSTER_SSH_USER']}\n    identity_file: {c['CLUSTER_SSH_KEY']}\n"
        f"    known_hosts: {c['CLUSTER_SSH_KNOWN_HOSTS']}\n    ssh_config: false\n"
    )
    target = tmp_path / "launchers.yaml"
    target.write_text("local:\n  - id: laptop\n")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}  # only sshd knows the cluster
    proc = discover("--connector", "front", "--update", str(target), env=env)
    assert proc.returncode == 0, proc.stderr
    cfg = load_config(target)
    local, remote = cfg.groups
    assert remote.connector == "front" and local.id == "laptop"
    assert [p.name for p in remote.partitions] == [p.name for p in group_of(discovered).partitions]  # type: ignore[union-attr]
    # refreshed through the group's own connector (SLURM_CONF is not set here)
    target.write_text(target.read_text().replace("max_duration: 1h", "max_duration: 3h", 1))
    again = discover("--update", str(target), "--cluster", str(remote.id), env=env)
    assert again.returncode == 0, again.stderr
    assert "max_duration: 3h" not in target.read_text()


@pytest.mark.ssh
def test_discover_over_ssh_to_a_host(site_cluster: dict[str, str], tmp_path: Path) -> None:
    """``--ssh HOST``: the user's ~/.ssh/config applies; the file declares the connector."""
    c = site_cluster
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host sandbox-login\n  HostName {c['CLUSTER_SSH_HOST']}\n  Port {c['CLUSTER_SSH_PORT']}\n"
        f"  User {c['CLUSTER_SSH_USER']}\n  IdentityFile {c['CLUSTER_SSH_KEY']}\n"
    )
    (home / ".ssh" / "known_hosts").write_text(Path(c["CLUSTER_SSH_KNOWN_HOSTS"]).read_text())
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["HOME"] = str(home)
    proc = discover("--ssh", "sandbox-login", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert doc["connectors"] == {"ssh": {"sandbox-login": {"hostname": "sandbox-login"}}}
    assert doc["slurm"][0]["connector"] == "sandbox-login"
    assert "restricted" in doc["slurm"][0]["partitions"]
