"""The ``environment:`` block end to end (docs/configuration.md, Environment): real Lmod modules
(Debian's lmod, tests/cluster/lmod.sh) and a real virtual environment, through the direct
launcher, Slurm here and Slurm over SSH; the container runtimes and conda through recording
stand-ins (tests/env_standins.py, docs/testing.md) whose inner commands run for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import env_standins
import env_tasks
from conftest import unavailable
from launchers import ExperimentFailed, JobState, SlurmLauncher, command, experiment
from launchers.config.loader import load_config
from launchers.config.model import LocalGroup
from launchers.connectors import registry
from launchers.local.launcher import DirectLauncher
from launchers.runtime.core import current as current_runtime
from paths import TESTS, job_pythonpath

SRC = Path(__import__("launchers").__file__).parent.parent

MODULEFILE = """\
setenv("MARKER_MODULE", "loaded-1.0")
prepend_path("PATH", "{tools}")
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Lmod installed; a modulefile ``marker/1.0`` and its tool; a venv holding ``marker_pkg``;
    the runtime and conda stand-ins, and a conda environment ``ml``."""
    done = subprocess.run(
        ["bash", str(TESTS / "cluster" / "lmod.sh")], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        unavailable(f"Lmod could not be installed: {done.stderr[-2000:]}")
    root = tmp_path_factory.mktemp("envworld")
    tools = root / "tools"
    tools.mkdir()
    (tools / "marker-tool").write_text("#!/bin/sh\necho marker-tool-ran\n")
    (tools / "marker-tool").chmod(0o755)
    mods = root / "modules" / "marker"
    mods.mkdir(parents=True)
    (mods / "1.0.lua").write_text(MODULEFILE.format(tools=tools))
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    site = env_dir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "marker_pkg").mkdir(parents=True)
    (site / "marker_pkg" / "__init__.py").write_text('VALUE = "venv-marker"\n')
    envs = root / "conda-envs"
    (envs / "ml" / "bin").mkdir(parents=True)
    (envs / "ml" / "bin" / "ml-tool").write_text("#!/bin/sh\necho ml-tool-ran\n")
    (envs / "ml" / "bin" / "ml-tool").chmod(0o755)
    standins = env_standins.install(root / "standins", envs)
    pyxis = env_standins.install(root / "pyxis", envs, srun=True)
    return {
        "root": root,
        "modules": root / "modules",
        "venv": env_dir,
        "standins": standins,
        "pyxis": pyxis,
        "log": root / "standins.log",
    }


@pytest.fixture
def job_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, world: dict[str, Path]) -> None:
    """Jobs import the tests' modules and this launchers; the stand-ins log to one file."""
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(SRC))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("STANDIN_LOG", str(world["log"]))


