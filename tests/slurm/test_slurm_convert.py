"""scontrol parsing and `launchers slurm convert` (pure: text in, YAML out; no cluster needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launchers.config.loader import load_config_text
from launchers.errors import ConfigurationError, LaunchersError
from launchers.slurm.convert import convert_text, duration_text
from launchers.slurm.scontrol import (
    NODE_FREE_TEXT,
    Access,
    ScontrolFormatError,
    Usability,
    cluster_name,
    expand_hostlist,
    max_array_size,
    parse_config,
    parse_gres,
    parse_nodes,
    parse_partitions,
    parse_records,
    partition_usability,
)
from launchers.units import MIB
from paths import ROOT

BENCHMARKS = ROOT / "benchmarks"

# Real `scontrol show nodes` output of the sandbox cluster (Slurm 22.05.8), trimmed to 4 nodes
# (`$` stands for the trailing space scontrol prints at the end of some lines).
SANDBOX_NODES = """\
NodeName=cpu-big-01 CoresPerSocket=64$
   CPUAlloc=0 CPUEfctv=256 CPUTot=256 CPULoad=N/A
   AvailableFeatures=CPU,EPYC,BIGMEM
   ActiveFeatures=CPU,EPYC,BIGMEM
   Gres=(null)
   NodeAddr=127.0.0.1 NodeHostName=cpu-big-01 Port=6863$
   RealMemory=1000000 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1
   State=UNKNOWN+DRAIN+NOT_RESPONDING ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=long$
   BootTime=None SlurmdStartTime=None
   LastBusyTime=Unknown
   CfgTRES=cpu=256,mem=1000000M,billing=256
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=sandbox_fake_node [root@2026-11-22T12:59:50]

NodeName=cpu01 Arch=x86_64 CoresPerSocket=4$
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.24
   AvailableFeatures=CPU,XEON
   ActiveFeatures=CPU,XEON
   Gres=(null)
   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8
   OS=Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)$
   RealMemory=16000 AllocMem=0 FreeMem=23761 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug,long$
   BootTime=2026-11-22T12:58:03 SlurmdStartTime=2026-11-22T12:59:51
   LastBusyTime=2026-11-22T12:59:51
   CfgTRES=cpu=8,mem=16000M,billing=8
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

NodeName=gpu01 Arch=x86_64 CoresPerSocket=4$
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.24
   AvailableFeatures=GPU,GPU2,GPUM48G,A6000
   ActiveFeatures=GPU,GPU2,GPUM48G,A6000
   Gres=gpu:a6000:2(S:0-1)
   NodeAddr=127.0.0.1 NodeHostName=vm Port=6822 Version=22.05.8
   OS=Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)$
   RealMemory=32000 AllocMem=0 FreeMem=23761 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug,gpu$
   CfgTRES=cpu=8,mem=32000M,billing=8,gres/gpu=2
   AllocTRES=

NodeName=gpu02 Arch=x86_64 CoresPerSocket=4$
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.24
   AvailableFeatures=GPU,GPU4,GPUM24G,RTX3090
   ActiveFeatures=GPU,GPU4,GPUM24G,RTX3090
   Gres=gpu:rtx3090:4
   RealMemory=32000 AllocMem=0 FreeMem=23761 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug,gpu$
""".replace("$", " ")  # real output has trailing spaces

SANDBOX_PARTITIONS = """\
PartitionName=debug
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=YES QoS=N/A
   DefaultTime=00:10:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=01:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=cpu01,gpu[01-02]
   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO
   State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE

PartitionName=gpu
   AllowGroups=ALL AllowAccounts=research,sandbox AllowQos=ALL
   AllocNodes=ALL Default=NO QoS=gpu
   DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=gpu[01-02],gpu-a100-[01-02]
   State=UP TotalCPUs=272 TotalNodes=4 SelectTypeParameters=NONE

PartitionName=scratch
   MaxTime=UNLIMITED DefaultTime=NONE State=INACTIVE Nodes=(null) PriorityTier=5
"""


def node(
    name: str,
    features: str = "",
    partitions: str | None = "p",
    cpus: int = 8,
    mem: int = 16000,
    gres: str = "(null)",
) -> str:
    """One record in scontrol's multi-line layout."""
    part = f"   Partitions={partitions} \n" if partitions is not None else ""
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket=4 \n"
        f"   CPUAlloc=0 CPUEfctv={cpus} CPUTot={cpus} CPULoad=0.01\n"
        f"   AvailableFeatures={features}\n   ActiveFeatures={features}\n"
        f"   Gres={gres}\n"
        f"   RealMemory={mem} AllocMem=0 FreeMem=1 Sockets=2 Boards=1\n"
        f"   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
        f"{part}"
    )


def converted(text: str, **kw: Any) -> dict[str, Any]:
    return yaml.safe_load(convert_text(text, **kw).text)  # type: ignore[no-any-return]


def groups_of(doc: dict[str, Any], partition: str) -> list[dict[str, Any]]:
    return doc["slurm"][0]["partitions"][partition]["nodes"]  # type: ignore[no-any-return]


