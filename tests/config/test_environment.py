"""The ``environment:`` block (docs/configuration.md, Environment): reading it with its errors,
merging levels, and the exact lines and command words the one renderer writes. Pure."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from launchers.config.environment import EMPTY, Container, Environment, for_job, merge_all
from launchers.config.environment_read import coerce
from launchers.config.loader import load_config_text
from launchers.config.model import LocalGroup, SlurmGroup
from launchers.errors import ConfigurationError, ScriptError, TaskError
from launchers.jobs.task import command, task
from launchers.local.launcher import DirectLauncher
from launchers.slurm.envscript import container_words, render_environment
from launchers.slurm.launcher import SlurmLauncher
from launchers.slurm.script import ScriptSpec, render_script
from launchers.slurm.settings import launcher_environment


def _load_error(text: str) -> str:
    with pytest.raises(ConfigurationError) as e:
        load_config_text(text, "f.yaml")
    return str(e.value)


# -- reading ---------------------------------------------------------------------------------


def test_every_level_of_the_file_is_read() -> None:
    cfg = load_config_text(
        """
local:
  - id: here
    environment: {modules: [a], venv: /v, setup: [echo hi]}
slurm:
  - id: c
    env: {A: "1"}
    environment:
      purge: true
      modules: [gcc, cuda]
      conda: ml
      teardown: [echo bye]
      container: {image: /i.sif, runtime: singularity, options: [--cleanenv], bind: [/s], env: {K: v}}
    partitions:
      gpu:
        environment: {modules: [cuda/12]}
        nodes:
          - hosts: [n1]
            environment: {venv: ~/v}
