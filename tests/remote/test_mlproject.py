"""MLproject entry points and ``launchers run`` parsing and ``--dry-run`` (docs/design/sites.md §3.4)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launchers.cli.main import main
from launchers.errors import ConfigurationError, LaunchersError
from launchers.remote.mlproject import (
    EntryPoint,
    Parameter,
    ParameterError,
    build_command,
    load_mlproject,
    parse_param_args,
    passed_environment,
    value_notes,
)

MLPROJECT = """\
name: demo
conda_env: conda.yaml
entry_points:
  main:
    parameters:
      lr: {type: float, default: 0.1}
      data: path
      name: string
      src: {type: uri, default: "s3://bucket/key"}
    command: "python train.py --lr {lr} --data {data} --name {name} --src {src}"
  braces:
    parameters: {x: string}
    command: "echo ${{HOME}} {{literal}} {x}"
  multi:
    command: |
      echo one
      echo two \\
        --flag
"""


def project(
    tmp_path: Path,
    text: str = MLPROJECT,
    files: tuple[str, ...] = ("train.py", "data/a.csv", "run.sh"),
) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "MLproject").write_text(text)
    for f in files:
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {f}\n")
    return tmp_path


UPLOADED = frozenset({"train.py", "data", "data/a.csv", "run.sh", "MLproject"})


def test_load_and_build(tmp_path: Path) -> None:
    mp = load_mlproject(project(tmp_path))
    assert mp.name == "demo" and mp.unused == ("conda_env",)
    ep = mp.entry_point()
    assert [p.name for p in ep.parameters] == ["lr", "data", "name", "src"]
    cmd = build_command(ep, {"data": "./data/a.csv", "name": "it's a b"}, UPLOADED)
    assert (
        cmd
        == "python train.py --lr 0.1 --data data/a.csv --name 'it'\"'\"'s a b' --src s3://bucket/key"
    )


def test_braces_and_extra_params(tmp_path: Path) -> None:
    ep = load_mlproject(project(tmp_path)).entry_point("braces")
    # extra parameters are appended (Mantik refused them)
    assert (
        build_command(ep, {"x": "$(id)", "extra": "a b"})
        == "echo ${HOME} {literal} '$(id)' --extra 'a b'"
    )


def test_newlines_keep_their_meaning(tmp_path: Path) -> None:
    ep = load_mlproject(project(tmp_path)).entry_point("multi")
    assert (
        build_command(ep, {}) == "echo one\necho two \\\n  --flag\n"
    )  # Mantik joined lines with spaces


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (
            "python a.py\n  --lr 1",
            "this line continues the previous one; join them or end it with `\\`",
        ),
        ("echo {missing}", "placeholder {missing} names no declared parameter"),
        ("echo {x!r}", "not a parameter name"),
        ("echo {0}", "not a parameter name"),
        ("echo {x", "for literal braces"),
    ],
)
def test_command_errors_when_selected(tmp_path: Path, command: str, fragment: str) -> None:
    """A malformed entry point is refused when it is selected, never at load: another runs."""
    text = (
        f"entry_points:\n  main:\n    parameters: {{x: string}}\n    command: {json.dumps(command)}\n"
        "  other:\n    command: echo ok\n"
    )
    mp = load_mlproject(project(tmp_path, text))
    assert build_command(mp.entry_point("other"), {}) == "echo ok"
    with pytest.raises(ConfigurationError) as info:
        mp.entry_point()
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'MLproject'}:4:14: entry_points.main.command: ")
    assert mp.problems == (msg,)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("entry_points: {main: {parameters: {a: path}}}\n", "command is required; MLflow fails"),
        ("entry_points: {main: {command: [x]}}\n", "expected the command"),
        ("entry_points: {main: {command: x, parameters: [a]}}\n", "expected a mapping NAME: TYPE"),
        ("entry_points: {main: {command: x, parameters: {a: 5}}}\n", "MLflow fails on it too"),
        ("entry_points: {main: python x.py}\n", "expected a mapping with command"),
    ],
)
def test_malformed_entry_points(tmp_path: Path, text: str, fragment: str) -> None:
    mp = load_mlproject(project(tmp_path, text))
    with pytest.raises(ConfigurationError) as info:
        mp.entry_point()
    assert fragment in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "MLproject") + ":1:")


def test_only_unloadable_files_are_refused_at_load(tmp_path: Path) -> None:
    for i, text in enumerate(("entry_points: [main]\n", "- a\n", "a: [\n")):
        with pytest.raises(ConfigurationError) as info:
            load_mlproject(project(tmp_path / str(i), text))
        assert re.match(
            re.escape(str(tmp_path / str(i) / "MLproject")) + r":\d+:\d+: \S", str(info.value)
        )


def test_any_type_word_is_a_string(tmp_path: Path) -> None:
    """MLflow changes only path and uri values; int, bool, str... pass unchanged, and a
    parameter whose declaration is broken still counts as declared (no follow-on message)."""
    text = (
        "entry_points:\n  main:\n    parameters:\n      n: {type: int, default: 15}\n      b: bool\n"
        "      s: {type: str, default: ''}\n      f: {type: float, default: .0}\n      t: {type: 3}\n"
        "    command: run {n} {b} {s} {f} {t}\n"
        "  broken:\n    parameters: {k: 7}\n    command: run {k}\n"
    )
    mp = load_mlproject(project(tmp_path, text))
    ep = mp.entry_point()
    assert [(p.type, p.default) for p in ep.parameters] == [
        ("int", "15"),
        ("bool", None),
        ("str", ""),
        ("float", "0.0"),
        ("3", None),
    ]
    assert build_command(ep, {"b": "True", "t": "x", "f": "abc"}) == "run 15 True '' abc x"
    assert value_notes(ep, {"f": "abc"}) == [
        "parameter f: 'abc' is not a number (type float); passed unchanged, as MLflow does"
    ]
    assert any(
        "entry_points.main.parameters.t.type: an integer, not a type name" in w for w in ep.warnings
    )
    with pytest.raises(ConfigurationError) as info:
        mp.entry_point("broken")
    assert "entry_points.broken.parameters.k" in str(info.value)
    assert "no declared parameter" not in str(info.value)


@pytest.mark.parametrize("name", ["MLproject", "MLProject", "mlproject"])
def test_file_name_in_any_case(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("entry_points: {main: {command: echo hi}}\n")
    mp = load_mlproject(tmp_path)
    assert mp.file == str(tmp_path / name) and mp.entry_point().command == "echo hi"


def test_two_mlproject_files_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "MLproject").write_text("entry_points: {}\n")
    (tmp_path / "mlproject").write_text("entry_points: {}\n")
    with pytest.raises(
        ConfigurationError, match=r"several MLproject files .*: MLproject, mlproject"
    ):
        load_mlproject(tmp_path)


def test_keys_mlflow_ignores_are_warnings(tmp_path: Path) -> None:
    text = (
        "name: x\nkubernetes_env: {job_namespace: ml}\nnam: y\n"
        "entry_points:\n  main:\n    comand: nope\n    command: echo {a}\n"
        "    parameters: {a: {type: string, default: v, description: d}}\n"
    )
    mp = load_mlproject(project(tmp_path, text))
    f = tmp_path / "MLproject"
    assert mp.warnings == (
        f"{f}:2:1: kubernetes_env: not a key MLflow reads; ignored, as MLflow does",
        f"{f}:3:1: nam: not a key MLflow reads; ignored, as MLflow does (did you mean 'name'?)",
    )
    ep = mp.entry_point()
    assert build_command(ep, {}) == "echo v"
    assert [w.split(": ", 2)[1] for w in ep.warnings] == [
        "entry_points.main.comand",
        "entry_points.main.parameters.a.description",
    ]
    assert "did you mean 'command'" in ep.warnings[0]


def test_duplicate_key_keeps_the_last_with_a_warning(tmp_path: Path) -> None:
    text = (
        "entry_points:\n  main:\n    command: echo first\n    command: echo second\n"
        "  main:\n    command: echo third\n"
    )
    mp = load_mlproject(project(tmp_path, text))
    assert mp.entry_point().command == "echo third"
    f = tmp_path / "MLproject"
    assert mp.warnings == (
        f"{f}:4:5: entry_points.main.command: written twice (lines 3 and 4); the value of line 4 is used, "
        "as MLflow's YAML reader does",
        f"{f}:5:3: entry_points.main: written twice (lines 2 and 5); the value of line 5 is used, "
        "as MLflow's YAML reader does",
    )


def test_boolean_default_is_passed_as_mlflow_writes_it(tmp_path: Path) -> None:
    text = "entry_points: {main: {parameters: {a: {default: yes}}, command: 'run {a}'}}\n"
    ep = load_mlproject(project(tmp_path, text)).entry_point()
    assert build_command(ep, {}) == "run True"
    assert "YAML reads this default as a boolean; it is passed as True" in ep.warnings[0]


def test_unknown_and_file_entries(tmp_path: Path) -> None:
    mp = load_mlproject(project(tmp_path))
    with pytest.raises(ConfigurationError, match="declared: main, braces, multi"):
        mp.entry_point("nope")
    py = mp.entry_point("train.py")
    assert build_command(py, {"lr": "0.1", "b": "x y"}) == "python train.py --lr 0.1 --b 'x y'"
    assert build_command(mp.entry_point("run.sh"), {}) == "bash run.sh"
    with pytest.raises(ConfigurationError, match="not a file of the project"):
        mp.entry_point("missing.py")


def test_project_without_mlproject(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    mp = load_mlproject(tmp_path)
    assert build_command(mp.entry_point("t.py"), {}) == "python t.py"
    with pytest.raises(ConfigurationError, match="unknown entry point 'main'"):
        mp.entry_point()


def test_param_args() -> None:
    assert parse_param_args(["a=b=c", "e="]) == {"a": "b=c", "e": ""}
    with pytest.raises(ParameterError, match="given twice"):
        parse_param_args(["a=1", "a=2"])
    with pytest.raises(ParameterError, match="NAME=VALUE"):
        parse_param_args(["novalue"])


def test_all_missing_listed_once() -> None:
    ep = EntryPoint(
        "main", "run {a} {b} {c}", (Parameter("a"), Parameter("b"), Parameter("c", default="1"))
    )
    with pytest.raises(ParameterError) as info:
        build_command(ep, {})
    assert "a, b" in str(info.value) and "-P a=VALUE -P b=VALUE" in str(info.value)


@pytest.mark.parametrize(
    ("ptype", "value", "expected"),
    [
        ("float", "1e-3", "1e-3"),
        ("float", "abc", "abc"),  # MLflow passes it unchanged (value_notes warns)
        ("int", "x", "x"),
        ("uri", "s3://b/k", "s3://b/k"),
        ("uri", "relative/path", ParameterError),
        ("path", "/p/scratch/data", "/p/scratch/data"),
        ("path", "./data/a.csv", "data/a.csv"),
        ("path", "data", "data"),
        ("path", "../outside", ParameterError),
        ("path", "excluded.csv", ParameterError),
    ],
)
def test_types(ptype: str, value: str, expected: object) -> None:
    ep = EntryPoint("main", "run {p}", (Parameter("p", ptype),))
    if expected is ParameterError:
        with pytest.raises(ParameterError, match="parameter p"):
            build_command(ep, {"p": value}, UPLOADED)
    else:
        assert build_command(ep, {"p": value}, UPLOADED) == f"run {shlex.quote(str(expected))}"


@settings(max_examples=200)
@given(
    st.text(
        alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20
    )
)
def test_substituted_value_is_one_word(value: str) -> None:
    ep = EntryPoint("main", "run {p}", (Parameter("p"),))
    assert shlex.split(build_command(ep, {"p": value})) == ["run", value]


def test_mlflow_variables() -> None:
    environ = {
        "MLFLOW_TRACKING_URI": "https://mlflow.example",
        "MLFLOW_TRACKING_TOKEN": "secret",
        "MLFLOW_RUN_ID": "r1",
        "OTHER": "o",
    }
    assert passed_environment(environ, []) == [
        ("MLFLOW_TRACKING_URI", "https://mlflow.example"),
        ("MLFLOW_RUN_ID", "r1"),
    ]
    assert ("MLFLOW_TRACKING_TOKEN", "secret") in passed_environment(
        environ, ["MLFLOW_TRACKING_TOKEN"]
    )
    assert passed_environment(environ, [], frozenset({"MLFLOW_RUN_ID"})) == [
        ("MLFLOW_TRACKING_URI", "https://mlflow.example")
    ]
    with pytest.raises(ParameterError, match="not set"):
        passed_environment(environ, ["UNSET_VARIABLE"])


# --- launchers run ----------------------------------------------------------------------------

BACKEND = """\
UnicoreApiUrl: https://unicore.example:9112/SITE/rest/core
Environment:
  Python: venv
  Variables: {GREETING: "hello $USER"}