def run_cli(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "convert", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


# ---------------------------------------------------------------- scontrol parsing


def test_parse_real_nodes() -> None:
    nodes = {n.name: n for n in parse_nodes(SANDBOX_NODES)}
    assert list(nodes) == ["cpu-big-01", "cpu01", "gpu01", "gpu02"]
    big, cpu, g1, g2 = nodes.values()
    assert (big.cpus, big.memory_mib, big.gpus) == (256, 1000000, 0)
    assert big.features == ("CPU", "EPYC", "BIGMEM") and big.partitions == ("long",)
    assert big.state == "UNKNOWN+DRAIN+NOT_RESPONDING"
    assert cpu.partitions == ("debug", "long") and cpu.features == ("CPU", "XEON")
    assert (g1.gpus, g1.gpu_types) == (2, ("a6000",))
    assert (g2.gpus, g2.gpu_types, g2.memory_mib) == (4, ("rtx3090",), 32000)
    assert [n.line for n in nodes.values()] == [1, 19, 37, 50]


def test_parse_one_line_form_and_spaces_in_values() -> None:
    text = (
        "NodeName=a.b:1 Arch=x86_64 CPUTot=4 AvailableFeatures=F1 ActiveFeatures=F1 Gres=gpu:1 "
        "OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC Debian  RealMemory=1000 State=IDLE "
        "Partitions=p1 Reason=being fixed [root@2026-01-01T00:00:00]\n"
        "NodeName=c Arch=x86_64 CPUTot=2 AvailableFeatures= ActiveFeatures= Gres=(null) "
        "RealMemory=500 State=DOWN Partitions=p2\n"
    )
    a, c = parse_nodes(text)
    assert (a.name, a.cpus, a.memory_mib, a.gpus, a.features, a.partitions) == (
        "a.b:1",
        4,
        1000,
        1,
        ("F1",),
        ("p1",),
    )
    assert (c.name, c.features, c.partitions, c.state) == ("c", (), ("p2",), "DOWN")


def test_reason_and_os_text_does_not_leak_into_fields() -> None:
    text = (
        node("n1", "A", "p1").replace(
            "   Gres=", "   OS=Linux State=BOGUS Partitions=bogus 1.0\n   Gres="
        )
        + "   Reason=drained: Partitions=wrong State=X [root@2026-01-01T00:00:00]\n"
    )
    (n,) = parse_nodes(text)
    assert n.partitions == ("p1",) and n.state == "IDLE"


@pytest.mark.parametrize(
    ("gres", "count", "types"),
    [
        ("(null)", 0, ()),
        ("", 0, ()),
        ("gpu:2", 2, ()),
        ("gpu", 1, ()),
        ("gpu:a6000:2(S:0-1)", 2, ("a6000",)),
        ("gpu:tesla:4,gpu:k80:2", 6, ("tesla", "k80")),
        ("gpu:a100:4(S:0,1),nic:2", 4, ("a100",)),
        ("gpu:1g.10gb:7,gpu:a100:1(S:0)", 8, ("1g.10gb", "a100")),
        ("mps:100,gpu:v100:2", 2, ("v100",)),
        ("gpu:tesla", 1, ("tesla",)),
    ],
)
def test_gres_forms(gres: str, count: int, types: tuple[str, ...]) -> None:
    (n,) = parse_nodes(node("n", gres=gres))
    assert (n.gpus, n.gpu_types) == (count, types)


def test_gres_bad_count_is_an_error_with_line() -> None:
    with pytest.raises(ValueError):
        parse_gres("gpu:a100:x:y")
    text = node("n1") + "\n" + node("n2", gres="gpu:a:b:x")
    with pytest.raises(ScontrolFormatError, match=r"<s>:10: node n2: bad count 'x'"):
        parse_nodes(text, "<s>")


def test_null_features_and_no_inheritance_from_previous_node() -> None:
    text = (
        node("a", "GPU,BIG", "p1,p2")
        + "\n"
        + node("b", "", "p1")
        + "\n"
        + node("c", "(null)", "p3")
    )
    nodes = parse_nodes(text)
    assert [n.features for n in nodes] == [("GPU", "BIG"), (), ()]
    assert [n.partitions for n in nodes] == [("p1", "p2"), ("p1",), ("p3",)]
    doc = converted(text)
    parts = doc["slurm"][0]["partitions"]
    assert list(parts) == ["p1", "p2", "p3"]
    assert [(g["hosts"], g["features"]) for g in parts["p1"]["nodes"]] == [
        (["a"], ["GPU", "BIG"]),
        (["b"], []),
    ]
    assert [(g["hosts"], g["features"]) for g in parts["p2"]["nodes"]] == [(["a"], ["GPU", "BIG"])]
    assert [(g["hosts"], g["features"]) for g in parts["p3"]["nodes"]] == [(["c"], [])]


def test_bad_integer_names_line_and_key() -> None:
    with pytest.raises(
        ScontrolFormatError, match=r"<in>:1: node x: CPUTot='eight' is not an integer"
    ):
        parse_nodes(node("x").replace("CPUTot=8", "CPUTot=eight"), "<in>")


def test_same_node_twice() -> None:
    assert len(parse_nodes(node("a") + "\n" + node("a"))) == 1
    with pytest.raises(ScontrolFormatError, match="node a is listed twice"):
        parse_nodes(node("a") + "\n" + node("a", cpus=16))


def test_cluster_headers() -> None:
    assert cluster_name(SANDBOX_NODES) is None
    text = "CLUSTER: alpha\n" + node("a") + "\n"
    assert cluster_name(text) == "alpha"
    assert converted(text)["slurm"][0]["id"] == "alpha"
    assert converted(SANDBOX_NODES)["slurm"][0]["id"] == "slurm"
    two = text + "\nCLUSTER: beta\n" + node("b") + "\n"
    assert [n.cluster for n in parse_nodes(two)] == ["alpha", "beta"]
    with pytest.raises(ScontrolFormatError, match="several clusters"):
        convert_text(two)
    assert converted(two, group_id="mine")["slurm"][0]["id"] == "mine"


def test_parse_partitions() -> None:
    debug, gpu, scratch = parse_partitions(SANDBOX_PARTITIONS)
    assert (debug.name, debug.max_time, debug.default_time, debug.default) == (
        "debug",
        3600,
        600,
        True,
    )
    assert (gpu.max_time, gpu.qos, gpu.allow_accounts, gpu.allow_qos) == (
        86400,
        "gpu",
        ("research", "sandbox"),
        (),
    )
    assert (scratch.max_time, scratch.default_time, scratch.state, scratch.nodes) == (
        None,
        None,
        "INACTIVE",
        "",
    )
    assert scratch.priority_tier == 5 and debug.line == 1


def test_config_and_max_array_size() -> None:
    text = (
        "Configuration data as of 2026-11-22T13:03:25\n"
        "AccountingStorageBackupHost = (null)\nClusterName             = sandbox\n"
        "MaxArraySize            = 1001\nMaxJobCount             = 10000\n\n"
        "Cgroup Support Configuration:\nAllowedRAMSpace         = 100.0%\n"
    )
    conf = parse_config(text)
    assert conf["ClusterName"] == "sandbox" and conf["AllowedRAMSpace"] == "100.0%"
    assert max_array_size(text) == 1001
    assert cluster_name(text) == "sandbox"
    with pytest.raises(ScontrolFormatError, match="MaxArraySize"):
        max_array_size("ClusterName = x\n")
    with pytest.raises(LaunchersError):
        max_array_size("MaxArraySize = lots\n")


# ---------------------------------------------------------------- convert


def test_catch_all_partition_of_every_node_is_listed_last() -> None:
    """Without partitions text, a partition holding every node, each also in another one (a
    hidden site-wide partition), never comes first; a partition that alone holds some nodes
    keeps its place."""
    text = (
        node("a1", partitions="All,small")
        + node("a2", partitions="All,small")
        + node("g1", partitions="All,gpu")
    )
    conv = convert_text(text)
    assert list(yaml.safe_load(conv.text)["slurm"][0]["partitions"]) == ["small", "gpu", "All"]
    assert any("partition All holds every node" in w for w in conv.warnings)
    assert "# Listed last: All holds every node" in conv.text
    text = node("a1", partitions="batch") + node("g1", partitions="batch,gpu")
    conv = convert_text(text)
    assert list(yaml.safe_load(conv.text)["slurm"][0]["partitions"]) == ["batch", "gpu"]
    assert not any("holds every node" in w for w in conv.warnings)


def test_convert_real_output_layout_and_load() -> None:
    result = convert_text(SANDBOX_NODES)
    assert (result.nodes, result.partitions, result.node_groups) == (4, 3, 7)
    doc = yaml.safe_load(result.text)
    assert list(doc) == ["slurm"] and len(doc["slurm"]) == 1
    group = doc["slurm"][0]
    assert "use_hosts" not in group
    assert groups_of(doc, "debug") == [
        {
            "hosts": ["cpu01"],
            "features": ["CPU", "XEON"],
            "configuration": {"cpu": {"cores": 8, "memory": "16000M"}, "gpu": {"count": 0}},
        },
        {
            "hosts": ["gpu01"],
            "features": ["GPU", "GPU2", "GPUM48G", "A6000"],
            "configuration": {"cpu": {"cores": 8, "memory": "32000M"}, "gpu": {"count": 2}},
        },
        {
            "hosts": ["gpu02"],
            "features": ["GPU", "GPU4", "GPUM24G", "RTX3090"],
            "configuration": {"cpu": {"cores": 8, "memory": "32000M"}, "gpu": {"count": 4}},
        },
    ]
    cfg = load_config_text(result.text, "converted.yaml")
    (g,) = cfg.groups
    by_name = {p.name: p for p in g.partitions}
    assert set(by_name) == {"long", "debug", "gpu"}
    ng = by_name["long"].nodes[0]
    assert ng.hosts == ("cpu-big-01",)
    assert ng.configuration.cpu.cores == 256
    assert ng.configuration.cpu.memory == 1000000 * MIB
    assert by_name["gpu"].nodes[1].configuration.gpu.count == 4


def test_grouping_by_features_cpus_memory_gpus() -> None:
    text = "\n".join(
        [
            node("a", "X,Y"),
            node("b", "Y,X"),
            node("c", "X,Y", cpus=16),
            node("d", "X,Y", mem=8000),
            node("e", "X,Y", gres="gpu:1"),
            node("f", "X,Y"),
        ]
    )
    groups = groups_of(converted(text), "p")
    assert [g["hosts"] for g in groups] == [["a", "b", "f"], ["c"], ["d"], ["e"]]
    assert groups[3]["configuration"]["gpu"] == {"count": 1}


def test_no_hosts() -> None:
    text = convert_text(SANDBOX_NODES, no_hosts=True).text
    doc = yaml.safe_load(text)
    assert doc["slurm"][0]["use_hosts"] is False
    assert all(g["hosts"] == [] for p in doc["slurm"][0]["partitions"].values() for g in p["nodes"])
    (g,) = load_config_text(text, "x.yaml").groups
    assert g.use_hosts is False  # type: ignore[union-attr]


WEIRD = [
    "n.1",
    "n:2",
    "yes",
    "on",
    "null",
    "~",
    "123",
    "1_000",
    "0x1F",
    "1e3",
    "-dash",
    "@at",
    "*star",
    "&amp",
    "!bang",
    "%pct",
    "a#b",
    "'q",
    '"dq',
    "é-node",
    "[x]",
    "{y}",
    "?q",
    "a: b",
]


def test_weird_names_survive_yaml() -> None:
    names = [w.replace(" ", "") for w in WEIRD]
    text = "\n".join(node(f"h{name}", name, name) for name in names)
    result = convert_text(text)
    assert "&id" not in result.text and "*id" not in result.text
    doc = yaml.safe_load(result.text)
    parts = doc["slurm"][0]["partitions"]
    assert list(parts) == names
    for name in names:
        (g,) = parts[name]["nodes"]
        assert g["hosts"] == [f"h{name}"] and g["features"] == [name]
    cfg = load_config_text(result.text, "weird.yaml")
    assert [p.name for p in cfg.groups[0].partitions] == names  # type: ignore[union-attr]
    assert [p.nodes[0].features for p in cfg.groups[0].partitions] == [(n,) for n in names]  # type: ignore[union-attr]


def test_no_aliases_even_for_identical_groups() -> None:
    text = "\n".join(node(f"n{i}", "A,B", f"p{i},q") for i in range(5))
    out = convert_text(text).text
    assert "&" not in out and "*" not in out


def test_nodes_without_partition_are_reported() -> None:
    result = convert_text(node("a") + "\n" + node("lonely", partitions=None))
    assert result.warnings == ("1 node(s) in no partition left out: lonely",)
    with pytest.raises(
        ScontrolFormatError, match=r"no node record has Partitions=.*--partitions FILE"
    ):
        convert_text(node("lonely", partitions=None))


def test_partitions_text_adds_time_limits_order_and_state() -> None:
    result = convert_text(
        SANDBOX_NODES, partitions_text=SANDBOX_PARTITIONS, access=Access(accounts=("research",))
    )
    doc = yaml.safe_load(result.text)
    parts = doc["slurm"][0]["partitions"]
    assert list(parts) == ["debug", "gpu"]  # scontrol's order; `long` is not in the text
    assert parts["debug"]["configuration"] == {"max_duration": "1h"}
    assert parts["gpu"]["configuration"] == {"max_duration": "1d"}
    assert parts["gpu"]["accounts"] == ["research"]  # AllowAccounts: the account to use there
    assert "scratch" not in parts and "accounts" not in parts["debug"]
    assert result.warnings == (
        "partition long left out (--all keeps it): not in the partitions text (hidden, or not "
        "visible to the user who ran scontrol)",
    )
    inactive = SANDBOX_PARTITIONS.replace("State=UP TotalCPUs=24", "State=DRAIN TotalCPUs=24")
    doc = yaml.safe_load(convert_text(SANDBOX_NODES, partitions_text=inactive).text)
    assert doc["slurm"][0]["partitions"]["debug"]["disabled"] is True
    (g,) = load_config_text(result.text, "p.yaml").groups
    assert [p.configuration.max_duration for p in g.partitions] == [3600, 86400]  # type: ignore[union-attr]
    kept = convert_text(SANDBOX_NODES, partitions_text=SANDBOX_PARTITIONS, keep_all=True)
    assert list(yaml.safe_load(kept.text)["slurm"][0]["partitions"]) == ["debug", "gpu", "long"]
    assert (
        "#   gpu: AllowAccounts=research,sandbox and your Slurm accounts are unknown" in kept.text
    )
    with pytest.raises(ScontrolFormatError, match="no partition records found"):
        convert_text(SANDBOX_NODES, partitions_text="\n")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(3600, "1h"), (86400, "1d"), (7 * 86400, "7d"), (5400, "90m"), (61, "61s"), (0, "0s")],
)
def test_duration_text(seconds: int, text: str) -> None:
    assert duration_text(seconds) == text


