"""``launchers slurm discover`` as pure functions: sacctmgr parsing, what a partition becomes
for one user, the new file, and ``--update`` keeping what a person wrote (docs/discover.md)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from launchers.config.loader import load_config_text
from launchers.config.model import SlurmGroup
from launchers.errors import ConfigurationError
from launchers.slurm.discover import MARK, Facts, discover, gpu_memory, render, update
from launchers.slurm.sacctmgr import (
    access_on,
    gpu_count,
    parse_associations,
    parse_default_account,
    parse_qos,
)
from launchers.slurm.scontrol import ScontrolFormatError, parse_partitions

NODES = """\
NodeName=c1 CPUTot=8 CPUEfctv=8 RealMemory=16000 AvailableFeatures=CPU,XEON Gres=(null) State=IDLE Partitions=batch,acct,hid,maint,qosonly,staff,capped
NodeName=g1 CPUTot=16 CPUEfctv=16 RealMemory=64000 AvailableFeatures=GPU,GPUM48G,A6000 Gres=gpu:a6000:2 State=IDLE Partitions=batch,gpu,hid
NodeName=g2 CPUTot=32 CPUEfctv=32 RealMemory=256000 AvailableFeatures=GPU,A100 Gres=gpu:a100_80gb:4(S:0-1) State=IDLE Partitions=gpu,hid
NodeName=g3 CPUTot=32 CPUEfctv=32 RealMemory=256000 AvailableFeatures=GPU,V100 Gres=gpu:v100:4 State=IDLE Partitions=gpu,hid
"""

PARTITIONS = """\
PartitionName=batch AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL Default=YES QoS=N/A DefaultTime=01:00:00 MaxTime=1-00:00:00 Nodes=c1,g1 State=UP DefMemPerCPU=2000 MaxMemPerNode=UNLIMITED
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL QoS=gpupart MaxTime=2-00:00:00 Nodes=g[1-3] State=UP DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED
PartitionName=acct AllowGroups=ALL AllowAccounts=physics,chem AllowQos=ALL MaxTime=UNLIMITED Nodes=c1 State=UP
PartitionName=hid AllowGroups=ALL AllowAccounts=ALL Hidden=YES MaxTime=UNLIMITED Nodes=ALL State=UP
PartitionName=maint AllowGroups=ALL AllowAccounts=ALL MaxTime=01:00:00 Nodes=c1 State=DOWN
PartitionName=qosonly AllowGroups=ALL AllowAccounts=ALL DenyQos=normal,high,multigpu MaxTime=01:00:00 Nodes=c1 State=UP
PartitionName=staff AllowGroups=wheel AllowAccounts=ALL MaxTime=01:00:00 Nodes=c1 State=UP
PartitionName=capped AllowGroups=ALL AllowAccounts=ALL MaxTime=01:00:00 Nodes=c1 State=UP DefMemPerNode=UNLIMITED MaxMemPerCPU=1000
PartitionName=cloud AllowGroups=ALL AllowAccounts=ALL MaxTime=01:00:00 Nodes=cl[1-2] State=UP
"""

CONFIG = "Configuration data as of 2026-05-01T10:00:00\nClusterName = alpha\nDefMemPerCPU = 256\n"
QOS = """\
normal|100|||
high|1000|04:00:00||
multigpu|300||gres/gpu=2|
extended|50|2-00:00:00||DenyOnLimit,PartitionTimeLimit
gpupart|0|1-12:00:00||
"""
ASSOCS = """\
alpha|proj|alice||high,normal|normal
alpha|physics|alice||multigpu,normal|normal
alpha|special|alice|gpu|extended,normal|normal
alpha|proj||||
beta|proj|alice||normal|normal
"""
USER = "alice|proj\n"


def facts(**kw: Any) -> Facts:
    base: dict[str, Any] = dict(
        nodes=NODES,
        partitions=PARTITIONS,
        config=CONFIG,
        qos=QOS,
        associations=ASSOCS,
        user_record=USER,
        user="alice",
        groups=frozenset({"alice", "users"}),
        superuser=False,
    )
    base.update(kw)
    return Facts(**base)


# ------------------------------------------------------------------------------- sacctmgr


def test_qos_as_sacctmgr_prints_them() -> None:
    qos = {q.name: q for q in parse_qos(QOS)}
    assert qos["high"].priority == 1000 and qos["high"].max_wall == 4 * 3600
    assert qos["multigpu"].min_gpus == 2 and not qos["multigpu"].partition_time_limit
    assert qos["extended"].partition_time_limit and qos["extended"].max_wall == 2 * 86400
    assert qos["normal"].max_wall is None and qos["normal"].flags == ()


def test_gpu_count_of_tres_lists() -> None:
    assert gpu_count("cpu=4,gres/gpu=2") == 2
    assert gpu_count("gres/gpu:a100=1,gres/gpu:v100=2") == 3
    assert gpu_count("gres/gpumem=10G") == 0 and gpu_count("") == 0


def test_unreadable_sacctmgr_text_names_the_line() -> None:
    with pytest.raises(ScontrolFormatError, match=r"show qos:2: expected 5 fields"):
        parse_qos("normal|100|||\nName Priority\n", "show qos")
    with pytest.raises(ScontrolFormatError, match="QoS x: "):
        parse_qos("x|high|||\n")


def test_associations_for_a_partition_win_over_the_general_one() -> None:
    assocs = parse_associations(ASSOCS)
    assert all(a.user == "alice" for a in assocs)  # the account's own line is skipped
    assert parse_default_account(USER) == "proj"
    on_gpu = access_on("gpu", [a for a in assocs if a.cluster == "alpha"], "proj")
    assert on_gpu.accounts == ("proj", "physics", "special")
    assert on_gpu.qos["special"] == ("normal", "extended")  # the default QoS first
    on_batch = access_on("batch", [a for a in assocs if a.cluster == "alpha"], "proj")
    assert on_batch.accounts == ("proj", "physics")


def test_partition_records_read_qos_and_memory_limits() -> None:
    parts = {p.name: p for p in parse_partitions(PARTITIONS)}
    assert parts["batch"].def_mem_per_cpu == 2000 and parts["batch"].max_mem_per_node is None
    assert parts["capped"].max_mem_per_cpu == 1000
    assert parts["qosonly"].deny_qos == ("normal", "high", "multigpu")
    assert parts["gpu"].qos == "gpupart"


# ----------------------------------------------------------------------------------- GPUs


@pytest.mark.parametrize(
    ("features", "types", "memory"),
    [
        (["GPU", "GPUM48G", "A6000"], ["a6000"], "48G"),
        (["GPU"], ["a100_80gb"], "80G"),
        (["GPU"], ["nvidia_a100-sxm4-40gb"], "40G"),
        (["GPU"], ["a100_3g.20gb"], "20G"),  # a MIG slice: its own memory
        (["gpu_mem_32gb"], ["v100"], "32G"),
        (["a100_80GB"], ["a100"], "80G"),
        (["GPU", "mem512G"], ["v100"], None),  # the node's memory, not the GPU's
        (["GPU", "GPU4"], ["rtx3090"], None),
        (["GPUM40G"], ["a100_80gb"], None),  # two answers: none trusted
        (["GPU", "MIG"], ["1g.10gb", "a100"], None),  # MIG slices and a whole A100
    ],
)
def test_gpu_memory_where_the_site_encodes_it(
    features: list[str], types: list[str], memory: str | None
) -> None:
    assert gpu_memory(features, types)[0] == memory


# ------------------------------------------------------------------------------- discover


def test_partitions_for_the_user() -> None:
    d = discover(facts())
    assert d.group_id == "alpha"
    assert list(d.partitions) == ["batch", "gpu", "acct", "maint", "capped"]
    why = {name: reason for name, (_, reason) in d.unusable.items()}
    assert why["hid"].startswith("Hidden=YES")
    assert "AllowGroups=wheel" in why["staff"]
    assert "DenyQos=normal,high,multigpu admits none of your QoS" in why["qosonly"]
    assert "FUTURE" in why["cloud"]
    assert any(n.startswith("partition hid left out: Hidden=YES") for n in d.notes)


def test_accounts_and_qos_come_from_the_associations() -> None:
    d = discover(facts())
    batch, acct, gpu = d.partitions["batch"], d.partitions["acct"], d.partitions["gpu"]
    # the default account proj may use batch: no --account, its QoS
    assert "accounts" not in batch and batch["qos"] == ["normal", "high"]
    # acct admits physics only (AllowAccounts=physics,chem): its QoS
    assert acct["accounts"] == ["physics"] and acct["qos"] == ["normal", "multigpu"]
    assert gpu["qos"] == ["normal", "high"]
    assert d.qos == {
        "normal": {"priority": 100},
        "high": {"priority": 1000, "max_duration": "4h"},
        "multigpu": {"priority": 300, "min_gpu": 2},
    }


def test_limits_states_and_memory() -> None:
    d = discover(facts())
    batch = d.partitions["batch"]
    assert batch["configuration"] == {"max_duration": "1d", "cpu": {"mem_per_cpu": "2000M"}}
    assert d.partitions["gpu"]["configuration"] == {"max_duration": "36h"}  # its QoS's MaxWall
    assert "max_duration" not in d.partitions["acct"].get("configuration", {})  # UNLIMITED
    assert d.partitions["maint"]["disabled"] is True
    assert d.disabled == {"maint": "State=DOWN in `scontrol show partitions`"}
    capped = d.partitions["capped"]["nodes"][0]["configuration"]["cpu"]
    assert capped == {"cores": 8, "memory": "8000M"}  # MaxMemPerCPU=1000 x 8 cores
    assert d.mem_per_cpu == "256M"


def test_gpus_model_count_and_memory() -> None:
    d = discover(facts())
    gpus = {ng["hosts"][0]: ng["configuration"]["gpu"] for ng in d.partitions["gpu"]["nodes"]}
    assert gpus["g1"] == {"count": 2, "model": "a6000", "memory": "48G"}
    assert gpus["g2"] == {"count": 4, "model": "a100_80gb", "memory": "80G"}
    assert gpus["g3"] == {"count": 4, "model": "v100"}
    (note,) = [n for n in d.notes if "memory of GPUs" in n]
    assert "Gres type v100" in note and "features: {V100: {configuration:" in note


def test_without_accounting_nodes_and_partitions_are_still_written() -> None:
    d = discover(
        facts(
            qos=None,
            associations=None,
            user_record=None,
            failures=(
                ("sacctmgr --noheader --parsable2 show", "exit 1: Problem talking to the database"),
            ),
        )
    )
    assert d.qos is None and not d.accounting
    assert list(d.partitions) == ["batch", "gpu", "maint", "capped"]
    assert "your accounts are unknown" in d.unusable["acct"][1]
    assert "your QoS are unknown" in d.unusable["qosonly"][1]
    assert all("qos" not in p and "accounts" not in p for p in d.partitions.values())
    assert any("Problem talking to the database" in n for n in d.notes)
    assert any("Problem talking to the database" in w for w in d.warnings)
    text = render(d)
    assert "qos" not in yaml.safe_load(text)["slurm"][0]
    load_config_text(text, "noacct.yaml")


def test_root_may_use_group_restricted_partitions() -> None:
    d = discover(facts(superuser=True, groups=frozenset({"root"})))
    assert "staff" in d.partitions


def test_a_user_without_usable_partition_is_told_why() -> None:
    with pytest.raises(ConfigurationError, match=r"no partition is usable by bob: .*batch: "):
        discover(facts(user="bob"))


def test_the_new_file_loads_and_says_what_was_left_out() -> None:
    text = render(discover(facts()))
    cfg = load_config_text(text, "discovered.yaml")
    (group,) = cfg.groups
    assert isinstance(group, SlurmGroup) and group.id == "alpha"
    assert [p.name for p in group.partitions] == ["batch", "gpu", "acct", "maint", "capped"]
    assert f"# {MARK} partition hid left out: Hidden=YES" in text
    assert f"    # {MARK} disabled: State=DOWN" in text
    assert group.qos["high"].max_duration == 4 * 3600


# --------------------------------------------------------------------------------- update

PERSON = """\
# my clusters
connectors:
  ssh:
    front: {hostname: front.example.org}
