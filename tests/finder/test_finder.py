"""The finder: matching rules (docs/design/matching.md §3), the search (docs/design/matching.md §5), output options and soundness (docs/design/matching.md §7)."""

from __future__ import annotations

import textwrap

import attrs
import pytest

from launchers import (
    ConfigurationError,
    LauncherNotFoundError,
    LaunchersError,
    cpu,
    cuda_gpu,
    duration,
    find_launcher,
    parse,
)
from launchers.config.loader import load_config_text
from launchers.config.model import LaunchersConfig
from launchers.finder.hosts import GPUSlot, Host
from launchers.finder.match import assign_gpus, matches, problems
from launchers.finder.search import explain_search
from launchers.language.values import HostRequirement

G = 2**30
M = 2**20


def cfg(text: str) -> LaunchersConfig:
    return load_config_text(textwrap.dedent(text), "launchers.yaml")


def args(text: str, *specs: str, **kw: object) -> list[str]:
    return find_launcher(*specs, config=cfg(text), **kw).sbatch_args()  # type: ignore[no-any-return]


def alt(spec: str) -> HostRequirement:
    return parse(spec).requirements[0]


LOCAL_GPUS = """
local:
  - id: box
    cpu: {cores: 8, memory: 32G}
    gpus: [{model: small, count: 1, memory: 12G}, {model: big, count: 1, memory: 24G}]
"""

# ---------------------------------------------------------------- docs/design/matching.md §3 matching


def test_cores_and_memory_each_reject() -> None:
    host = Host(cores=8, memory=32 * G)
    assert matches(alt("cpu(cores=8, mem=32G)"), host)
    # the older tool rejected only when both were short
    assert not matches(alt("cpu(cores=9, mem=1G)"), host)
    assert not matches(alt("cpu(cores=1, mem=33G)"), host)


def test_undeclared_quantities_do_not_constrain() -> None:
    assert matches(alt("cpu(cores=256, mem=2T)"), Host())
    assert matches(alt("cpu(cores=256, mem=2T)"), Host(cores=0, memory=0))
    assert not matches(alt("cpu(cores=256, mem=2T)"), Host(cores=0, memory=G))


def test_gpu_assignment_is_order_independent() -> None:
    small, big = GPUSlot(memory=12 * G), GPUSlot(memory=24 * G)
    for slots in ((small, big), (big, small)):
        for req in ("cuda(mem=20G) & cuda(mem=10G)", "cuda(mem=10G) & cuda(mem=20G)"):
            assert matches(alt(req), Host(gpus=slots)), (slots, req)
        assert not matches(alt("cuda(mem=20G)*2"), Host(gpus=slots))
    # requests go to DISTINCT GPUs
    assert not matches(alt("cuda()*3"), Host(gpus=(small, big)))


def test_gpu_assignment_needs_augmenting_paths() -> None:
    # a greedy pairing would put the 10G request on the 24G card first and fail
    slots = [GPUSlot(memory=24 * G), GPUSlot(memory=12 * G, min_memory=0)]
    assert assign_gpus([10 * G, 20 * G], slots)
    assert assign_gpus([20 * G, 10 * G], list(reversed(slots)))


def test_gpu_min_memory_and_any_gpu() -> None:
    host = Host(gpus=(GPUSlot(memory=80 * G, min_memory=40 * G),))
    assert not matches(alt("cuda(mem=10G)"), host)
    assert matches(alt("cuda(mem=40G)"), host)
    assert matches(alt("cuda(mem=80G)"), host)
    assert not matches(alt("cuda(mem=81G)"), host)
    assert matches(alt("cuda()"), host)  # no size: any GPU


def test_duration_limit_equality_fits() -> None:
    host = Host(max_duration=24 * 3600)
    assert matches(alt("duration=24h"), host)
    assert matches(alt("duration=1 day"), host)
    assert not matches(alt("duration=1441 minutes"), host)
    assert matches(alt("duration=400 days"), Host())


def test_qos_min_gpu() -> None:
    host = Host(gpus=(GPUSlot(memory=G),) * 4, min_gpu=2, qos_name="q")
    assert not matches(alt("cuda()"), host)
    assert matches(alt("cuda()*2"), host)
    reasons, _ = problems(alt("cuda()"), host)
    assert "QoS q requires at least 2 GPUs" in str(reasons[0])