# ---------------------------------------------------------------- real clusters' quirks
# Each input below is written from scratch with one layout scontrol prints (Slurm's
# src/api/node_info.c and partition_info.c, 15.08 to 25.05); see docs/slurm-convert.md.

# Slurm <= 17.02: OS (one word) on the RealMemory line, Features=, no Partitions=, CPUErr=
OLD_NODE = """\
NodeName=old{i} Arch=x86_64 CoresPerSocket=8
   CPUAlloc=0 CPUErr=0 CPUTot=16 CPULoad=0.01 Features=ib,haswell
   Gres=gpu:k80:2
   NodeAddr=old{i} NodeHostName=old{i} Version=16.05
   OS=Linux RealMemory=94000 AllocMem=0 FreeMem=90000 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A
   BootTime=2017-01-01T00:00:00 SlurmdStartTime=2017-01-01T00:00:00
   CapWatts=n/a
   CurrentWatts=0 LowestJoules=0 ConsumedJoules=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
"""

OLD_PARTITIONS = """\
PartitionName=short
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=YES QoS=N/A
   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=04:00:00 MinNodes=1 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=old[1-2]
   Priority=1 RootOnly=NO ReqResv=NO Shared=NO PreemptMode=OFF
   State=UP TotalCPUs=32 TotalNodes=2 SelectTypeParameters=NONE

PartitionName=all
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=NO QoS=N/A Hidden=NO
   MaxTime=1-00:00:00 Nodes=ALL Priority=1 State=UP
"""


