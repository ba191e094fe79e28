"""``scontrol show nodes`` records -> partitions and node groups -> ``launchers.yaml`` text.

Pure: grouping (:func:`group_nodes`), the checks of what was read (:func:`node_warnings`) and
the choice of partitions (:func:`choose_partitions`) are shared by ``launchers slurm convert``
(YAML text) and ``query_slurm: true`` (model values, see :mod:`launchers.slurm.query`). Each
node's features and partitions are its own; nodes with the same features, usable cores, usable
memory and GPU count form one node group per partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import yaml

from ..units import duration_text  # the largest whole unit (1h, 7d, 90m): files show it
from .scontrol import (
    Access,
    ScontrolFormatError,
    SlurmNode,
    SlurmPartition,
    Usability,
    cluster_name,
    parse_nodes,
    parse_partitions,
    partition_usability,
    with_partitions,
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
        for part in node.partitions or ():
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


def catch_all_partitions(nodes: Sequence[SlurmNode]) -> list[str]:
    """Partitions that hold every node while every node is also in another partition: the
    administrators' catch-all kind (often ``Hidden`` or restricted by ``AllowGroups``), which
    ``scontrol show nodes`` alone cannot tell apart from a usable one."""
    placed = [n for n in nodes if n.partitions]
    if not placed:
        return []
    names = list(dict.fromkeys(p for n in placed for p in n.partitions or ()))
    if len(names) < 2:
        return []
    return [
        name
        for name in names
        if all(name in (n.partitions or ()) and len(set(n.partitions or ())) > 1 for n in placed)
    ]


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


def _shown(names: Sequence[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" ... ({len(names)} in all)" if len(names) > limit else "")


def _at(source: str, nodes: Sequence[SlurmNode]) -> str:
    lines = ", ".join(str(n.line) for n in nodes[:5]) + (" ..." if len(nodes) > 5 else "")
    return f"{source}:{lines}"


def node_warnings(nodes: Sequence[SlurmNode], source: str = "<stdin>") -> list[str]:
    """What the user must know about the nodes read: no partition, memory or cores that
    cannot be read (never silently unconstrained), Slurm's default ``RealMemory=1``."""
    out = []
    # Slurm >= 17.02 prints Partitions= only for nodes in some partition: a record without
    # it is in none, unless no record has it (Slurm < 17.02 never prints it)
    listed = any(n.partitions is not None for n in nodes)
    unlisted = [] if listed else list(nodes)
    if unlisted:
        out.append(
            f"{_at(source, unlisted)}: no node record has Partitions= (Slurm before 17.02 "
            "does not print it): give `scontrol show partitions` output (--partitions FILE) "
            f"so that each node gets the partitions whose Nodes= list it: {_shown([n.name for n in unlisted])}"
        )
    orphans = [n for n in nodes if not n.partitions and listed]
    if orphans:
        out.append(
            f"{len(orphans)} node(s) in no partition left out: {_shown([n.name for n in orphans])}"
        )
    no_memory = [n for n in nodes if n.memory_mib is None and n.partitions]
    if no_memory:
        out.append(
            f"{_at(source, no_memory)}: RealMemory: cannot read the memory of "
            f"{len(no_memory)} node(s) (no RealMemory= above 0, no mem= in CfgTRES=); their node groups "
            f"declare no memory, so cpu(mem=...) does not limit them: {_shown([n.name for n in no_memory])}"
        )
    no_cpus = [n for n in nodes if n.cpus is None and n.partitions]
    if no_cpus:
        out.append(
            f"{_at(source, no_cpus)}: CPUTot: cannot read the cores of {len(no_cpus)} node(s) "
            "(no CPUTot= above 0, no cpu= in CfgTRES=); "
            f"their node groups declare no cores: {_shown([n.name for n in no_cpus])}"
        )
    tiny = [n for n in nodes if n.real_memory_mib == 1 and n.partitions]
    if tiny:
        out.append(
            f"{_at(source, tiny)}: RealMemory=1 (Slurm's default when slurm.conf does not set "
            f"it) on {len(tiny)} node(s): Slurm gives jobs that ask for memory none of them: "
            f"{_shown([n.name for n in tiny])}"
        )
    odd = [
        n
        for n in nodes
        if (n.cpus is not None and n.cpus <= 0) or (n.memory_mib is not None and n.memory_mib <= 0)
    ]
    if odd:
        out.append(
            f"{_at(source, odd)}: node(s) whose core or memory specialization (CoreSpecCount, "
            f"CPUSpecList, MemSpecLimit) leaves nothing for jobs: {_shown([n.name for n in odd])}"
        )
    return out


@attrs.frozen
class PartitionChoice:
    """One partition the nodes name: kept or left out, and why (from ``choose_partitions``)."""

    name: str
    info: SlurmPartition | None
    usability: Usability

    @property
    def reason(self) -> str | None:
        return self.usability.reason