def test_local_group_gpus_any_order() -> None:
    for gpus in (
        "[{model: small, count: 1, memory: 12G}, {model: big, count: 1, memory: 24G}]",
        "[{model: big, count: 1, memory: 24G}, {model: small, count: 1, memory: 12G}]",
    ):
        text = f"local:\n  - id: box\n    gpus: {gpus}\n"
        launcher = find_launcher("cuda(mem=10G) & cuda(mem=20G)", config=cfg(text))
        assert launcher.kind == "local" and launcher.group.id == "box"


RATIO = """
slurm:
  - id: c
    configuration: {gpu: {min_mem_ratio: %(group)s}}
    features: {F: {configuration: {gpu: {min_mem_ratio: %(feature)s}}}}
    partitions:
      p:
        configuration: {gpu: {count: 1, memory: 10G, min_mem_ratio: %(partition)s}}
        nodes: [{hosts: [n1], features: [F], configuration: {gpu: {min_mem_ratio: %(node)s}}}]
"""


def _ratio_cfg(**levels: str) -> LaunchersConfig:
    values = {"group": "null", "partition": "null", "node": "null", "feature": "null"}
    values.update(levels)
    text = RATIO % values
    text = text.replace("min_mem_ratio: null", "").replace("{gpu: {}}", "{}").replace(", }", "}")
    return cfg(text)


@pytest.mark.parametrize("level", ["group", "partition", "node", "feature"])
def test_min_mem_ratio_at_every_level(level: str) -> None:
    config = _ratio_cfg(**{level: "0.4"})
    # 0.4 * 10G is exactly 4G (rational arithmetic)
    assert find_launcher(cuda_gpu(mem=4 * G), config=config, default=None) is not None
    assert find_launcher(cuda_gpu(mem=4 * G - 1), config=config, default=None) is None
    assert find_launcher("cuda()", config=config, default=None) is not None


def test_min_mem_ratio_most_specific_level_wins_even_zero() -> None:
    config = _ratio_cfg(group="0.9", node="0")
    assert find_launcher("cuda(mem=1G)", config=config, default=None) is not None
    config = _ratio_cfg(group="0", feature="0.5")
    assert find_launcher("cuda(mem=4G)", config=config, default=None) is None


def test_layering_order() -> None:
    text = """
    slurm:
      - id: c
        features_regex: ["GPUM(?P<cuda_memory>\\\\d+G)"]
        configuration: {cpu: {cores: 1}, max_duration: 1h}
        features: {F: {configuration: {cpu: {cores: 4}, gpu: {count: 2, memory: 8G}}}}
        partitions:
          p:
            configuration: {cpu: {cores: 2}, max_duration: 2h}
            nodes: [{hosts: [n1], features: [F, GPUM16G], configuration: {cpu: {cores: 3}}}]
    """
    config = cfg(text)
    # feature configuration beats the node group (4 cores), the regex beats the feature (16G)
    assert find_launcher("cpu(cores=4) & cuda(mem=16G)*2", config=config, default=None)
    assert find_launcher("cpu(cores=5)", config=config, default=None) is None
    # partition max_duration overrides the group's
    assert find_launcher("duration=2h", config=config, default=None)
    assert find_launcher("duration=121m", config=config, default=None) is None


def test_features_regex_whole_name() -> None:
    text = """
    slurm:
      - id: c
        features_regex: ["GPU(?P<cuda_count>\\\\d+)", "GPUM(?P<cuda_memory>\\\\d+G)"]
        partitions:
          p: {nodes: [{hosts: [n1], features: [GPU2, GPUM24G, XGPU8]}]}
    """
    config = cfg(text)
    assert find_launcher("cuda(mem=24G)*2", config=config, default=None)
    # XGPU8 does not match GPU(\d+) as a whole: still 2 GPUs
    assert find_launcher("cuda()*3", config=config, default=None) is None


# ---------------------------------------------------------------- docs/design/matching.md §5 the search

TWO_GROUPS = """
local:
  - id: laptop
    weight: 1
    tags: [cheap]
    cpu: {cores: 4, memory: 16G}
slurm:
  - id: cluster
    weight: 5
    tags: [hpc]
    partitions:
      gpu: {configuration: {cpu: {cores: 32, memory: 256G}, gpu: {count: 4, memory: 24G}}}
  - id: other
    weight: 5
    partitions:
      gpu: {configuration: {gpu: {count: 8, memory: 80G}}}
"""