def test_memory_on_the_os_line_of_slurm_17_02() -> None:
    (n,) = parse_nodes(OLD_NODE.format(i=1))
    assert (n.memory_mib, n.cpus, n.features, n.gpus, n.partitions) == (
        94000,
        16,
        ("ib", "haswell"),
        2,
        None,
    )


def test_os_with_spaces_own_line_and_one_line_form() -> None:
    multi = node("a").replace(
        "   RealMemory=",
        "   OS=Linux 3.10.0-957.el7.x86_64 #1 SMP Thu Nov 8 23:39:32 UTC 2018 \n   RealMemory=",
    )
    one = (
        "NodeName=b CPUTot=8 AvailableFeatures=X Gres=(null) OS=Linux 3.10.0-957.el7.x86_64 #1 SMP "
        "Thu Nov 8 23:39:32 UTC 2018 RealMemory=2000 AllocMem=0 State=IDLE Partitions=p "
        "Reason=fan RealMemory=1 State=DOWN [root@2020-01-01T00:00:00] Comment=moved: a=b c "
        'Extra={"rack": 5, "x=y": 1} ReservationName=maint\n'
    )
    a, b = parse_nodes(multi + "\n" + one)
    assert (a.memory_mib, a.cpus) == (16000, 8)
    assert (b.memory_mib, b.state, b.partitions, b.features) == (2000, "IDLE", ("p",), ("X",))


