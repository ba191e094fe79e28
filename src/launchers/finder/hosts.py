"""Hosts and candidates: what each local group or Slurm-like node group offers, precomputed.

A ``Host`` is the flat, fully layered view the matcher needs. A Slurm-like group becomes a
``GroupIndex``: every enabled partition x node group x QoS x account, in candidate order
(docs/design/matching.md §5, §7). Indexes are built once per group object (config values are immutable).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from ..config.model import (
    CPUConfig,
    GPUConfig,
    LocalGroup,
    NodeGroup,
    Partition,
    QoS,
    ResourceConfig,
    SlurmGroup,
    regex_gpu,
)
from ..errors import ConfigurationError
from .gpus import SLOT_BITS, GPUSlot, assign_gpus


@attrs.frozen
class Host:
    """What one host (local machine or node group under a QoS) offers; 0 means not declared."""

    cores: int = 0
    memory: int = 0
    gpus: tuple[GPUSlot, ...] = ()
    max_duration: int = 0
    min_gpu: int = 0
    priority: int = 0
    mem_per_cpu: int = 0
    cpu_per_gpu: int = 0
    memory_as_cores: bool = False  # use_memory_constraint: false
    partition_duration: int = 0  # the partition's own limit (for explanations)
    qos_name: str | None = None
    qos_duration: int = 0

    #: the one GPU kind when all GPUs are alike (the common case), else None; derived
    uniform_gpu: GPUSlot | None = attrs.field(init=False, eq=False, repr=False)
    #: every GPU is an Apple GPU: GPU requests take the host's memory too; derived
    unified: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        kinds = set(self.gpus)
        object.__setattr__(self, "uniform_gpu", next(iter(kinds)) if len(kinds) == 1 else None)
        object.__setattr__(self, "unified", bool(kinds) and all(g.kind == "mps" for g in kinds))


IMPLICIT_NODE_GROUP = NodeGroup()


def node_group_text(ng: NodeGroup) -> str:
    """``A&B`` (its features), else a few of its hosts, else ``no features``."""
    if ng.features:
        return "&".join(ng.features)
    if ng.hosts:
        more = f",+{len(ng.hosts) - 3} more" if len(ng.hosts) > 3 else ""
        return ",".join(ng.hosts[:3]) + more
    return "no features"


@attrs.frozen(eq=False)
class Candidate:
    """One partition x node group x QoS x account of a Slurm-like group, with its host."""

    order: int
    partition: Partition
    pindex: int
    node_group: NodeGroup
    nindex: int
    qos: QoS | None
    qindex: int
    account: str | None
    aindex: int
    host: Host
    hidx: int  # index of ``host`` in ``GroupIndex.hosts``
    clause: tuple[str, ...]  # features for --constraint; () = no constraint possible
    qos_name: str | None = attrs.field(init=False)
    pn: tuple[int, int] = attrs.field(init=False)  # (pindex, nindex)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "qos_name", self.qos.name if self.qos is not None else None)
        object.__setattr__(self, "pn", (self.pindex, self.nindex))

    def label(self) -> str:
        """``partition gpu, nodes GPU&GPU2, QoS q, account a`` for explanations."""
        parts = [f"partition {self.partition.name}"]
        ng = self.node_group
        if ng is not IMPLICIT_NODE_GROUP:
            parts.append(f"node group {self.nindex} ({node_group_text(ng)})")
        if self.qos is not None:
            parts.append(f"QoS {self.qos.name}")
        if self.account is not None:
            parts.append(f"account {self.account}")
        return ", ".join(parts)


@attrs.frozen(eq=False)
class GroupIndex:
    """The precomputed candidates of one Slurm-like group, in candidate order."""

    group: SlurmGroup
    candidates: tuple[Candidate, ...]
    partitions: tuple[Partition, ...]  # enabled partitions, file order
    disabled: tuple[Partition, ...]
    node_groups: dict[int, tuple[NodeGroup, ...]]  # pindex -> node groups (implicit one if none)
    feature_sets: dict[int, tuple[frozenset[str], ...]]  # pindex -> features of each node group
    feature_ids: dict[
        int, tuple[int, ...]
    ]  # pindex -> index in ``distinct_features`` per node group
    distinct_features: tuple[frozenset[str], ...]
    by_key: dict[tuple[int, int, str | None, str | None], Candidate]
    by_combo: dict[
        tuple[str | None, str | None], tuple[Candidate, ...]
    ]  # (QoS, account) -> candidates
    hosts: tuple[Host, ...]  # distinct hosts; candidates refer to them by ``hidx``
    memo: dict[Any, Any] = attrs.field(factory=dict)  # finder.choose.select
    #: ``hosts`` as plain tuples for the inlined matcher (``finder.choose.needed_cores``)
    rows: tuple[HostRow, ...] = attrs.field(init=False)
    #: (needed cores per host, single partition) -> (best, cores, merge), for ``select_cached``
    by_needed: dict[Any, Any] = attrs.field(init=False, factory=dict)

    #: ``rows`` compiled to one function (see ``compile_matcher``), ``None`` when too many
    matcher: Callable[..., tuple[int, ...]] | None = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        rows = tuple(host_row(h) for h in self.hosts)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(
            self, "matcher", compile_matcher(rows) if len(rows) <= MAX_COMPILED else None
        )


#: (max_duration, min_gpu, cores, memory, mem_per_cpu, cpu_per_gpu, memory_as_cores,
#: GPU count, uniform GPU min memory, uniform GPU memory, uniform?, GPU slots,
#: kind bits a uniform GPU refuses, unified memory?)
HostRow = tuple[
    int, int, int, int, int, int, bool, int, int, int, bool, tuple[GPUSlot, ...], int, bool
]


#: Groups with more distinct hosts than this use the row loop (compiling would cost more).
MAX_COMPILED = 256


def _host_expression(i: int, row: HostRow) -> str:
    """``fit`` for one host row as a Python expression with the host's numbers inlined."""
    (
        maxd,
        min_gpu,
        hcores,
        hmem,
        mem_per_cpu,
        cpu_per_gpu,
        as_cores,
        nslots,
        low,
        high,
        uniform,
        _,
        refused,
        unified,
    ) = row
    conds: list[str] = []
    if maxd:
        conds.append(f"duration <= {int(maxd)}")
    if min_gpu:
        conds.append(f"n >= {int(min_gpu)}")
    if hmem:
        conds.append(f"memory + gpu_total <= {int(hmem)}" if unified else f"memory <= {int(hmem)}")
    conds.append(f"n <= {int(nslots)}")
    if nslots:
        if uniform:
            conds.append(f"not need & {int(refused)}")
            conds.append(f"(not high_req or ({int(low)} <= low_req and high_req <= {int(high)}))")
        else:
            conds.append(f"(not n or assign(requests, SLOTS[{i}]))")
    cores = "want"
    if cpu_per_gpu:
        cores = f"max({cores}, {int(cpu_per_gpu)} * n)"
    if as_cores:
        if mem_per_cpu:
            cores = f"max({cores}, -(-memory // {int(mem_per_cpu)}))"
        else:
            conds.append("not memory")
    if hcores:
        conds.append(f"(c := {cores}) <= {int(hcores)}")
        cores = "c"
    return f"({cores} if {' and '.join(conds)} else -1)"


