"""``scontrol show nodes`` records -> partitions and node groups -> ``launchers.yaml`` text.

Pure: grouping (:func:`group_nodes`) is shared by ``launchers slurm convert`` (YAML text) and
``query_slurm: true`` (model values, see :mod:`launchers.slurm.query`). Each node's features
and partitions are its own; nodes with the same features, CPUTot, RealMemory and GPU count
form one node group per partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import yaml

from .scontrol import (
    ScontrolFormatError,
    SlurmNode,
    SlurmPartition,
    cluster_name,
    parse_nodes,
    parse_partitions,
)


@attrs.frozen
class NodeGroupSpec:
    """Nodes of one partition sharing features, CPUs, memory (MiB) and GPU count."""

    hosts: tuple[str, ...]
    features: tuple[str, ...]
    cpus: int | None
    memory_mib: int | None
    gpus: int


@attrs.frozen
class Conversion:
    """The result of a conversion: the YAML text and what the user should know about it."""

    text: str
    nodes: int
    partitions: int
    node_groups: int
    warnings: tuple[str, ...] = ()


def group_nodes(nodes: Iterable[SlurmNode]) -> dict[str, list[NodeGroupSpec]]:
    """Partition name -> node groups, both in order of first appearance.

    Nodes listed in no partition are left out (the caller reports them)."""
    table: dict[str, dict[tuple[Any, ...], tuple[SlurmNode, list[str]]]] = {}
    for node in nodes:
        key = (frozenset(node.features), node.cpus, node.memory_mib, node.gpus)
        for part in node.partitions:
            groups = table.setdefault(part, {})
            entry = groups.get(key)
            if entry is None:
                groups[key] = (node, [node.name])
            else:
                entry[1].append(node.name)
    return {
        part: [
            NodeGroupSpec(tuple(hosts), first.features, first.cpus, first.memory_mib, first.gpus)
            for first, hosts in groups.values()
        ]
        for part, groups in table.items()
    }


def node_group_configuration(spec: NodeGroupSpec) -> dict[str, Any]:
    """The ``configuration`` mapping of a node group (``cpu.cores``, ``cpu.memory``, ``gpu.count``)."""
    cpu: dict[str, Any] = {}
    if spec.cpus is not None:
        cpu["cores"] = spec.cpus
    if spec.memory_mib is not None:
        cpu["memory"] = f"{spec.memory_mib}M"
    conf: dict[str, Any] = {}
    if cpu:
        conf["cpu"] = cpu
    conf["gpu"] = {"count": spec.gpus}
    return conf


class _Dumper(yaml.CSafeDumper if hasattr(yaml, "CSafeDumper") else yaml.SafeDumper):  # type: ignore[misc]
    """Safe YAML emitter that never writes anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def duration_text(seconds: int) -> str:
    """A duration as the largest whole unit the file format reads (``1h``, ``7d``, ``90m``)."""
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % factor == 0:
            return f"{seconds // factor}{unit}"
    return f"{seconds}s"