def test_positional_requirements_concatenate() -> None:
    config = cfg(TWO_GROUPS)
    a = find_launcher("cuda(mem=80G)", "cpu(cores=2)", config=config)
    b = find_launcher("cuda(mem=80G) | cpu(cores=2)", config=config)
    c = find_launcher(cuda_gpu(mem="80G") | cpu(cores=2), config=config)
    assert a == b == c
    assert a.alternative == 0 and a.group.id == "other"


def test_weight_then_file_order() -> None:
    config = cfg(TWO_GROUPS)
    assert find_launcher("cpu()", config=config).group.id == "cluster"
    assert find_launcher("cuda(mem=30G)", config=config).group.id == "other"


def test_tags_filter() -> None:
    config = cfg(TWO_GROUPS)
    assert find_launcher("cpu()", tags=["cheap"], config=config).group.id == "laptop"
    assert find_launcher("cpu()", tags="cheap,hpc", config=config).group.id == "cluster"
    assert find_launcher("cuda()", tags=["cheap"], config=config, default=None) is None


def test_alternatives_outer_loop() -> None:
    config = cfg("""
    local:
      - {id: laptop, weight: 1, cpu: {cores: 4}, gpus: [{model: m, count: 1, memory: 6G}]}
    slurm:
      - {id: big, weight: 5, partitions: {p: {configuration: {cpu: {cores: 64}, gpu: {count: 0}}}}}
    """)
    # alternative 0 only fits the low-weight laptop: it wins over alternative 1 on the cluster
    launcher = find_launcher("cuda() | cpu(cores=32)", config=config)
    assert launcher.group.id == "laptop" and launcher.alternative == 0
    launcher = find_launcher("cpu(cores=65) | cpu(cores=32) | cuda()", config=config)
    assert launcher.group.id == "big" and launcher.alternative == 1


def test_not_found_explains_every_group_and_default() -> None:
    config = cfg(TWO_GROUPS)
    with pytest.raises(LauncherNotFoundError) as err:
        find_launcher("cuda(mem=100G)", config=config)
    text = str(err.value)
    assert "laptop" in text and "cluster" in text and "other" in text
    assert "GPU memory 24 GiB < 100 GiB requested" in text
    assert "GPU memory 80 GiB < 100 GiB requested" in text
    assert isinstance(err.value, LaunchersError)
    assert find_launcher("cuda(mem=100G)", config=config, default=None) is None
    sentinel = object()
    assert find_launcher("cuda(mem=100G)", config=config, default=sentinel) is sentinel


def test_empty_configuration_uses_implicit_local() -> None:
    launcher = find_launcher("cpu()", config=LaunchersConfig())
    assert launcher.kind == "local" and launcher.group.implicit
    with pytest.raises(LauncherNotFoundError):
        find_launcher("cpu(cores=100000)", config=LaunchersConfig())


def test_empty_file_counts_as_no_configuration(tmp_path: object) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "launchers.yaml"
    path.write_text("slurm: []\nlocal: []\n")
    assert find_launcher("cpu()", config=path).kind == "local"


def test_bad_requirement_type_is_a_launchers_error() -> None:
    with pytest.raises(LaunchersError):
        find_launcher(42, config=LaunchersConfig())  # type: ignore[arg-type]


# ---------------------------------------------------------------- QoS, accounts, merging

QOS = """
slurm:
  - id: jz
    qos:
      qos_gpu-t3: {max_duration: 20h, priority: 1}
      qos_gpu-t4: {max_duration: 100h, min_gpu: 1}
      qos_long: {max_duration: 10d, partition_time_limit: true}
    partitions:
      gpu_p1:
        qos: [qos_gpu-t3, qos_gpu-t4]
        accounts: [acc1, acc2]
        configuration: {max_duration: 2d, gpu: {count: 4, memory: 32G}}
        nodes: [{hosts: [a1, a2], features: [v100]}]
      gpu_p2:
        qos: [qos_gpu-t3, qos_gpu-t4]
        accounts: [acc1]
        configuration: {max_duration: 2d, gpu: {count: 8, memory: 32G}}
        nodes: [{hosts: [b1], features: [v100, big]}]
      long:
        qos: [qos_long]
        configuration: {max_duration: 1d}
        nodes: [{hosts: [l1], features: [cpu]}]
"""


