"""The finder on configurations built from the real cluster: `launchers slurm convert` of the
live `scontrol show nodes`, and `query_slurm: true`; every chosen option set is checked by the
real controller with `sbatch --test-only`."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import yaml

from launchers import LauncherNotFoundError, find_launcher
from launchers.config.loader import load_config, load_config_text
from launchers.config.model import LaunchersConfig, SlurmGroup
from launchers.errors import ConfigurationError
from launchers.slurm import query
from launchers.slurm.scontrol import max_array_size, parse_nodes, parse_partitions

pytestmark = pytest.mark.slurm

GPU_MEMORY_REGEX = r"GPUM(?P<cuda_memory>\d+G)"
GPU_MEMORY_FEATURES = {
    f"GPUM{m}G": {"configuration": {"gpu": {"memory": f"{m}G"}}} for m in (24, 48, 80)
}


def scontrol(*args: str) -> str:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def sbatch_test_only(args: list[str], jobs_dir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sbatch", "--test-only", *args, "--wrap", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=jobs_dir,
        check=False,
    )


@pytest.fixture(scope="module")
def converted_text(slurm_cluster: dict[str, str]) -> str:
    nodes = scontrol("show", "nodes")
    proc = subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "convert"],
        input=nodes,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


#: what tests/cluster/start.sh adds as a real site has it: AllowAccounts=physics, Hidden=YES
#: (every node), State=DOWN
SITE_PARTITIONS = ("restricted", "hidden", "maint")


def with_gpu_memory(text: str, how: str) -> LaunchersConfig:
    doc: dict[str, Any] = yaml.safe_load(text)
    if how == "regex":
        doc["slurm"][0]["features_regex"] = [GPU_MEMORY_REGEX]
    else:
        doc["slurm"][0]["features"] = GPU_MEMORY_FEATURES
    return load_config_text(yaml.safe_dump(doc, sort_keys=False), f"converted-{how}.yaml")


def test_converted_output_describes_the_cluster(
    converted_text: str, site_cluster: dict[str, str]
) -> None:
    (group,) = load_config_text(converted_text, "converted.yaml").groups
    assert isinstance(group, SlurmGroup)
    parts = {p.name: p for p in group.partitions}
    # without --partitions, the site's restricted, hidden and DOWN partitions look like others;
    # the hidden one holds every node (a catch-all): written last
    assert set(parts) == {"debug", "gpu", "long", *SITE_PARTITIONS}
    assert list(parts)[-1] == "hidden"
    hosts = {p: sorted(h for ng in parts[p].nodes for h in ng.hosts) for p in parts}
    assert hosts == {
        "debug": ["cpu01", "gpu01", "gpu02"],
        "gpu": ["gpu-a100-01", "gpu-a100-02", "gpu01", "gpu02"],
        "long": ["cpu-big-01", "cpu01"],  # FUTURE nodes are not in plain `show nodes`
        "restricted": ["cpu01"],
        "maint": ["cpu01"],
        "hidden": ["cpu-big-01", "cpu01", "gpu-a100-01", "gpu-a100-02", "gpu01", "gpu02"],
    }
    a100 = next(ng for ng in parts["gpu"].nodes if "A100" in ng.features)
    assert a100.configuration.gpu.count == 8 and a100.configuration.cpu.cores == 128
    assert a100.hosts == ("gpu-a100-01", "gpu-a100-02")


def test_future_nodes_convert_too(slurm_cluster: dict[str, str]) -> None:
    names = [n.name for n in parse_nodes(scontrol("--future", "show", "nodes"))]
    assert {"cpu-cloud-01", "cpu-cloud-02", "cpu01"} <= set(names)


# requirement -> the node sbatch --test-only must place the job on (None: any)
RUNNABLE = [
    ("cpu(cores=2)", None),
    ("cpu(cores=4, mem=8G) & duration=30m", None),
    ("cuda(mem=40G)*2", "gpu01"),
    ("cuda(mem=20G)*4", "gpu02"),
    ("cuda(mem=20G)*3", "gpu02"),
    ("cuda(mem=40G) & cpu(cores=6, mem=20G)", "gpu01"),
    ("cuda(mem=100G)*2 | cuda(mem=20G)*2", None),
]


@pytest.mark.parametrize("how", ["regex", "features"])
@pytest.mark.parametrize(("requirement", "node"), RUNNABLE)
def test_found_options_are_accepted_by_slurm(
    converted_text: str, slurm_cluster: dict[str, str], how: str, requirement: str, node: str | None
) -> None:
    cfg = with_gpu_memory(converted_text, how)
    launcher = find_launcher(requirement, config=cfg)
    args = launcher.sbatch_args()
    proc = sbatch_test_only(args, slurm_cluster["CLUSTER_JOBS_DIR"])
    assert proc.returncode == 0, (args, proc.stderr)
    if node is not None:
        assert f"on nodes {node} " in proc.stderr, (args, proc.stderr)


def test_gpu_requests_use_gpu_count_features(converted_text: str) -> None:
    cfg = with_gpu_memory(converted_text, "regex")
    two = find_launcher("cuda(mem=40G)*2", config=cfg).options
    assert "GPU2" in two.constraint and "GPU4" not in two.constraint and two.gpus_per_node == 2
    four = find_launcher("cuda(mem=20G)*4", config=cfg).options
    assert "GPU4" in four.constraint and "GPU2" not in four.constraint


@pytest.mark.parametrize(
    "requirement",
    ["cuda()*9", "cpu(mem=2TiB)", "cuda(mem=100G)", "cpu(cores=300)", "cuda(mem=90G)"],
)
def test_impossible_requirements_are_not_found(converted_text: str, requirement: str) -> None:
    cfg = with_gpu_memory(converted_text, "regex")
    with pytest.raises(LauncherNotFoundError):
        find_launcher(requirement, config=cfg)


def test_no_hosts_config_still_finds(slurm_cluster: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "convert", "--no-hosts"],
        input=scontrol("show", "nodes"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    cfg = with_gpu_memory(proc.stdout, "regex")
    args = find_launcher("cuda(mem=20G)*4", config=cfg).sbatch_args()
    assert not any(a.startswith(("--exclude", "--nodelist")) for a in args)
    assert sbatch_test_only(args, slurm_cluster["CLUSTER_JOBS_DIR"]).returncode == 0


def test_convert_with_partitions_reads_time_limits(
    slurm_cluster: dict[str, str], tmp_path: Any
) -> None:
    parts = tmp_path / "partitions.txt"
    parts.write_text(scontrol("show", "partitions"))
    proc = subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "convert", "--partitions", str(parts)],
        input=scontrol("show", "nodes"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    cfg = with_gpu_memory(proc.stdout, "regex")
    launcher = find_launcher("duration=2h & cpu(cores=2)", config=cfg)
    assert "debug" not in launcher.options.partition.split(",")
    assert (
        sbatch_test_only(launcher.sbatch_args(), slurm_cluster["CLUSTER_JOBS_DIR"]).returncode == 0
    )
    with pytest.raises(LauncherNotFoundError):
        find_launcher("duration=8 days & cpu()", config=cfg)


# ---------------------------------------------------------------- query_slurm

QUERY_YAML = """\
slurm:
  - id: sandbox
    query_slurm: true
    features_regex: ['GPUM(?P<cuda_memory>\\d+G)']
    partitions:
      gpu: {priority: 10}