def choose_partitions(
    names: Sequence[str],
    slurm_partitions: Sequence[SlurmPartition],
    access: Access,
) -> tuple[list[PartitionChoice], list[PartitionChoice]]:
    """``(usable, not usable)`` partitions among ``names`` (those of the nodes), each list in
    ``scontrol show partitions`` order: hidden ones, ones whose ``AllowGroups`` /
    ``AllowAccounts`` / ``DenyAccounts`` / ``RootOnly`` exclude ``access``, and ones the
    partitions text does not list (hidden from the user who ran it) are not usable."""
    infos = {p.name: p for p in slurm_partitions}
    order = {p.name: i for i, p in enumerate(slurm_partitions)}
    usable: list[PartitionChoice] = []
    unusable: list[PartitionChoice] = []
    for name in sorted(names, key=lambda n: order.get(n, len(order))):
        info = infos.get(name)
        if info is None:
            verdict = Usability(
                "not in the partitions text (hidden, or not visible to the user who ran scontrol)"
            )
        else:
            verdict = partition_usability(info, access)
        (usable if verdict.reason is None else unusable).append(
            PartitionChoice(name, info, verdict)
        )
    return usable, unusable


def _partition_entry(
    specs: list[NodeGroupSpec], no_hosts: bool, choice: PartitionChoice | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    info = choice.info if choice is not None else None
    if info is not None:
        if info.max_time is not None:
            entry["configuration"] = {"max_duration": duration_text(info.max_time)}
        if info.state.upper() != "UP":
            entry["disabled"] = True
    if choice is not None and choice.usability.accounts:
        entry["accounts"] = list(choice.usability.accounts)
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
    choices: Sequence[PartitionChoice] | None = None,
) -> dict[str, Any]:
    """The ``launchers.yaml`` mapping with one ``slurm`` group (plain dicts and lists).

    With ``choices`` (from ``scontrol show partitions``), only those partitions are written,
    in that order, with ``max_duration`` (MaxTime), ``disabled`` (State not UP) and the
    ``accounts`` to use where the partition restricts them."""
    group: dict[str, Any] = {"id": group_id}
    if no_hosts:
        group["use_hosts"] = False
    if choices is None:
        group["partitions"] = {
            name: _partition_entry(specs, no_hosts, None) for name, specs in partitions.items()
        }
    else:
        group["partitions"] = {
            c.name: _partition_entry(partitions[c.name], no_hosts, c) for c in choices
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
# launchers.yaml generated by `launchers slurm convert{flags}` from `scontrol show nodes`{parts}
# ({nodes} nodes, {partitions} partitions, {groups} node groups).
# Cores and memory are what jobs can get: CPUEfctv (else CPUTot less CoreSpecCount or
# CPUSpecList) and RealMemory less MemSpecLimit.
# scontrol does not tell how much memory a GPU has: add `features_regex` (named groups
# cuda_count and cuda_memory) or a `features:` mapping so that cuda(mem=...) can match.
"""
_NO_PARTITIONS_NOTE = """\
# Without --partitions (`scontrol show partitions`), hidden partitions and partitions whose
# AllowGroups/AllowAccounts exclude you cannot be told apart: check the partitions below.
"""


def _comment(text: str) -> str:
    return "".join(f"# {line}\n" for line in text.splitlines())


def convert_nodes(
    nodes: Sequence[SlurmNode],
    *,
    no_hosts: bool = False,
    group_id: str | None = None,
    slurm_partitions: Sequence[SlurmPartition] | None = None,
    access: Access | None = None,
    keep_all: bool = False,
    source: str = "<stdin>",
    partitions_source: str = "<partitions>",
) -> Conversion:
    """Convert parsed nodes (and optionally partitions) into ``launchers.yaml`` text with one
    ``slurm:`` group. With partitions, the ones ``access`` cannot use are left out (listed in
    the warnings and the header) unless ``keep_all``, which keeps them after the others."""
    if not nodes:
        raise ScontrolFormatError(
            "no node records found; expected the output of `scontrol show nodes` "
            "(experimaestro 1.5.7's slurm convert wrote a group without partitions)",
            file=source,
        )
    if slurm_partitions is not None:
        nodes = with_partitions(nodes, slurm_partitions, partitions_source)
    warnings = node_warnings(nodes, source)
    partitions = group_nodes(nodes)
    if not partitions:
        if all(n.partitions is None for n in nodes):
            raise ScontrolFormatError(
                "no node record has Partitions=: no node is in a partition, or the text comes "
                "from Slurm before 17.02, which does not print it; give `scontrol show "
                "partitions` output with --partitions FILE to place the nodes (experimaestro "
                "1.5.7's slurm convert wrote a group without partitions)",
                file=source,
            )
        raise ScontrolFormatError(
            "no node belongs to a partition (every record lacks Partitions=); nothing to convert "
            "(experimaestro 1.5.7's slurm convert wrote a group without partitions)",
            file=source,
        )
    clusters = {n.cluster for n in nodes if n.cluster}
    if group_id is None:
        if len(clusters) > 1:
            raise ScontrolFormatError(
                f"the text lists nodes of several clusters ({', '.join(sorted(clusters))}); "
                "convert one cluster at a time (scontrol -M NAME show nodes) (experimaestro "
                "1.5.7's slurm convert merged them into one group)",
                file=source,
            )
        group_id = next(iter(clusters)) if clusters else "slurm"
    choices: list[PartitionChoice] | None = None
    notes = ""
    if slurm_partitions is not None:
        usable, unusable = choose_partitions(list(partitions), slurm_partitions, access or Access())
        for c in unusable:
            where = f"{partitions_source}:{c.info.line}: " if c.info is not None else ""
            what = "kept last (--all)" if keep_all else "left out (--all keeps it)"
            warnings.append(f"{where}partition {c.name} {what}: {c.reason}")
        choices = usable + unusable if keep_all else usable
        if unusable:
            head = (
                "kept last by --all, though you may not be able to use them:"
                if keep_all
                else ("left out (you may not be able to use them; --all keeps them):")
            )
            notes = _comment(head + "\n" + "\n".join(f"  {c.name}: {c.reason}" for c in unusable))
        if not choices:
            raise ScontrolFormatError(
                "no partition of the nodes is usable: "
                + "; ".join(f"{c.name}: {c.reason}" for c in unusable)
                + " (--all keeps them)",
                file=partitions_source,
            )
        partitions = {c.name: partitions[c.name] for c in choices}
    n_groups = sum(len(v) for v in partitions.values())
    flags = (" --no-hosts" if no_hosts else "") + (
        " --all" if keep_all and slurm_partitions is not None else ""
    )
    header = _HEADER.format(
        flags=flags,
        parts="" if slurm_partitions is None else " and `scontrol show partitions`",
        nodes=len(nodes),
        partitions=len(partitions),
        groups=n_groups,
    )
    if slurm_partitions is None:
        header += _NO_PARTITIONS_NOTE
        catch_all = catch_all_partitions(nodes)
        if catch_all:
            # listed last, so that they never come first in a --partition= list
            partitions = {
                **{k: v for k, v in partitions.items() if k not in catch_all},
                **{k: partitions[k] for k in catch_all},
            }
            names = ", ".join(catch_all)
            header += _comment(
                f"Listed last: {names} holds every node, each of which is also in another partition:\n"
                "an administrators' catch-all partition (often Hidden=YES or AllowGroups-restricted);\n"
                "remove it if you cannot use it, or give --partitions to decide."
            )
            warnings.append(
                f"{source}: partition {names} holds every node and every node is also in another "
                "partition: listed last (a catch-all partition, often hidden; --partitions decides)"
            )
    header += notes
    document = build_document(partitions, group_id, no_hosts, choices)
    text = header + dump_yaml(document)
    return Conversion(text, len(nodes), len(partitions), n_groups, tuple(warnings))


def split_partition_records(text: str) -> tuple[str, str | None]:
    """``(nodes text, partitions text or None)`` of one text holding both outputs
    (``scontrol show nodes; scontrol show partitions``): a record that starts with
    ``PartitionName=`` runs to the next ``NodeName=`` line. Each text keeps the other's lines
    as blank lines, so that line numbers stay those of the input."""
    if "PartitionName=" not in text:
        return text, None
    nodes: list[str] = []
    parts: list[str] = []
    in_partition = False
    for line in text.split("\n"):
        head = line.lstrip()
        if head.startswith("PartitionName="):
            in_partition = True
        elif head.startswith(("NodeName=", "CLUSTER:")):
            in_partition = False
        (parts if in_partition else nodes).append(line)
        (nodes if in_partition else parts).append("")
    if not any(p.strip() for p in parts):
        return text, None
    return "\n".join(nodes), "\n".join(parts)


def convert_text(
    text: str,
    *,
    no_hosts: bool = False,
    group_id: str | None = None,
    source: str = "<stdin>",
    partitions_text: str | None = None,
    partitions_source: str = "<partitions>",
    access: Access | None = None,
    keep_all: bool = False,
) -> Conversion:
    """Convert ``scontrol show nodes`` text (and optionally ``scontrol show partitions`` text,
    given apart or following the nodes in ``text``); the group id defaults to the cluster named
    in the text, else ``slurm``."""
    text, inline = split_partition_records(text)
    if inline is not None:
        if partitions_text is not None:
            raise ScontrolFormatError(
                f"the text holds `scontrol show partitions` records and {partitions_source} "
                "gives them too: give them once",
                file=source,
            )
        partitions_text, partitions_source = inline, source
    nodes = parse_nodes(text, source)
    if inline is not None and not nodes:
        raise ScontrolFormatError(
            "the text holds `scontrol show partitions` records but no node record: give "
            "`scontrol show nodes` on stdin, the partitions after it or with --partitions FILE "
            "(experimaestro 1.5.7's slurm convert wrote a group without partitions)",
            file=source,
        )
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
        nodes,
        no_hosts=no_hosts,
        group_id=group_id,
        slurm_partitions=slurm_partitions,
        access=access,
        keep_all=keep_all,
        source=source,
        partitions_source=partitions_source,
    )
