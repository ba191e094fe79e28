"""A site's ``job.sh`` with launchers.yaml's ``environment:`` block (docs/remote-sites.md, "The
same model"): the lines come from the one renderer (``slurm.envscript``), as in a Slurm job
script; the Compute Backend Config form keeps Mantik's script (tests/remote/test_remote_script.py).
Rendered text compared, and the script run with bash and stand-ins for ``module``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from launchers.batch.rest import check_rest_site
from launchers.config.environment import EMPTY, Container, Environment
from launchers.config.model import UnicoreGroup, UnicoreSite
from launchers.errors import ConfigurationError, ScriptError, TaskError
from launchers.jobs.record import RcRecord
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.remote import decide as D
from launchers.remote.environment import Environment as Mantik
from launchers.remote.environment import validate_environment
from launchers.remote.payload import site_environment
from launchers.remote.script import JobScriptSpec, render_job_script
from launchers.remote.unicore import UnicoreLauncher
from launchers.slurm.envscript import render_environment

HERE = '"$_l_cwd"'


def script(block: Environment, transport: str = "unicore", **spec: Any) -> str:
    return render_job_script(
        JobScriptSpec(
            environment=Mantik(),
            command=spec.pop("command", ""),
            transport=transport,
            run_dir=spec.pop("run_dir", "/r" if transport == "firecrest" else None),
            block=block,
            **spec,
        )
    )


def test_the_lines_are_the_one_renderers() -> None:
    block = Environment(
        purge=True,
        modules=("gcc/12",),
        conda="ml",
        setup=("ulimit -n 64",),
        teardown=("echo bye",),
    )
    text = script(block, argv=("python3", "x.py"))
    lines = render_environment(block, job_dir="/", cwd="/")
    for line in lines.setup:
        assert line in text
    assert "        " + lines.teardown[0] in text  # in the exit handler: on every exit
    assert "launchers_started=1\n'python3' 'x.py'\nexit \"$?\"\n" in text
    assert '"$_l_failed" > "$tmp"' in text  # job.rc names the failed environment step
    assert "launchers_failed_step" not in text


def test_variables_are_single_quoted_and_the_task_env_comes_after() -> None:
    text = script(
        Environment(variables=(("A", "$HOME"),), modules=("m",)),
        argv=("true",),
        exports=(("B", "b"),),
        cpus_per_node=4,
    )
    assert "export A='$HOME'\nexport SRUN_CPUS_PER_TASK=\"4\"\nexport B='b'\n" in text
    mine = script(Environment(variables=(("SRUN_CPUS_PER_TASK", "2"),)), cpus_per_node=4)
    assert 'SRUN_CPUS_PER_TASK="4"' not in mine


@pytest.mark.parametrize(
    ("box", "gpus", "words"),
    [
        (Container(image="/i.sif"), 1, "apptainer exec --nv '/i.sif' 'run'"),
        (
            Container(image="/i.sif", runtime="singularity", bind=("/d",)),
            0,
            "singularity exec --bind '/d' '/i.sif' 'run'",
        ),
        (
            Container(image="img", runtime="podman", env=(("K", "v"),)),
            0,
            f"podman run --rm -v {HERE}':'{HERE} -e 'K=v' -w {HERE} 'img' 'run'",
        ),
        (
            Container(image="img", runtime="docker", options=("--net=host",)),
            2,
            f"docker run --rm --gpus all -v {HERE}':'{HERE} -w {HERE} '--net=host' 'img' 'run'",
        ),
        (
            Container(image="img", runtime="pyxis", bind=("/d",)),
            0,
            f"srun '--container-image=img' '--container-mounts=/d,'{HERE} "
            f"'--container-workdir='{HERE} 'run'",
        ),
    ],
)
def test_every_runtime_runs_in_the_run_directory(box: Container, gpus: int, words: str) -> None:
    """UNICORE's run directory is known only when the job runs: the container's words name it
    as ``"$_l_cwd"`` (the working directory after ``cd``), for both sites alike."""
    for transport in ("unicore", "firecrest"):
        text = script(Environment(container=box), transport, argv=("run",), gpus=gpus)
        assert "\n" + words + "\n" in text
        assert "_l_cwd=$PWD\n" in text


def test_a_command_text_runs_through_eval_or_bash_in_a_container() -> None:
    assert "\neval 'a && b'\n" in script(Environment(modules=("m",)), command="a && b\n")
    text = script(Environment(container=Container(image="/i")), command="a && b")
    assert "\napptainer exec '/i' bash -c 'a && b'\n" in text


def test_a_job_has_one_form() -> None:
    with pytest.raises(ScriptError, match="not both"):
        render_job_script(
            JobScriptSpec(
                environment=validate_environment({"Modules": ["a"]}, None),
                command="true",
                transport="unicore",
                block=Environment(modules=("b",)),
            )
        )
    with pytest.raises(ScriptError, match="NUL"):
        script(Environment(container=Container(image="i", runtime="podman", bind=("a\0b",))))


def test_both_forms_meeting_on_one_job_is_an_error() -> None:
    """A group in the Compute Backend Config form with a launcher's or a task's block in
    launchers.yaml's form: a ConfigurationError (launcher) or a TaskError (task) at submit."""
    group = UnicoreGroup(id="u", environment={"Modules": ["a"]})
    launcher = UnicoreLauncher(group=group)
    plain = command(["true"])
    assert site_environment(launcher, plain, "unicore")[1] is EMPTY
    with pytest.raises(TaskError, match="the task's environment is in launchers\\.yaml's form"):
        site_environment(launcher, command(["true"], environment={"venv": "/v"}), "unicore")
    with pytest.raises(ConfigurationError, match="the launcher's environment"):
        site_environment(launcher.config(environment={"venv": "/v"}), plain, "unicore")
    # batched over the site: refused before the task is recorded, as unbatched
    site = UnicoreGroup(
        id="u", site=UnicoreSite(url="https://h:1/S/rest/core"), environment={"Modules": ["a"]}
    )
    with pytest.raises(TaskError, match="takes one form"):
        check_rest_site(UnicoreLauncher(group=site), command(["true"], environment={"venv": "/v"}))
    # a group in the new form: levels merge key by key, the task's last
    new = UnicoreLauncher(group=UnicoreGroup(id="u", job_environment=Environment(modules=("a",))))
    mantik, block = site_environment(new, command(["true"], environment={"venv": "/v"}), "unicore")
    assert mantik == Mantik() and block == Environment(modules=("a",), venv="/v")


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ("modules[0]", "exit code 1 in environment step modules[0]"),
        ("", "exit code 1"),
        ("Modules[0]", "exit code 1"),  # a Compute Backend Config's step: the reason as before
        ("the command", "exit code 1"),
    ],
)
def test_the_failed_reason_names_the_environment_step(step: str, reason: str) -> None:
    rc = RcRecord(rc=1, step=step)
    row = {"status": {"state": "FAILED", "exitCode": 1}, "time": {}}
    update = D.firecrest_update(row, rc, cancel_requested=False)
    assert update is not None and update.state is JobState.FAILED and update.reason == reason
    props = {"status": "FAILED", "statusMessage": "User application exited", "exitCode": "1"}
    unicore = D.unicore_final(props, rc, cancel_requested=False)
    expected = reason if "step" in reason else "User application exited"
    assert unicore.reason == expected


