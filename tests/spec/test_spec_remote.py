"""Spec conformance of docs/design/sites.md §1-§3: one small test per rule (the comment
above it quotes the rule's wording in the behaviour spec the page was first written from), mostly
pure; a few end to end against the loopback servers on the real Slurm."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from launchers.cli.main import main
from launchers.config.loader import load_config_text
from launchers.config.model import FirecrestGroup, FirecrestSite, UnicoreGroup, UnicoreSite
from launchers.errors import ConfigurationError, LaunchersError
from launchers.jobs.state import JobState
from launchers.remote.backend_config import load_backend_config, resolve_account
from launchers.remote.environment import validate_environment
from launchers.remote.exclude import ExcludeRules, collect_uploads, compile_pattern
from launchers.remote.mlproject import (
    build_command,
    load_mlproject,
    parse_param_args,
    passed_environment,
)
from launchers.remote.plan import plan_run
from launchers.remote.resources import Resources
from launchers.remote.script import (
    JobScriptSpec,
    quote_variable,
    render_job_script,
    unicore_description,
)
from remote_fixtures import firecrest_server_fixture, unicore_server_fixture  # noqa: F401 - fixtures

URL = "https://h.example:9112/SITE/rest/core"
FC = '{ApiUrl: "https://fc.example", TokenUrl: "https://auth.example/token", Machine: daint}'


def write(tmp_path: Path, text: str, name: str = "backend.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def load(tmp_path: Path, text: str, name: str = "backend.yaml", **kw: Any) -> Any:
    kw.setdefault("environ", {})
    return load_backend_config(write(tmp_path, text, name), **kw)


def problems(tmp_path: Path, text: str, name: str = "backend.yaml", **kw: Any) -> list[str]:
    with pytest.raises(ConfigurationError) as info:
        load(tmp_path, text, name, **kw)
    return str(info.value).splitlines()


def uc(resources: str = "{Queue: batch}", environment: str | None = None, extra: str = "") -> str:
    text = f"UnicoreApiUrl: {URL}\nResources: {resources}\n"
    if environment is not None:
        text += f"Environment: {environment}\n"
    return text + extra


def fc(resources: str = "{Queue: normal}", environment: str | None = None) -> str:
    text = f"Firecrest: {FC}\nResources: {resources}\n"
    return text + (f"Environment: {environment}\n" if environment is not None else "")


# -- docs/design/sites.md §1 the file --------------------------------------------------------------------------------


# "YAML (.yaml, .yml) or JSON (.json), chosen by the suffix (another suffix is an error naming these)."
def test_suffix_chooses_the_format(tmp_path: Path) -> None:
    assert load(tmp_path, uc(), "b.yml").resources.queue == "batch"
    assert (
        load(
            tmp_path, json.dumps({"UnicoreApiUrl": URL, "Resources": {"Queue": "q"}}), "b.json"
        ).resources.queue
        == "q"
    )
    (line,) = problems(tmp_path, uc(), "b.txt")
    assert ".yaml" in line and ".yml" in line and ".json" in line


# "Keys are case-sensitive." + "Unknown keys get 'did you mean' (queue → Queue)"
def test_keys_are_case_sensitive_with_did_you_mean(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, uc("{Queue: a, queue: b}"))
    assert "Resources.queue" in line and "did you mean 'Queue'" in line


# "Firecrest (ApiUrl, TokenUrl: URLs; Machine: string; all required)"
def test_firecrest_keys_all_required(tmp_path: Path) -> None:
    lines = problems(tmp_path, "Firecrest: {ApiUrl: 'https://a'}\nResources: {Queue: q}\n")
    assert any("Firecrest.TokenUrl" in x for x in lines) and any(
        "Firecrest.Machine" in x for x in lines
    )
    cfg = load(tmp_path, fc())
    assert cfg.site == FirecrestSite(
        api_url="https://fc.example", token_url="https://auth.example/token", machine="daint"
    )


# "Resources (required, docs/design/sites.md §1.2)"
def test_resources_required(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, f"UnicoreApiUrl: {URL}\n")
    assert "Resources" in line


# "Exactly one of UnicoreApiUrl and Firecrest; a file with neither is accepted only with --group ID
#  naming a unicore or firecrest group of launchers.yaml (docs/design/sites.md §2), which gives the site."
def test_exactly_one_site(tmp_path: Path) -> None:
    assert problems(tmp_path, f"UnicoreApiUrl: {URL}\nFirecrest: {FC}\nResources: {{Queue: q}}\n")
    (line,) = problems(tmp_path, "Resources: {Queue: q}\n")
    assert "--group" in line
    group = UnicoreGroup(id="juwels", site=UnicoreSite(url=URL, account="proj"))
    cfg = load(tmp_path, "Resources: {Queue: q}\n", group=group)
    assert cfg.site == group.site and cfg.account == "proj" and cfg.group == "juwels"


# -- docs/design/sites.md §1.1 Environment --------------------------------------------------------------------------


# "At most one of Apptainer and Python."
def test_apptainer_and_python_exclusive(tmp_path: Path) -> None:
    (line,) = problems(
        tmp_path, uc(environment="{Apptainer: {Path: /x.sif, Type: remote}, Python: /venv}")
    )
    assert "Environment.Python" in line


# "Type (local default or remote, any case)" + "A remote path must be absolute."
def test_apptainer_type_any_case_and_remote_absolute(tmp_path: Path) -> None:
    env = load(
        tmp_path, uc(environment="{Apptainer: {Path: /img/x.sif, Type: REMOTE}}")
    ).environment
    assert env.apptainer is not None and env.apptainer.type == "remote"
    assert env.apptainer.image_name == "/img/x.sif"
    (line,) = problems(tmp_path, uc(environment="{Apptainer: {Path: img/x.sif, Type: Remote}}"))
    assert "Environment.Apptainer.Path" in line and "absolute" in line


# "Options: the string, or each item, is split into words by POSIX shell rules (an item
#  -B /data:/data is two words, as with Mantik); each word is written like a Variables value."
def test_apptainer_options_split_and_quoted(tmp_path: Path) -> None:
    env = validate_environment(
        {
            "Apptainer": {
                "Path": "/i.sif",
                "Type": "remote",
                "Options": ["-B $HOME/data:/data", "--env 'A=b c'"],
            }
        },
        None,
    )
    assert env.apptainer is not None
    assert env.apptainer.options == ("-B", "$HOME/data:/data", "--env", "A=b c")
    text = render_job_script(JobScriptSpec(env, "python t.py", "unicore"))
    assert 'srun apptainer run "-B" "$HOME/data:/data" "--env" "A=b c" /i.sif python t.py' in text


# "A local image path is relative to the project directory (../image.sif allowed) and must exist;
#  it is uploaded to the run directory's root under its file name even if Exclude matches it
#  (as Mantik did; --dry-run says so); a project file of that name is an error."
def test_local_image_rules(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "img").mkdir(parents=True)
    (proj / "img" / "x.sif").write_text("image")
    (tmp_path / "outside.sif").write_text("outside")
    cfg = write(
        tmp_path, uc(environment="{Apptainer: {Path: img/x.sif}}", extra="Exclude: ['*.sif']\n")
    )
    (proj / "t.sh").write_text("true\n")
    plan = plan_run(proj, entry="t.sh", backend_config=cfg, environ={})
    assert plan.image is not None and plan.image.relpath == "x.sif" and "Exclude" in plan.image.note
    cfg2 = write(tmp_path, uc(environment="{Apptainer: {Path: ../outside.sif}}"), "b2.yaml")
    assert (
        plan_run(proj, entry="t.sh", backend_config=cfg2, environ={}).image.relpath == "outside.sif"
    )  # type: ignore[union-attr]
    cfg3 = write(tmp_path, uc(environment="{Apptainer: {Path: missing.sif}}"), "b3.yaml")
    with pytest.raises(ConfigurationError) as info:
        plan_run(proj, entry="t.sh", backend_config=cfg3, environ={})
    message = str(info.value)
    assert message.startswith(f"{cfg3}:3:") and "Mantik refuses it too" in message
    assert ": Environment.Apptainer.Path: the local image 'missing.sif' does not exist" in message
    (proj / "x.sif").write_text(
        "a project file with the image's name"
    )  # uploaded: it would collide
    cfg4 = write(tmp_path, uc(environment="{Apptainer: {Path: img/x.sif}}"), "b4.yaml")
    with pytest.raises(ConfigurationError, match="file of that name"):
        plan_run(proj, entry="t.sh", backend_config=cfg4, environ={})


# "Python: absolute means a remote path; relative means inside the project, existing and not excluded"
def test_python_relative_inside_project(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "venv" / "bin").mkdir(parents=True)
    (proj / "venv" / "bin" / "activate").write_text("")
    (proj / "t.sh").write_text("true\n")
    ok = write(tmp_path, uc(environment="{Python: {Path: venv}}"))
    plan = plan_run(proj, entry="t.sh", backend_config=ok, environ={})
    assert "source venv/bin/activate" in plan.script()
    excluded = write(
        tmp_path, uc(environment="{Python: venv}", extra="Exclude: [venv/]\n"), "b2.yaml"
    )
    with pytest.raises(ConfigurationError, match="excluded"):
        plan_run(proj, entry="t.sh", backend_config=excluded, environ={})
    missing = write(tmp_path, uc(environment="{Python: nope}"), "b3.yaml")
    with pytest.raises(ConfigurationError, match="not a directory of the project"):
        plan_run(proj, entry="t.sh", backend_config=missing, environ={})
    absolute = write(tmp_path, uc(environment="{Python: /p/venv}"), "b4.yaml")
    assert (
        "source /p/venv/bin/activate"
        in plan_run(proj, entry="t.sh", backend_config=absolute, environ={}).script()
    )


# "Modules: module load NAME, one line per module, on the compute node"
def test_modules_one_line_each() -> None:
    env = validate_environment({"Modules": ["Stages/2024", "CUDA"]}, None)
    text = render_job_script(JobScriptSpec(env, "true", "unicore"))
    loads = [
        shlex.split(line.split("||")[0]) for line in text.splitlines() if "module load" in line
    ]
    assert loads == [["module", "load", "Stages/2024"], ["module", "load", "CUDA"]]


# "Variables: names match [A-Za-z_][A-Za-z0-9_]*; values are strings or numbers (a boolean or null
#  is an error asking for quotes: YAML reads yes, on as booleans)."
def test_variables_types(tmp_path: Path) -> None:
    lines = problems(
        tmp_path, uc(environment="{Variables: {A: yes, B: on, C: null, 9X: v, D: [1]}}")
    )
    assert len(lines) == 5
    assert all("quotes" in x for x in lines[:3])
    assert "Environment.Variables.9X" in lines[3]
    env = load(tmp_path, uc(environment="{Variables: {N: 3, F: 0.5, S: 'yes'}}")).environment
    assert env.variables == (("N", "3"), ("F", "0.5"), ("S", "yes"))


# "Values are written in double quotes with \, ", ` escaped and $( as \$(: $NAME, ${NAME} expand on
#  the compute node as with Mantik; no command substitution or splitting."
def test_variable_quoting_runs_as_specified(tmp_path: Path) -> None:
    assert quote_variable('a\\b"c`d$(e) $HOME ${HOME}') == '"a\\\\b\\"c\\`d\\$(e) $HOME ${HOME}"'
    value = 'x  y "q" `id` $(id) \\n'
    env = validate_environment({"Variables": {"V": value, "H": "$HOME/data"}}, None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    text = render_job_script(JobScriptSpec(env, 'printf "%s|%s" "$V" "$H" > out.txt', "unicore"))
    (run_dir / "job.sh").write_text(text)
    proc = subprocess.run(
        ["bash", "job.sh"],
        cwd=run_dir,
        env={"PATH": os.environ["PATH"], "HOME": "/home/u", "UC_WORKING_DIRECTORY": str(run_dir)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "out.txt").read_text() == f"{value}|/home/u/data"


# "SRUN_CPUS_PER_TASK is set to CPUsPerNode when that is set and Variables does not set it."
def test_srun_cpus_per_task(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "t.sh").write_text("true\n")
    cfg = write(tmp_path, uc("{Queue: q, CPUsPerNode: 8}"))
    assert (
        'export SRUN_CPUS_PER_TASK="8"'
        in plan_run(proj, entry="t.sh", backend_config=cfg, environ={}).script()
    )
    cfg2 = write(
        tmp_path,
        uc("{Queue: q, CPUsPerNode: 8}", "{Variables: {SRUN_CPUS_PER_TASK: 2}}"),
        "b2.yaml",
    )
    script = plan_run(proj, entry="t.sh", backend_config=cfg2, environ={}).script()
    assert 'export SRUN_CPUS_PER_TASK="2"' in script and '"8"' not in script
    cfg3 = write(tmp_path, uc("{Queue: q}"), "b3.yaml")
    assert (
        "SRUN_CPUS_PER_TASK"
        not in plan_run(proj, entry="t.sh", backend_config=cfg3, environ={}).script()
    )


# "Command items must be strings (Mantik turned 1 into "1"); an item may span lines and runs as one snippet."
def test_command_items(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, uc(environment="{PreRunCommandOnComputeNode: [echo a, 1]}"))
    assert "PreRunCommandOnComputeNode[1]" in line and '"1"' in line
    env = validate_environment(
        {"PreRunCommandOnComputeNode": ["for i in 1 2; do\n  echo $i\ndone"]}, None
    )
    assert len(env.pre_compute) == 1


# "Login-node commands with a firecREST site are an error."
def test_login_commands_refused_for_firecrest(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, fc(environment="{PostRunCommandOnLoginNode: echo x}"))
    assert "Environment.PostRunCommandOnLoginNode" in line
    group = FirecrestGroup(
        id="daint", site=FirecrestSite(api_url="https://a", token_url="https://t", machine="m")
    )
    with pytest.raises(ConfigurationError):
        load(
            tmp_path,
            "Resources: {Queue: q}\nEnvironment: {PreRunCommandOnLoginNode: echo x}\n",
            group=group,
        )


# -- docs/design/sites.md §1.2 Resources -----------------------------------------------------------------------------

FULL_RES = (
    "{Queue: batch, Runtime: 90m, Nodes: 2, TotalCPUs: 16, GPUsPerNode: 4, MemoryPerNode: 16G, "
    "Reservation: res, NodeConstraints: gpu, QoS: high}"
)


# the table's UNICORE column
def test_unicore_resources_table(tmp_path: Path) -> None:
    res = load(tmp_path, uc(FULL_RES)).resources
    assert res.unicore() == {
        "Queue": "batch",
        "Runtime": "5400",
        "Nodes": 2,
        "TotalCPUs": 16,
        "GPUsPerNode": 4,
        "MemoryPerNode": "16384M",
        "Reservation": "res",
        "NodeConstraints": "gpu",
        "QoS": "high",
    }
    assert res.unicore("GPUS")["GPUS"] == 4 and "GPUsPerNode" not in res.unicore("GPUS")


# the table's firecREST column
def test_firecrest_sbatch_table(tmp_path: Path) -> None:
    res = load(tmp_path, fc(FULL_RES.replace("TotalCPUs: 16", "CPUsPerNode: 8"))).resources
    assert res.sbatch_options() == [
        ("partition", "batch"),
        ("time", "0-01:30:00"),
        ("nodes", "2"),
        ("ntasks-per-node", "1"),
        ("cpus-per-task", "8"),
        ("gpus-per-node", "4"),
        ("mem", "16384M"),
        ("reservation", "res"),
        ("constraint", "gpu"),
        ("qos", "high"),
    ]
    assert ("gres", "gpu:4") in res.sbatch_options("gres")
    assert ("ntasks", "16") in Resources(total_cpus=16).sbatch_options()


# "Runtime: Mantik's <integer><unit> (s, m = minutes, h, d) or any docs/design/matching.md duration; a bare number
#  or several units (1h30m) is an error suggesting one (90m)."
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("'4 days'", 345600),
        ("'90 minutes'", 5400),
    ],
)
def test_runtime_forms(tmp_path: Path, text: str, seconds: int) -> None:
    assert load(tmp_path, uc(f"{{Queue: q, Runtime: {text}}}")).resources.runtime == seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [("45", "a duration needs a unit (45s, 45m…)"), ("'45'", "needs a unit"), ("1h30m", "90m")],
)
def test_runtime_errors(tmp_path: Path, text: str, expected: str) -> None:
    (line,) = problems(tmp_path, uc(f"{{Queue: q, Runtime: {text}}}"))
    assert "Resources.Runtime" in line and expected in line


# "Sizes use docs/design/matching.md's units (K, M, G, T binary; KB, MB, GB decimal); no unit is an error; MiB are rounded up."
@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("1K", "1M"),
        ("1536M", "1536M"),
        ("1.5G", "1536M"),
        ("1T", "1048576M"),
        ("1GB", "954M"),
        ("1MB", "1M"),
        ("1000KB", "1M"),
    ],
)
def test_sizes(tmp_path: Path, text: str, mib: str) -> None:
    res = load(tmp_path, uc(f"{{Queue: q, MemoryPerNode: {text}}}")).resources
    assert res.unicore()["MemoryPerNode"] == mib
    assert ("mem", mib) in res.sbatch_options()


def test_size_without_unit(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, uc("{Queue: q, MemoryPerNode: 16}"))
    assert "Resources.MemoryPerNode: '16' has no unit" in line


# "Integers must be integers ("2" is an error)."
@pytest.mark.parametrize("text", ["'2'", "2.0", "true", "[2]"])
def test_integers_must_be_integers(tmp_path: Path, text: str) -> None:
    (line,) = problems(tmp_path, uc(f"{{Queue: q, Nodes: {text}}}"))
    assert "Resources.Nodes" in line


@pytest.mark.parametrize(
    ("key", "low"), [("Nodes", 1), ("TotalCPUs", 1), ("CPUsPerNode", 1), ("GPUsPerNode", 0)]
)
def test_integer_minimum(tmp_path: Path, key: str, low: int) -> None:
    assert load(tmp_path, uc(f"{{Queue: q, {key}: {low}}}")).resources is not None
    (line,) = problems(tmp_path, uc(f"{{Queue: q, {key}: {low - 1}}}"))
    assert f"Resources.{key}" in line


# "Memory with MemoryPerNode is an error (the Mantik documentation's own example writes Memory)."
def test_memory_alias(tmp_path: Path) -> None:
    assert load(tmp_path, uc("{Queue: q, Memory: 2G}")).resources.memory_per_node == 2 << 30
    (line,) = problems(tmp_path, uc("{Queue: q, Memory: 2G, MemoryPerNode: 2G}"))
    assert "Memory" in line


# "TotalCPUs with CPUsPerNode is an error for a firecREST site (sbatch would multiply them);
#  UNICORE receives both and its site maps them."
def test_totalcpus_with_cpuspernode(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, fc("{Queue: q, TotalCPUs: 8, CPUsPerNode: 4}"))
    assert "Resources.TotalCPUs" in line
    # UNICORE takes both (a Mantik file with both runs unchanged): TotalCPUs one-CPU tasks, at
    # most CPUsPerNode of them per node, as UNICORE's own mapping reads them
    res = load(tmp_path, uc("{Queue: q, TotalCPUs: 8, CPUsPerNode: 4}")).resources
    assert dict(res.sbatch_options()) == {"partition": "q", "ntasks": "8", "ntasks-per-node": "4"}


# "The account (...) is not in the file: --account, else the site's account, else
#  $MANTIK_COMPUTE_BUDGET_ACCOUNT, else none (site default; Mantik required one)."
def test_account_order() -> None:
    site = UnicoreSite(url=URL, account="site-acct")
    env = {"MANTIK_COMPUTE_BUDGET_ACCOUNT": "env-acct"}
    assert resolve_account("cli", site, env) == "cli"
    assert resolve_account(None, site, env) == "site-acct"
    assert resolve_account(None, UnicoreSite(url=URL), env) == "env-acct"
    assert resolve_account(None, UnicoreSite(url=URL), {}) is None


def test_account_key_in_resources_is_unknown(tmp_path: Path) -> None:
    assert problems(tmp_path, uc("{Queue: q, Project: p}"))


# -- docs/design/sites.md §1.3 Exclude -------------------------------------------------------------------------------

EXCLUDE = [
    # 1. A trailing / matches directories only; a matching directory excludes everything below it.
    (["data/"], "data", True, True),
    (["data/"], "data", False, False),
    (["data/"], "data/x/y", False, True),
    # 2. A pattern with no other / matches a name at any depth (*.csv, data/, data).
    (["*.csv"], "a/b/c.csv", False, True),
    (["data"], "src/data/f", False, True),
    (["data/"], "a/data/f", False, True),
    # 3. A leading or inner / anchors the pattern at the project root (/data.csv, src/*.csv).
    (["/data.csv"], "data.csv", False, True),
    (["/data.csv"], "a/data.csv", False, False),
    (["src/*.csv"], "src/a.csv", False, True),
    (["src/*.csv"], "a/src/a.csv", False, False),
    # 4. * matches any characters but / (dot-names included), ? one such character, [...] a class;
    #    ** as a whole component matches any number of directories (**/*.png, logs/**).
    (["*"], ".env", False, True),
    (["src/*"], "src/a/b", False, True),
    (["src/*.py"], "src/a/b.py", False, False),
    (["?.txt"], "a.txt", False, True),
    (["?.txt"], "ab.txt", False, False),
    (["[0-9].txt"], "7.txt", False, True),
    (["**/*.png"], "a.png", False, True),
    (["**/*.png"], "x/y/a.png", False, True),
    (["logs/**"], "logs/a/b.txt", False, True),
    (["a/**/b"], "a/b", False, True),
    (["a/**/b"], "a/x/y/b", False, True),
    # 5. !pattern re-includes what an earlier pattern excluded, except below an excluded directory.
    (["*.csv", "!keep.csv"], "keep.csv", False, False),
    (["data/", "!data/keep.csv"], "data/keep.csv", False, True),
    # case-sensitive; # is not special
    (["*.CSV"], "a.csv", False, False),
    (["#x"], "#x", False, True),
]


@pytest.mark.parametrize(("patterns", "path", "is_dir", "excluded"), EXCLUDE)
def test_exclude_rules(patterns: list[str], path: str, is_dir: bool, excluded: bool) -> None:
    assert ExcludeRules.compile(patterns).is_excluded(path, is_dir) is excluded


# "an empty pattern is an error"
def test_empty_pattern(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, uc(extra="Exclude: ['*.csv', '']\n"))
    assert "Exclude[1]" in line
    with pytest.raises(ConfigurationError):
        compile_pattern("")


# "A symbolic link is uploaded as its target; a link to a directory or a dangling link is an error naming it."
def test_symlinks(tmp_path: Path) -> None:
    proj = tmp_path / "p"
    (proj / "d").mkdir(parents=True)
    (proj / "f.txt").write_text("target")
    (proj / "l.txt").symlink_to("f.txt")
    ups = collect_uploads(proj, ExcludeRules())
    link = next(u for u in ups.uploads if u.relpath == "l.txt")
    assert link.local == (proj / "f.txt").resolve() and link.size == 6
    (proj / "ld").symlink_to("d")
    with pytest.raises(ConfigurationError, match="ld"):
        collect_uploads(proj, ExcludeRules())
    (proj / "ld").unlink()
    (proj / "dangling").symlink_to("nowhere")
    with pytest.raises(ConfigurationError, match="dangling"):
        collect_uploads(proj, ExcludeRules())


# "--dry-run lists the uploads and, for each excluded path, the pattern that matched."
def test_dry_run_lists_uploads_and_exclusions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "a.csv").write_text("a")
    (proj / "src" / "m.py").write_text("print(1)")
    (proj / "MLproject").write_text(
        "name: x\nentry_points:\n  main:\n    command: python src/m.py\n"
    )
    cfg = write(tmp_path, uc(extra="Exclude: ['src/*.csv']\n"))
    assert (
        main(
            [
                "run",
                str(proj),
                "--backend-config",
                str(cfg),
                "--dry-run",
                "--workdir",
                str(tmp_path / "w"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "src/m.py" in out and "src/a.csv  (pattern 'src/*.csv')" in out
    assert '"Executable": "./job.sh"' in out and "python src/m.py" in out
    assert not (tmp_path / "w").exists()  # nothing submitted, nothing recorded


# -- docs/design/sites.md §1.4 errors --------------------------------------------------------------------------------

DOC_EXAMPLE = f"""\
UnicoreApiUrl: {URL}
Environment:
  Modules: [CUDA]
