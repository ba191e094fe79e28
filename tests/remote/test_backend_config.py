"""The Compute Backend Config (docs/design/sites.md §1): loading, every rule, the docs/design/sites.md §1.5 Mantik defects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchers.config.loader import load_config_text
from launchers.config.model import FirecrestSite, UnicoreGroup, UnicoreSite
from launchers.errors import ConfigurationError
from launchers.remote.backend_config import load_backend_config
from launchers.remote.script import sbatch_pairs

URL = "https://zam.example:9112/JUWELS/rest/core"
GOOD = f"""\
UnicoreApiUrl: {URL}
Environment:
  Modules: [Stages/2024, CUDA]
  Variables: {{A: 1, B: text}}
  PreRunCommandOnComputeNode: [echo one, echo two]
Resources:
  Queue: booster
  Runtime: 2h
  Nodes: 1
  GPUsPerNode: 4
  MemoryPerNode: 16G
Exclude: ["*.csv", "data/"]
"""


def write(tmp_path: Path, text: str, name: str = "backend.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def errors_of(path: Path, **kw: object) -> list[str]:
    with pytest.raises(ConfigurationError) as info:
        load_backend_config(path, **kw)  # type: ignore[arg-type]
    return str(info.value).splitlines()


def one_error(tmp_path: Path, text: str, name: str = "backend.yaml") -> str:
    lines = errors_of(write(tmp_path, text, name))
    assert len(lines) == 1, lines
    return lines[0]


def test_good_yaml(tmp_path: Path) -> None:
    cfg = load_backend_config(write(tmp_path, GOOD), environ={})
    assert cfg.site == UnicoreSite(url=URL)
    assert cfg.site_kind == "unicore"
    assert cfg.environment.modules == ("Stages/2024", "CUDA")
    assert cfg.environment.variables == (("A", "1"), ("B", "text"))
    assert [s.label for s in cfg.environment.pre_compute] == [
        "PreRunCommandOnComputeNode[0]",
        "PreRunCommandOnComputeNode[1]",
    ]
    assert cfg.resources.unicore() == {
        "Queue": "booster",
        "Runtime": "7200",
        "Nodes": 1,
        "GPUsPerNode": 4,
        "MemoryPerNode": "16384M",
    }
    assert cfg.exclude.is_excluded("x/a.csv")
    assert cfg.account is None


def test_json_equals_yaml(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(GOOD)
    a = load_backend_config(write(tmp_path, GOOD), environ={})
    b = load_backend_config(write(tmp_path, json.dumps(data, indent=1), "backend.json"), environ={})
    assert (a.site, a.environment.variables, a.resources) == (
        b.site,
        b.environment.variables,
        b.resources,
    )


def test_firecrest_site(tmp_path: Path) -> None:
    text = """\
Firecrest: {ApiUrl: "https://api.example/", TokenUrl: "https://auth.example/token", Machine: daint}
Resources: {Queue: normal, Runtime: 90m, CPUsPerNode: 8, MemoryPerNode: 1.5G, GPUsPerNode: 1}
"""
    cfg = load_backend_config(write(tmp_path, text), environ={})
    assert cfg.site == FirecrestSite(
        api_url="https://api.example", token_url="https://auth.example/token", machine="daint"
    )
    assert dict(sbatch_pairs(cfg.resources, "acct")) == {
        "partition": "normal",
        "time": "0-01:30:00",
        "ntasks-per-node": "1",
        "cpus-per-task": "8",
        "gpus-per-node": "1",
        "mem": "1536M",
        "account": "acct",
    }


def test_suffix(tmp_path: Path) -> None:
    line = one_error(tmp_path, GOOD, "backend.txt")
    assert ".yaml, .yml or .json" in line and "backend.txt" in line


def test_spec_example_format(tmp_path: Path) -> None:
    text = (
        "UnicoreApiUrl: "
        + URL
        + "\n"
        + "\n" * 5
        + "Resources:\n  Queue: batch\n  MemoryPerNode: 16\n"
    )
    assert one_error(tmp_path, text) == (
        f"{tmp_path / 'backend.yaml'}:9:18: Resources.MemoryPerNode: '16' has no unit; "
        "write a size such as 16G (binary, as in Slurm)"
    )


def test_all_problems_in_file_order(tmp_path: Path) -> None:
    text = f"""\
UnicoreApiUrl: {URL}
Environment:
  Variables: {{B: yes}}
Resources:
  queue: batch
  Runtime: 45
  Nodes: "2"