def compile_matcher(rows: tuple[HostRow, ...]) -> Callable[..., tuple[int, ...]]:
    """One function computing ``fit`` on every host at once, the host numbers inlined:
    ``f(duration, n, want, memory, low_req, high_req, requests, need, gpu_total) -> cores or
    -1 per host``; ``need`` is the OR of the requests' kind bits, ``gpu_total`` the sum of
    their memory (taken from the host's memory on Apple GPUs)."""
    items = "".join(f"\n        {_host_expression(i, row)}," for i, row in enumerate(rows))
    source = (
        "def matcher(duration, n, want, memory, low_req, high_req, requests, need=0, gpu_total=0):\n"
        f"    return ({items}\n    )\n"
    )
    namespace: dict[str, Any] = {"assign": assign_gpus, "SLOTS": tuple(r[11] for r in rows)}
    exec(compile(source, "<launchers.finder host matcher>", "exec"), namespace)
    return namespace["matcher"]


def host_row(host: Host) -> HostRow:
    """A host as the plain tuple the inlined matcher unpacks (no attribute lookups)."""
    one = host.uniform_gpu
    return (
        host.max_duration, host.min_gpu, host.cores, host.memory, host.mem_per_cpu,
        host.cpu_per_gpu, host.memory_as_cores, len(host.gpus),
        one.min_memory if one is not None else 0, one.memory if one is not None else 0,
        one is not None, host.gpus, 7 & ~SLOT_BITS[one.kind] if one is not None else 0, host.unified,
    )  # fmt: skip


