"""Shared fixtures: the real single-machine Slurm cluster and sshd (tests/cluster/start.sh).

Under ``CI=true`` a service that cannot be started fails the test; elsewhere it is skipped
with the reason, so a laptop without root can still run the pure tests.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from hypothesis import settings

# Property tests check answers, not speed (speed lives in benchmarks/): no per-example deadline,
# which a loaded machine running the suite's workers in parallel would break at random.
settings.register_profile("launchers", deadline=None)
settings.load_profile("launchers")

CLUSTER_SCRIPTS = pathlib.Path(__file__).parent / "cluster"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first (a stable sort, so the rest keep their order): the
    parallel pass hands tests to its workers in this order, and a long test handed out last
    would end the pass alone while the other workers idle. Tests of an ``xdist_group`` stay
    where they are (the scheduler sends each group first, as one unit)."""

    def later(item: pytest.Item) -> bool:
        return item.get_closest_marker("slow") is None or bool(
            item.get_closest_marker("xdist_group")
        )

    items.sort(key=later)


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """A component a test needs cannot be had: the test fails under CI (``CI=true``), where
    every component must be there; elsewhere (a developer's laptop) it is skipped. The one
    place where the suite may skip."""
    if IN_CI:
        pytest.fail(f"required component unavailable under CI: {reason}", pytrace=False)
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
        unavailable(f"could not start the Slurm sandbox in {cluster_dir}: {e}\n{err[-2000:]}")
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


#: What tests/cluster/start.sh sets up as a real site has it (partitions restricted, hidden and
#: maint; QoS short, multigpu, extended; account physics): a sandbox started before they
#: existed lacks them until it is restarted.
SITE_CHECK = ["scontrol", "show", "partition", "restricted"]


@pytest.fixture(scope="session")
def site_cluster(slurm_cluster: dict[str, str]) -> dict[str, str]:
    """The main cluster, with the site's restricted, hidden and DOWN partitions, QoS limits and
    accounts (docs/testing.md); a sandbox started without them fails with what to do."""
    done = subprocess.run(SITE_CHECK, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        pytest.fail(
            f"the sandbox in {slurm_cluster.get('CLUSTER_DIR')} was started before the site "
            "additions of tests/cluster/start.sh (no partition 'restricted'): restart it "
            "(bash tests/cluster/stop.sh; bash tests/cluster/start.sh)",
            pytrace=False,
        )
    return slurm_cluster


@pytest.fixture(scope="session")
def slurm_env(slurm_cluster: dict[str, str]) -> dict[str, str]:
    """An environment for subprocesses that talk to the main cluster."""
    return dict(os.environ, **slurm_cluster)


def _processes_under(root: pathlib.Path) -> list[str]:
    """Processes of this machine started for jobs under ``root`` (their command line names it,
    or their ``LAUNCHERS_JOB_DIR`` is in it): a pilot's runner, a task the runner left behind."""
    mark = str(root).encode()
    out = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if mark in argv or b"LAUNCHERS_JOB_DIR=" + mark in env:
            text = argv.replace(bytes(1), b" ").decode(errors="replace")
            out.append(f"{proc.name}: {text[:160]}")
    return out


def _slurm_jobs_under(root: pathlib.Path) -> list[str]:
    """Live Slurm jobs (squeue) whose working directory is under ``root``; [] without Slurm."""
    try:
        res = subprocess.run(
            ["squeue", "--noheader", "--format=%i|%T|%Z"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if res.returncode != 0:
        return []
    return [line for line in res.stdout.splitlines() if line.split("|")[-1].startswith(str(root))]


class Leftovers:
    """What a batch test watches so that it leaves nothing behind (see ``leaves_nothing``)."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.executors: list[Any] = []
        self.lingering = False

    def watch(self, executor: Any, *, lingering: bool = False) -> None:
        """End, after the test, the pilots this ``BatchExecutor`` started for queues under the root;
        ``lingering``: the test leaves them lingering on purpose, so they are cancelled at once."""
        self.executors.append(executor)
        self.lingering = self.lingering or lingering

    def pilots(self) -> list[Any]:
        return [
            p
            for ex in self.executors
            for s in ex.shapes.values()
            if str(s.queue).startswith(str(self.root))
            for p in s.pilots
        ]

    def end_pilots(self, timeout: float) -> list[Any]:
        """Wait for the pilots to end (their runners linger briefly), waking their trackers so the
        final state is seen while the site still answers; cancel the others. Returns those."""
        from launchers.runtime.loop import call_soon

        deadline = time.monotonic() + timeout
        while True:
            alive = [p for p in self.pilots() if not p.state.is_final]
            if not alive or time.monotonic() > deadline:
                break
            for p in alive:
                if p.executor is not None:
                    call_soon(lambda t=p.executor.tracker: t.wake(poll_now=True))
            time.sleep(1.0)
        for p in alive:
            p.cancel()
        for p in alive:
            try:
                p.wait(30)
            except TimeoutError:
                pass
        return alive


def until_released(release: pathlib.Path | str, limit: int = 120) -> str:
    """A POSIX shell line that waits until the test creates ``release`` (the event a held job
    waits for, instead of a guessed sleep), at most ``limit`` seconds, then exits 124 as
    timeout(1) does, so that a test that fails before releasing it leaves no job for long."""
    path = shlex.quote(str(release))
    return (
        f"n=0; while [ ! -e {path} ]; do n=$((n+1)); "
        f"if [ $n -gt {10 * limit} ]; then exit 124; fi; sleep 0.1; done"
    )


def one_slot_taken(sleepers: list[Any], timeout: float = 60) -> tuple[Any, Any]:
    """Two long tasks on a batch of one slot: (the one that runs, the one queued behind it),
    once the queued one's entry reached the queue (PENDING: it may still be WAITING or
    SUBMITTING when the other starts). Publication order of concurrent submissions is free."""
    from launchers import JobState

    deadline = time.monotonic() + timeout
    while all(s.state is not JobState.RUNNING for s in sleepers):
        assert time.monotonic() < deadline, "no sleeper ran"
        time.sleep(0.1)
    running, queued = sleepers if sleepers[0].state is JobState.RUNNING else sleepers[::-1]
    while queued.state in (JobState.WAITING, JobState.SUBMITTING):
        assert time.monotonic() < deadline, queued.state
        time.sleep(0.05)
    return running, queued


def cancel_in_another_process(job: Any, timeout: float) -> None:
    """``launchers cancel JOB_DIR`` run as its own process (it knows the job from its record only):
    it exits 0 once the job is CANCELLED."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launchers",
            "cancel",
            "--timeout",
            f"{timeout:g}",
            str(job.directory),
        ],
        capture_output=True,
        text=True,
        timeout=2 * timeout,
    )
    assert done.returncode == 0, done.stderr
    assert "CANCELLED" in done.stdout