def test_every_key_is_read_wherever_it_stands() -> None:
    text = (
        "NodeName=moved CPUTot=12 Partitions=q\n"
        "   RealMemory=5000 Gres=gpu:2 State=MIXED AvailableFeatures=F\n"
    )
    (n,) = parse_nodes(text)
    assert (n.cpus, n.memory_mib, n.gpus, n.state, n.partitions, n.features) == (
        12,
        5000,
        2,
        "MIXED",
        ("q",),
        ("F",),
    )


def test_reason_comment_extra_and_their_continuation_lines() -> None:
    text = node("r", "A", "p1") + (
        "   Reason=bad dimm State=DOWN Partitions=wrong [root@2026-01-01T00:00:00]\n"
        "          second line of the reason RealMemory=1\n"
        "   Comment=see ticket CPUTot=2\n"
        '   Extra={"Partitions": "x"} Gres=gpu:8\n'
        "   ReservationName=maint\n"
    )
    (n,) = parse_nodes(text)
    assert (n.partitions, n.state, n.memory_mib, n.cpus, n.gpus) == (("p1",), "IDLE", 16000, 8, 0)
    records = parse_records(text, "NodeName", free_text=NODE_FREE_TEXT)
    fields = records[0].fields
    assert fields["Reason"] == (
        "bad dimm State=DOWN Partitions=wrong [root@2026-01-01T00:00:00] second line of the reason RealMemory=1"
    )
    assert (fields["Comment"], fields["Extra"]) == (
        "see ticket CPUTot=2",
        '{"Partitions": "x"} Gres=gpu:8',
    )
    assert fields["ReservationName"] == "maint" and fields["RealMemory"] == "16000"


def spec_node(
    name: str, extra: str, cpus: int = 48, threads: int = 2, efctv: int | None = None
) -> str:
    """A node with core and memory specialization (CoresPerSocket x Sockets = 24 cores)."""
    eff = f" CPUEfctv={efctv}" if efctv is not None else ""
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket=12\n"
        f"   CPUAlloc=0{eff} CPUTot={cpus} CPULoad=0.01\n"
        f"   AvailableFeatures=F\n   ActiveFeatures=F\n   Gres=(null)\n"
        f"   RealMemory=190000 AllocMem=0 FreeMem=1 Sockets=2 Boards=1\n"
        f"   {extra}\n"
        f"   State=IDLE ThreadsPerCore={threads} TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
        f"   Partitions=p\n"
    )


@pytest.mark.parametrize(
    ("text", "cpus", "memory"),
    [
        (
            spec_node("a", "CoreSpecCount=2 CPUSpecList=0-1,24-25 MemSpecLimit=10000", efctv=44),
            44,
            180000,
        ),
        (spec_node("b", "CoreSpecCount=2 MemSpecLimit=10000"), 44, 180000),  # 2 cores x 2 threads
        (spec_node("c", "CoreSpecCount=2", cpus=24), 22, 190000),  # threads not scheduled
        (spec_node("d", "CPUSpecList=0,24,1"), 45, 190000),
        (spec_node("e", "MemSpecLimit=90000"), 48, 100000),
    ],
)
def test_core_and_memory_specialization(text: str, cpus: int, memory: int) -> None:
    (n,) = parse_nodes(text)
    assert (n.cpus, n.memory_mib, n.cpu_tot, n.real_memory_mib) == (cpus, memory, n.cpu_tot, 190000)
    assert n.reserved_cpus == n.cpu_tot - cpus  # type: ignore[operator]
    (g,) = groups_of(converted(text), "p")
    assert g["configuration"]["cpu"] == {"cores": cpus, "memory": f"{memory}M"}


