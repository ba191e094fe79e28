"""launchers.yaml's ``environment:`` block on UNICORE and firecREST sites, end to end
(docs/remote-sites.md, "The same model"): the loopback servers run the one renderer's lines on the real Slurm,
with real Lmod modules (tests/cluster/lmod.sh), a real virtual environment holding a marker
package, and a container through the recording podman stand-in (tests/env_standins.py), whose
inner command runs for real. The site's ``job.sh`` runs as ``bash -l`` (the login profile sets
PATH), so the stand-ins are put on PATH by a ``setup`` line, as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

import env_standins
from conftest import unavailable
from launchers import ExperimentFailed, command, experiment
from launchers.config.environment import Environment
from launchers.config.model import (
    FirecrestGroup,
    FirecrestSite,
    Position,
    UnicoreGroup,
    UnicoreSite,
)
from launchers.remote.firecrest import FirecrestLauncher
from launchers.remote.unicore import UnicoreLauncher
from paths import TESTS
from remote_fixtures import (  # noqa: F401 - fixtures
    firecrest_server_fixture,
    unicore_server_fixture,
)
from servers.firecrest import FirecrestServer
from servers.unicore import UnicoreServer

pytestmark = pytest.mark.slurm

MODULEFILE = 'setenv("MARKER_MODULE", "loaded-1.0")\nprepend_path("PATH", "{tools}")\n'


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Lmod; a modulefile ``marker/1.0`` with its tool; a venv holding ``marker_pkg``; the
    runtime stand-ins (as tests/integration/slurm/test_environment_real.py makes them)."""
    done = subprocess.run(
        ["bash", str(TESTS / "cluster" / "lmod.sh")], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        unavailable(f"Lmod could not be installed: {done.stderr[-2000:]}")
    root = tmp_path_factory.mktemp("siteenv")
    tools = root / "tools"
    tools.mkdir()
    (tools / "marker-tool").write_text("#!/bin/sh\necho marker-tool-ran\n")
    (tools / "marker-tool").chmod(0o755)
    (root / "modules" / "marker").mkdir(parents=True)
    (root / "modules" / "marker" / "1.0.lua").write_text(MODULEFILE.format(tools=tools))
    env_dir = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    site = env_dir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "marker_pkg").mkdir(parents=True)
    (site / "marker_pkg" / "__init__.py").write_text('VALUE = "venv-marker"\n')
    standins = env_standins.install(root / "standins", root / "conda-envs")
    return {
        "modules": root / "modules",
        "venv": env_dir,
        "standins": standins,
        "log": root / "standins.log",
    }


def _run(launcher: Any, world: dict[str, Path], tmp_path: Path) -> dict[str, Any]:
    """Three tasks: modules + venv (COMPLETED), a missing module (FAILED, the step named), and
    a command in podman with a teardown (FAILED with the command's exit code 3)."""
    world["log"].unlink(missing_ok=True)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "xp", launcher, progress=False):
        mod_venv = command(
            [
                "sh",
                "-c",
                'echo "$MARKER_MODULE"; marker-tool; '
                'python3 -c "import marker_pkg; print(marker_pkg.VALUE)"',
            ],
            name="modvenv",
            environment={"venv": str(world["venv"])},
        ).submit()
        missing = command(["true"], name="missing", environment={"modules": ["nosuch/9"]}).submit()
        boxed = command(
            ["sh", "-c", 'echo "in-box $CK"; pwd; exit 3'],
            name="boxed",
            environment={
                "container": {"image": "img", "runtime": "podman", "env": {"CK": "v 'w'"}},
                "setup": [f'export PATH={world["standins"]}:"$PATH"'],
                "teardown": ["echo teardown-ran"],
            },
        ).submit()
    return {"modvenv": mod_venv, "missing": missing, "boxed": boxed}


def _check(jobs: dict[str, Any], world: dict[str, Path]) -> None:
    mod_venv, missing, boxed = jobs["modvenv"], jobs["missing"], jobs["boxed"]
    assert mod_venv.state.value == "COMPLETED", (mod_venv.reason, mod_venv.stderr_path.read_text())
    assert mod_venv.stdout_path.read_text().split() == [
        "loaded-1.0",
        "marker-tool-ran",
        "venv-marker",
    ]
    assert missing.state.value == "FAILED"
    assert missing.reason == "exit code 1 in environment step modules[0]"
    err = missing.stderr_path.read_text()
    assert "nosuch/9" in err and "launchers: environment step modules[0] failed" in err
    assert boxed.state.value == "FAILED" and boxed.exit_code == 3, boxed.reason
    out = boxed.stdout_path.read_text().splitlines()
    assert out[0] == "in-box v 'w'" and out[-1] == "teardown-ran"
    run_dir = out[1]
    logged = [json.loads(line) for line in world["log"].read_text().splitlines()]
    assert logged == [
        [
            "podman",
            "run",
            "--rm",
            "-v",
            f"{run_dir}:{run_dir}",
            "-e",
            "CK=v 'w'",
            "-w",
            run_dir,
            "img",
            "sh",
            "-c",
            'echo "in-box $CK"; pwd; exit 3',
        ]
    ]


def _group_environment(world: dict[str, Path]) -> Environment:
    return Environment(modules=("marker/1.0",), variables=(("MODULEPATH", str(world["modules"])),))


def test_unicore_site_modules_venv_and_a_container(
    unicore_server: UnicoreServer,
    world: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STANDIN_LOG", str(world["log"]))
    launcher = UnicoreLauncher(
        group=UnicoreGroup(
            id="uc",
            site=UnicoreSite(url=unicore_server.base_url),
            position=Position("launchers.yaml", 1),
            job_environment=_group_environment(world),
        ),
        options={"partition": "debug", "time": "0:05:00"},
    )
    _check(_run(launcher, world, tmp_path), world)


def test_firecrest_site_modules_venv_and_a_container(
    firecrest_server: FirecrestServer,
    world: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STANDIN_LOG", str(world["log"]))
    server = firecrest_server
    site = FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    launcher = FirecrestLauncher(
        group=FirecrestGroup(
            id="fc",
            site=site,
            position=Position("launchers.yaml", 1),
            job_environment=_group_environment(world),
        ),
        options={"partition": "debug"},
    )
    _check(_run(launcher, world, tmp_path), world)