Exclude: [""]
"""
    lines = errors_of(write(tmp_path, text))
    keys = [line.split(": ")[1] for line in lines]
    assert keys == [
        "Environment.Variables.B",
        "Resources.queue",
        "Resources.Queue",
        "Resources.Runtime",
        "Resources.Nodes",
        "Exclude[0]",
    ]
    assert "did you mean 'Queue'" in lines[1]
    positions = [tuple(int(x) for x in line.split(":")[1:3]) for line in lines]
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        (
            "UnicoreApiUrl: {u}\nResources: {{Queue: q}}\nunicoreApiUrl: x\n",
            "unicoreApiUrl",
            "did you mean 'UnicoreApiUrl'",
        ),
        (
            "UnicoreApiUrl: {u}\nFirecrest: {{ApiUrl: 'https://a', TokenUrl: 'https://b', Machine: m}}\nResources: {{Queue: q}}\n",
            "Firecrest",
            "both set",
        ),
        ("Resources: {{Queue: q}}\n", "", "--group ID"),
        ("UnicoreApiUrl: 12\nResources: {{Queue: q}}\n", "UnicoreApiUrl", "expected a URL"),
        (
            "Firecrest: {{ApiUrl: 'https://a', Machine: m}}\nResources: {{Queue: q}}\n",
            "Firecrest.TokenUrl",
            "required",
        ),
        (
            "Firecrest: {{ApiUrl: 'https://a', TokenUrl: 'https://b', Machine: m, machine: n}}\nResources: {{Queue: q}}\n",
            "Firecrest.machine",
            "did you mean 'Machine'",
        ),
        ("UnicoreApiUrl: {u}\n", "Resources", "required"),
        (
            "UnicoreApiUrl: {u}\nResources: {{Queue: q}}\nExclude: '*.csv'\n",
            "Exclude",
            "list of patterns",
        ),
        ("UnicoreApiUrl: {u}\nResources: {{Queue: q}}\nExclude: [3]\n", "Exclude[0]", "string"),
    ],
)
def test_top_level_rules(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    line = one_error(tmp_path, text.format(u=URL))
    assert (f": {key}: " in line) if key else True
    assert fragment in line


@pytest.mark.parametrize(
    ("resources", "key", "fragment"),
    [
        (
            "{Queue: q, Runtime: 45}",
            "Runtime",
            "a duration needs a unit (45s, 45m",
        ),  # Mantik: value 4, unit 5
        ("{Queue: q, Runtime: '45'}", "Runtime", "a duration needs a unit"),
        ("{Queue: q, Runtime: 1h30m}", "Runtime", "such as 90m"),
        ("{Queue: q, Runtime: 3 fortnights}", "Runtime", "unknown duration unit"),
        ("{Queue: q, Nodes: '2'}", "Nodes", "write 2 without quotes"),
        ("{Queue: q, Nodes: 0}", "Nodes", "≥ 1"),
        ("{Queue: q, Nodes: 1.5}", "Nodes", "integer"),
        ("{Queue: q, GPUsPerNode: -1}", "GPUsPerNode", "≥ 0"),
        ("{Queue: q, CPUsPerNode: {a: 1}}", "CPUsPerNode", "not a mapping"),  # Mantik: TypeError
        ("{Queue: q, TotalCPUs: true}", "TotalCPUs", "boolean"),
        ("{Queue: q, MemoryPerNode: 16}", "MemoryPerNode", "'16' has no unit"),
        ("{Queue: q, MemoryPerNode: 16Q}", "MemoryPerNode", "unknown size unit"),
        ("{Queue: q, MemoryPerNode: 4G, Memory: 4G}", "Memory", "only one"),
        ("{Queue: 3}", "Queue", "expected a string"),
        ("{Queue: ''}", "Queue", "empty"),
        ("{Runtime: 1h}", "Queue", "required"),
        ("{Queue: q, QoS: [a]}", "QoS", "a list"),
        ("{Queue: q, GPUS: 4}", "GPUS", "did you mean 'GPUsPerNode'"),
        ("[Queue]", "Resources", "mapping"),
    ],
)
def test_resource_rules(tmp_path: Path, resources: str, key: str, fragment: str) -> None:
    line = one_error(tmp_path, f"UnicoreApiUrl: {URL}\nResources: {resources}\n")
    path = key if key == "Resources" else f"Resources.{key}"
    assert f": {path}: " in line
    assert fragment in line


def test_memory_alias_and_zero_gpus(tmp_path: Path) -> None:
    cfg = load_backend_config(
        write(
            tmp_path,
            f"UnicoreApiUrl: {URL}\nResources: {{Queue: q, Memory: 1000MB, GPUsPerNode: 0}}\n",
        ),
        environ={},
    )
    assert cfg.resources.unicore() == {"Queue": "q", "GPUsPerNode": 0, "MemoryPerNode": "954M"}


def test_total_and_per_node_cpus(tmp_path: Path) -> None:
    res = "Resources: {Queue: q, TotalCPUs: 8, CPUsPerNode: 4}\n"
    line = one_error(
        tmp_path, "Firecrest: {ApiUrl: 'https://a', TokenUrl: 'https://b', Machine: m}\n" + res
    )
    assert ": Resources.TotalCPUs: " in line and "multiply" in line


@pytest.mark.parametrize(
    ("environment", "key", "fragment"),
    [
        ("{Apptainer: {Path: a.sif}, Python: /venv}", "Environment.Python", "cannot both"),
        ("{Apptainer: {Path: img.sif, Type: remote}}", "Environment.Apptainer.Path", "absolute"),
        (
            "{Apptainer: {Path: img.sif, Type: docker}}",
            "Environment.Apptainer.Type",
            "local or remote",
        ),
        ("{Apptainer: {Type: local}}", "Environment.Apptainer", "Path"),
        (
            '{Apptainer: {Path: a.sif, Options: ["-B \'x"]}}',
            "Environment.Apptainer.Options[0]",
            "split",
        ),
        (
            "{Apptainer: {Path: a.sif, Option: -B}}",
            "Environment.Apptainer.Option",
            "did you mean 'Options'",
        ),
        ("{Python: {Pth: /v}}", "Environment.Python.Pth", "did you mean 'Path'"),
        ("{Python: 3}", "Environment.Python", "string"),
        ("{Modules: CUDA}", "Environment.Modules", "write [CUDA]"),
        ("{Modules: [CUDA, 3]}", "Environment.Modules[1]", "string"),
        ("{Variables: {X: on}}", "Environment.Variables.X", "in quotes"),
        ("{Variables: {X: null}}", "Environment.Variables.X", "in quotes"),
        ("{Variables: {X: [1]}}", "Environment.Variables.X", "a string or a number"),
        ("{Variables: {1X: a}}", "Environment.Variables.1X", "not a variable name"),
        ("{Variables: [X]}", "Environment.Variables", "mapping"),
        (
            "{PreRunCommandOnComputeNode: [echo, 1]}",
            "Environment.PreRunCommandOnComputeNode[1]",
            "write it in quotes: \"1\" (Mantik 0.5 converts it with str() and runs the command '1')",
        ),
        (
            "{PostRunCommandOnComputeNode: {a: b}}",
            "Environment.PostRunCommandOnComputeNode",
            "string or a list",
        ),
        ("{PreRunCommandOnComputeNode: ''}", "Environment.PreRunCommandOnComputeNode", "empty"),
        ("{modules: [a]}", "Environment.modules", "did you mean 'Modules'"),
    ],
)
def test_environment_rules(tmp_path: Path, environment: str, key: str, fragment: str) -> None:
    line = one_error(
        tmp_path, f"UnicoreApiUrl: {URL}\nEnvironment: {environment}\nResources: {{Queue: q}}\n"
    )
    assert f": {key}: " in line
    assert fragment in line


def test_environment_values(tmp_path: Path) -> None:
    text = f"""\