Exclude:
  - "*.csv"
Resources:
  Queue: batch
  Nodes: 1
  MemoryPerNode: 16
"""


# "ConfigurationError with one line per problem, all of them, in file order, as
#  FILE:LINE:COLUMN: KEY.PATH: message, e.g. backend.yaml:9:18: Resources.MemoryPerNode: '16' has
#  no unit; write a size such as 16G (binary, as in Slurm)."
def test_error_line_format(tmp_path: Path) -> None:
    path = write(tmp_path, DOC_EXAMPLE)
    (line,) = problems(tmp_path, DOC_EXAMPLE)
    assert (
        line
        == f"{path}:9:18: Resources.MemoryPerNode: '16' has no unit; write a size such as 16G (binary, as in Slurm)"
    )


def test_all_problems_in_file_order(tmp_path: Path) -> None:
    text = uc("{Queue: 1, Nodes: x}", "{Variables: {A: yes}}", "Exclude: ['']\nExtra: 1\n")
    lines = problems(tmp_path, text)
    assert len(lines) == 5
    positions = [tuple(int(n) for n in x.split(":")[1:3]) for x in lines]
    assert positions == sorted(positions)


# "duplicate keys are errors in both formats"
def test_duplicate_keys(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, uc("{Queue: a, Queue: b}"))
    assert (
        line
        == f"{tmp_path / 'backend.yaml'}:2:23: Resources.Queue: duplicate key 'Queue' (first written at line 2)"
    )
    text = '{"UnicoreApiUrl": "' + URL + '",\n "Resources": {"Queue": "a",\n  "Queue": "b"}}'
    (line,) = problems(tmp_path, text, "b.json")
    assert line.startswith(f"{tmp_path / 'b.json'}:3:3: Resources.Queue: duplicate key 'Queue'")


# -- docs/design/sites.md §2 groups ----------------------------------------------------------------------------------


# "connector, path, query_slurm are errors: the site is reached only through its API."
# "No secret in a file: password, client_secret or token keys are errors showing the _env form."
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "unicore:\n  - id: u\n    connector: x\n    site: {url: 'https://h/S/rest/core'}\n",
            "connector",
        ),
        (
            "unicore:\n  - id: u\n    query_slurm: true\n    site: {url: 'https://h/S/rest/core'}\n",
            "query_slurm",
        ),
        (
            "firecrest:\n  - id: f\n    path: /x\n    site: {api_url: 'https://a', token_url: 'https://t', machine: m}\n",
            "path",
        ),
        (
            "unicore:\n  - id: u\n    site: {url: 'https://h/S/rest/core', password: p}\n",
            "password_env",
        ),
        ("unicore:\n  - id: u\n    site: {url: 'https://h/S/rest/core', token: p}\n", "token_env"),
        (
            "firecrest:\n  - id: f\n    site: {api_url: 'https://a', token_url: 'https://t', machine: m, client_secret: s}\n",
            "client_secret_env",
        ),
    ],
)
def test_group_keys_refused(text: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text, "launchers.yaml")
    assert expected in str(info.value)


def test_group_site_defaults() -> None:
    cfg = load_config_text(
        "unicore:\n  - id: u\n    site: {url: 'https://h/S/rest/core'}\n"
        "firecrest:\n  - id: f\n    site: {api_url: 'https://a', token_url: 'https://t', machine: m}\n",
        "launchers.yaml",
    )
    u = next(g for g in cfg.groups if isinstance(g, UnicoreGroup)).site
    f = next(g for g in cfg.groups if isinstance(g, FirecrestGroup)).site
    assert u is not None and f is not None
    assert (u.auth, u.username_env, u.password_env, u.token_env) == (
        "basic",
        "LAUNCHERS_UNICORE_USERNAME",
        "LAUNCHERS_UNICORE_PASSWORD",
        "LAUNCHERS_UNICORE_TOKEN",
    )
    assert (
        u.verify_tls is True and u.gpu_resource_name == "GPUsPerNode" and u.batch_storage == "HOME"
    )
    assert (f.client_id_env, f.client_secret_env, f.api_version) == (
        "LAUNCHERS_FIRECREST_CLIENT_ID",
        "LAUNCHERS_FIRECREST_CLIENT_SECRET",
        2,
    )


# -- docs/design/sites.md §3.1 the job script ------------------------------------------------------------------------


# "(1) firecREST only, #SBATCH lines from docs/design/sites.md §1.2 or the finder, with --job-name, --output=RUN/job.out,
#  --error=RUN/job.err" and "#!/bin/bash -l"
def test_firecrest_script_header(tmp_path: Path) -> None:
    env = validate_environment(None, None)
    text = render_job_script(
        JobScriptSpec(
            env,
            "true",
            "firecrest",
            run_dir="/scratch/u/run 1",
            job_name="train-3f2a",
            sbatch=(("partition", "normal"), ("account", "a")),
        )
    )
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash -l"
    assert lines[1:6] == [
        "#SBATCH --job-name=train-3f2a",
        '#SBATCH --output="/scratch/u/run 1/job.out"',
        '#SBATCH --error="/scratch/u/run 1/job.err"',
        "#SBATCH --partition=normal",
        "#SBATCH --account=a",
    ]
    assert "cd '/scratch/u/run 1'" in text
    unicore = render_job_script(JobScriptSpec(env, "true", "unicore"))
    assert "#SBATCH" not in unicore and 'cd "$UC_WORKING_DIRECTORY"' in unicore


def run_script(
    tmp_path: Path, environment: dict[str, Any], command: str
) -> tuple[int, str, dict[str, Any]]:
    env = validate_environment(environment, None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.sh").write_text(render_job_script(JobScriptSpec(env, command, "unicore")))
    proc = subprocess.run(
        ["bash", str(run_dir / "job.sh")],
        env={"PATH": os.environ["PATH"], "UC_WORKING_DIRECTORY": str(run_dir)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    rc = json.loads((run_dir / "job.rc").read_text())
    return proc.returncode, proc.stderr, rc


# "(2) cd to the run directory and LAUNCHERS_WORKDIR set to it, plus MANTIK_WORKING_DIRECTORY"
# "(6) if it succeeded, PostRunCommandOnComputeNode items; (7) job.rc, written atomically, and exit
#  with the first failing step's code (0 if none failed)."
def test_script_success_writes_job_rc(tmp_path: Path) -> None:
    code, err, rc = run_script(
        tmp_path,
        {"PostRunCommandOnComputeNode": 'echo "$MANTIK_WORKING_DIRECTORY" > post.txt'},
        'echo "$LAUNCHERS_WORKDIR $PWD" > cmd.txt',
    )
    assert code == 0 and rc["rc"] == 0, err
    run_dir = tmp_path / "run"
    assert (run_dir / "cmd.txt").read_text() == f"{run_dir} {run_dir}\n"
    assert (run_dir / "post.txt").read_text() == f"{run_dir}\n"
    assert not list(run_dir.glob(".job.rc.*"))


# "Each step of 4 to 6 must succeed before the next runs, and a failure is named in job.err
#  (launchers: PreRunCommandOnComputeNode[1] failed with exit code 2)."
def test_script_failure_named_and_chained(tmp_path: Path) -> None:
    code, err, rc = run_script(
        tmp_path,
        {
            "PreRunCommandOnComputeNode": ["true", "exit 2", "touch pre2"],
            "PostRunCommandOnComputeNode": "touch post",
        },
        "touch command",
    )
    assert code == 2 and rc["rc"] == 2
    assert "launchers: PreRunCommandOnComputeNode[1] failed with exit code 2" in err  # `exit 2` too
    assert not any((tmp_path / "run" / n).exists() for n in ("pre2", "command", "post"))


def test_script_command_failure_skips_post(tmp_path: Path) -> None:
    code, err, rc = run_script(tmp_path, {"PostRunCommandOnComputeNode": "touch post"}, "(exit 7)")
    assert code == 7 and rc["rc"] == 7
    assert "launchers: the command failed with exit code 7" in err
    assert not (tmp_path / "run" / "post").exists()


# "UNICORE login-node commands go to User precommand / User postcommand, chained so each runs only if
#  the previous succeeded, with RunUserPrecommandOnLoginNode / RunUserPostcommandOnLoginNode set to "true"."
def test_login_commands_in_description(tmp_path: Path) -> None:
    env = validate_environment(
        {
            "PreRunCommandOnLoginNode": ["echo a", "false", "touch never"],
            "PostRunCommandOnLoginNode": "echo done",
        },
        None,
    )
    desc = unicore_description(name="n", environment=env)
    assert (
        desc["RunUserPrecommandOnLoginNode"] == "true"
        and desc["RunUserPostcommandOnLoginNode"] == "true"
    )
    assert desc["User postcommand"] == "echo done"
    proc = subprocess.run(
        ["bash", "-c", desc["User precommand"]], cwd=tmp_path, capture_output=True, timeout=30
    )
    assert proc.returncode != 0 and not (tmp_path / "never").exists()


# -- docs/design/sites.md §3.2 UNICORE -------------------------------------------------------------------------------


# "Job description (only keys that are set; name in [A-Za-z0-9_.-], at most 64 characters)" and
# "Variables are exported by job.sh, not via Environment"
def test_unicore_description_keys() -> None:
    env = validate_environment({"Variables": {"A": "1"}}, None)
    desc = unicore_description(name="train 3f2a/" + "x" * 80, environment=env, task_id="train-3f2a")
    # resources travel in the BSS file of a raw job (docs/remote-sites.md, "UNICORE: server behaviours")
    assert desc == {
        "Name": ("train_3f2a_" + "x" * 80)[:64],
        "Executable": "./job.sh",
        "Arguments": [],
        "Stdout": "job.out",
        "Stderr": "job.err",
        "haveClientStageIn": "true",
        "Job type": "raw",
        "BSS file": "job.sbatch",
        "Tags": ["launchers", "train-3f2a"],
    }
    bare = unicore_description(name="n", environment=validate_environment(None, None))
    assert "Project" not in bare and "User precommand" not in bare and "Environment" not in bare


# "READY, STAGINGIN, QUEUED → PENDING; RUNNING, STAGINGOUT → RUNNING; UNDEFINED or anything else → unchanged"
@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("READY", JobState.PENDING),
        ("STAGINGIN", JobState.PENDING),
        ("QUEUED", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("STAGINGOUT", JobState.RUNNING),
        ("UNDEFINED", None),
        ("STAGING_IN", None),
    ],
)
def test_unicore_state_map(status: str, state: JobState | None) -> None:
    from launchers.remote.unicore_executor import UnicoreExecutor

    executor = UnicoreExecutor(UnicoreSite(url=URL))
    update = asyncio.run(executor._update_for(None, {"status": status}))  # type: ignore[arg-type]
    assert (update.state if update is not None else None) is state


# -- docs/design/sites.md §3.4 MLproject -----------------------------------------------------------------------------

MLPROJECT = """\
name: demo
conda_env: conda.yaml
entry_points:
  main:
    parameters:
      lr: {type: float, default: 0.1}
      data: path
      url: {type: uri, default: "s3://bucket/x"}
      name: string
    command: "python train.py --lr {lr} --data {data} --name {name} --url {url} --home ${{HOME}}"