def test_all_cputot_cores_on_a_specialized_node_is_not_found() -> None:
    from launchers import find_launcher

    cfg = load_config_text(
        convert_text(spec_node("a", "CoreSpecCount=2 MemSpecLimit=10000", efctv=44)).text, "s.yaml"
    )
    assert find_launcher("cpu(cores=44, mem=180000M)", config=cfg).options.partition == "p"
    assert find_launcher("cpu(cores=48)", config=cfg, default=None) is None
    assert find_launcher("cpu(mem=190000M)", config=cfg, default=None) is None


def test_memory_that_cannot_be_read_is_reported() -> None:
    bare = "NodeName=nomem CPUTot=4 AvailableFeatures=F Gres=(null) State=IDLE Partitions=p\n"
    tres = bare.replace("nomem", "tres").replace(
        "State=", "CfgTRES=cpu=4,mem=1.5G,billing=4 State="
    )
    nomem, viatres = parse_nodes(bare + tres)
    assert nomem.memory_mib is None and viatres.memory_mib == 1536
    result = convert_text(bare + tres)
    assert result.warnings == (
        "<stdin>:1: RealMemory: cannot read the memory of 1 node(s) (no RealMemory= above 0, no mem= in "
        "CfgTRES=); their node groups declare no memory, so cpu(mem=...) does not limit them: nomem",
    )
    one = convert_text(node("tiny", mem=1))
    assert "RealMemory=1 (Slurm's default" in one.warnings[0]


