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
    ScontrolFormatError,
    cluster_name,
    max_array_size,
    parse_config,
    parse_gres,
    parse_nodes,
    parse_partitions,
)
from launchers.units import MIB

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

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


def node(name: str, features: str = "", partitions: str | None = "p", cpus: int = 8,
         mem: int = 16000, gres: str = "(null)") -> str:
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
        input=stdin, capture_output=True, timeout=60, check=False,
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
        "a.b:1", 4, 1000, 1, ("F1",), ("p1",))
    assert (c.name, c.features, c.partitions, c.state) == ("c", (), ("p2",), "DOWN")


def test_reason_and_os_text_does_not_leak_into_fields() -> None:
    text = node("n1", "A", "p1").replace(
        "   Gres=", "   OS=Linux State=BOGUS Partitions=bogus 1.0\n   Gres="
    ) + "   Reason=drained: Partitions=wrong State=X [root@2026-01-01T00:00:00]\n"
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
    text = node("a", "GPU,BIG", "p1,p2") + "\n" + node("b", "", "p1") + "\n" + node("c", "(null)", "p3")
    nodes = parse_nodes(text)
    assert [n.features for n in nodes] == [("GPU", "BIG"), (), ()]
    assert [n.partitions for n in nodes] == [("p1", "p2"), ("p1",), ("p3",)]
    doc = converted(text)
    parts = doc["slurm"][0]["partitions"]
    assert list(parts) == ["p1", "p2", "p3"]
    assert [(g["hosts"], g["features"]) for g in parts["p1"]["nodes"]] == [
        (["a"], ["GPU", "BIG"]), (["b"], [])]
    assert [(g["hosts"], g["features"]) for g in parts["p2"]["nodes"]] == [(["a"], ["GPU", "BIG"])]
    assert [(g["hosts"], g["features"]) for g in parts["p3"]["nodes"]] == [(["c"], [])]


def test_bad_integer_names_line_and_key() -> None:
    with pytest.raises(ScontrolFormatError, match=r"<in>:1: node x: CPUTot='eight' is not an integer"):
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
    assert (debug.name, debug.max_time, debug.default_time, debug.default) == ("debug", 3600, 600, True)
    assert (gpu.max_time, gpu.qos, gpu.allow_accounts, gpu.allow_qos) == (
        86400, "gpu", ("research", "sandbox"), ())
    assert (scratch.max_time, scratch.default_time, scratch.state, scratch.nodes) == (
        None, None, "INACTIVE", "")
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


def test_convert_real_output_layout_and_load() -> None:
    result = convert_text(SANDBOX_NODES)
    assert (result.nodes, result.partitions, result.node_groups) == (4, 3, 7)
    doc = yaml.safe_load(result.text)
    assert list(doc) == ["slurm"] and len(doc["slurm"]) == 1
    group = doc["slurm"][0]
    assert "use_hosts" not in group
    assert groups_of(doc, "debug") == [
        {"hosts": ["cpu01"], "features": ["CPU", "XEON"],
         "configuration": {"cpu": {"cores": 8, "memory": "16000M"}, "gpu": {"count": 0}}},
        {"hosts": ["gpu01"], "features": ["GPU", "GPU2", "GPUM48G", "A6000"],
         "configuration": {"cpu": {"cores": 8, "memory": "32000M"}, "gpu": {"count": 2}}},
        {"hosts": ["gpu02"], "features": ["GPU", "GPU4", "GPUM24G", "RTX3090"],
         "configuration": {"cpu": {"cores": 8, "memory": "32000M"}, "gpu": {"count": 4}}},
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
    text = "\n".join([
        node("a", "X,Y"), node("b", "Y,X"), node("c", "X,Y", cpus=16), node("d", "X,Y", mem=8000),
        node("e", "X,Y", gres="gpu:1"), node("f", "X,Y"),
    ])
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


WEIRD = ["n.1", "n:2", "yes", "on", "null", "~", "123", "1_000", "0x1F", "1e3", "-dash", "@at",
         "*star", "&amp", "!bang", "%pct", "a#b", "'q", '"dq', "é-node", "[x]", "{y}", "?q", "a: b"]


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
    with pytest.raises(ScontrolFormatError, match="no node belongs to a partition"):
        convert_text(node("lonely", partitions=None))


def test_partitions_text_adds_time_limits_order_and_state() -> None:
    result = convert_text(SANDBOX_NODES, partitions_text=SANDBOX_PARTITIONS)
    doc = yaml.safe_load(result.text)
    parts = doc["slurm"][0]["partitions"]
    assert list(parts) == ["debug", "gpu", "long"]  # scontrol's order; unknown ones last
    assert parts["debug"]["configuration"] == {"max_duration": "1h"}
    assert parts["gpu"]["configuration"] == {"max_duration": "1d"}
    assert "configuration" not in parts["long"] and "scratch" not in parts
    assert result.warnings == (
        "partition(s) not in the partitions text (hidden?), kept without a time limit: long",)
    inactive = SANDBOX_PARTITIONS.replace("State=UP TotalCPUs=24", "State=DRAIN TotalCPUs=24")
    doc = yaml.safe_load(convert_text(SANDBOX_NODES, partitions_text=inactive).text)
    assert doc["slurm"][0]["partitions"]["debug"]["disabled"] is True
    (g,) = load_config_text(result.text, "p.yaml").groups
    assert [p.configuration.max_duration for p in g.partitions] == [3600, 86400, None]  # type: ignore[union-attr]
    with pytest.raises(ScontrolFormatError, match="no partition records found"):
        convert_text(SANDBOX_NODES, partitions_text="\n")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(3600, "1h"), (86400, "1d"), (7 * 86400, "7d"), (5400, "90m"), (61, "61s"), (0, "0s")],
)
def test_duration_text(seconds: int, text: str) -> None:
    assert duration_text(seconds) == text


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
    assert proc.stderr.decode().startswith("launchers: warning: partition(s) not in the")
    proc = run_cli(SANDBOX_NODES.encode(), "--partitions", str(tmp_path / "missing.txt"))
    assert proc.returncode == 2 and b"missing.txt: cannot read" in proc.stderr


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no node records found"),
        (b"\n  \n", "no node records found"),
        (b"slurm_load_node error: Unable to contact slurm controller\n", "<stdin>:1: expected a record"),
        (b"PartitionName=debug MaxTime=1:00:00\n", "<stdin>:1: expected a record starting with NodeName="),
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


# ---------------------------------------------------------------- properties and speed

_name = st.text(
    alphabet=st.sampled_from("abcXYZ019.:-_@#+/"), min_size=1, max_size=8
).filter(lambda s: s not in ("(null)",))
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