def node_groups_of(partition: Partition) -> tuple[NodeGroup, ...]:
    """The partition's node groups; a partition without any has one implicit, featureless group."""
    return partition.nodes if partition.nodes else (IMPLICIT_NODE_GROUP,)


def layered(group: SlurmGroup, partition: Partition, ng: NodeGroup) -> ResourceConfig:
    """docs/design/matching.md §7 layering: group, partition, node group, each feature, then features_regex."""
    cfg = group.configuration.merged(partition.configuration).merged(ng.configuration)
    for feature in ng.features:
        extra = group.features.get(feature)
        if extra is not None:
            cfg = cfg.merged(extra)
    for feature in ng.features:
        for regex in group.features_regex:
            m = regex.fullmatch(feature)
            if m is None:
                continue
            cfg = cfg.merged(_regex_layer(m.groupdict(), feature, regex.pattern, ng))
    return cfg


def _regex_layer(
    found: dict[str, Any], feature: str, pattern: str, ng: NodeGroup
) -> ResourceConfig:
    """The layer of one ``features_regex`` match. The loader has checked every node group of a
    file (``config.loader``); the error here only guards groups built otherwise."""
    try:
        gpu = regex_gpu(found)
    except ValueError as e:
        pos = ng.position
        raise ConfigurationError(
            f"feature {feature!r} matched by features_regex {pattern!r}: {e}",
            file=pos.file, line=pos.line, column=pos.column, key=pos.key or None,
        ) from None  # fmt: skip
    return ResourceConfig(gpu=gpu)


def gpu_slots(cfg: GPUConfig) -> tuple[GPUSlot, ...]:
    """The GPUs a layered configuration declares, with ``min_mem_ratio`` applied exactly."""
    count = cfg.count or 0
    memory = cfg.memory or 0
    floor = cfg.min_memory or 0
    if cfg.min_mem_ratio is not None and memory:
        floor = max(floor, math.ceil(cfg.min_mem_ratio * memory))
    return (GPUSlot(memory=memory, min_memory=floor, kind=cfg.kind or "cuda"),) * count


def _duration_limit(partition_limit: int, qos: QoS | None) -> int:
    if qos is None or not qos.max_duration:
        return partition_limit
    if qos.partition_time_limit or not partition_limit:
        return qos.max_duration
    return min(partition_limit, qos.max_duration)


def slurm_host(
    group: SlurmGroup, partition: Partition, cfg: ResourceConfig, qos: QoS | None
) -> Host:
    """The host one candidate offers (layered configuration with the QoS applied)."""
    cpu: CPUConfig = cfg.cpu
    part_limit = cfg.max_duration or 0
    return Host(
        cores=cpu.cores or 0,
        memory=cpu.memory or 0,
        gpus=gpu_slots(cfg.gpu),
        max_duration=_duration_limit(part_limit, qos),
        min_gpu=qos.min_gpu if qos is not None else 0,
        priority=partition.priority + (qos.priority if qos is not None else 0),
        mem_per_cpu=cpu.mem_per_cpu or 0,
        cpu_per_gpu=cpu.cpu_per_gpu or 0,
        memory_as_cores=not group.use_memory_constraint,
        partition_duration=part_limit,
        qos_name=qos.name if qos is not None else None,
        qos_duration=(qos.max_duration or 0) if qos is not None else 0,
    )


def local_host(group: LocalGroup) -> Host:
    """The host a local group describes (no duration limit)."""
    gpus: list[GPUSlot] = []
    for gpu in group.gpus:
        gpus.extend(
            [GPUSlot(memory=gpu.memory, min_memory=gpu.min_memory or 0, kind=gpu.kind)] * gpu.count
        )
    return Host(
        cores=group.cpu.cores or 0,
        memory=group.cpu.memory or 0,
        gpus=tuple(gpus),
        mem_per_cpu=group.cpu.mem_per_cpu or 0,
        cpu_per_gpu=group.cpu.cpu_per_gpu or 0,
    )


