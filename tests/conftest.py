"""Shared fixtures: the real single-machine Slurm cluster and sshd (tests/cluster/start.sh).

Under ``CI=true`` a service that cannot be started fails the test; elsewhere it is skipped
with the reason, so a laptop without root can still run the pure tests.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

CLUSTER_SCRIPTS = pathlib.Path(__file__).parent / "cluster"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"required service unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def start_cluster(cluster_dir: str, **knobs: str) -> dict[str, str]:
    """Start (or reuse, when healthy) a sandbox cluster and return its environment."""
    # env.sh exports the ports a running sandbox uses (CLUSTER_SSH_PORT...). Inherited, they
    # would read as explicit knobs and make start.sh restart a healthy cluster: drop them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTER_")}
    env.update(CLUSTER_DIR=cluster_dir, **knobs)
    try:
        out = subprocess.run(
            ["bash", str(CLUSTER_SCRIPTS / "start.sh")],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=600,
        ).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        err = getattr(e, "stderr", "") or ""
        _unavailable(f"could not start the Slurm sandbox in {cluster_dir}: {e}\n{err[-2000:]}")
        raise
    return dict(
        line[len("export ") :].split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    """The main cluster (accounting on, sshd on 127.0.0.1). SLURM_CONF is exported for tests."""
    info = start_cluster(os.environ.get("CLUSTER_DIR", "/tmp/slurm-sandbox"))
    old = {k: os.environ.get(k) for k in info}
    os.environ.update(info)
    try:
        yield info
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def slurm_env(slurm_cluster: dict[str, str]) -> dict[str, str]:
    """An environment for subprocesses that talk to the main cluster."""
    return dict(os.environ, **slurm_cluster)