def _log(world: dict[str, Path]) -> list[list[str]]:
    path = world["log"]
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_direct_modules_venv_conda_and_each_container(
    world: dict[str, Path], job_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{world['standins']}{os.pathsep}{os.environ['PATH']}")
    world["log"].unlink(missing_ok=True)
    launcher = DirectLauncher(group=LocalGroup(env=(("MODULEPATH", str(world["modules"])),)))
    launcher = launcher.config(environment={"modules": ["marker/1.0"]})
    runtimes = ["apptainer", "singularity", "podman", "docker"]
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher, progress=False):
        module_cmd = command(
            ["sh", "-c", 'echo "$MARKER_MODULE"; marker-tool'], name="mod"
        ).submit()
        missing = command(["true"], name="missing", environment={"modules": ["nosuch/9"]}).submit()
        in_venv = env_tasks.where_am_i("callable")
        callable_job = attrs.evolve(in_venv, environment=_env(venv=str(world["venv"]))).submit()
        venv_cmd = command(
            ["python3", "-c", "import marker_pkg, sys; print(marker_pkg.VALUE, sys.prefix)"],
            name="venvcmd",
            environment={"venv": str(world["venv"])},
        ).submit()
        conda_cmd = command(
            ["sh", "-c", 'echo "$CONDA_DEFAULT_ENV"; ml-tool'],
            name="conda",
            environment={"modules": [], "conda": "ml"},
        ).submit()
        no_conda = command(
            ["true"],
            name="noconda",
            environment={"modules": [], "conda": "ml", "variables": {"PATH": "/usr/bin:/bin"}},
        ).submit()
        boxes = {
            rt: command(
                ["sh", "-c", f'echo in-{rt} > "$OUT_DIR/{rt}.txt"; echo "$CK"; pwd; exit 3'],
                name=rt,
                cwd=str(tmp_path),
                environment={
                    "modules": [],
                    "container": {
                        "image": f"img-{rt}",
                        "runtime": rt,
                        "bind": [f"{tmp_path}:/data"],
                        "env": {"CK": "v 'w'", "OUT_DIR": str(tmp_path)},
                    },
                    "teardown": ["echo teardown-ran"],
                },
            ).submit()
            for rt in runtimes
        }
        boxed_callable = attrs.evolve(
            in_venv, environment=_env(modules=[], container={"image": "py.sif"})
        ).submit()
    assert module_cmd.state is JobState.COMPLETED
    assert module_cmd.stdout_path.read_text().splitlines()[1:] == ["loaded-1.0", "marker-tool-ran"]
    assert missing.state is JobState.FAILED
    assert missing.record.reason == "exit code 1 in environment step modules[0]"
    err = missing.stderr_path.read_text()
    assert "The following module(s) are unknown" in err and '"nosuch/9"' in err  # Lmod's own
    assert "launchers: environment step modules[0] failed (exit code 1)" in err
    prefix, marker, module, note = callable_job.result()
    assert (Path(prefix), marker, module, note) == (
        world["venv"],
        "venv-marker",
        "loaded-1.0",
        "callable",
    )
    assert venv_cmd.stdout_path.read_text().splitlines()[1] == f"venv-marker {world['venv']}"
    assert conda_cmd.stdout_path.read_text().splitlines()[1:] == ["ml", "ml-tool-ran"]
    assert no_conda.record.reason == "exit code 127 in environment step conda"
    assert "launchers: conda is not available" in no_conda.stderr_path.read_text()
    calls = {c[0]: c[1:] for c in _log(world) if c[0] != "conda"}
    for rt, job in boxes.items():
        assert (job.state, job.exit_code) == (JobState.FAILED, 3), rt
        assert (tmp_path / f"{rt}.txt").read_text() == f"in-{rt}\n"
        out = job.stdout_path.read_text().splitlines()
        assert out[1:] == ["v 'w'", str(tmp_path), "teardown-ran"], rt
    argv = ["sh", "-c", 'echo in-{} > "$OUT_DIR/{}.txt"; echo "$CK"; pwd; exit 3']
    env_args = ["CK=v 'w'", f"OUT_DIR={tmp_path}"]
    for rt in ("apptainer", "singularity"):
        cmd = [a.replace("{}", rt) for a in argv]
        assert calls[rt] == [
            "exec", "--bind", f"{tmp_path}:/data", "--env", env_args[0], "--env", env_args[1],
            f"img-{rt}", *cmd,
        ]  # fmt: skip
    for rt in ("podman", "docker"):
        cmd = [a.replace("{}", rt) for a in argv]
        assert calls[rt] == [
            "run", "--rm", "-v", f"{tmp_path}:/data", "-v", f"{tmp_path}:{tmp_path}",
            "-e", env_args[0], "-e", env_args[1], "-w", str(tmp_path), f"img-{rt}", *cmd,
        ]  # fmt: skip
    # a callable in a container: its Python is looked for inside the image
    assert boxed_callable.state is JobState.COMPLETED
    assert boxed_callable.result()[3] == "callable"


def _env(**values: Any) -> Any:
    from launchers.config.environment_read import coerce

    return coerce(values, where="test")


def test_callable_in_an_image_without_its_python(
    world: dict[str, Path], job_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{world['standins']}{os.pathsep}{os.environ['PATH']}")
    launcher = DirectLauncher(group=LocalGroup(python="python-missing"))
    launcher = launcher.config(environment={"container": {"image": "bare.sif"}})
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher, progress=False):
        job = env_tasks.where_am_i("x").submit()
    assert (job.state, job.exit_code) == (JobState.FAILED, 127)
    assert (
        "launchers: the container image bare.sif has no python-missing: a callable task needs "
        "Python (with launchers installed) inside the image" in job.stderr_path.read_text()
    )