""",
        "f.yaml",
    )
    local, slurm = cfg.groups
    assert isinstance(local, LocalGroup) and isinstance(slurm, SlurmGroup)
    assert local.job_environment == Environment(modules=("a",), venv="/v", setup=("echo hi",))
    assert slurm.env == (("A", "1"),)
    assert slurm.job_environment.container == Container(
        "/i.sif", "singularity", ("--cleanenv",), ("/s",), (("K", "v"),)
    )
    part = slurm.partitions[0]
    assert part.job_environment.modules == ("cuda/12",)
    assert part.nodes[0].job_environment.venv == "~/v"
    launcher = SlurmLauncher(group=slurm, options={"partition": "gpu"})
    merged = launcher_environment(launcher)
    # lists replaced, venv over an inherited conda, the rest kept from the group
    assert merged.modules == ("cuda/12",) and merged.purge is True
    assert merged.venv == "~/v" and merged.conda is None
    assert merged.teardown == ("echo bye",)


def test_variables_is_env_of_the_group() -> None:
    cfg = load_config_text("local:\n  - environment: {variables: {X: 'y'}}\n")
    group = cfg.groups[0]
    assert group.env == (("X", "y"),)  # type: ignore[union-attr]
    assert group.job_environment.variables is None  # type: ignore[union-attr]
    cfg = load_config_text("local:\n  - environment: {env: {X: 'y'}}\n")
    assert cfg.groups[0].env == (("X", "y"),)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "local:\n  - environment: {modulez: [a]}\n",
            "f.yaml:2:19: local[0].environment.modulez: unknown key 'modulez'; did you mean 'modules'?",
        ),
        (
            "local:\n  - environment: {venv: rel/v}\n",
            "f.yaml:2:25: local[0].environment.venv: venv must be an absolute path",
        ),
        (
            "local:\n  - environment: {venv: /v, conda: ml}\n",
            "f.yaml:2:36: local[0].environment.conda: venv and conda cannot both be set",
        ),
        (
            "slurm:\n  - id: a\n    environment:\n      container: {runtime: podman}\n",
            "f.yaml:4:18: slurm[0].environment.container: missing required key 'image'",
        ),
        (
            "slurm:\n  - id: a\n    environment:\n      container: {image: x, runtime: lxc}\n",
            "slurm[0].environment.container.runtime: expected one of apptainer, singularity, podman, docker, pyxis",
        ),
        (
            "local:\n  - environment: {env: {A: '1'}, variables: {B: '2'}}\n",
            "'variables' and 'env' are the same key; keep one",
        ),
        (
            "local:\n  - env: {A: '1'}\n    environment: {variables: {B: '2'}}\n",
            "f.yaml:3:30: local[0].environment.variables: env: and environment: variables: are the same setting; keep one",
        ),
        (
            "slurm:\n  - id: a\n    partitions:\n      p:\n        environment: {setup: echo}\n",
            "f.yaml:5:30: slurm[0].partitions.p.environment.setup: expected a list of strings; write [echo]",
        ),
    ],
)
def test_bad_blocks_name_file_line_column_and_key(text: str, message: str) -> None:
    assert message in _load_error(text)


def test_task_and_launcher_blocks_are_checked_where_given() -> None:
    with pytest.raises(TaskError, match=r"environment\.venv: venv must be an absolute path"):
        command(["true"], environment={"venv": "v"})
    with pytest.raises(TaskError, match="did you mean 'modules'"):
        task(environment={"module": ["a"]})(len)  # checked before the function is
    with pytest.raises(ConfigurationError, match="missing required key 'image'"):
        DirectLauncher().config(environment={"container": {"runtime": "docker"}})
    with pytest.raises(ConfigurationError, match="unknown setting 'modules'"):
        DirectLauncher().config(modules=["a"])
    launcher = SlurmLauncher().config(environment={"modules": ("a",)})
    assert launcher.environment.modules == ("a",)
    again = launcher.config(environment={"venv": "/v"})  # merged over the one set before
    assert again.environment == Environment(modules=("a",), venv="/v")
    assert coerce(None, where="x") is EMPTY


# -- merging -----------------------------------------------------------------------------------


def test_merge_is_key_by_key_lists_replaced_variables_by_name() -> None:
    group = Environment(
        modules=("a", "b"),
        purge=True,
        conda="ml",
        setup=("s1",),
        variables=(("A", "1"), ("B", "2")),
    )
    task_level = Environment(modules=("c",), venv="/v", variables=(("B", "3"),))
    merged = merge_all(group, None, task_level)
    assert merged == Environment(
        modules=("c",), purge=True, venv="/v", setup=("s1",), variables=(("A", "1"), ("B", "3"))
    )
    assert merge_all() is EMPTY and group.merged(EMPTY) is group
    block, variables = for_job({"A": "0", "Z": "z"}, {"B": "task"}, group, task_level)
    assert block.variables is None
    assert dict(variables) == {"A": "1", "Z": "z", "B": "task"}


# -- rendering ---------------------------------------------------------------------------------


def _words(box: Container, **kw: object) -> str:
    args = {"job_dir": "/j", "cwd": "/w", "gpus": 0, "callable_task": False, "slurm": True, **kw}
    return " ".join(container_words(box, **args))  # type: ignore[arg-type]


def test_each_runtime_has_its_documented_command_line() -> None:
    box = Container("img.sif", "apptainer", ("--cleanenv",), ("/data:/d",), (("K", "v 1"),))
    assert _words(box) == "apptainer exec --bind '/data:/d' --env 'K=v 1' '--cleanenv' 'img.sif'"
    assert _words(box, gpus=1, callable_task=True) == (
        "apptainer exec --nv --bind '/data:/d' --bind '/j' --env 'K=v 1' '--cleanenv' 'img.sif'"
    )
    assert _words(attrs.evolve(box, runtime="singularity")).startswith("singularity exec --bind")
    assert _words(attrs.evolve(box, runtime="podman"), gpus=2) == (
        "podman run --rm --device nvidia.com/gpu=all -v '/data:/d' -v '/w:/w' -e 'K=v 1' "
        "-w '/w' '--cleanenv' 'img.sif'"
    )
    assert _words(attrs.evolve(box, runtime="docker"), gpus=1, callable_task=True) == (
        "docker run --rm --gpus all -v '/data:/d' -v '/w:/w' -v '/j:/j' -e 'K=v 1' "
        "-w '/w' '--cleanenv' 'img.sif'"
    )
    assert _words(attrs.evolve(box, runtime="pyxis")) == (
        "env 'K=v 1' srun '--container-image=img.sif' '--container-mounts=/data:/d,/w' "
        "'--container-workdir=/w' '--container-env=K' '--cleanenv'"
    )
    with pytest.raises(ScriptError, match="pyxis runs through srun"):
        _words(attrs.evolve(box, runtime="pyxis"), slurm=False)
    with pytest.raises(ScriptError, match="cannot hold one"):
        _words(Container("i", "pyxis", bind=("/a,b",)))


def test_setup_lines_in_order_each_a_named_step() -> None:
    env = Environment(
        modules=("gcc/12",),
        purge=True,
        venv="~/venvs/x",
        setup=("ulimit -n 4096",),
        teardown=("echo done",),
    )
    lines = render_environment(env, job_dir="/j", cwd="/w")
    text = "\n".join(lines.setup)
    assert text.index("module purge || _l_fail 'purge' $?") < text.index(
        "module load 'gcc/12' || _l_fail 'modules[0]' $?"
    )
    assert ". \"$HOME\"/'venvs/x/bin/activate' || _l_fail 'venv' $?" in text
    assert text.endswith("eval 'ulimit -n 4096' || _l_fail 'setup[0]' $?")
    assert lines.teardown[0].startswith("eval 'echo done' || printf")
    assert render_environment(EMPTY, job_dir="/j", cwd="/w").is_empty


def test_a_script_without_environment_is_unchanged() -> None:
    spec = ScriptSpec(job_dir="/j", task_id="t", job_name="n", argv=("true",))
    text = render_script(spec)
    assert "_l_fail" not in text and "step" not in text
    with_env = render_script(
        attrs.evolve(
            spec,
            environment=Environment(container=Container("i.sif")),
            python="python3",
            argv=("python3", "-m", "launchers.run", "/j"),
        )
    )
    assert (
        "apptainer exec --bind '/j' 'i.sif' sh -c 'command -v \"$1\"" in with_env
    )  # the callable's Python is checked inside the image
    assert "'i.sif' 'python3' '-m' 'launchers.run' '/j' < /dev/null &" in with_env
    assert '\\"step\\"' in with_env  # job.rc names a failed step


def test_callables_use_the_activated_python() -> None:
    from launchers.config.environment import callable_python

    assert callable_python(EMPTY, None, "/usr/bin/python3.11") == "/usr/bin/python3.11"
    assert callable_python(Environment(venv="/v"), None, "/usr/bin/python3.11") == "python3"
    assert callable_python(Environment(container=Container("i")), "/opt/py", "x") == "/opt/py"


# -- what the user sees before anything runs ---------------------------------------------------


def test_submit_dry_run_and_find_explain_show_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from launchers.cli.main import main

    conf = tmp_path / "launchers.yaml"
    conf.write_text(
        "slurm:\n  - id: c\n    environment:\n      modules: [gcc/12]\n"
        "      container: {image: /img/py.sif, runtime: apptainer}\n"
        "    partitions:\n      debug: {}\n"
    )
    code = main(
        [
            "submit", "--config", str(conf), "--workdir", str(tmp_path / "xp"), "--dry-run",
            "--environment", "{setup: ['echo \"$HOME\"']}", "--", "python3", "train.py",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("#!/bin/bash\n#SBATCH --job-name=python3-")
    assert "module load 'gcc/12' || _l_fail 'modules[0]' $?" in out
    assert "eval 'echo \"$HOME\"' || _l_fail 'setup[0]' $?" in out
    assert "apptainer exec '/img/py.sif' 'python3' 'train.py' < /dev/null &" in out
    assert not (tmp_path / "xp").exists()  # nothing submitted, nothing written
    assert main(["find", "--config", str(conf), "--explain", "cpu()"]) == 0
    out = capsys.readouterr().out
    assert "environment (docs/configuration.md, Environment): the job script runs" in out
    assert "  apptainer exec '/img/py.sif' COMMAND..." in out


def test_the_compute_backend_config_environment_maps_onto_the_block() -> None:
    """docs/remote-sites.md, "The same model": each Mantik key has its place in the block."""
    from launchers.remote.environment import as_block, validate_environment

    mantik = validate_environment(
        {
            "Modules": ["Stages/2024", "GCC"],
            "Apptainer": {"Path": "/images/x.sif", "Type": "remote", "Options": "-B /data:/data"},
            "Variables": {"A": 1},
            "PreRunCommandOnComputeNode": ["echo pre"],
            "PostRunCommandOnComputeNode": "echo post",
            "PreRunCommandOnLoginNode": "echo login",
        },
        None,
        site_kind="unicore",
    )
    block, pre_login, post_login = as_block(mantik)
    assert block == Environment(
        modules=("Stages/2024", "GCC"),
        container=Container("/images/x.sif", "apptainer", ("-B", "/data:/data")),
        setup=("echo pre",),
        teardown=("echo post",),
        variables=(("A", "1"),),
    )
    assert [s.text for s in pre_login] == ["echo login"] and post_login == ()
    venv_block, _, _ = as_block(validate_environment({"Python": "/venvs/x"}, None))
    assert venv_block == Environment(venv="/venvs/x")


def test_a_site_group_keeps_the_block_for_the_one_renderer() -> None:
    """unicore/firecrest groups: launchers.yaml's form stays the block (``job_environment``),
    written by the one renderer into the site's script (docs/configuration.md, Environment);
    purge, conda, every runtime and partition blocks are accepted; a mapping in both forms, or
    a partition's block under a group in the Compute Backend Config form, is refused at load."""
    from launchers.remote.environment import Environment as RemoteEnvironment
    from launchers.remote.script import JobScriptSpec, render_job_script

    base = (
        "firecrest:\n  - id: f\n    site: {api_url: https://a, token_url: https://t, machine: m}\n"
    )
    cfg = load_config_text(
        base + "    environment:\n      purge: true\n      modules: [gcc/12]\n      conda: ml\n"
        "      variables: {A: x}\n      setup: [echo pre]\n      teardown: [echo post]\n"
        "      container: {image: img, runtime: docker}\n"
        "    partitions:\n      p:\n        environment: {modules: [cuda]}\n",
        "f.yaml",
    )
    group = cfg.groups[0]
    assert group.environment is None  # type: ignore[union-attr]
    assert group.job_environment == Environment(
        purge=True,
        modules=("gcc/12",),
        conda="ml",
        variables=(("A", "x"),),
        setup=("echo pre",),
        teardown=("echo post",),
        container=Container(image="img", runtime="docker"),
    )
    assert group.partitions[0].job_environment == Environment(modules=("cuda",))  # type: ignore[attr-defined]
    script = render_job_script(
        JobScriptSpec(
            environment=RemoteEnvironment(),
            command="",
            argv=("true",),
            transport="firecrest",
            run_dir="/r",
            block=group.job_environment,
        )
    )
    assert "module purge || _l_fail 'purge' $?" in script
    assert "docker run --rm -v \"$_l_cwd\"':'\"$_l_cwd\" -w \"$_l_cwd\" 'img' 'true'" in script
    for extra, message in [
        ("    environment: {modules: [a], Python: /v}\n", "in one form"),
        (
            "    environment: {Modules: [a]}\n    partitions:\n      p:\n"
            "        environment: {modules: [a]}\n",
            "f.yaml:7:9: firecrest[0].partitions.p: environment: on a partition or node group is "
            "launchers.yaml's form, but the group's environment is a Compute Backend Config "
            "Environment",
        ),
    ]:
        assert message in _load_error(base + extra)


def test_the_schema_covers_the_block() -> None:
    import jsonschema

    from launchers.config.schema import json_schema

    schema = json_schema()
    env = schema["$defs"]["environment"]
    assert set(env["properties"]) >= {"modules", "purge", "venv", "conda", "container", "setup"}
    assert schema["$defs"]["container"]["required"] == ["image"]
    good = {"slurm": [{"id": "a", "environment": {"modules": ["x"], "container": {"image": "i"}}}]}
    jsonschema.validate(good, schema)
    for bad in (
        {"slurm": [{"id": "a", "environment": {"modulez": ["x"]}}]},
        {"local": [{"environment": {"container": {"runtime": "docker"}}}]},
        {"local": [{"environment": {"container": {"image": "i", "runtime": "lxc"}}}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_what_a_launcher_kind_cannot_run_is_refused_at_submit(tmp_path: Path) -> None:
    from launchers.jobs.experiment import experiment

    launcher = DirectLauncher().config(
        environment={"container": {"image": "x", "runtime": "pyxis"}}
    )
    with (
        pytest.raises(ScriptError, match="pyxis runs through srun"),
        experiment(tmp_path / "xp", launcher, progress=False),
    ):
        command(["true"]).submit()