Resources: {Queue: batch, Runtime: 10m, MemoryPerNode: 1G}
Exclude: ["*.csv", "!keep.csv", "backend.yaml", "image.sif"]
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["run", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def make_run_project(tmp_path: Path) -> Path:
    root = project(
        tmp_path / "proj", files=("train.py", "data/a.csv", "keep.csv", "venv/bin/activate")
    )
    (root / "backend.yaml").write_text(BACKEND)
    return root


def test_dry_run_unicore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_run_project(tmp_path)
    rc, out, err = run_cli(
        capsys,
        str(root),
        "--backend-config",
        str(root / "backend.yaml"),
        "-P",
        "data=keep.csv",
        "-P",
        "name=x",
        "--dry-run",
        "--workdir",
        str(tmp_path / "runs"),
    )
    assert rc == 0, err
    assert "conda_env is not used" in err
    assert (
        "data/a.csv  (pattern '*.csv')" in out and "backend.yaml  (pattern 'backend.yaml')" in out
    )
    assert (
        "  keep.csv" in out and "  venv/bin/activate" in out
    )  # a relative Python is accepted (Mantik refused it)
    desc = json.loads(out.split("job description:\n", 1)[1].split("\n\nBSS file", 1)[0])
    assert (
        desc["Job type"] == "raw" and desc["BSS file"] == "job.sbatch" and "Resources" not in desc
    )
    bss = out.split("BSS file (job.sbatch):\n", 1)[1].split("\njob.sh:", 1)[0]
    for line in ("--partition=batch", "--time=0-00:10:00", "--mem=1024M", "--output=job.out"):
        assert f"#SBATCH {line}\n" in bss, line
    assert (
        desc["Executable"] == "./job.sh"
        and desc["Stdout"] == "job.out"
        and desc["Stderr"] == "job.err"
    )
    assert "source venv/bin/activate" in out
    assert 'export GREETING="hello $USER"' in out
    assert out.rstrip().endswith(
        "python train.py --lr 0.1 --data keep.csv --name x --src s3://bucket/key"
    )
    assert not (tmp_path / "runs").exists()  # nothing written, nothing submitted


def test_dry_run_firecrest_with_image(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_run_project(tmp_path)
    (root / "image.sif").write_text("image")
    (root / "backend.yaml").write_text(
        "Firecrest: {ApiUrl: 'https://fc.example', TokenUrl: 'https://auth.example/t', Machine: m}\n"
        "Environment: {Apptainer: {Path: image.sif, Options: ['-B $HOME/data:/data']}}\n"
        "Resources: {Queue: normal, CPUsPerNode: 4}\nExclude: [image.sif, '*.csv', venv/]\n"
    )
    rc, out, err = run_cli(
        capsys,
        str(root),
        "--backend-config",
        str(root / "backend.yaml"),
        "-e",
        "train.py",
        "--dry-run",
    )
    assert rc == 0, err
    assert (
        "image.sif  5 B  [Apptainer image, uploaded to the run directory's root even though Exclude matches it]"
        in out
    )
    assert "#SBATCH --partition=normal" in out and "#SBATCH --cpus-per-task=4" in out
    assert 'export SRUN_CPUS_PER_TASK="4"' in out
    assert 'srun apptainer run "-B" "$HOME/data:/data" image.sif python train.py' in out


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["-P", "name=x"], "no value for parameter data"),
        (["-P", "data=a.csv", "-P", "name=x"], "not an uploaded project path"),  # excluded
        (
            ["-P", "data=keep.csv", "-P", "name=x", "--pass-env", "LAUNCHERS_TEST_UNSET_VAR"],
            "not set",
        ),
        (["-e", "nope"], "unknown entry point"),
        (["--group", "g"], "launchers.yaml"),
    ],
)
def test_run_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    root = make_run_project(tmp_path)
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text("local:\n  - id: here\n")
    rc, _out, err = run_cli(
        capsys,
        str(root),
        "--backend-config",
        str(root / "backend.yaml"),
        "--config",
        str(cfg),
        "--dry-run",
        *extra,
    )
    assert rc == 2
    assert err.startswith("launchers: ") and fragment in err and "Traceback" not in err