"""


@pytest.fixture()
def queried(slurm_cluster: dict[str, str]) -> LaunchersConfig:
    query.clear_cache()
    return load_config_text(QUERY_YAML, "query.yaml")


def test_query_reads_max_time_and_keeps_file_keys(
    queried: LaunchersConfig, site_cluster: dict[str, str]
) -> None:
    (group,) = queried.groups
    assert isinstance(group, SlurmGroup)
    refreshed = query.refresh_group(group)
    parts = {p.name: p for p in refreshed.partitions}
    # in scontrol's order, without the partitions root may not use (hidden; restricted to an
    # account, and query_slurm does not ask the accounts); the DOWN one kept, disabled
    assert [p.name for p in refreshed.partitions] == [
        p.name
        for p in parse_partitions(scontrol("show", "partitions"))
        if p.name not in ("restricted", "hidden")
    ]
    assert parts["maint"].disabled and not parts["debug"].disabled
    assert parts["debug"].configuration.max_duration == 3600
    assert parts["gpu"].configuration.max_duration == 86400
    assert parts["long"].configuration.max_duration == 7 * 86400
    assert parts["gpu"].priority == 10 and parts["debug"].priority == 0
    assert refreshed.features_regex == group.features_regex and refreshed.id == "sandbox"
    assert query.refresh_group(group) is refreshed  # cached: scontrol is not run again


@pytest.mark.parametrize(
    ("requirement", "allowed", "forbidden"),
    [
        ("duration=2h & cpu(cores=2)", {"gpu", "long"}, {"debug"}),
        ("duration=2 days & cpu()", {"long"}, {"debug", "gpu"}),
        ("duration=30m & cuda(mem=40G)*2", {"gpu", "debug"}, {"long"}),
    ],
)
def test_query_slurm_respects_partition_time_limits(
    queried: LaunchersConfig,
    slurm_cluster: dict[str, str],
    requirement: str,
    allowed: set[str],
    forbidden: set[str],
) -> None:
    launcher = find_launcher(requirement, config=queried)
    parts = set(launcher.options.partition.split(","))
    assert parts <= allowed and not parts & forbidden
    proc = sbatch_test_only(launcher.sbatch_args(), slurm_cluster["CLUSTER_JOBS_DIR"])
    assert proc.returncode == 0, proc.stderr


def test_query_slurm_too_long_is_not_found(queried: LaunchersConfig) -> None:
    with pytest.raises(LauncherNotFoundError, match=r"(?s)partition debug.*partition long"):
        find_launcher("duration=8 days & cpu()", config=queried)


def test_query_slurm_errors_name_the_group(slurm_cluster: dict[str, str], tmp_path: Any) -> None:
    query.clear_cache()
    bad_path = SlurmGroup(id="nowhere", query_slurm=True, path=str(tmp_path))
    with pytest.raises(
        ConfigurationError, match=r"slurm group nowhere: query_slurm needs scontrol"
    ):
        query.refresh_group(bad_path)
    failing = tmp_path / "scontrol"
    failing.write_text(
        "#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    with pytest.raises(
        ConfigurationError,
        match=r"`scontrol show nodes` failed \(exit 1\): slurm_load_partitions: Unable",
    ):
        query.refresh_group(bad_path)
    remote = SlurmGroup(id="far", query_slurm=True, connector="front")
    with pytest.raises(ConfigurationError, match=r"slurm group far: .*unknown connector 'front'"):
        query.refresh_group(remote)


@pytest.mark.ssh
def test_query_slurm_over_ssh(site_cluster: dict[str, str], tmp_path: Any) -> None:
    c = site_cluster
    (tmp_path / "launchers.yaml").write_text(f"""\