UnicoreApiUrl: {URL}
Environment:
  Apptainer: {{Path: /p/img.sif, Type: REMOTE, Options: ["-B /data:/data", --nv]}}
  Variables: {{N: 3, F: 0.5, S: "$HOME/x"}}
  PreRunCommandOnLoginNode: echo login
Resources: {{Queue: q}}
"""
    env = load_backend_config(write(tmp_path, text), environ={}).environment
    assert env.apptainer is not None
    assert (env.apptainer.type, env.apptainer.options) == ("remote", ("-B", "/data:/data", "--nv"))
    assert env.variables == (("N", "3"), ("F", "0.5"), ("S", "$HOME/x"))
    assert [s.label for s in env.pre_login] == ["PreRunCommandOnLoginNode"]


def test_login_commands_refused_for_firecrest(tmp_path: Path) -> None:
    text = (
        "Firecrest: {ApiUrl: 'https://a', TokenUrl: 'https://b', Machine: m}\n"
        "Environment: {PostRunCommandOnLoginNode: [echo]}\nResources: {Queue: q}\n"
    )
    line = one_error(tmp_path, text)
    assert (
        ": Environment.PostRunCommandOnLoginNode: " in line
        and "PostRunCommandOnComputeNode" in line
    )


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("UnicoreApiUrl: a\nUnicoreApiUrl: b\n", "backend.yaml"),
        (
            '{"UnicoreApiUrl": "https://a/b", "Resources": {"Queue": "x", "Queue": "y"}}',
            "backend.json",
        ),
        ('{"UnicoreApiUrl": "https://a/b",\t"UnicoreApiUrl": "https://c"}', "backend.json"),
    ],
)
def test_duplicate_keys(tmp_path: Path, text: str, name: str) -> None:
    assert "duplicate key" in one_error(tmp_path, text, name)


def test_json_syntax_error_has_position(tmp_path: Path) -> None:
    line = one_error(tmp_path, '{"UnicoreApiUrl": "https://a/b",\n  "Resources": }', "backend.json")
    assert line.startswith(f"{tmp_path / 'backend.json'}:2:")


def test_secrets_not_echoed(tmp_path: Path) -> None:
    text = "UnicoreApiUrl: 'ftp://user:s3cr3t@host/x'\nEnvironment: {Variables: {TOKEN: {v: s3cr3t}}}\nResources: {Queue: q}\n"
    lines = errors_of(write(tmp_path, text))
    assert len(lines) == 2 and not any("s3cr3t" in line for line in lines)


def test_account_resolution(tmp_path: Path) -> None:
    p = write(tmp_path, GOOD)
    env = {"MANTIK_COMPUTE_BUDGET_ACCOUNT": "budget"}
    assert load_backend_config(p, environ=env).account == "budget"
    assert load_backend_config(p, account="mine", environ=env).account == "mine"
    assert load_backend_config(p, environ={}).account is None


GROUPS = f"""\
unicore:
  - id: juwels
    site: {{url: "{URL}", account: proj, gpu_resource_name: GPUS}}
    environment: {{Modules: [Stages/2024], Variables: {{G: group}}}}
    partitions: {{booster: {{configuration: {{gpu: {{count: 4, memory: 40G}}}}}}}}