def test_excluded_python_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_run_project(tmp_path)
    (root / "backend.yaml").write_text(BACKEND.replace('"image.sif"]', '"image.sif", venv]'))
    rc, _, err = run_cli(
        capsys,
        str(root),
        "--backend-config",
        str(root / "backend.yaml"),
        "-P",
        "data=keep.csv",
        "-P",
        "name=x",
        "--dry-run",
    )
    assert rc == 2 and "excluded (pattern 'venv')" in err


def test_backend_or_requirement_required(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", str(tmp_path)])
    assert info.value.code == 2
    capsys.readouterr()


def test_submission_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --dry-run the plan goes to launchers.remote.submit.run_project with the flags."""
    import launchers.cli.run as run_module

    root = make_run_project(tmp_path)
    calls: list[tuple[object, bool, bool]] = []

    def fake_run_project(plan: object, *, follow: bool, cancel_on_interrupt: bool) -> int:
        calls.append((plan, follow, cancel_on_interrupt))
        return 7

    monkeypatch.setattr(run_module, "submitter", lambda: fake_run_project)
    rc, _, err = run_cli(
        capsys,
        str(root),
        "--backend-config",
        str(root / "backend.yaml"),
        "-P",
        "data=keep.csv",
        "-P",
        "name=x",
        "--no-follow",
        "--cancel-on-interrupt",
    )
    assert rc == 7, err
    plan, follow, cancel = calls[0]
    assert (follow, cancel) == (False, True)
    assert plan.kind == "unicore" and "job.sh" not in [u.relpath for u in plan.all_uploads]


def test_submitter_missing_is_a_clear_error() -> None:
    import importlib.util

    from launchers.cli.run import submitter

    if importlib.util.find_spec("launchers.remote.submit") is not None:
        assert callable(submitter())
    else:
        with pytest.raises(LaunchersError, match="not available"):
            submitter()


FIRECREST_GROUP = """\
firecrest:
  - id: daint
    site: {api_url: "https://fc.example", machine: daint, token_url: "https://auth.example/token", account: acct}
    environment: {Modules: [cray-python], Variables: {X: 1}}
    partitions: {normal: {configuration: {gpu: {count: 1, memory: 16G}, max_duration: 1d}}}
"""


def test_dry_run_with_requirement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_run_project(tmp_path)
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(FIRECREST_GROUP)
    rc, out, err = run_cli(
        capsys,
        str(root),
        "-r",
        "duration=2h & cuda(mem=10G)",
        "--config",
        str(cfg),
        "-P",
        "data=keep.csv",
        "-P",
        "name=x",
        "--dry-run",
    )
    assert rc == 0, err
    assert "group daint" in out and "account: acct" in out
    for line in (
        "#SBATCH --partition=normal",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --account=acct",
        'export X="1"',
        "module load cray-python",
    ):
        assert line in out


def test_from_backend_config(tmp_path: Path) -> None:
    from launchers.remote import from_backend_config

    root = make_run_project(tmp_path)
    launcher = from_backend_config(root / "backend.yaml", account="proj")
    assert launcher.kind == "unicore"
    assert launcher.sbatch_args() == [
        "--partition=batch",
        "--mem=1024M",
        "--time=00:10:00",
        "--account=proj",
    ]
    assert launcher.group.site.url == "https://unicore.example:9112/SITE/rest/core"
    assert launcher.group.environment["Python"] == "venv"


def test_account_option_wins_over_site(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_run_project(tmp_path)
    cfg = tmp_path / "launchers.yaml"
    cfg.write_text(FIRECREST_GROUP)
    rc, out, err = run_cli(
        capsys,
        str(root),
        "-r",
        "cuda(mem=10G)",
        "--config",
        str(cfg),
        "--account",
        "mine",
        "-P",
        "data=keep.csv",
        "-P",
        "name=x",
        "--dry-run",
    )
    assert rc == 0, err
    assert "#SBATCH --account=mine" in out and "--account=acct" not in out


@pytest.mark.parametrize("site", ["unicore", "firecrest"])
def test_backend_config_resources_are_sent_as_written(
    tmp_path: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/design/sites.md §2: a standalone Compute Backend Config's Resources go out as written (docs/design/sites.md §1.2
    table): TotalCPUs, Reservation, Runtime in seconds for UNICORE; D-HH:MM:SS for firecREST;
    the account falls back to $MANTIK_COMPUTE_BUDGET_ACCOUNT."""
    import types

    from launchers import command
    from launchers.remote import from_backend_config
    from launchers.remote.payload import task_payload

    monkeypatch.setenv("MANTIK_COMPUTE_BUDGET_ACCOUNT", "budget")
    head = (
        'UnicoreApiUrl: "https://u.example:9112/S/rest/core"\n'
        if site == "unicore"
        else 'Firecrest: {ApiUrl: "https://fc.example", TokenUrl: "https://auth.example/t", Machine: m}\n'
    )
    path = tmp_path / "backend.yaml"
    path.write_text(head + "Resources: {Queue: batch, Runtime: 90s, Nodes: 2, TotalCPUs: 8, Reservation: r1,"
                    " MemoryPerNode: 1G, QoS: q}\n")  # fmt: skip
    launcher = from_backend_config(path)
    task = command(["python", "t.py"])
    job = types.SimpleNamespace(task=task, launcher=launcher, directory=tmp_path / "d0123456789ab", attempt=1,
                                name=task.name, task_id=task.task_id)  # fmt: skip
    payload = task_payload(job, site)  # type: ignore[arg-type]
    if site == "unicore":
        assert payload.description is not None and "Resources" not in payload.description
        assert payload.description["Job type"] == "raw" and payload.bss_file("x") is not None
    script = (
        payload.bss_file(payload.name_for(1))
        if site == "unicore"
        else payload.script("/scratch/run")
    )
    if script:
        for line in ("--partition=batch", "--time=0-00:02:00", "--nodes=2", "--ntasks=8", "--mem=1024M",
                     "--reservation=r1", "--qos=q", "--account=budget"):  # fmt: skip
            assert f"#SBATCH {line}\n" in script, line


def test_validate_reports_every_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``launchers validate`` checks all entry points of an MLproject (a file or its directory)."""
    good = project(
        tmp_path / "good",
        "kubernetes_env: {}\nentry_points: {main: {command: echo hi}}\n",
        files=(),
    )
    assert main(["validate", str(good)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{good / 'MLproject'}: OK (MLproject; entry points: main)\n"
    assert "warning: " in err and "kubernetes_env: not a key MLflow reads" in err
    bad = project(
        tmp_path / "bad",
        "entry_points:\n  a: {command: 'echo {x}'}\n  b: {parameters: {y: 1}, command: 'echo {y}'}\n"
        "  c: {command: echo ok}\n",
        files=(),
    )
    (bad / "MLproject").rename(bad / "MLProject")
    assert main(["validate", str(bad / "MLProject")]) == 2
    _, err = capsys.readouterr()
    lines = err.strip().split("\n")
    assert len(lines) == 2 and "Traceback" not in err
    assert (
        lines[0].startswith(f"launchers: {bad / 'MLProject'}:2:") and "placeholder {x}" in lines[0]
    )
    assert "entry_points.b.parameters.y" in lines[1]