def _partition_entry(
    specs: list[NodeGroupSpec], no_hosts: bool, info: SlurmPartition | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if info is not None:
        if info.max_time is not None:
            entry["configuration"] = {"max_duration": duration_text(info.max_time)}
        if info.state.upper() != "UP":
            entry["disabled"] = True
    entry["nodes"] = [
        {
            "hosts": [] if no_hosts else list(spec.hosts),
            "features": list(spec.features),
            "configuration": node_group_configuration(spec),
        }
        for spec in specs
    ]
    return entry


def build_document(
    partitions: dict[str, list[NodeGroupSpec]],
    group_id: str,
    no_hosts: bool = False,
    slurm_partitions: Sequence[SlurmPartition] | None = None,
) -> dict[str, Any]:
    """The ``launchers.yaml`` mapping with one ``slurm`` group (plain dicts and lists).

    With ``slurm_partitions`` (``scontrol show partitions``), partitions follow scontrol's
    order and carry ``max_duration`` (MaxTime) and ``disabled`` (State not UP)."""
    group: dict[str, Any] = {"id": group_id}
    if no_hosts:
        group["use_hosts"] = False
    infos = {p.name: p for p in slurm_partitions or ()}
    names = list(partitions)
    if slurm_partitions is not None:
        order = {p.name: i for i, p in enumerate(slurm_partitions)}
        names.sort(key=lambda n: order.get(n, len(order)))
    group["partitions"] = {
        name: _partition_entry(partitions[name], no_hosts, infos.get(name)) for name in names
    }
    return {"slurm": [group]}


def dump_yaml(document: dict[str, Any]) -> str:
    """YAML text of ``document``: block style with short lists inline, no aliases, keys in order."""
    return yaml.dump(
        document,
        Dumper=_Dumper,
        default_flow_style=None,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )


_HEADER = """\
# launchers.yaml generated by `launchers slurm convert{hosts}` from `scontrol show nodes`{parts}
# ({nodes} nodes, {partitions} partitions, {groups} node groups).
# scontrol does not tell how much memory a GPU has: add `features_regex` (named groups
# cuda_count and cuda_memory) or a `features:` mapping so that cuda(mem=...) can match.
"""


def convert_nodes(
    nodes: Sequence[SlurmNode],
    *,
    no_hosts: bool = False,
    group_id: str | None = None,
    slurm_partitions: Sequence[SlurmPartition] | None = None,
) -> Conversion:
    """Convert parsed nodes (and optionally partitions) into ``launchers.yaml`` text with one
    ``slurm:`` group."""
    if not nodes:
        raise ScontrolFormatError(
            "no node records found; expected the output of `scontrol show nodes`", file="<stdin>"
        )
    warnings = []
    orphans = [n.name for n in nodes if not n.partitions]
    if orphans:
        shown = ", ".join(orphans[:10]) + (" ..." if len(orphans) > 10 else "")
        warnings.append(f"{len(orphans)} node(s) in no partition left out: {shown}")
    partitions = group_nodes(nodes)
    if not partitions:
        raise ScontrolFormatError(
            "no node belongs to a partition (every record lacks Partitions=); nothing to convert",
            file="<stdin>",
        )
    clusters = {n.cluster for n in nodes if n.cluster}
    if group_id is None:
        if len(clusters) > 1:
            raise ScontrolFormatError(
                f"the text lists nodes of several clusters ({', '.join(sorted(clusters))}); "
                "convert one cluster at a time (scontrol -M NAME show nodes)",
                file="<stdin>",
            )
        group_id = next(iter(clusters)) if clusters else "slurm"
    n_groups = sum(len(v) for v in partitions.values())
    header = _HEADER.format(
        hosts=" --no-hosts" if no_hosts else "",
        parts="" if slurm_partitions is None else " and `scontrol show partitions`",
        nodes=len(nodes),
        partitions=len(partitions),
        groups=n_groups,
    )
    if slurm_partitions is not None:
        known = {p.name for p in slurm_partitions}
        unknown = [name for name in partitions if name not in known]
        if unknown:
            warnings.append(
                "partition(s) not in the partitions text (hidden?), kept without a time limit: "
                + ", ".join(unknown)
            )
    document = build_document(partitions, group_id, no_hosts, slurm_partitions)
    text = header + dump_yaml(document)
    return Conversion(text, len(nodes), len(partitions), n_groups, tuple(warnings))


def convert_text(
    text: str,
    *,
    no_hosts: bool = False,
    group_id: str | None = None,
    source: str = "<stdin>",
    partitions_text: str | None = None,
    partitions_source: str = "<partitions>",
) -> Conversion:
    """Convert ``scontrol show nodes`` text (and optionally ``scontrol show partitions`` text);
    the group id defaults to the cluster named in the text, else ``slurm``."""
    nodes = parse_nodes(text, source)
    slurm_partitions = None
    if partitions_text is not None:
        slurm_partitions = parse_partitions(partitions_text, partitions_source)
        if not slurm_partitions:
            raise ScontrolFormatError(
                "no partition records found; expected the output of `scontrol show partitions`",
                file=partitions_source,
            )
    if group_id is None and not any(n.cluster for n in nodes):
        # `scontrol -M` headers give each node its cluster; else look for ClusterName= lines
        group_id = cluster_name(text)
    return convert_nodes(
        nodes, no_hosts=no_hosts, group_id=group_id, slurm_partitions=slurm_partitions
    )
