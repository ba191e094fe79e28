"""The finder's sbatch options are accepted by the real Slurm controller (``sbatch --test-only``)
and place the job on a node that matches."""

from __future__ import annotations

import re
import subprocess
import textwrap

import pytest

from launchers import find_launcher
from launchers.config.loader import load_config_text

SANDBOX = textwrap.dedent(
    """
    slurm:
      - id: sandbox
        use_features: %s
        features_regex: ["GPU(?P<cuda_count>\\\\d+)", "GPUM(?P<cuda_memory>\\\\d+G)"]
        partitions:
          debug:
            priority: 1
            configuration: {max_duration: 1h, cpu: {cores: 8}}
            nodes:
              - {hosts: [cpu01], features: [CPU, XEON], configuration: {cpu: {memory: 16000M}}}
              - {hosts: [gpu01], features: [GPU, GPU2, GPUM48G, A6000], configuration: {cpu: {memory: 32000M}}}
              - {hosts: [gpu02], features: [GPU, GPU4, GPUM24G, RTX3090], configuration: {cpu: {memory: 32000M}}}
          gpu:
            configuration: {max_duration: 1d, cpu: {cores: 8, memory: 32000M}}
            nodes:
              - {hosts: [gpu01], features: [GPU, GPU2, GPUM48G, A6000]}
              - {hosts: [gpu02], features: [GPU, GPU4, GPUM24G, RTX3090]}
    """
)


def _test_only(args: list[str], env: dict[str, str]) -> str:
    res = subprocess.run(
        ["sbatch", "--test-only", *args, "--wrap", "true"],
        env=env, capture_output=True, text=True, timeout=60, cwd=env.get("CLUSTER_JOBS_DIR", "/tmp"),
    )  # fmt: skip
    assert res.returncode == 0, (args, res.stderr)
    m = re.search(r"on nodes (\S+)", res.stderr + res.stdout)
    assert m, res.stderr
    return m.group(1)


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("use_features", "spec", "nodes"),
    [
        ("true", "cuda(mem=20G)*2 & duration=30m", {"gpu01", "gpu02"}),
        ("true", "cuda(mem=40G) & cpu(mem=20G, cores=2) & duration=2h", {"gpu01"}),
        ("true", "cuda()*3", {"gpu02"}),
        ("false", "cuda()*3 & duration=10m", {"gpu02"}),
        ("false", "cpu(mem=20G)", {"gpu01", "gpu02"}),
    ],
)
def test_sbatch_accepts_finder_options(
    slurm_env: dict[str, str], use_features: str, spec: str, nodes: set[str]
) -> None:
    launcher = find_launcher(spec, config=load_config_text(SANDBOX % use_features, "sandbox.yaml"))
    args = launcher.sbatch_args()
    if use_features == "true" and "cuda(mem=20G)*2" in spec:
        assert "--constraint=(GPU&GPU2&GPUM48G&A6000)|(GPU&GPU4&GPUM24G&RTX3090)" in args
    if use_features == "false":
        assert any(a.startswith("--exclude=") for a in args) and not any(
            "nodelist" in a for a in args
        )
    assert _test_only(args, slurm_env) in nodes


@pytest.mark.slurm
def test_query_slurm_searches_the_live_partitions(slurm_env: dict[str, str]) -> None:
    config = load_config_text(
        textwrap.dedent(
            """
            slurm:
              - id: live
                query_slurm: true
                features_regex: ["GPU(?P<cuda_count>\\\\d+)", "GPUM(?P<cuda_memory>\\\\d+G)"]
            """
        ),
        "live.yaml",
    )
    # debug's MaxTime is 1h: a 2h job goes to partition gpu, on the 48G card of gpu01
    launcher = find_launcher("cuda(mem=40G) & duration=2h", config=config)
    assert launcher.options.partition == "gpu"
    assert "GPUM24G" not in (launcher.options.constraint or "")
    assert _test_only(launcher.sbatch_args(), slurm_env) == "gpu01"