def test_qos_priority_duration_and_merge_by_qos_and_account() -> None:
    config = cfg(QOS)
    launcher = find_launcher("cuda()*2 & duration=10h", config=config)
    o = launcher.options
    assert (o.qos, o.account) == ("qos_gpu-t3", "acc1")
    assert o.partition == "gpu_p1,gpu_p2"  # both have qos_gpu-t3 / acc1
    assert o.constraint == "(v100)|(v100&big)"
    # 30h: QoS t3 allows only 20h (min of partition 2d and QoS), t4 fits
    launcher = find_launcher("cuda()*2 & duration=30h", config=config)
    assert launcher.options.qos == "qos_gpu-t4"
    # 3d exceeds the partitions' 2d although QoS t4 allows 100h
    assert find_launcher("cuda() & duration=3d", config=config, default=None) is None
    # partition_time_limit: the QoS limit replaces the partition's
    launcher = find_launcher("duration=5d", config=config)
    assert launcher.options.partition == "long" and launcher.options.qos == "qos_long"


def test_min_gpu_from_qos_rejects() -> None:
    config = cfg(QOS)
    # no GPU: t4 needs one; t3 is fine
    launcher = find_launcher("cuda()*0 | duration=10h" if False else "duration=10h", config=config)
    assert launcher.options.qos in ("qos_gpu-t3", "qos_long")
    assert find_launcher("duration=21h", config=config).options.partition == "long"


def test_explain_messages() -> None:
    config = cfg(QOS)
    text = explain_search("cuda() & duration=96h", config=config).explanation.text()
    assert "QoS qos_gpu-t3 allows 20h < 96h" in text
    assert "0 GPUs < 1 requested" in text


# ---------------------------------------------------------------- output options

CLUSTER = """
slurm:
  - id: c
    features_regex: ["GPU(?P<cuda_count>\\\\d+)", "GPUM(?P<cuda_memory>\\\\d+G)"]
    partitions:
      gpu:
        priority: 1
        configuration: {cpu: {cores: 16, memory: 64G}}
        nodes:
          - {hosts: [g1, g2], features: [GPU, GPU2, GPUM12G]}
          - {hosts: [g3], features: [GPU, GPU4, GPUM24G]}
      heavy: {disabled: true, nodes: [{hosts: [h1], features: [GPU8, GPUM80G]}]}
      cpu:
        configuration: {cpu: {cores: 64, memory: 512G}}
        nodes: [{hosts: [c1, c2], features: [CPU]}]
"""


def test_constraint_parentheses_and_order() -> None:
    assert args(CLUSTER, "cuda(mem=10G)*2") == [
        "--partition=gpu",
        "--constraint=(GPU&GPU2&GPUM12G)|(GPU&GPU4&GPUM24G)",
        "--gpus-per-node=2",
        "--cpus-per-task=1",
    ]
    assert args(CLUSTER, "cuda(mem=20G)")[:2] == [
        "--partition=gpu",
        "--constraint=GPU&GPU4&GPUM24G",
    ]


def test_disabled_partition_never_used_and_explained() -> None:
    config = cfg(CLUSTER)
    assert find_launcher("cuda(mem=80G)", config=config, default=None) is None
    text = explain_search("cuda(mem=80G)", config=config).explanation.text()
    assert "partition heavy is disabled" in text
    assert "GPU memory 24 GiB < 80 GiB requested" in text


def test_mem_rounded_up_to_mib() -> None:
    assert "--mem=4096M" in args(CLUSTER, "cpu(mem=4G)")
    assert "--mem=382M" in args(CLUSTER, "cpu(mem=400MB)")  # 381.47 MiB rounded up
    assert "--mem=2M" in args(CLUSTER, "cpu(mem=1.5M)")
    launcher = find_launcher(cpu(mem=M + 1), config=cfg(CLUSTER))
    assert launcher.options.mem == "2M"


def test_time_rounded_up_to_minutes() -> None:
    assert "--time=00:02:00" in args(CLUSTER, "duration=61s")
    assert "--time=01:30:00" in args(CLUSTER, "duration=1.5h")
    assert "--time=4-00:00:00" in args(CLUSTER, "duration=4 days")
    assert not any(a.startswith("--time") for a in args(CLUSTER, "cpu()"))


