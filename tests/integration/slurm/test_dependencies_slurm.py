"""Jobs that wait for other jobs on the real Slurm and sshd (docs/design/runtime.md §15): native
``--dependency`` chains, a chain across launchers with results passed along, a failure in the
middle, a client killed mid-graph, a fan-out/fan-in graph. The pure side: test_dependencies.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dependencies_tasks as dt
from conftest import until_released
from launchers import ExperimentFailed, JobState, SlurmLauncher, command, experiment
from launchers.config.loader import load_config
from launchers.config.model import LocalGroup, SlurmGroup
from launchers.connectors import registry
from launchers.local.launcher import DirectLauncher
from launchers.runtime.core import current as current_runtime
from paths import SRC, TESTS, job_pythonpath

S = JobState

pytestmark = pytest.mark.slurm


def slurm() -> SlurmLauncher:
    return SlurmLauncher(
        group=SlurmGroup(id="sb"), options={"partition": "debug", "time": "00:05:00"}
    )


def direct() -> DirectLauncher:
    return DirectLauncher(group=LocalGroup())  # type: ignore[call-arg]


@pytest.fixture
def cluster(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    monkeypatch.setenv("PYTHONPATH", job_pythonpath(SRC))
    monkeypatch.setenv("LAUNCHERS_STATE_DIR", str(tmp_path / "state"))
    current_runtime().forget_executors("slurm")
    yield slurm_cluster
    current_runtime().forget_executors("slurm")
    registry.forget_all()


def scontrol_dependency(native_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", native_id], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    found = re.search(r"\bDependency=(\S+)", out)
    return found.group(1) if found else ""


def wait_for(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_native_chain_results_passed_along(cluster: dict[str, str], tmp_path: Path) -> None:
    """A -> B -> C with --dependency: B and C are in Slurm's queue while A runs, and C's results
    come from B's directory when it starts."""
    release = tmp_path / "release-a"
    with experiment(tmp_path / "xp", slurm()):
        # A runs until the test has seen B and C queued behind it, however slow the machine
        a = command(["sh", "-c", until_released(release)], name="a").submit()
        b = dt.prepare(4, tmp_path / "data").submit(after=[a])  # 0+1+2+3
        c = dt.train(b, 10.0).submit()
        wait_for(lambda: c.native_id is not None)
        assert a.state in (S.PENDING, S.RUNNING) and b.state is S.PENDING
        assert scontrol_dependency(str(b.native_id)).startswith(f"afterok:{a.native_id}")
        assert scontrol_dependency(str(c.native_id)).startswith(f"afterok:{b.native_id}")
        assert c.record.extra["native_dependency"] == f"afterok:{b.native_id}"
        script = (c.directory / "job.sh").read_text()
        assert f"#SBATCH --dependency=afterok:{b.native_id}" in script
        assert "#SBATCH --kill-on-invalid-dep=yes" in script
        release.touch()
    assert a.state is S.COMPLETED
    assert c.result() == 60.0
    # C was queued before B ran: its queue wait overlapped B's run
    assert c.record.submitted_at is not None and b.record.started_at is not None
    assert c.record.submitted_at <= b.record.started_at


def test_failure_in_the_middle(cluster: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ExperimentFailed) as info, experiment(tmp_path / "xp", slurm()):
        a = command(["true"], name="a").submit()
        b = command(["sh", "-c", "sleep 1; exit 3"], name="b").submit(after=[a])
        c = dt.mark(marker, 1).submit(after=[b])  # natively held
        d = dt.mark(marker, c).submit(launcher=direct())  # waits in the client
        e = dt.mark(marker, 2).submit(after=[d])
    assert not marker.exists()  # nothing of them ran
    assert (a.state, b.state) == (S.COMPLETED, S.FAILED)
    assert (c.state, c.reason) == (S.CANCELLED, f"dependency {b.task_id} ended FAILED")
    assert (d.state, d.reason) == (S.CANCELLED, f"dependency {c.task_id} ended CANCELLED")
    assert (e.state, e.reason) == (S.CANCELLED, f"dependency {d.task_id} ended CANCELLED")
    assert "1 job(s) did not complete" in str(info.value)
    assert "3 job(s) did not run because a dependency failed" in str(info.value)
    # Slurm ended the natively held one itself (--kill-on-invalid-dep), without starting it
    wait_for(lambda: "CANCELLED" in _sacct(str(c.native_id)), 30)


def _sacct(native_id: str) -> str:
    return subprocess.run(["sacct", "-X", "--noheader", "--parsable2", "-j", native_id,
                           "--format=State"], capture_output=True, text=True).stdout  # fmt: skip