@pytest.fixture
def leaves_nothing(tmp_path: pathlib.Path) -> Iterator[Leftovers]:
    """After the test: its pilots ended, and no Slurm job nor process of its own left (working
    directory, command line or job directory under ``tmp_path``). A leftover holds nodes of the
    small sandbox cluster, or keeps a tracker polling a test server that is gone; whatever is
    found is cancelled or killed, then reported as a failure. Request it after the fixtures of
    the servers a test uses, so that it runs first at teardown, while they still answer."""
    watch = Leftovers(tmp_path)
    yield watch
    stuck = watch.end_pilots(timeout=0 if watch.lingering else 60)
    if watch.lingering:
        stuck = []
    jobs: list[str] = []
    procs: list[str] = []
    deadline = time.monotonic() + 20  # a pilot that just ended may still be COMPLETING
    while time.monotonic() < deadline:
        jobs, procs = _slurm_jobs_under(tmp_path), _processes_under(tmp_path)
        if not jobs and not procs:
            break
        time.sleep(0.5)
    if jobs:
        subprocess.run(["scancel", *(line.split("|")[0] for line in jobs)], capture_output=True)
    for line in procs:
        try:
            os.kill(int(line.split(":")[0]), 9)
        except OSError:
            pass
    assert not stuck, (
        f"pilots still running after the test: {[(p.native_id, p.state) for p in stuck]}"
    )
    assert not jobs, f"Slurm jobs left by the test (cancelled now): {jobs}"
    assert not procs, f"processes left by the test (killed now): {procs}"


@pytest.fixture
def fresh_runtime() -> Iterator[Any]:
    """The runtime of a fresh process (``launchers.runtime.core.Runtime.reset``), before and
    after the test: no executor, job, experiment, connector or cached value of earlier tests."""
    from launchers.runtime.core import current

    runtime = current()
    runtime.reset()
    try:
        yield runtime
    finally:
        runtime.reset()


@pytest.fixture
def slurm_tuning(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``slurm_tuning(fatal_confirm=3.0, ...)``: the Slurm executor's timings for this test
    (``Runtime.tune``), the process's own again afterwards."""
    import attrs

    from launchers.runtime.core import current
    from launchers.slurm.settings import SlurmTuning

    def tune(**changes: Any) -> SlurmTuning:
        runtime = current()
        value = attrs.evolve(runtime.tuned(SlurmTuning), **changes)
        monkeypatch.setitem(runtime.tunings, SlurmTuning, value)
        return value

    return tune


@pytest.fixture
def fast_fakes(fresh_runtime: Any, slurm_tuning: Any) -> Iterator[Any]:
    """A fresh runtime whose Slurm executors poll fast (``fakes.FAST_POLLING``): tests on
    ``FakeSlurm`` and ``FakeClock``, where only the virtual time of the decisions matters."""
    from fakes import FAST_POLLING

    slurm_tuning(**FAST_POLLING)
    yield fresh_runtime