def test_cpus_and_gres_option() -> None:
    assert "--cpus-per-task=12" in args(CLUSTER, "cpu(cores=12)")
    text = CLUSTER.replace("  - id: c\n", "  - id: c\n    gpu_option: gres\n")
    out = args(text, "cuda()*2")
    assert "--gres=gpu:2" in out and not any(a.startswith("--gpus") for a in out)


def test_no_constraint_when_a_node_group_has_no_features() -> None:
    text = """
    slurm:
      - id: c
        partitions:
          a: {nodes: [{hosts: [a1], features: [X]}, {hosts: [a2], features: []}]}
    """
    out = args(text, "cpu()")
    assert out == ["--partition=a", "--cpus-per-task=1"]


def test_use_features_false_excludes_never_nodelist() -> None:
    text = """
    slurm:
      - id: c
        use_features: false
        partitions:
          gpu:
            nodes:
              - {hosts: [g1, g2], features: [A], configuration: {gpu: {count: 2, memory: 12G}}}
              - {hosts: [g3], features: [B], configuration: {gpu: {count: 4, memory: 24G}}}
    """
    out = args(text, "cuda(mem=20G)")
    assert out == ["--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=1", "--exclude=g1,g2"]
    assert not any("nodelist" in a for a in out)


def test_use_memory_constraint_false_asks_for_cores() -> None:
    text = """
    slurm:
      - id: c
        use_memory_constraint: false
        partitions:
          p: {configuration: {cpu: {cores: 8, memory: 64G, mem_per_cpu: 4G}}}
    """
    out = args(text, "cpu(mem=10G)")
    assert out == ["--partition=p", "--cpus-per-task=3"]
    assert args(text, "cpu(cores=4, mem=10G)") == ["--partition=p", "--cpus-per-task=4"]
    with pytest.raises(LauncherNotFoundError, match="needed for memory"):
        find_launcher("cpu(mem=36G)", config=cfg(text))  # 9 cores > 8


def test_cpu_per_gpu() -> None:
    text = """
    slurm:
      - id: c
        partitions:
          p: {configuration: {cpu: {cores: 40, cpu_per_gpu: 10}, gpu: {count: 4, memory: 32G}}}
    """
    assert "--cpus-per-task=20" in args(text, "cuda()*2")


# ---------------------------------------------------------------- soundness


def test_soundness_drops_other_partition() -> None:
    # partition b also has a node group that satisfies clause X but lacks memory
    text = """
    slurm:
      - id: c
        partitions:
          a: {priority: 2, nodes: [{hosts: [a1], features: [X], configuration: {cpu: {memory: 64G}}}]}
          b:
            nodes:
              - {hosts: [b1], features: [X, Y], configuration: {cpu: {memory: 64G}}}
              - {hosts: [b2], features: [X, Z], configuration: {cpu: {memory: 8G}}}
    """
    launcher = find_launcher("cpu(mem=32G)", config=cfg(text))
    assert launcher.options.partition == "a"
    assert launcher.options.constraint == "X"
    assert any("dropped partition b" in line for line in launcher.explanation)


def test_soundness_drops_clause_not_best() -> None:
    text = """
    slurm:
      - id: c
        partitions:
          a:
            priority: 2
            nodes:
              - {hosts: [a1], features: [X, Y], configuration: {cpu: {memory: 64G}}}
              - {hosts: [a2], features: [Z, W], configuration: {cpu: {memory: 8G}}}
          b: {nodes: [{hosts: [b1], features: [Z], configuration: {cpu: {memory: 64G}}}]}
    """
    launcher = find_launcher("cpu(mem=32G)", config=cfg(text))
    # clause Z (from b) would admit a2 in the best partition: clause dropped, and with it b
    assert launcher.options.partition == "a"
    assert launcher.options.constraint == "X&Y"
    assert any("dropped constraint clause" in line for line in launcher.explanation)