connectors:
  ssh:
    sandbox:
      hostname: {c["CLUSTER_SSH_HOST"]}
      port: {c["CLUSTER_SSH_PORT"]}
      username: {c["CLUSTER_SSH_USER"]}
      identity_file: {c["CLUSTER_SSH_KEY"]}
      known_hosts: {c["CLUSTER_SSH_KNOWN_HOSTS"]}
slurm:
  - id: remote
    connector: sandbox
    query_slurm: true
    partitions:
      gpu: {{priority: 3}}
""")
    query.clear_cache()
    cfg = load_config(tmp_path / "launchers.yaml")
    refreshed = query.refresh_group(cfg.groups[0])  # type: ignore[arg-type]
    assert [(p.name, p.priority, p.configuration.max_duration) for p in refreshed.partitions] == [
        ("debug", 0, 3600),
        ("gpu", 3, 86400),
        ("long", 0, 7 * 86400),
        ("maint", 0, 3600),  # State=DOWN: kept, disabled (restricted and hidden left out)
    ]
    launcher = find_launcher("duration=2h & cuda()*2", config=cfg)
    assert launcher.options.partition == "gpu"


@pytest.mark.ssh
def test_query_slurm_over_ssh_asks_the_remote_user_for_allow_groups(
    slurm_cluster: dict[str, str], tmp_path: Any
) -> None:
    """A partition with AllowGroups or RootOnly makes query_slurm ask who the remote user is
    (`id -u`, `id -Gn` over the connector): root may use both; hidden ones stay out."""
    c = slurm_cluster
    (tmp_path / "nodes.txt").write_text(
        "NodeName=n1 CPUTot=4 RealMemory=1000 AvailableFeatures=F Gres=(null) State=IDLE "
        "Partitions=hidden,wheelonly,rootonly,open\n"
    )
    (tmp_path / "parts.txt").write_text(
        "PartitionName=hidden AllowGroups=ALL AllowAccounts=ALL Hidden=YES MaxTime=UNLIMITED Nodes=n1 State=UP\n"
        "PartitionName=wheelonly AllowGroups=wheel,nosuchgroup AllowAccounts=ALL Hidden=NO Nodes=n1 State=UP\n"
        "PartitionName=rootonly AllowGroups=ALL AllowAccounts=ALL RootOnly=YES Nodes=n1 State=UP\n"
        "PartitionName=open AllowGroups=ALL AllowAccounts=ALL Nodes=n1 State=UP\n"
    )
    fake = tmp_path / "scontrol"
    fake.write_text(
        f'#!/bin/sh\ncase "$2" in nodes) cat {tmp_path}/nodes.txt;; *) cat {tmp_path}/parts.txt;; esac\n'
    )
    fake.chmod(0o755)
    (tmp_path / "launchers.yaml").write_text(f"""\
connectors:
  ssh:
    sandbox:
      hostname: {c["CLUSTER_SSH_HOST"]}
      port: {c["CLUSTER_SSH_PORT"]}
      username: {c["CLUSTER_SSH_USER"]}
      identity_file: {c["CLUSTER_SSH_KEY"]}
      known_hosts: {c["CLUSTER_SSH_KNOWN_HOSTS"]}
slurm:
  - id: remote
    connector: sandbox
    query_slurm: true
    path: {tmp_path}
""")
    query.clear_cache()
    cfg = load_config(tmp_path / "launchers.yaml")
    refreshed = query.query_group(cfg.groups[0])  # type: ignore[arg-type]
    assert c["CLUSTER_SSH_USER"] == "root"  # the sandbox's sshd logs in as root
    assert [p.name for p in refreshed.partitions] == ["wheelonly", "rootonly", "open"]


def test_max_array_size_of_the_real_cluster(slurm_cluster: dict[str, str]) -> None:
    assert max_array_size(scontrol("show", "config")) == 1001
    assert os.environ["SLURM_CONF"] == slurm_cluster["SLURM_CONF"]