def test_old_slurm_nodes_get_partitions_from_partition_node_lists() -> None:
    text = OLD_NODE.format(i=1) + "\n" + OLD_NODE.format(i=2) + "\n" + OLD_NODE.format(i=3)
    with pytest.raises(ScontrolFormatError, match=r"Slurm before 17\.02"):
        convert_text(text)
    result = convert_text(text, partitions_text=OLD_PARTITIONS)
    doc = yaml.safe_load(result.text)
    parts = doc["slurm"][0]["partitions"]
    assert [g["hosts"] for g in parts["short"]["nodes"]] == [["old1", "old2"]]
    assert [g["hosts"] for g in parts["all"]["nodes"]] == [["old1", "old2", "old3"]]
    assert parts["short"]["configuration"] == {"max_duration": "4h"}
    assert parts["short"]["nodes"][0]["configuration"] == {
        "cpu": {"cores": 16, "memory": "94000M"},
        "gpu": {"count": 2},
    }
    assert result.warnings == ()
    (short, _all) = parse_partitions(OLD_PARTITIONS)
    assert short.priority_tier == 1 and short.nodes == "old[1-2]"


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("a", ("a",)),
        ("r01c[01-03],gpu[1,3-4]", ("r01c01", "r01c02", "r01c03", "gpu1", "gpu3", "gpu4")),
        ("n[8-10]", ("n8", "n9", "n10")),
        ("n[008-010]", ("n008", "n009", "n010")),
        ("rack[1-2]n[1-2]-ib", ("rack1n1-ib", "rack1n2-ib", "rack2n1-ib", "rack2n2-ib")),
        ("a,a,b", ("a", "b")),
    ],
)
def test_expand_hostlist(hostlist: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(hostlist) == names


@pytest.mark.parametrize("bad", ["n[1-", "n[3-1]", "n[x]", "n]1[", "n[0-99999999]"])
def test_expand_hostlist_errors(bad: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(bad)
    text = OLD_NODE.format(i=1)
    with pytest.raises(ScontrolFormatError, match=r"parts.txt:1: partition short: Nodes="):
        convert_text(
            text,
            partitions_text=OLD_PARTITIONS.replace("old[1-2]", bad),
            partitions_source="parts.txt",
        )


RESTRICTED = """\
PartitionName=everything
   AllowGroups=wheel AllowAccounts=ALL AllowQos=ALL
   Default=NO QoS=N/A Hidden=YES MaxTime=UNLIMITED Nodes=n[1-3] State=UP

PartitionName=std
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   Default=YES Hidden=NO MaxTime=1-00:00:00 Nodes=n[1-3] State=UP

PartitionName=staff
   AllowGroups=wheel,admin AllowAccounts=ALL AllowQos=ALL Hidden=NO MaxTime=2-00:00:00 Nodes=n1 State=UP

PartitionName=paid
   AllowGroups=ALL AllowAccounts=proj1,proj2 AllowQos=ALL Hidden=NO MaxTime=3-00:00:00 Nodes=n2 State=UP

PartitionName=nofree
   AllowGroups=ALL DenyAccounts=free AllowQos=ALL Hidden=NO MaxTime=4-00:00:00 Nodes=n3 State=UP

PartitionName=rootonly
   AllowGroups=ALL AllowAccounts=ALL Hidden=NO RootOnly=YES MaxTime=UNLIMITED Nodes=n3 State=UP
"""
RESTRICTED_NODES = "\n".join(
    node(f"n{i}", "F", f"everything,std,{p}")
    for i, p in ((1, "staff"), (2, "paid"), (3, "nofree,rootonly"))
)


def test_partitions_the_user_cannot_use() -> None:
    everything, std, staff, paid, nofree, rootonly = parse_partitions(RESTRICTED)
    assert (everything.hidden, everything.allow_groups, staff.allow_groups) == (
        True,
        ("wheel",),
        ("wheel", "admin"),
    )
    assert (
        paid.allow_accounts,
        nofree.deny_accounts,
        nofree.allow_accounts,
        rootonly.root_only,
    ) == (("proj1", "proj2"), ("free",), (), True)
    user = Access(frozenset({"users"}), ("proj2", "free"))
    assert (
        partition_usability(everything, user).reason
        == "Hidden=YES (Slurm shows it to administrators only)"
    )
    assert partition_usability(std, user) == Usability()
    assert (
        partition_usability(staff, user).reason
        == "AllowGroups=wheel,admin includes none of your groups (users)"
    )
    assert partition_usability(paid, user) == Usability(None, ("proj2",))
    assert partition_usability(nofree, user) == Usability(None, ("proj2",))
    assert partition_usability(nofree, Access(accounts=("free",))).reason == (
        "DenyAccounts=free admits none of your accounts (free)"
    )
    assert partition_usability(rootonly, user).reason == "RootOnly=YES (only root may submit there)"
    root = Access(frozenset({"root"}), ("proj1",), superuser=True)
    assert [
        partition_usability(p, root).reason is None for p in (staff, paid, rootonly, everything)
    ] == [True, True, True, False]

    result = convert_text(
        RESTRICTED_NODES, partitions_text=RESTRICTED, access=user, partitions_source="parts"
    )
    parts = yaml.safe_load(result.text)["slurm"][0]["partitions"]
    assert list(parts) == ["std", "paid", "nofree"]  # scontrol's order, `everything` not first
    assert parts["paid"]["accounts"] == ["proj2"] and parts["nofree"]["accounts"] == ["proj2"]
    assert result.warnings == (
        "parts:1: partition everything left out (--all keeps it): Hidden=YES (Slurm shows it to administrators only)",
        "parts:9: partition staff left out (--all keeps it): AllowGroups=wheel,admin includes none of your groups (users)",
        "parts:18: partition rootonly left out (--all keeps it): RootOnly=YES (only root may submit there)",
    )
    assert "#   everything: Hidden=YES" in result.text
    kept = yaml.safe_load(
        convert_text(RESTRICTED_NODES, partitions_text=RESTRICTED, access=user, keep_all=True).text
    )
    assert list(kept["slurm"][0]["partitions"]) == [
        "std",
        "paid",
        "nofree",
        "everything",
        "staff",
        "rootonly",
    ]
    nobody = Access(frozenset({"users"}), None)
    names = list(
        yaml.safe_load(
            convert_text(RESTRICTED_NODES, partitions_text=RESTRICTED, access=nobody).text
        )["slurm"][0]["partitions"]
    )
    assert names == ["std"]  # accounts unknown: restricted partitions are never assumed usable
    with pytest.raises(
        ScontrolFormatError, match="no partition of the nodes is usable: everything: Hidden=YES"
    ):
        convert_text(node("n1", "F", "everything"), partitions_text=RESTRICTED, access=user)


# ---------------------------------------------------------------- the command


def test_cli_convert_and_no_hosts() -> None:
    proc = run_cli(SANDBOX_NODES.encode())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    assert load_config_text(proc.stdout.decode(), "out.yaml").groups[0].id == "slurm"
    proc = run_cli(SANDBOX_NODES.encode(), "--no-hosts")
    assert proc.returncode == 0 and b"use_hosts: false" in proc.stdout


def test_cli_partitions_file(tmp_path: Path) -> None:
    parts = tmp_path / "partitions.txt"
    parts.write_text(SANDBOX_PARTITIONS)
    proc = run_cli(SANDBOX_NODES.encode(), "--partitions", str(parts), "--id", "sandbox")
    assert proc.returncode == 0, proc.stderr
    assert b"max_duration: 1h" in proc.stdout and b"id: sandbox" in proc.stdout
    assert proc.stderr.decode().splitlines() == [
        f"launchers: warning: {parts}:10: partition gpu left out (--all keeps it): "
        "AllowAccounts=research,sandbox and your Slurm accounts are unknown",
        "launchers: warning: partition long left out (--all keeps it): not in the partitions "
        "text (hidden, or not visible to the user who ran scontrol)",
    ]
    proc = run_cli(SANDBOX_NODES.encode(), "--partitions", str(parts), "--accounts", "sandbox,x")
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert doc["slurm"][0]["partitions"]["gpu"]["accounts"] == ["sandbox"]
    proc = run_cli(SANDBOX_NODES.encode(), "--partitions", str(parts), "--all")
    assert list(yaml.safe_load(proc.stdout)["slurm"][0]["partitions"]) == ["debug", "gpu", "long"]
    assert "kept last (--all)" in proc.stderr.decode()
    proc = run_cli(SANDBOX_NODES.encode(), "--all")
    assert proc.returncode == 2 and b"need --partitions FILE" in proc.stderr
    proc = run_cli(SANDBOX_NODES.encode(), "--partitions", str(tmp_path / "missing.txt"))
    assert proc.returncode == 2 and b"missing.txt: cannot read" in proc.stderr


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no node records found"),
        (b"\n  \n", "no node records found"),
        (
            b"slurm_load_node error: Unable to contact slurm controller\n",
            "<stdin>:1: expected a record",
        ),
        (
            b"PartitionName=debug MaxTime=1:00:00\n",
            "<stdin>: the text holds `scontrol show partitions` records but no node record",
        ),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (node("x").replace("RealMemory=16000", "RealMemory=lots").encode(), "RealMemory='lots'"),
    ],
)
def test_cli_unreadable_input(data: bytes, message: str) -> None:
    proc = run_cli(data)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.startswith("launchers: ") and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert proc.stdout == b""
    assert "(experimaestro 1.5.7's slurm convert " in err  # what the older converter did instead