def test_soundness_excludes_when_best_clause_admits_bad_node() -> None:
    text = """
    slurm:
      - id: c
        partitions:
          a:
            nodes:
              - {hosts: [a1], features: [X], configuration: {cpu: {memory: 64G}}}
              - {hosts: [a2, a3], features: [X, Y], configuration: {cpu: {memory: 8G}}}
    """
    launcher = find_launcher("cpu(mem=32G)", config=cfg(text))
    assert launcher.options.constraint == "X"
    assert launcher.options.exclude == "a2,a3"
    no_hosts = text.replace("hosts: [a1], ", "").replace("hosts: [a2, a3], ", "")
    launcher = find_launcher("cpu(mem=32G)", config=cfg(no_hosts))
    assert launcher.options.exclude is None
    assert any("WARNING" in line and "cannot be excluded" in line for line in launcher.explanation)


def test_every_admitted_node_matches_in_merged_result() -> None:
    config = cfg(CLUSTER)
    launcher = find_launcher("cuda(mem=10G)*2", config=config)
    assert launcher.options.partition == "gpu"
    # the CPU partition is never listed for a GPU job
    assert "cpu" not in launcher.options.partition.split(",")


# ---------------------------------------------------------------- launcher values


def test_options_names_and_sbatch_args() -> None:
    from launchers.slurm.options import SlurmOptions

    names = [f.name for f in attrs.fields(SlurmOptions)]
    assert names == [
        "partition", "constraint", "gpus_per_node", "gres", "cpus_per_task", "mem", "time",
        "qos", "account", "exclude", "nodes",
    ]  # fmt: skip
    launcher = find_launcher("cpu(cores=2)", config=cfg(CLUSTER))
    assert launcher.options.nodes is None and launcher.options.gres is None
    assert launcher.sbatch_args() == launcher.options.sbatch_args()


def test_launchers_are_immutable_and_config_changes_only_given() -> None:
    from launchers import SlurmLauncher

    launcher = find_launcher("cuda(mem=10G)*2 & duration=1h", config=cfg(CLUSTER))
    assert isinstance(launcher, SlurmLauncher) and launcher.kind == "slurm"
    before = launcher.sbatch_args()
    changed = launcher.config(time="02:00:00", qos="qos_x")
    assert launcher.sbatch_args() == before
    assert changed.options.time == "02:00:00" and changed.options.qos == "qos_x"
    assert changed.options.partition == launcher.options.partition
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        launcher.options = None  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="did you mean 'partition'"):
        launcher.config(partiton="x")
    extra = launcher.config(sbatch_options={"exclusive": True, "mail-type": "END"})
    assert extra.sbatch_args()[-2:] == ["--exclusive", "--mail-type=END"]
    assert launcher.config(mem="8G").options.mem == "8G"


def test_unicore_and_firecrest_launchers() -> None:
    text = """
    unicore:
      - id: juwels
        site: {url: "https://example.org:9112/JUWELS/rest/core"}
        partitions:
          booster: {configuration: {gpu: {count: 4, memory: 40G}, max_duration: 1d}}
          develbooster: {configuration: {gpu: {count: 4, memory: 40G}, max_duration: 2h}}
    firecrest:
      - id: daint
        weight: 1
        site: {api_url: "https://f.example.org", machine: daint, token_url: "https://a.example.org/token"}
        partitions:
          normal: {configuration: {gpu: {count: 1, memory: 16G}}}
          debug: {configuration: {gpu: {count: 1, memory: 16G}}}
    """
    from launchers import FirecrestLauncher, UnicoreLauncher

    config = cfg(text)
    u = find_launcher("cuda(mem=32G)*2 & duration=1h", config=config)
    assert isinstance(u, UnicoreLauncher) and u.kind == "unicore"
    assert u.options.partition == "booster"  # one queue only
    f = find_launcher("cuda(mem=16G)", config=config)
    assert isinstance(f, FirecrestLauncher) and f.kind == "firecrest"
    assert f.options.partition == "normal,debug"


def test_direct_launcher_value() -> None:
    from launchers import DirectLauncher

    launcher = find_launcher("cpu() | cuda()", config=cfg(LOCAL_GPUS))
    assert isinstance(launcher, DirectLauncher)
    assert launcher.kind == "local" and launcher.alternative == 0
    assert launcher.requirement == alt("cpu()")


def test_requirement_values_and_strings_agree() -> None:
    config = cfg(QOS)
    for text, value in [
        ("cuda()*2 & duration=10h", cuda_gpu() * 2 & duration("10h")),
        ("duration=21h", duration(21 * 3600)),
        ("cpu(mem=1G) | cuda()", cpu(mem="1G") | cuda_gpu()),
    ]:
        assert find_launcher(text, config=config) == find_launcher(value, config=config)