@pytest.fixture
def slurm(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    current_runtime().forget_executors("slurm")
    registry.forget_all()
    yield slurm_cluster
    current_runtime().forget_executors("slurm")
    registry.forget_all()


def _config(tmp_path: Path, world: dict[str, Path], info: dict[str, str], ssh: bool) -> Path:
    lines = []
    if ssh:
        lines += [
            "connectors:",
            "  ssh:",
            "    cluster:",
            "      hostname: 127.0.0.1",
            f"      port: {info['CLUSTER_SSH_PORT']}",
            "      username: root",
            f"      identity_file: {info['CLUSTER_SSH_KEY']}",
            f"      known_hosts: {info['CLUSTER_SSH_KNOWN_HOSTS']}",
            "      ssh_config: false",
            f"      workdir: {tmp_path / 'remote'}",
        ]
    lines += [
        "slurm:",
        "  - id: env",
        *(["    connector: cluster"] if ssh else []),
        "    environment:",
        f"      variables: {{MODULEPATH: {world['modules']}}}",
        "      purge: true",
        "      modules: [marker/1.0]",
        "    partitions:",
        "      debug:",
        "        environment:",
        f"          setup: ['export PATH={world['pyxis']}:$PATH']",
    ]
    path = tmp_path / "launchers.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slurm
def test_slurm_modules_venv_and_pyxis(
    world: dict[str, Path], job_env: None, slurm: dict[str, str], tmp_path: Path
) -> None:
    world["log"].unlink(missing_ok=True)
    group = load_config(_config(tmp_path, world, slurm, ssh=False)).groups[0]
    launcher = SlurmLauncher(group=group, options={"partition": "debug", "time": "00:05:00"})
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher, progress=False):
        module_cmd = command(
            ["sh", "-c", 'echo "$MARKER_MODULE"; marker-tool'], name="mod"
        ).submit()
        missing = command(
            ["true"], name="missing", environment={"modules": ["marker/1.0", "nosuch/9"]}
        ).submit()
        venv_job = attrs.evolve(
            env_tasks.where_am_i("slurm"), environment=_env(venv=str(world["venv"]))
        ).submit()
        pyxis = command(
            ["sh", "-c", "pwd; echo $CK"],
            name="pyxis",
            cwd=str(tmp_path),
            environment={
                "container": {
                    "image": "nvcr.io#nvidia/pytorch:24.01",
                    "runtime": "pyxis",
                    "env": {"CK": "x y"},
                }
            },
        ).submit()
    assert module_cmd.state is JobState.COMPLETED
    assert module_cmd.stdout_path.read_text().splitlines()[1:] == ["loaded-1.0", "marker-tool-ran"]
    assert missing.state is JobState.FAILED
    assert "environment step modules[1]" in (missing.record.reason or "")
    assert "The following module(s) are unknown" in missing.stderr_path.read_text()
    prefix, marker, module, _ = venv_job.result()
    assert (Path(prefix), marker, module) == (world["venv"], "venv-marker", "loaded-1.0")
    assert pyxis.state is JobState.COMPLETED
    assert pyxis.stdout_path.read_text().splitlines()[1:] == [str(tmp_path), "x y"]
    (srun,) = [c[1:] for c in _log(world) if c[0] == "srun"]
    assert srun == [
        "--container-image=nvcr.io#nvidia/pytorch:24.01",
        f"--container-mounts={tmp_path}",
        f"--container-workdir={tmp_path}",
        "--container-env=CK",
        "sh", "-c", "pwd; echo $CK",
    ]  # fmt: skip


@pytest.mark.slurm
@pytest.mark.ssh
def test_slurm_over_ssh_loads_modules_and_a_venv(
    world: dict[str, Path], job_env: None, slurm: dict[str, str], tmp_path: Path
) -> None:
    group = load_config(_config(tmp_path, world, slurm, ssh=True)).groups[0]
    launcher = SlurmLauncher(group=group, options={"partition": "debug", "time": "00:05:00"})
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher, progress=False):
        ok = command(["sh", "-c", 'echo "$MARKER_MODULE"; marker-tool'], name="mod").submit()
        missing = command(["true"], name="missing", environment={"modules": ["nosuch/9"]}).submit()
        in_venv = command(
            ["python", "-c", "import sys, marker_pkg; print(sys.prefix, marker_pkg.VALUE)"],
            name="venv",
            environment={"venv": str(world["venv"])},
        ).submit()
    assert ok.state is JobState.COMPLETED
    assert ok.stdout_path.read_text().splitlines()[1:] == ["loaded-1.0", "marker-tool-ran"]
    assert in_venv.state is JobState.COMPLETED, in_venv.stderr_path.read_text()
    assert in_venv.stdout_path.read_text().splitlines()[1:] == [f"{world['venv']} venv-marker"]
    assert missing.state is JobState.FAILED
    assert "environment step modules[0]" in (missing.record.reason or "")
    assert "The following module(s) are unknown" in missing.stderr_path.read_text()


def test_batch_environment_is_part_of_the_shape_and_applied_per_task(
    world: dict[str, Path], job_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks with different environments never share a pilot (batch/shape.py); each runs in
    its own inside the pilot, whose runner itself runs bare (no container around it)."""
    from launchers.batch.executor import BatchExecutor

    monkeypatch.setenv("PATH", f"{world['standins']}{os.pathsep}{os.environ['PATH']}")
    group = LocalGroup(max_jobs=4, env=(("MODULEPATH", str(world["modules"])),))
    inner = DirectLauncher(group=group).config(environment={"modules": ["marker/1.0"]})
    batch = inner.batched(slots=2, linger=1)
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    before = ex.pilots_submitted
    echo = ["sh", "-c", 'echo "$MARKER_MODULE $CONDA_DEFAULT_ENV"']
    with experiment(tmp_path / "xp", batch, progress=False):
        same = [command([*echo, str(i)], name=f"m{i}").submit() for i in range(2)]
        conda = command(echo, name="conda", environment={"conda": "ml"}).submit()
        boxed = command(
            ["sh", "-c", "echo boxed"],
            name="boxed",
            environment={"container": {"image": "b.sif", "runtime": "docker"}},
        ).submit()
    assert ex.pilots_submitted - before == 3  # modules; modules + conda; modules + container
    for job in same:
        assert job.stdout_path.read_text().splitlines()[-1] == "loaded-1.0 "
    assert conda.stdout_path.read_text().splitlines()[-1] == "loaded-1.0 ml"
    assert boxed.stdout_path.read_text().splitlines()[-1] == "boxed"
    assert len({j.record.extra["batch"]["queue"] for j in [*same, conda, boxed]}) == 3