@pytest.mark.ssh
def test_chain_across_launchers(cluster: dict[str, str], tmp_path: Path) -> None:
    """local -> Slurm over SSH -> local, each result passed to the next (the SSH job runs this
    checkout's code: the group's env and python say so)."""
    info = cluster
    conf = tmp_path / "launchers.yaml"
    conf.write_text(textwrap.dedent(f"""\
        connectors:
          ssh:
            cluster:
              hostname: 127.0.0.1
              port: {info["CLUSTER_SSH_PORT"]}
              username: root
              identity_file: {info["CLUSTER_SSH_KEY"]}
              known_hosts: {info["CLUSTER_SSH_KNOWN_HOSTS"]}
              ssh_config: false
              workdir: {tmp_path / "remote"}
        slurm:
          - id: over-ssh
            connector: cluster
            python: {sys.executable}
            env: {{PYTHONPATH: "{TESTS}:{SRC}"}}
            partitions:
              debug: {{}}
        """))  # fmt: skip
    over_ssh = SlurmLauncher(group=load_config(conf).groups[0], options={"partition": "debug", "time": "00:05:00"})  # fmt: skip
    with experiment(tmp_path / "xp", direct()):
        data = dt.prepare(3, tmp_path / "data").submit()  # local: a Path
        model = dt.train(data, 2.0).submit(launcher=over_ssh)  # Slurm over SSH: 6.0
        total = dt.evaluate([model, model], tag="end").submit()  # local again
        assert model.state is S.WAITING
    assert model.result() == 6.0 and total.result()["total"] == 12.0
    remote = Path(str(model.record.extra["remote_dir"]))
    assert json.loads((remote / "inputs.json").read_text()) == {
        data.task_id: {"value": {"$path": str(tmp_path / "data" / "data-3.txt")}}
    }


CLIENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from launchers import SlurmLauncher, command, experiment
    from launchers.config.model import LocalGroup, SlurmGroup
    from launchers.local.launcher import DirectLauncher
    L = SlurmLauncher(group=SlurmGroup(id="sb"), options={"partition": "debug", "time": "00:05:00"})
    D = DirectLauncher(group=LocalGroup())
    xp, held = Path(sys.argv[1]), sys.argv[2]  # A runs until the test has killed the first client
    with experiment(xp, L):
        a = command(["sh", "-c", held], name="a").submit()
        b = command(["sh", "-c", "echo b"], name="b").submit(after=[a])   # native
        c = command(["sh", "-c", "echo c"], name="c").submit(D, after=[b])  # waits here
        d = command(["sh", "-c", "echo d"], name="d").submit(after=[c])   # waits here
        while b.native_id is None:
            time.sleep(0.05)
        print("SUBMITTED", flush=True)
    print("STATES", a.state.value, b.state.value, c.state.value, d.state.value, flush=True)
    """
)


def test_client_killed_mid_graph(cluster: dict[str, str], tmp_path: Path) -> None:
    """SIGKILL while A runs and B is held by Slurm: the next run completes the graph, and sbatch
    ran once per Slurm job (a PATH shim counts the calls by job directory)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "sbatch.log"
    real = subprocess.run(["sh", "-c", "command -v sbatch"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    (shim / "sbatch").write_text(f'#!/bin/sh\necho "$PWD" >> {calls}\nexec {real} "$@"\n')
    (shim / "sbatch").chmod(0o755)
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}")
    xp, release = tmp_path / "xp", tmp_path / "release-a"
    argv = [sys.executable, str(script), str(xp), until_released(release)]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "SUBMITTED"
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    release.touch()
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90)
    assert second.returncode == 0, second.stderr
    assert "STATES COMPLETED COMPLETED COMPLETED COMPLETED" in second.stdout
    dirs = calls.read_text().split()
    assert len(dirs) == len(set(dirs)) == 3  # a, b, d: each submitted once
    for name in "bcd":
        [out] = xp.glob(f"jobs/{name}/*/job.out")
        assert out.read_text().count("==== launchers: attempt 1") == 1


def test_fan_out_fan_in(cluster: dict[str, str], tmp_path: Path) -> None:
    """3 preprocess -> 8 trains each -> 3 evaluations (local) -> 1 summary: 31 tasks."""
    L = slurm()
    with experiment(tmp_path / "xp", L) as xp:
        preps = [command(["true"], name=f"prep{i}").submit() for i in range(3)]
        evals = []
        for i, prep in enumerate(preps):
            trains = [command(["true", str(k)], name=f"train{i}").submit(after=[prep]) for k in range(8)]  # fmt: skip
            evals.append(dt.mark(tmp_path / "evals", i + 1).submit(direct(), after=trains))
        summary = dt.evaluate(evals, tag="all").submit()
    assert len(xp.jobs) == 31 and {j.state for j in xp.jobs} == {S.COMPLETED}
    assert summary.result()["total"] == 6
    assert (tmp_path / "evals").read_text().count("\n") == 3


def test_array_elements_and_batched_tasks(cluster: dict[str, str], tmp_path: Path) -> None:
    """An array element (``ID_N``) and a whole array (every element) as native dependencies;
    batched tasks as dependents and as dependencies (they wait in the client)."""
    from launchers.slurm.executor import array

    L = slurm()
    with experiment(tmp_path / "xp", L) as xp:
        with array(L):
            elements = [command(["sleep", "1", str(i)], name="el").submit() for i in range(3)]
        one = command(["true"], name="one").submit(after=[elements[1]])
        whole = command(["true"], name="whole").submit(after=elements)
        batch = L.batched(slots=2)
        batched = [command(["true", str(i)], name="bt").submit(batch, after=[one]) for i in range(2)]  # fmt: skip
        last = command(["true"], name="last").submit(direct(), after=batched)
        wait_for(lambda: whole.native_id is not None)
        master = str(elements[0].native_id).split("_")[0]
        assert one.record.extra["native_dependency"] == f"afterok:{master}_1"
        assert whole.record.extra["native_dependency"] == (
            f"afterok:{master}_0:{master}_1:{master}_2"
        )
    assert {j.state for j in xp.jobs} == {S.COMPLETED} and last.attempt == 1