"""


def project(tmp_path: Path, text: str = MLPROJECT) -> Path:
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "in.txt").write_text("x")
    (proj / "train.py").write_text("")
    (proj / "run.sh").write_text("")
    (proj / "MLproject").write_text(text)
    return proj


# "conda_env, python_env, docker_env are reported as unused"; other keys are ignored with a
# warning, as MLflow ignores them (issue 16: the file is read as MLflow reads it)
def test_mlproject_keys(tmp_path: Path) -> None:
    assert load_mlproject(project(tmp_path)).unused == ("conda_env",)
    (warning,) = load_mlproject(project(tmp_path / "b", "name: x\nentry_point: {}\n")).warnings
    assert (
        "entry_point: not a key MLflow reads; ignored" in warning
        and "did you mean 'entry_points'" in warning
    )


# "ENTRY defaults to main; an undeclared entry ending in .py or .sh runs as python FILE or bash FILE
#  with each parameter as --NAME VALUE (MLflow's rule); another unknown entry lists the declared ones."
def test_entry_points(tmp_path: Path) -> None:
    proj = load_mlproject(project(tmp_path))
    assert proj.entry_point().name == "main"
    assert build_command(proj.entry_point("train.py"), {"a": "1 2"}) == "python train.py --a '1 2'"
    assert build_command(proj.entry_point("run.sh"), {}) == "bash run.sh"
    with pytest.raises(ConfigurationError, match="declared: main"):
        proj.entry_point("other")


# "-P splits at the first =; a repeated name is an error; all missing parameters are listed in one error."
def test_param_args(tmp_path: Path) -> None:
    assert parse_param_args(["a=b=c", "e="]) == {"a": "b=c", "e": ""}
    with pytest.raises(LaunchersError, match="twice"):
        parse_param_args(["a=1", "a=2"])
    ep = load_mlproject(project(tmp_path)).entry_point()
    with pytest.raises(LaunchersError) as info:
        build_command(ep, {})
    assert "data" in str(info.value) and "name" in str(info.value)


# "path: absolute is a remote path, passed unchanged; relative must name an uploaded project path and is
#  passed relative to the run directory. uri must start with a scheme." A float is passed unchanged, as
#  MLflow does (issue 16: only path and uri change the value).
def test_param_types(tmp_path: Path) -> None:
    ep = load_mlproject(project(tmp_path)).entry_point()
    uploaded = frozenset({"data", "data/in.txt", "train.py"})
    cmd = build_command(ep, {"data": "./data/in.txt", "name": "a b"}, uploaded)
    assert (
        cmd
        == "python train.py --lr 0.1 --data data/in.txt --name 'a b' --url s3://bucket/x --home ${HOME}"
    )
    assert "--data /p/x" in build_command(ep, {"data": "/p/x", "name": "n"}, uploaded)
    assert "--lr fast" in build_command(ep, {"data": "data", "name": "n", "lr": "fast"}, uploaded)
    for bad in ({"data": "missing.txt"}, {"url": "no-scheme"}, {"data": "../x"}):
        with pytest.raises(LaunchersError):
            build_command(ep, {"data": "data", "name": "n", **bad}, uploaded)


# "an undeclared placeholder is an error" (when the entry point is selected: issue 16), "and parameters
#  absent from the command are appended as quoted --NAME VALUE (Mantik refused them)."
def test_placeholders_and_extra_params(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="placeholder"):
        load_mlproject(
            project(tmp_path, "entry_points:\n  main:\n    command: echo {nope}\n")
        ).entry_point()
    ep = load_mlproject(
        project(tmp_path / "b", "entry_points:\n  main:\n    command: echo hi\n")
    ).entry_point()
    assert build_command(ep, {"x": "a b"}) == "echo hi --x 'a b'"


# "a line starting with - after a newline is an error ("this line continues the previous one; join them
#  or end it with `\`")"
def test_continuation_line_error(tmp_path: Path) -> None:
    text = "entry_points:\n  main:\n    command: |\n      python t.py\n      --lr 1\n"
    with pytest.raises(ConfigurationError) as info:
        load_mlproject(project(tmp_path, text)).entry_point()
    assert "this line continues the previous one; join them or end it with `\\`" in str(info.value)
    ok = "entry_points:\n  main:\n    command: |\n      python t.py \\\n      --lr 1\n"
    assert load_mlproject(project(tmp_path / "b", ok)).entry_point().name == "main"


# "With Apptainer a one-line command follows srun apptainer run OPTIONS IMAGE word by word (...);
#  a multi-line one is passed as bash -c 'TEXT'."
def test_apptainer_command_forms() -> None:
    env = validate_environment({"Apptainer": {"Path": "/i.sif", "Type": "remote"}}, None)
    one = render_job_script(JobScriptSpec(env, "python t.py --x 1", "unicore"))
    assert "srun apptainer run /i.sif python t.py --x 1 ||" in one
    multi = render_job_script(JobScriptSpec(env, "echo a\necho b", "unicore"))
    assert "srun apptainer run /i.sif bash -c 'echo a\necho b'" in multi


# "MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, MLFLOW_EXPERIMENT_ID, MLFLOW_RUN_ID are passed when set;
#  any other variable only with --pass-env NAME."
def test_passed_environment() -> None:
    environ = {
        "MLFLOW_TRACKING_URI": "http://t",
        "MLFLOW_RUN_ID": "r",
        "MLFLOW_TRACKING_TOKEN": "secret",
        "MINE": "m",
    }
    assert passed_environment(environ, []) == [
        ("MLFLOW_TRACKING_URI", "http://t"),
        ("MLFLOW_RUN_ID", "r"),
    ]
    assert ("MINE", "m") in passed_environment(environ, ["MINE"])
    with pytest.raises(LaunchersError):
        passed_environment(environ, ["UNSET_VARIABLE_X"])


# "The run is a job (docs/design/runtime.md §2) under --workdir (./launchers-runs)."
def test_run_options_defaults() -> None:
    from launchers.cli.main import build_parser

    args = build_parser().parse_args(["run", "p", "--backend-config", "b.yaml"])
    assert args.workdir == "launchers-runs" and args.entry == "main" and not args.dry_run
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "p", "--backend-config", "b.yaml", "-r", "cpu()"])


# -- end to end ---------------------------------------------------------------------------------


@pytest.mark.slurm
def test_firecrest_run_failing_pre_command(
    firecrest_server: Any, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """docs/design/sites.md §3.1 on a real firecREST round trip: the failing step is named in job.err, the run exits with
    its code, job.out and job.err stay separate (Mantik merged them)."""
    proj = project(tmp_path, "entry_points:\n  main:\n    command: echo never\n")
    cfg = write(
        tmp_path,
        f"Firecrest: {{ApiUrl: '{firecrest_server.api_url}', TokenUrl: '{firecrest_server.token_url}', "
        "Machine: cluster}\nResources: {Queue: debug, Runtime: 5m}\n"
        "Environment: {PreRunCommandOnComputeNode: ['echo pre-out', 'echo pre-err >&2; exit 4']}\n",
    )
    rc = main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(tmp_path / "runs")])
    out, err = capfdbinary.readouterr()
    assert rc == 4, err.decode()
    assert b"pre-out" in out and b"pre-err" not in out and b"never" not in out
    assert b"launchers: PreRunCommandOnComputeNode[1] failed with exit code 4" in err
    assert len(firecrest_server.jobs) == 1


@pytest.mark.slurm
def test_unicore_run_description_at_the_site(
    unicore_server: Any, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """docs/design/sites.md §3.2: the description the site received, and the job's files in its working directory."""
    proj = project(tmp_path, 'entry_points:\n  main:\n    command: echo "V=$V"\n')
    cfg = write(
        tmp_path,
        uc(
            "{Queue: debug, Runtime: 5m, MemoryPerNode: 100M}",
            "{Variables: {V: 'a b'}}",
            "Exclude: [data/]\n",
        ).replace(URL, unicore_server.base_url),
    )
    rc = main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(tmp_path / "runs")])
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    assert b"V=a b" in out
    (ujob,) = unicore_server.jobs.values()
    desc = ujob.desc
    assert (
        desc["Executable"] == "./job.sh"
        and desc["Stdout"] == "job.out"
        and desc["Stderr"] == "job.err"
    )
    assert desc["Job type"] == "raw" and "Resources" not in desc
    bss = (ujob.workdir / "job.sbatch").read_text()
    assert (
        "#SBATCH --partition=debug\n" in bss
        and "#SBATCH --time=0-00:05:00\n" in bss
        and "#SBATCH --mem=100M\n" in bss
    )
    assert desc["Tags"][0] == "launchers" and "Environment" not in desc
    assert not (ujob.workdir / "data").exists() and (ujob.workdir / "train.py").exists()