def _qos_of(group: SlurmGroup, partition: Partition) -> Iterator[tuple[int, QoS | None]]:
    if not partition.qos:
        yield 0, None
        return
    for i, name in enumerate(partition.qos):
        qos = group.qos.get(name)
        if qos is None:
            pos = partition.position
            raise ConfigurationError(
                f"unknown QoS {name!r} in partition {partition.name!r}",
                file=pos.file, line=pos.line, column=pos.column, key=pos.key or None,
            )  # fmt: skip
        yield i, qos


def build_index(group: SlurmGroup) -> GroupIndex:
    """Every candidate of a Slurm-like group, sorted by priority then file order."""
    raw: list[tuple[tuple[int, int, int, int, int], dict[str, Any]]] = []
    hosts: dict[Host, Host] = {}  # intern equal hosts: the matcher works once per distinct host
    host_ids: dict[int, int] = {}
    enabled: list[Partition] = []
    disabled: list[Partition] = []
    node_groups: dict[int, tuple[NodeGroup, ...]] = {}
    for pindex, partition in enumerate(group.partitions):
        if partition.disabled:
            disabled.append(partition)
            continue
        enabled.append(partition)
        ngs = node_groups_of(partition)
        node_groups[pindex] = ngs
        for nindex, ng in enumerate(ngs):
            cfg = layered(group, partition, ng)
            clause = tuple(ng.features) if group.use_features else ()
            for qindex, qos in _qos_of(group, partition):
                host = slurm_host(group, partition, cfg, qos)
                host = hosts.setdefault(host, host)
                hidx = host_ids.setdefault(id(host), len(host_ids))
                for aindex, account in enumerate(partition.accounts or (None,)):
                    key = (-host.priority, pindex, nindex, qindex, aindex)
                    raw.append((key, dict(
                        partition=partition, pindex=pindex, node_group=ng, nindex=nindex,
                        qos=qos, qindex=qindex, account=account, aindex=aindex, host=host,
                        hidx=hidx, clause=clause,
                    )))  # fmt: skip
    raw.sort(key=lambda item: item[0])
    candidates = tuple(Candidate(order=i, **fields) for i, (_, fields) in enumerate(raw))
    by_key = {(c.pindex, c.nindex, c.qos_name, c.account): c for c in candidates}
    by_combo: dict[tuple[str | None, str | None], list[Candidate]] = {}
    for c in candidates:
        by_combo.setdefault((c.qos_name, c.account), []).append(c)
    feature_sets = {
        pi: tuple(frozenset(ng.features) for ng in ngs) for pi, ngs in node_groups.items()
    }
    fids: dict[frozenset[str], int] = {}
    return GroupIndex(
        group=group,
        candidates=candidates,
        partitions=tuple(enabled),
        disabled=tuple(disabled),
        node_groups=node_groups,
        feature_sets=feature_sets,
        feature_ids={
            pi: tuple(fids.setdefault(f, len(fids)) for f in fs) for pi, fs in feature_sets.items()
        },
        distinct_features=tuple(fids),
        by_key=by_key,
        by_combo={k: tuple(v) for k, v in by_combo.items()},
        hosts=tuple(hosts.values()),
    )


_CACHE: dict[tuple[int, str], tuple[weakref.ref[Any], Any]] = {}


def cached(obj: Any, name: str, build: Callable[[Any], Any]) -> Any:
    """``build(obj)`` computed once per live object (by identity, not equality: hashing a
    10,000-node group on every call would cost more than the search itself)."""
    key = (id(obj), name)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is obj:
        return hit[1]
    value = build(obj)

    def forget(
        ref: weakref.ref[Any], key: tuple[int, str] = key, table: dict[Any, Any] = _CACHE
    ) -> None:
        entry = table.get(key)
        if entry is not None and entry[0] is ref:
            del table[key]

    _CACHE[key] = (weakref.ref(obj, forget), value)
    return value


def group_index(group: SlurmGroup) -> GroupIndex:
    """The cached ``GroupIndex`` of a group."""
    return cached(group, "index", build_index)


def cached_local_host(group: LocalGroup) -> Host:
    """The cached ``Host`` of a local group."""
    return cached(group, "host", local_host)