local:
  - id: laptop
    cpu: {cores: 4, memory: 8G}
slurm:
  # alpha, refreshed by discover
  - id: alpha
    connector: front
    weight: 5                      # prefer it
    tags: [gpu]
    features_regex: ['GPUM(?P<cuda_memory>\\d+G)']
    partitions:
      batch:
        priority: 3                # my choice
        configuration: {max_duration: 24h}
        nodes:
          - hosts: [old1]
            features: [OLD]
      gone:                        # Slurm no longer lists it
        nodes: [{hosts: [x]}]
      maint:
        disabled: true             # closed for me anyway
      hid: {priority: 1}           # I know I may use it
    qos:
      normal: {priority: 1}
      retired: {}
"""


def test_update_keeps_what_a_person_wrote() -> None:
    d = discover(facts())
    result = update(PERSON, d, source="mine.yaml")
    text = result.text
    for kept in (
        "# my clusters",
        "    front: {hostname: front.example.org}",
        "  # alpha, refreshed by discover",
        "    weight: 5                      # prefer it",
        "    tags: [gpu]",
        "    features_regex: ['GPUM(?P<cuda_memory>\\d+G)']",
        "        priority: 3                # my choice",
        "          max_duration: 24h",  # the same duration as Slurm's 1d: as written
        "      hid:\n        priority: 1",
    ):
        assert kept in text, kept
    doc = yaml.safe_load(text)
    (group,) = doc["slurm"]
    parts = group["partitions"]
    assert "gone" not in parts and "partition gone removed" in "; ".join(result.changes)
    assert parts["batch"]["nodes"][0]["hosts"] == ["c1"]
    assert parts["gpu"]["qos"] == ["normal", "high"] and "partition gpu added" in result.changes
    assert parts["maint"]["disabled"] is True
    assert parts["hid"]["priority"] == 1 and parts["hid"]["nodes"]  # kept, and refreshed
    assert "partition hid kept because the file names it" in text
    assert "partition hid left out" not in text
    assert group["qos"]["normal"] == {"priority": 100}  # owned: Slurm's value
    assert "retired" not in group["qos"]
    assert doc["local"] == [{"id": "laptop", "cpu": {"cores": 4, "memory": "8G"}}]
    cfg = load_config_text(text, "mine.yaml")
    assert cfg.groups[1].weight == 5  # type: ignore[union-attr]


def test_update_twice_changes_nothing_more() -> None:
    d = discover(facts())
    once = update(PERSON, d).text
    assert update(once, d).text == once
    fresh = render(d)
    assert update(fresh, d).text == fresh


def test_update_drops_disabled_it_wrote_when_the_partition_is_up_again() -> None:
    d = discover(facts())
    text = render(d)
    up = PARTITIONS.replace("Nodes=c1 State=DOWN", "Nodes=c1 State=UP")
    again = update(text, discover(facts(partitions=up))).text
    assert "disabled" not in yaml.safe_load(again)["slurm"][0]["partitions"]["maint"]
    assert "State=DOWN" not in again
    # a disabled: true written by a person stays
    assert yaml.safe_load(update(PERSON, discover(facts(partitions=up))).text)["slurm"][0][
        "partitions"
    ]["maint"]["disabled"]


def test_update_adds_a_missing_group_and_creates_a_file() -> None:
    d = discover(facts())
    text = update("local: [{id: here}]\n", d).text
    doc = yaml.safe_load(text)
    assert doc["local"] == [{"id": "here"}] and doc["slurm"][0]["id"] == "alpha"
    load_config_text(text, "x.yaml")
    created = update("", d)
    assert created.created and created.text == render(d)


def test_update_of_a_flow_style_file() -> None:
    text = "slurm: [{id: alpha, weight: 2, partitions: {batch: {priority: 4}}}]\n"
    again = update(text, discover(facts())).text
    group = yaml.safe_load(again)["slurm"][0]
    assert (group["weight"], group["partitions"]["batch"]["priority"]) == (2, 4)
    assert group["partitions"]["batch"]["nodes"][0]["hosts"] == ["c1"]
    load_config_text(again, "flow.yaml")


def test_update_with_no_hosts_keeps_the_file_host_free() -> None:
    text = render(discover(facts(), no_hosts=True))
    assert yaml.safe_load(text)["slurm"][0]["use_hosts"] is False
    again = update(text, discover(facts())).text
    nodes = yaml.safe_load(again)["slurm"][0]["partitions"]["batch"]["nodes"]
    assert all(ng["hosts"] == [] for ng in nodes)


def test_update_without_accounting_leaves_qos_and_accounts_alone() -> None:
    text = render(discover(facts()))
    d = discover(facts(qos=None, associations=None, user_record=None))
    again = yaml.safe_load(update(text, d).text)["slurm"][0]
    assert again["qos"]["high"] == {"priority": 1000, "max_duration": "4h"}
    assert again["partitions"]["acct"]["accounts"] == ["physics"]  # kept: the file names it