"""


def test_site_from_group(tmp_path: Path) -> None:
    cfg = load_config_text(GROUPS, "launchers.yaml")
    group = cfg.groups[0]
    assert isinstance(group, UnicoreGroup)
    p = write(
        tmp_path,
        "Environment: {Variables: {F: file}}\nResources: {Queue: booster, GPUsPerNode: 2}\n",
    )
    bc = load_backend_config(p, group=group, environ={})
    assert bc.site_kind == "unicore" and bc.account == "proj" and bc.group == "juwels"
    assert bc.environment.modules == ("Stages/2024",)  # from the group
    assert bc.environment.variables == (("F", "file"),)  # the file's key wins
    assert bc.resources.unicore("GPUS")["GPUS"] == 2  # the site's gpu_resource_name


def test_group_environment_checked_by_launchers_yaml_loader() -> None:
    bad = GROUPS.replace("G: group", "G: yes")
    with pytest.raises(ConfigurationError) as info:
        load_config_text(bad, "launchers.yaml")
    assert "launchers.yaml:4:" in str(info.value) and "environment.Variables.G" in str(info.value)


def test_group_and_own_site_conflict(tmp_path: Path) -> None:
    group = load_config_text(GROUPS, "launchers.yaml").groups[0]
    assert isinstance(group, UnicoreGroup)
    lines = errors_of(write(tmp_path, GOOD), group=group)
    assert len(lines) == 1 and ": UnicoreApiUrl: " in lines[0] and "--group juwels" in lines[0]


def test_mantik_memory_text_is_a_size_for_both_sites(tmp_path: Path) -> None:
    """docs/design/sites.md §1.5: Mantik crashed on `MemoryPerNode: 16G` for firecREST and sent the text to UNICORE."""
    res = "Resources: {Queue: q, MemoryPerNode: 16G}\n"
    uc = load_backend_config(write(tmp_path, f"UnicoreApiUrl: {URL}\n" + res), environ={})
    fc = load_backend_config(
        write(
            tmp_path,
            "Firecrest: {ApiUrl: 'https://a', TokenUrl: 'https://b', Machine: m}\n" + res,
            "f.yaml",
        ),
        environ={},
    )
    assert uc.resources.unicore()["MemoryPerNode"] == "16384M"
    assert ("mem", "16384M") in sbatch_pairs(fc.resources, None)
