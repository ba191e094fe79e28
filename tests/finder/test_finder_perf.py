"""The finder's fast paths give the same answers as the plain ones (PERF task).

The compiled host matcher against ``fit``, ``select_cached`` against ``select``, the canonical
memo keys of ``find_launcher``, and the one-stat-per-file check of ``load_config``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from launchers.config.loader import clear_cache, load_config, load_config_text
from launchers.errors import ConfigurationError
from launchers.finder.choose import needed_cores, select, select_cached
from launchers.finder.hosts import GPUSlot, Host, build_index, compile_matcher, host_row
from launchers.finder.match import fit, kind_bits
from launchers.finder.search import find_launcher
from launchers.language.values import CPURequest, GPURequest, HostRequirement

GIB = 1024**3
_sizes = st.sampled_from([0, 4 * GIB, 10 * GIB, 12 * GIB, 24 * GIB, 48 * GIB, 80 * GIB])
_slot = st.builds(
    GPUSlot, memory=_sizes, min_memory=st.sampled_from([0, 2 * GIB, 5 * GIB, 20 * GIB]),
    kind=st.sampled_from(["cuda", "cuda", "mps", "other"]),
)  # fmt: skip
_host = st.builds(
    Host,
    cores=st.sampled_from([0, 4, 16, 64]),
    memory=st.sampled_from([0, 16 * GIB, 256 * GIB]),
    gpus=st.one_of(
        st.lists(_slot, max_size=6).map(tuple),
        st.tuples(_slot, st.integers(0, 8)).map(lambda p: (p[0],) * p[1]),
    ),
    max_duration=st.sampled_from([0, 3600, 86400]),
    min_gpu=st.sampled_from([0, 0, 1, 2]),
    mem_per_cpu=st.sampled_from([0, 0, 2 * GIB]),
    cpu_per_gpu=st.sampled_from([0, 0, 4]),
    memory_as_cores=st.booleans(),
)
_alt = st.builds(
    HostRequirement,
    duration=st.sampled_from([0, 60, 7200, 100000]),
    cpu=st.builds(
        CPURequest,
        memory=st.sampled_from([0, GIB, 20 * GIB, 300 * GIB]),
        cores=st.sampled_from([1, 2, 8, 32, 100]),
    ),
    cuda_gpus=st.lists(
        st.builds(GPURequest, memory=_sizes, kind=st.sampled_from(["cuda", "cuda", "gpu", "mps"])),
        max_size=5,
    ).map(tuple),
)


def _compiled(hosts: tuple[Host, ...], alt: HostRequirement) -> tuple[int, ...]:
    requests = [g.memory for g in alt.cuda_gpus]
    nonzero = [r for r in requests if r]
    low, high = (min(nonzero), max(nonzero)) if nonzero else (0, 0)
    matcher = compile_matcher(tuple(host_row(h) for h in hosts))
    need = kind_bits(alt.cuda_gpus)
    return matcher(
        alt.duration,
        len(requests),
        alt.cpu.cores,
        alt.cpu.memory,
        low,
        high,
        alt.cuda_gpus,
        need,
        sum(requests),
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(_host, min_size=1, max_size=6).map(tuple), st.lists(_alt, min_size=1, max_size=6))
def test_compiled_matcher_and_row_loop_agree_with_fit(
    hosts: tuple[Host, ...], alts: list[HostRequirement]
) -> None:
    rows = tuple(host_row(h) for h in hosts)
    for alt in alts:
        expected = tuple(fit(alt, h) for h in hosts)
        assert needed_cores(rows, alt) == expected
        assert _compiled(hosts, alt) == expected


_CONFIG = """
slurm:
  - id: c
    configuration: {gpu: {min_mem_ratio: 0.4}}
    features_regex: ['GPU(?P<cuda_count>\\d+)', 'GPUM(?P<cuda_memory>\\d+G)']
    partitions:
      a:
        configuration: {max_duration: 2 days, cpu: {cores: 16}}
        nodes:
          - {features: [GPU4, GPUM24G], hosts: [n1, n2]}
          - {features: [GPU2, GPUM48G], hosts: [n3]}
      b:
        priority: 1
        configuration: {cpu: {cores: 32, memory: 64G}}
        nodes:
          - {features: [GPU8, GPUM12G], hosts: [n4]}
"""


@settings(max_examples=200, deadline=None)
@given(_alt)
def test_select_cached_equals_select(alt: HostRequirement) -> None:
    group = load_config_text(_CONFIG).groups[0]
    index = build_index(group)  # type: ignore[arg-type]
    for single in (False, True):
        for _ in range(2):  # the second call comes from the memo
            got, want = select_cached(index, alt, single), select(index, alt, None, single)
            if want is None:
                assert got is None
                continue
            assert got is not None
            assert (got.best, got.cores, got.alt) == (want.best, want.cores, alt)
            assert (got.partitions, got.constraint, got.exclude) == (
                want.partitions,
                want.constraint,
                want.exclude,
            )


def test_found_launcher_keeps_an_equal_requirement() -> None:
    cfg = load_config_text(_CONFIG)
    a = HostRequirement(duration=60, cuda_gpus=(GPURequest(24 * GIB),) * 2)
    b = HostRequirement(duration=60, cuda_gpus=(GPURequest(24 * GIB),) * 2)
    c = HostRequirement(duration=61, cuda_gpus=(GPURequest(24 * GIB),) * 2)
    la, lb, lc = (find_launcher(x, config=cfg) for x in (a, b, c))
    assert la.requirement == a and lb.requirement == b and lc.requirement == c
    assert la.options.time != lc.options.time


def _age(path: Path, seconds: int) -> None:
    ns = time.time_ns() - seconds * 1_000_000_000
    os.utime(path, ns=(ns, ns))


def test_load_config_notices_changes_on_the_next_call(tmp_path: Path) -> None:
    clear_cache()
    path = tmp_path / "launchers.yaml"
    path.write_text("local: [{id: one}]\n")
    _age(path, 100)
    _age(tmp_path, 100)
    first = load_config(str(path))
    assert load_config(str(path)) is first  # unchanged: the cached value
    path.write_text("local: [{id: two}]\n")  # same size, new content
    _age(path, 50)
    assert load_config(str(path)).groups[0].id == "two"
    _age(tmp_path, 50)
    second = load_config(str(path))
    assert load_config(str(path)) is second
    (tmp_path / "connectors.yaml").write_text("ssh: [\n")  # a new sidecar, noticed at once
    try:
        load_config(str(path))
    except ConfigurationError as e:
        assert "connectors.yaml" in str(e)
    else:  # pragma: no cover
        raise AssertionError("the new connectors.yaml was not read")
    (tmp_path / "connectors.yaml").unlink()
    assert load_config(str(path)).groups[0].id == "two"
    path.unlink()
    try:
        load_config(str(path))
    except ConfigurationError as e:
        assert "does not exist" in str(e)
    else:  # pragma: no cover
        raise AssertionError("the removed file was not noticed")
    clear_cache()