# ---------------------------------------------------------------- speed (10,000 nodes, 100 partitions)


def _big_config() -> LaunchersConfig:
    import re

    from launchers.config.model import (
        CPUConfig,
        GPUConfig,
        NodeGroup,
        Partition,
        ResourceConfig,
        SlurmGroup,
    )

    kinds = [
        (("CPU", "XEON"), 40, 192 * G, 0),
        (("CPU", "EPYC", "BIGMEM"), 128, 1000 * G, 0),
        (("GPU", "GPU4", "GPUM32G", "V100"), 40, 384 * G, 4),
        (("GPU", "GPU8", "GPUM80G", "A100"), 64, 512 * G, 8),
        (("GPU", "GPU2", "GPUM48G"), 32, 256 * G, 2),
        (("GPU", "MIG"), 64, 512 * G, 8),
        ((), 24, 96 * G, 0),
    ]
    partitions = []
    n = 0
    for p in range(100):
        ngs = []
        for k, (feats, cores, mem, gpus) in enumerate(kinds):
            hosts = tuple(f"n{p:03d}-{k}-{i:02d}" for i in range(15 if k < 2 else 14))
            n += len(hosts)
            conf = ResourceConfig(cpu=CPUConfig(cores=cores, memory=mem), gpu=GPUConfig(count=gpus))
            ngs.append(NodeGroup(hosts=hosts, features=feats, configuration=conf))
        partitions.append(Partition(name=f"p{p:03d}", nodes=tuple(ngs)))
    assert n >= 10_000
    group = SlurmGroup(
        id="big",
        partitions=tuple(partitions),
        features_regex=(
            re.compile(r"GPU(?P<cuda_count>\d+)"),
            re.compile(r"GPUM(?P<cuda_memory>\d+G)"),
        ),
    )
    return LaunchersConfig(groups=(group,))


def test_ten_thousand_nodes() -> None:
    """Correct answers on a large configuration (its speed targets: benchmarks/finder.py)."""
    config = _big_config()
    req = parse("cuda(mem=24G)*2 & duration=2h")
    first = find_launcher(req, config=config)  # builds the candidate index once
    assert (
        first.options.constraint
        == "(GPU&GPU4&GPUM32G&V100)|(GPU&GPU8&GPUM80G&A100)|(GPU&GPU2&GPUM48G)"
    )
    for spec in ("cuda(mem=24G)*2 & duration=2h", req):
        assert find_launcher(spec, config=config) == first
    for i in range(5):
        assert find_launcher(cpu(cores=2, mem=f"{i + 1}G"), config=config).options.mem is not None


def test_several_configurations_in_one_process() -> None:
    a = cfg("local:\n  - {id: a, cpu: {cores: 2}}\n")
    b = cfg("local:\n  - {id: b, cpu: {cores: 64}}\n")
    assert find_launcher("cpu(cores=2)", config=a).group.id == "a"
    assert find_launcher("cpu(cores=2)", config=b).group.id == "b"
    assert find_launcher("cpu(cores=8)", config=a, default=None) is None
    assert find_launcher("cpu(cores=8)", config=b).group.id == "b"


def test_distribution_over_alternatives() -> None:
    config = cfg(TWO_GROUPS)
    x = cpu(cores=2)
    value = x & (cuda_gpu(mem="80G") | duration("1h"))
    assert [str(a) for a in value.requirements] == [
        str(x & cuda_gpu(mem="80G")),
        str(x & duration("1h")),
    ]
    assert find_launcher(value, config=config) == find_launcher(
        "cpu(cores=2) & cuda(mem=80G) | cpu(cores=2) & duration=1h", config=config
    )
    # the operands are unchanged
    assert x == cpu(cores=2)


def test_partition_duration_reason() -> None:
    text = explain_search(
        "duration=25h", config=cfg(QOS.replace("qos: [qos_long]", "qos: []"))
    ).explanation.text()
    assert "partition long, node group 0 (cpu): partition allows 24h < 25h requested" in text


def test_disabled_local_group_and_empty_search() -> None:
    config = cfg("local:\n  - {id: down, disabled: true}\n")
    with pytest.raises(LauncherNotFoundError, match="group is disabled"):
        find_launcher("cpu()", config=config)