# ---------------------------------------------------------------- properties and speed

_name = st.text(alphabet=st.sampled_from("abcXYZ019.:-_@#+/"), min_size=1, max_size=8).filter(
    lambda s: s not in ("(null)",)
)
_node_st = st.tuples(
    _name,
    st.lists(_name, max_size=3, unique=True),
    st.lists(_name, min_size=1, max_size=3, unique=True),
    st.sampled_from([4, 8]),
    st.sampled_from(["(null)", "gpu:2", "gpu:a100:4(S:0-1)"]),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_node_st, min_size=1, max_size=8, unique_by=lambda t: t[0]))
def test_every_node_keeps_its_own_features_and_partitions(spec: list[Any]) -> None:
    text = "\n".join(node(n, ",".join(f), ",".join(p), c, 1000, g) for n, f, p, c, g in spec)
    result = convert_text(text)
    doc = yaml.safe_load(result.text)
    parts = doc["slurm"][0]["partitions"]
    seen: dict[str, set[str]] = {}
    for pname, pval in parts.items():
        for g in pval["nodes"]:
            for host in g["hosts"]:
                seen.setdefault(host, set()).add(pname)
                (_n, f, _p, c, gres) = next(t for t in spec if t[0] == host)
                assert sorted(g["features"]) == sorted(f)  # same set; the first node's order
                assert g["configuration"]["cpu"] == {"cores": c, "memory": "1000M"}
                assert g["configuration"]["gpu"]["count"] == {"(null)": 0, "gpu:2": 2}.get(gres, 4)
    assert seen == {n: set(p) for n, _f, p, _c, _g in spec}
    load_config_text(result.text, "prop.yaml")


def test_ten_thousand_nodes_convert_and_load() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from synthetic import generate_scontrol_nodes  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCHMARKS))
    text = generate_scontrol_nodes(10000, 100)
    result = convert_text(text)  # its speed target (< 1 s) is checked by benchmarks/finder.py
    assert result.nodes == 10000 and result.partitions == 100
    cfg = load_config_text(result.text, "synthetic.yaml")
    assert sum(len(p.nodes) for p in cfg.groups[0].partitions) == result.node_groups  # type: ignore[union-attr]


def test_errors_are_configuration_errors() -> None:
    assert issubclass(ScontrolFormatError, ConfigurationError)


def test_query_slurm_leaves_out_partitions_the_user_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from launchers.config.model import Partition, SlurmGroup
    from launchers.slurm import query

    (tmp_path / "nodes.txt").write_text(RESTRICTED_NODES)
    (tmp_path / "parts.txt").write_text(RESTRICTED)
    fake = tmp_path / "scontrol"
    fake.write_text(
        f'#!/bin/sh\ncase "$2" in nodes) cat {tmp_path}/nodes.txt;; *) cat {tmp_path}/parts.txt;; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(query, "local_access", lambda: Access(frozenset({"admin"}), None, False))
    group = SlurmGroup(
        id="x", query_slurm=True, path=str(tmp_path),
        partitions=(Partition(name="paid", accounts=("proj1", "other")), Partition(name="everything", priority=1),
                    Partition(name="nofree", accounts=("free",))),
    )  # fmt: skip
    with caplog.at_level("INFO", logger="launchers.slurm.query"):
        refreshed = query.query_group(group)
    parts = {p.name: p for p in refreshed.partitions}
    # usable ones in scontrol's order, then the ones the file names although Slurm restricts them
    assert list(parts) == ["std", "staff", "everything", "paid"]
    assert parts["paid"].accounts == ("proj1",) and parts["everything"].priority == 1
    text = caplog.text
    assert (
        "partition rootonly left out: RootOnly=YES (only root may submit there) (name it in the file to use it)"
        in text
    )
    assert "partition nofree left out: the file's accounts (free) are not admitted by Slurm" in text
    assert [n.hosts for n in parts["std"].nodes] == [("n1", "n2", "n3")]


def test_zero_memory_non_gpu_gres_and_byte_order_mark() -> None:
    zero = node("z", mem=0)
    other = node("o", gres="tmpdisk:local:200GB,gpu:a100:2")
    z, o = parse_nodes("\ufeff" + zero + "\n" + other)
    assert z.memory_mib is None and (o.gpus, o.gpu_types) == (2, ("a100",))
    (warning,) = convert_text(zero).warnings
    assert "cannot read the memory of 1 node(s)" in warning
    with pytest.raises(ScontrolFormatError, match="bad count 'x'"):
        parse_nodes(node("g", gres="gpu:a:b:x"))
    assert parse_partitions("\ufeff" + RESTRICTED)[0].name == "everything"


def test_partitions_after_the_nodes_on_stdin() -> None:
    """`(scontrol show nodes; scontrol show partitions) | launchers slurm convert`."""
    text = RESTRICTED_NODES + "\n" + RESTRICTED
    user = Access(frozenset({"users"}), ("proj2",))
    both = convert_text(text, access=user)
    apart = convert_text(RESTRICTED_NODES, partitions_text=RESTRICTED, access=user)
    assert both.text == apart.text
    assert both.warnings[0].startswith(
        f"<stdin>:{RESTRICTED_NODES.count(chr(10)) + 2}: partition everything left out"
    )
    with pytest.raises(ScontrolFormatError, match="give them once"):
        convert_text(text, partitions_text=RESTRICTED)