# -- run with bash -------------------------------------------------------------------------------

MODULE = """#!/bin/sh
echo "module $*" >> "$LOG"
[ "$2" = missing ] && { echo "Lmod has detected the following error: missing" >&2; exit 1; }
exit 0
"""


def run(tmp_path: Path, block: Environment, argv: tuple[str, ...]) -> tuple[int, str, Path]:
    """Render the firecREST script for a run directory under ``tmp_path`` and run it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    module = bin_dir / "module"
    module.write_text(MODULE)
    module.chmod(module.stat().st_mode | stat.S_IXUSR)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.sh").write_text(script(block, "firecrest", run_dir=str(run_dir), argv=argv))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"), "HOME": "/"}
    proc = subprocess.run(
        ["bash", str(run_dir / "job.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    log = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    return proc.returncode, log + proc.stderr, run_dir


def test_teardown_always_and_the_exit_code_is_the_commands(tmp_path: Path) -> None:
    block = Environment(
        modules=("gcc",), setup=('echo setup >> "$LOG"',), teardown=('echo down >> "$LOG"', "false")
    )
    code, log, run_dir = run(tmp_path, block, ("sh", "-c", 'echo cmd >> "$LOG"; exit 3'))
    assert code == 3
    assert log.splitlines()[:4] == ["module load gcc", "setup", "cmd", "down"]
    assert "environment step teardown[1] failed (exit code 1); the job keeps" in log
    rc = json.loads((run_dir / "job.rc").read_text())
    assert (rc["rc"], rc["step"]) == (3, "")


def test_a_failed_step_is_named_and_nothing_else_runs(tmp_path: Path) -> None:
    block = Environment(modules=("ok", "missing"), teardown=('echo down >> "$LOG"',))
    code, log, run_dir = run(tmp_path, block, ("sh", "-c", 'echo cmd >> "$LOG"'))
    assert code == 1
    assert "Lmod has detected the following error: missing" in log
    assert "launchers: environment step modules[1] failed (exit code 1)" in log
    assert "cmd" not in log.split() and "down" not in log.split()
    rc = json.loads((run_dir / "job.rc").read_text())
    assert (rc["rc"], rc["step"]) == (1, "modules[1]")
    update = D.firecrest_update(
        {"status": {"state": "FAILED", "exitCode": 1}, "time": {}},
        RcRecord(rc=rc["rc"], step=rc["step"]),
        cancel_requested=False,
    )
    assert update is not None and update.reason == "exit code 1 in environment step modules[1]"


def test_launchers_run_with_a_group_in_launchers_yaml_form(tmp_path: Path) -> None:
    """``launchers run --backend-config FILE --group ID``: the group's block is written by the
    one renderer when the file has no ``Environment``; a file with one is refused (one form)."""
    from launchers.config.loader import load_config_text
    from launchers.remote.plan import plan_run

    config = load_config_text(
        "unicore:\n  - id: u\n    site: {url: 'https://h:1/S/rest/core'}\n"
        "    environment: {modules: [gcc], teardown: [echo bye]}\n",
        "launchers.yaml",
    )
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "t.sh").write_text("true\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("Resources: {Queue: q}\n")
    plan = plan_run(proj, entry="t.sh", backend_config=plain, config=config, group="u", environ={})
    text = plan.script()
    assert "module load 'gcc' || _l_fail 'modules[0]' $?" in text and "eval 'echo bye'" in text
    mantik = tmp_path / "mantik.yaml"
    mantik.write_text("Resources: {Queue: q}\nEnvironment: {Modules: [x]}\n")
    with pytest.raises(ConfigurationError, match="the file's Environment is a Compute Backend"):
        plan_run(proj, entry="t.sh", backend_config=mantik, config=config, group="u", environ={})


def test_a_cancel_runs_the_teardown_and_records_the_signal(tmp_path: Path) -> None:
    """scancel signals every process of the job: the command ends, then the teardown runs
    before ``job.rc`` records the signal (docs/configuration.md, Environment)."""
    import signal
    import time

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    block = Environment(setup=('echo up >> "$LOG"',), teardown=('echo down >> "$LOG"',))
    (run_dir / "job.sh").write_text(
        script(
            block,
            "firecrest",
            run_dir=str(run_dir),
            argv=("sh", "-c", 'echo cmd >> "$LOG"; exec sleep 30'),
        )
    )
    log = tmp_path / "log"
    proc = subprocess.Popen(
        ["bash", str(run_dir / "job.sh")],
        env={"PATH": os.environ["PATH"], "LOG": str(log)},
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not (log.exists() and "cmd" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 143
    assert log.read_text().split() == ["up", "cmd", "down"]
    rc = json.loads((run_dir / "job.rc").read_text())
    assert (rc["rc"], rc["signal"], rc["step"]) == (143, 15, "")


def test_submit_dry_run_shows_the_sites_script() -> None:
    """``launchers submit --dry-run`` on a site launcher prints the site's ``job.sh`` (with the
    one renderer's lines), not a Slurm job script."""
    from launchers.cli.preview import job_script
    from launchers.config.model import FirecrestGroup, FirecrestSite
    from launchers.remote.firecrest import FirecrestLauncher

    site = FirecrestSite(api_url="https://a", token_url="https://t", machine="m")
    launcher = FirecrestLauncher(
        group=FirecrestGroup(id="f", site=site, job_environment=Environment(modules=("gcc",))),
        options={"partition": "debug"},
    )
    text = job_script(launcher, command(["echo", "hi"], environment={"venv": "/v"}), "/jd")
    assert text.startswith("#!/bin/bash -l\n#SBATCH --job-name=")
    assert "cd 'RUN_DIR' ||" in text and "module load 'gcc' || _l_fail 'modules[0]' $?" in text
    assert "_l_fail 'venv' $?\nlaunchers_started=1\n'echo' 'hi'\n" in text
