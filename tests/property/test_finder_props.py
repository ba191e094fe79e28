"""Property tests: random requirements x random small configurations.

Only ``LaunchersError`` may escape; a chosen launcher really matches; the emitted options are
sound (every node group Slurm could pick matches); GPU assignment equals a brute-force oracle.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launchers import LaunchersError, find_launcher
from launchers.config.model import (
    CPUConfig,
    GPUConfig,
    LaunchersConfig,
    NodeGroup,
    Partition,
    QoS,
    ResourceConfig,
    SlurmGroup,
)
from launchers.finder.hosts import GPUSlot, layered, node_groups_of, slurm_host
from launchers.finder.match import accepts, assign_gpus, fit, problems
from launchers.language.values import CPURequest, GPURequest, HostRequirement
from launchers.slurm.options import SlurmOptions

G = 2**30
SIZES = st.sampled_from([None, 4 * G, 8 * G, 12 * G, 24 * G, 64 * G])


@st.composite
def resource(draw: st.DrawFn) -> ResourceConfig:
    return ResourceConfig(
        max_duration=draw(st.sampled_from([None, 0, 3600, 86400])),
        cpu=CPUConfig(
            cores=draw(st.sampled_from([None, 4, 16])),
            memory=draw(SIZES),
            mem_per_cpu=draw(st.sampled_from([None, 2 * G, 8 * G])),
            cpu_per_gpu=draw(st.sampled_from([None, None, 2])),
        ),
        gpu=GPUConfig(
            count=draw(st.sampled_from([None, 0, 1, 2, 4])),
            memory=draw(st.sampled_from([None, 12 * G, 24 * G])),
            min_memory=draw(st.sampled_from([None, None, 10 * G])),
            min_mem_ratio=draw(st.sampled_from([None, None, Fraction(0), Fraction(1, 2)])),
        ),
    )


@st.composite
def node_group(draw: st.DrawFn, i: int) -> NodeGroup:
    feats = draw(st.lists(st.sampled_from(["A", "B", "C"]), max_size=2, unique=True))
    hosts = draw(st.sampled_from([(), (f"n{i}a", f"n{i}b")]))
    return NodeGroup(hosts=hosts, features=tuple(feats), configuration=draw(resource()))


@st.composite
def slurm_group(draw: st.DrawFn) -> SlurmGroup:
    qos = {
        "short": QoS("short", max_duration=3600, priority=2),
        "gpu": QoS("gpu", max_duration=86400, min_gpu=1, priority=1),
        "long": QoS("long", max_duration=7 * 86400, partition_time_limit=True),
    }
    partitions = []
    counter = itertools.count()
    for p in range(draw(st.integers(1, 3))):
        ngs = tuple(draw(node_group(next(counter))) for _ in range(draw(st.integers(0, 3))))
        partitions.append(
            Partition(
                name=f"p{p}",
                nodes=ngs,
                configuration=draw(resource()),
                priority=draw(st.integers(0, 2)),
                disabled=draw(st.booleans()) and p > 0,
                qos=tuple(draw(st.lists(st.sampled_from(sorted(qos)), max_size=2, unique=True))),
                accounts=tuple(
                    draw(st.lists(st.sampled_from(["x", "y"]), max_size=2, unique=True))
                ),
            )
        )
    return SlurmGroup(
        id="g",
        partitions=tuple(partitions),
        qos=qos,
        configuration=draw(resource()),
        use_features=draw(st.booleans()),
        use_hosts=draw(st.booleans()),
        use_memory_constraint=draw(st.booleans()),
        gpu_option=draw(st.sampled_from(["gpus-per-node", "gres"])),
    )


@st.composite
def requirement(draw: st.DrawFn) -> HostRequirement:
    gpus = draw(st.lists(st.sampled_from([0, 8 * G, 12 * G, 20 * G, 24 * G]), max_size=2))
    return HostRequirement(
        duration=draw(st.sampled_from([0, 1800, 3600, 7200, 3 * 86400])),
        cpu=CPURequest(
            memory=draw(st.sampled_from([0, 0, G, 10 * G, 100 * G])),
            cores=draw(st.sampled_from([1, 1, 2, 8, 32])),
        ),
        cuda_gpus=tuple(GPURequest(memory=m) for m in gpus),
    )


def _admitted(group: SlurmGroup, options: SlurmOptions) -> list[tuple[Partition, NodeGroup]]:
    names = options.partition.split(",")
    constraint = options.constraint
    clauses = None
    if constraint:
        clauses = [set(c.strip("()").split("&")) for c in constraint.split("|")]
    excluded = set((options.exclude or "").split(",")) - {""}
    out = []
    for p in group.partitions:
        if p.name not in names:
            continue
        for ng in node_groups_of(p):
            if clauses is not None and not any(c <= set(ng.features) for c in clauses):
                continue
            if ng.hosts and set(ng.hosts) <= excluded:
                continue
            out.append((p, ng))
    return out


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(slurm_group(), requirement())
def test_random_search_is_sound(group: SlurmGroup, alt: HostRequirement) -> None:
    config = LaunchersConfig(groups=(group,))
    try:
        launcher = find_launcher(alt, config=config, default=None)
    except LaunchersError:
        return
    if launcher is None:
        return
    o = launcher.options
    qos = group.qos.get(o.qos) if o.qos else None
    cores = o.cpus_per_task
    warned = any("WARNING" in line for line in launcher.explanation)
    assert launcher.hosts
    for host in launcher.hosts:  # the chosen and merged candidates really match
        assert not problems(alt, host, first_only=False)[0]
        assert fit(alt, host) >= 0
    for p, ng in _admitted(group, o):
        host = slurm_host(group, p, layered(group, p, ng), qos)
        if o.qos is not None and o.qos not in p.qos:
            raise AssertionError(f"partition {p.name} listed without QoS {o.qos}")
        reasons, needed = problems(alt, host, first_only=False)
        bad = bool(reasons) or needed > cores or bool(host.cores and cores > host.cores)
        if bad:
            assert warned, (p.name, ng, reasons, launcher.explanation)
    if o.mem is not None:
        assert int(o.mem[:-1]) * 2**20 >= alt.cpu.memory
    assert cores >= alt.cpu.cores


def _brute(requests: list[int], slots: list[GPUSlot]) -> bool:
    if len(requests) > len(slots):
        return False
    return any(
        all(accepts(s, r) for r, s in zip(requests, perm, strict=False))
        for perm in itertools.permutations(slots, len(requests))
    )


SLOTS = st.builds(
    GPUSlot,
    memory=st.sampled_from([0, 8 * G, 12 * G, 24 * G, 80 * G]),
    min_memory=st.sampled_from([0, 0, 10 * G, 20 * G]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0, 8 * G, 10 * G, 12 * G, 20 * G, 24 * G, 40 * G]), max_size=4),
    st.lists(SLOTS, max_size=5),
    st.randoms(use_true_random=False),
)
def test_gpu_assignment_matches_brute_force_in_any_order(
    requests: list[int], slots: list[GPUSlot], rnd: object
) -> None:
    expected = _brute(requests, slots)
    assert assign_gpus(requests, slots) == expected
    shuffled_r, shuffled_s = list(requests), list(slots)
    rnd.shuffle(shuffled_r)  # type: ignore[attr-defined]
    rnd.shuffle(shuffled_s)  # type: ignore[attr-defined]
    assert assign_gpus(shuffled_r, shuffled_s) == expected


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(slurm_group(), requirement())
def test_fast_path_agrees_with_reasons(group: SlurmGroup, alt: HostRequirement) -> None:
    from launchers.finder.hosts import build_index

    for host in build_index(group).hosts:
        reasons, cores = problems(alt, host, first_only=False)
        fast = fit(alt, host)
        assert (fast >= 0) == (not reasons), (host, alt, reasons)
        if fast >= 0:
            assert fast == cores
        first, _ = problems(alt, host, first_only=True)
        assert bool(first) == bool(reasons)
