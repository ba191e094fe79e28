"""``launchers find``: exit statuses, ``--json``, ``--explain``; determinism across hash seeds."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from launchers.cli.main import main

CONFIG = textwrap.dedent(
    """
    slurm:
      - id: jz
        features_regex: ["GPU(?P<cuda_count>\\\\d+)", "GPUM(?P<cuda_memory>\\\\d+G)"]
        qos:
          qos_gpu-t3: {max_duration: 20h, priority: 1}
          qos_gpu-t4: {max_duration: 100h}
        partitions:
          gpu:
            qos: [qos_gpu-t3, qos_gpu-t4]
            accounts: [abc, xyz]
            nodes:
              - {hosts: [g1, g2], features: [GPU, GPU2, GPUM12G]}
              - {hosts: [g3], features: [GPU, GPU4, GPUM24G]}
          gpu2:
            qos: [qos_gpu-t3]
            accounts: [abc]
            nodes:
              - {hosts: [h1], features: [GPU, GPU4, GPUM32G]}
              - {hosts: [h2], features: [GPU, GPU8, GPUM12G]}
          heavy: {disabled: true}
    """
)


@pytest.fixture()
def config(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "launchers.yaml"
    path.write_text(CONFIG)
    return str(path)


def test_found_json(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["find", "cuda(mem=20G) & duration=2h", "--config", config, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["kind", "group", "alternative", "options", "sbatch_args"]
    assert data["kind"] == "slurm" and data["group"] == "jz" and data["alternative"] == 0
    assert data["options"]["qos"] == "qos_gpu-t3" and data["options"]["account"] == "abc"
    assert data["options"]["nodes"] is None
    assert data["sbatch_args"] == [
        "--partition=gpu,gpu2",
        "--constraint=(GPU&GPU4&GPUM24G)|(GPU&GPU4&GPUM32G)",
        "--gpus-per-node=1",
        "--cpus-per-task=1",
        "--time=02:00:00",
        "--qos=qos_gpu-t3",
        "--account=abc",
    ]


def test_two_specs_and_alternative_index(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["find", "cuda(mem=100G)", "cuda()", "--config", config, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["alternative"] == 1


def test_not_found_exit_1_explains_on_stderr(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["find", "cuda(mem=24G)*2 & duration=101h", "--config", config]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "QoS qos_gpu-t3 allows 20h < 101h" in captured.err
    assert "QoS qos_gpu-t4 allows 100h < 101h" in captured.err
    assert "partition heavy is disabled" in captured.err
    assert "GPU memory 12 GiB < 24 GiB requested" in main_err(config, "cuda(mem=24G)*9", capsys)


def main_err(config: str, spec: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["find", spec, "--config", config]) == 1
    return capsys.readouterr().err


def test_explain_on_success(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["find", "cuda(mem=20G)", "--config", config, "--explain"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("slurm jz (alternative 0): --partition=gpu,gpu2")
    assert "chosen for alternative 0" in out
    assert "GPU memory 12 GiB < 20 GiB requested" in out
    assert "partition heavy is disabled" in out


def test_syntax_and_config_errors_exit_2(
    config: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["find", "cuda(mem=24G", "--config", config]) == 2
    err = capsys.readouterr().err
    assert err.startswith("launchers: ") and "Traceback" not in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("slurm:\n  - id: x\n    partitons: {}\n")
    assert main(["find", "cpu()", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:3" in err and "Traceback" not in err


def test_tags_option(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["find", "cpu()", "--config", config, "--tags", "nothing,else"]) == 1
    assert "tags" in capsys.readouterr().err


def test_deterministic_across_hash_seeds(config: str) -> None:
    script = (
        "import json, sys\n"
        "from launchers import find_launcher\n"
        "out = [find_launcher(s, config=sys.argv[1]).sbatch_args() for s in "
        "('cuda()', 'cuda(mem=20G)', 'cuda()*2 & duration=30h', 'cpu(mem=3G)')]\n"
        "print(json.dumps(out))\n"
    )
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run(
            [sys.executable, "-c", script, config],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(res.stdout)
    assert len(outputs) == 1, outputs


def test_local_json_group_index_and_explain_on_stderr(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "launchers.yaml"
    path.write_text("local:\n  - cpu: {cores: 4}\n")
    assert main(["find", "cpu(cores=2)", "--config", str(path), "--json", "--explain"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data == {"kind": "local", "group": 0, "alternative": 0, "options": {}, "sbatch_args": []}
    assert "chosen for alternative 0" in captured.err