def test_not_found_error_has_its_message_in_args() -> None:
    """``LauncherNotFoundError`` builds its explanation when read, but ``args`` is as for any
    exception: ``(message,)``."""
    cfg = load_config_text("local:\n  - id: box\n    cpu: {cores: 2}\n")
    with pytest.raises(LauncherNotFoundError) as e:
        find_launcher("cpu(cores=64)", config=cfg)
    assert e.value.args == (str(e.value),) and "no launcher can run" in e.value.args[0]


# ---------------------------------------------------------------- accelerator kinds

KINDS = """
local:
  - id: mac
    cpu: {cores: 10, memory: 32G}
    gpus: [{model: Apple M2 Pro, kind: mps, memory: 32G}]
  - id: nvidia
    cpu: {cores: 8, memory: 64G}
    gpus: [{model: A6000, count: 2, memory: 48G}]
slurm:
  - id: amd
    partitions:
      mi:
        configuration: {cpu: {cores: 64, memory: 512G}, gpu: {count: 8, kind: other, memory: 64G}}
"""


@pytest.mark.parametrize(
    ("spec", "group"),
    [
        ("cuda(mem=24G)", "nvidia"),
        ("gpu(mem=24G)", "mac"),  # any kind: the first group that has one (file order)
        ("gpu(mem=40G)", "nvidia"),
        ("gpu(mem=60G)", "amd"),
        ("gpu()*4", "amd"),
        ("mps(mem=8G) & cpu(mem=20G)", "mac"),
        ("mps(mem=16G) & cpu(mem=20G)", None),  # the Apple GPU takes the machine's memory
        ("mps()*2", None),
        ("cuda()*3", None),
        ("cuda(mem=60G)", None),  # the AMD GPUs are not CUDA ones
        ("mps(mem=4G) | cuda(mem=4G)", "mac"),
    ],
)
def test_gpu_kinds(spec: str, group: str | None) -> None:
    found = find_launcher(spec, config=cfg(KINDS), default=None)
    assert (found.group.id if found is not None else None) == group
    if group == "amd":
        assert found.options.gpus_per_node == len(parse(spec).requirements[0].cuda_gpus)


def test_gpu_kinds_explained() -> None:
    with pytest.raises(LauncherNotFoundError) as info:
        find_launcher("mps(mem=16G) & cpu(mem=20G)", config=cfg(KINDS))
    text = str(info.value)
    assert (
        "local group mac: memory 32 GiB < 36 GiB requested: 20 GiB for the CPU and 16 GiB for "
        "the Apple GPU, which shares the machine's memory"
    ) in text
    assert "local group nvidia: CUDA GPUs here, mps() requested" in text
    assert "partition mi: other GPUs here, mps() requested" in text


def test_mixed_kinds_on_one_host_are_assigned() -> None:
    host = Host(gpus=(GPUSlot(memory=24 * G), GPUSlot(memory=16 * G, kind="other")))
    assert matches(alt("cuda(mem=20G) & gpu(mem=16G)"), host)
    assert matches(alt("gpu(mem=16G) & cuda()"), host)
    assert not matches(alt("cuda()*2"), host)
    assert not matches(alt("cuda(mem=20G) & gpu(mem=20G)"), host)
    assert problems(alt("cuda()*2"), host, first_only=False)[0][0].code == "gpu_assign"
    with pytest.raises(ConfigurationError, match=r"local\[0\].gpus: an Apple GPU \(kind: mps\)"):
        cfg("local:\n  - gpus: [{kind: mps, memory: 8G}, {kind: cuda, memory: 8G}]\n")
    with pytest.raises(ConfigurationError, match="kind"):
        cfg("local:\n  - gpus: [{kind: rocm, memory: 8G}]\n")


def test_requests_of_different_kinds_are_not_one_memo_entry() -> None:
    config = cfg(KINDS)
    assert find_launcher("cuda(mem=8G)", config=config).group.id == "nvidia"
    assert find_launcher("mps(mem=8G)", config=config).group.id == "mac"
    assert find_launcher("gpu(mem=8G)", config=config).group.id == "mac"
    assert find_launcher("cuda(mem=8G)", config=config).group.id == "nvidia"
