"""BatchLauncher over UNICORE and firecREST (docs/design/pilots.md §3.3): the queue lives at the site (a
UNICORE storage, a firecREST file system), entries are written in place, the pilot is an
ordinary job of the inner launcher, outputs come back into the local job directories.

The loopback servers speak the real APIs to the real pyunicore/pyfirecrest clients and run the
jobs on the real local Slurm; the "site" file systems are directories of this machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Leftovers, cancel_in_another_process, one_slot_taken
from launchers import ExperimentFailed, JobState, command, experiment, task
from launchers.batch.executor import BatchExecutor
from launchers.batch.rest import (
    FirecrestQueue,
    RestQueue,
    UnicoreQueue,
    lost_claims,
    parse_entry,
    requeue_target,
    snapshot_of,
)
from launchers.config.model import (
    FirecrestGroup,
    FirecrestSite,
    Position,
    UnicoreGroup,
    UnicoreSite,
)
from launchers.errors import LaunchersError
from launchers.remote.firecrest import FirecrestLauncher
from launchers.remote.unicore import UnicoreLauncher
from launchers.runtime.loop import run_sync
from remote_fixtures import (  # noqa: F401 - fixtures
    FIRECREST_USER,
    UNICORE_USER,
    firecrest_server_fixture,
    unicore_server_fixture,
)
from servers.firecrest import FirecrestServer
from servers.unicore import UnicoreServer

pytestmark = pytest.mark.slurm

OPTIONS = {"partition": "debug", "cpus_per_task": 1, "mem": "256M"}


@task
def answer() -> int:
    return 42


def unicore_site(server: UnicoreServer) -> tuple[UnicoreLauncher, Path]:
    """A UNICORE launcher and the directory of the user's HOME storage (where the queue is)."""
    site = UnicoreSite(url=server.base_url)
    launcher = UnicoreLauncher(
        group=UnicoreGroup(id="uc", site=site, position=Position("launchers.yaml", 1)),
        options=OPTIONS,
    )
    return launcher, server.storage_root("HOME", UNICORE_USER) / "launchers" / "batch"


def firecrest_site(server: FirecrestServer) -> tuple[FirecrestLauncher, Path]:
    """A firecREST launcher and ``<workdir>/batch`` on the system's file system, whose
    ``max_ops_file_size`` is 1 MiB: firecREST refuses a read without an explicit size then."""
    server.max_ops_file_size = 1024 * 1024
    site = FirecrestSite(api_url=server.api_url, token_url=server.token_url, machine=server.machine)
    launcher = FirecrestLauncher(
        group=FirecrestGroup(id="fc", site=site, position=Position("launchers.yaml", 1)),
        options=OPTIONS,
    )
    return launcher, server.scratch / FIRECREST_USER / "launchers" / "batch"


SITES: dict[str, Callable[[Any], tuple[Any, Path]]] = {
    "unicore": unicore_site,
    "firecrest": firecrest_site,
}


@pytest.fixture(params=["unicore", "firecrest"])
def site(request: pytest.FixtureRequest) -> tuple[str, Any, Any, Path]:
    """(kind, server, inner launcher, batch root on the site) for each REST API."""
    kind = request.param
    server = request.getfixturevalue(f"{kind}_server")
    launcher, root = SITES[kind](server)
    return kind, server, launcher, root


def shape_of_queue(root: Path) -> Path:
    queues = [p for p in root.iterdir() if p.is_dir()]
    assert len(queues) == 1, queues
    return queues[0]


def rest_queue(ex: BatchExecutor, tmp_path: Path) -> RestQueue:
    shapes = [s for s in ex.shapes.values() if str(s.queue).startswith(str(tmp_path))]
    assert len(shapes) == 1
    remote = shapes[0].remote
    assert isinstance(remote, RestQueue)
    return remote


@pytest.mark.slow
def test_one_pilot_runs_many_tasks(
    site: tuple[str, Any, Any, Path], tmp_path: Path, leaves_nothing: Leftovers
) -> None:
    _kind, _server, inner, root = site
    batch = inner.batched(slots=1, linger=3, walltime="10m", drain_margin="1m")
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    leaves_nothing.watch(ex)
    before = ex.pilots_submitted
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "exp", batch):
        jobs = [
            command(["sh", "-c", f"echo out{i}; echo err{i} >&2"], name=f"t{i}").submit()
            for i in range(3)
        ]
        bad = command(["sh", "-c", "exit 3"], name="bad").submit()
        # long sleeps: only the cancels end them, however slow the machine
        sleepers = [command(["sleep", "300"], name=n).submit() for n in ("long", "late")]
        long, late = one_slot_taken(sleepers)
        assert late.state is JobState.PENDING  # one slot: the other one waits in pending/
        late.cancel()
        assert late.wait(60) is JobState.CANCELLED  # taken out of pending/ by the next cycle
        assert long.state is JobState.RUNNING  # the one slot is still busy: late never ran
        long.cancel()  # running: cancel/<id> written, the runner stops it
        for j in jobs:
            assert j.wait(60) is JobState.COMPLETED
        assert long.wait(30) is JobState.CANCELLED
    assert ex.pilots_submitted - before == 1
    pilots = {j.pilot for j in [*jobs, bad]}
    assert len(pilots) == 1 and None not in pilots
    for i, j in enumerate(jobs):
        assert f"out{i}" in j.stdout_path.read_text()  # copied back from the site
        assert f"err{i}" in (j.directory / "job.err").read_text()
        assert json.loads((j.directory / "job.rc").read_text())["rc"] == 0
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 3)
    assert late.state is JobState.CANCELLED and long.state is JobState.CANCELLED
    queue = shape_of_queue(root)  # launchers/batch/<shape> in HOME, <workdir>/batch/<shape>
    assert (queue / "runner.py").exists()
    assert jobs[0].record.extra["batch"]["remote_queue"] == str(queue)
    assert sorted(p.name for p in (queue / "done").iterdir()) == sorted(
        f"{j.task_id}.json" for j in [*jobs, bad, *sleepers]
    )
    # a quiet cycle costs three listings (pending/, running/, done/); entries are read once
    remote = rest_queue(ex, tmp_path)
    n = remote.requests
    snap = run_sync(remote.scan()).snap
    assert remote.requests - n == 3
    assert (
        snap.done == {j.task_id for j in [*jobs, bad, *sleepers]}
        and not snap.pending
        and not snap.running
    )


def test_callable_refused(site: tuple[str, Any, Any, Path], tmp_path: Path) -> None:
    kind, _server, inner, _root = site
    batch = inner.batched(slots=1)
    with (
        pytest.raises(LaunchersError, match=f"batching over a {kind} site runs commands only"),
        experiment(tmp_path / "exp", batch),
    ):
        answer().submit()


@pytest.mark.slow
def test_truncated_entry_is_skipped_then_run_once_complete(
    site: tuple[str, Any, Any, Path], tmp_path: Path, leaves_nothing: Leftovers
) -> None:
    """An entry written in place and not complete yet is never run; the next scan after it is
    complete runs it (the pilot lingers)."""
    _kind, _server, inner, root = site
    batch = inner.batched(slots=2, linger=20, walltime="10m", drain_margin="1m")
    leaves_nothing.watch(batch.executor(), lingering=True)
    marker = tmp_path / "ran-bogus"
    with experiment(tmp_path / "exp", batch):
        first = command(["echo", "first"], name="first").submit()
        assert first.wait(60) is JobState.COMPLETED
        queue = shape_of_queue(root)
        entry = {
            "id": "bogus",
            "dir": str(queue / "tasks" / "bogus"),
            "argv": ["touch", str(marker)],
            "env": {},
            "cwd": None,
            "timeout": None,
            "duration": None,
            "resources": {},
            "attempt": 0,
            "max_attempts": 3,
            "seq": 1,
        }
        text = json.dumps(entry)
        pending = queue / "pending" / "1-bogus.json"
        pending.write_text(text[: len(text) // 2])  # as seen in the middle of an in-place write
        second = command(["echo", "second"], name="second").submit()
        assert second.wait(60) is JobState.COMPLETED  # the lingering pilot kept scanning
        time.sleep(2)
        assert pending.exists() and not marker.exists()  # skipped, neither run nor dropped
        assert not (queue / "done" / "bogus.json").exists()
        pending.write_text(text)  # complete now
        deadline = time.monotonic() + 20
        while not (queue / "done" / "bogus.json").exists():
            assert time.monotonic() < deadline, "the completed entry was not run"
            time.sleep(0.2)
    assert marker.exists()
    assert json.loads((queue / "done" / "bogus.json").read_text())["state"] == "COMPLETED"


@pytest.mark.slow
def test_killed_pilot_task_finished_by_a_second_pilot(
    site: tuple[str, Any, Any, Path], tmp_path: Path, leaves_nothing: Leftovers
) -> None:
    """A pilot killed with SIGKILL leaves its claim in running/: UNICORE re-queues it with the
    storage's rename action once the pilot is final; firecREST (no cheap rename) starts the next
    pilot with ``--lost-runner``, whose runner re-queues it at start-up. Attempt 2 completes."""
    kind, _server, inner, root = site
    batch = inner.batched(slots=1, linger=2, walltime="10m", drain_margin="1m")
    ex = batch.executor()
    assert isinstance(ex, BatchExecutor)
    leaves_nothing.watch(ex)
    before = ex.pilots_submitted
    with experiment(tmp_path / "exp", batch):
        job = command(
            ["sh", "-c", 'if [ "$LAUNCHERS_ATTEMPT" = 1 ]; then sleep 120; fi; echo ok'], name="s"
        ).submit()
        deadline = time.monotonic() + 60
        while not (job.state is JobState.RUNNING and job.pilot):
            assert time.monotonic() < deadline, "the task never ran"
            time.sleep(0.1)
        first = job.pilot
        assert first is not None
        # SIGKILL the runner itself (scancel would SIGTERM it first, and it would re-queue its
        # claims on its way out): its pilot job then ends, leaving the claim in running/
        queue = shape_of_queue(root)
        claim = json.loads((queue / "running" / f"{job.task_id}.json").read_text())
        beat = json.loads((queue / "runners" / f"{claim['runner']}.json").read_text())
        os.kill(int(beat["pid"]), signal.SIGKILL)
        assert job.wait(90) is JobState.COMPLETED
    assert ex.pilots_submitted - before == 2
    assert job.pilot != first
    assert "ok" in job.stdout_path.read_text()
    assert job.record.extra.get("batch_attempt") == 2
    assert "attempt 1" in job.stdout_path.read_text() and "attempt 2" in job.stdout_path.read_text()
    assert re.search(r"launchers: runner \S+ lost, task re-queued", job.stderr_path.read_text())
    remote = rest_queue(ex, tmp_path)
    assert remote.can_rename is (kind == "unicore")
    second = json.loads(
        next((tmp_path / "exp" / "batch").glob("*/pilots/2/params.json")).read_text()
    )["target"]
    # firecREST: the lost runner is handed to the second pilot, whose runner re-queues its claim
    assert ("--lost-runner" in second) is (kind == "firecrest")
    assert not remote.lost_runners  # forgotten once its claims are gone


@pytest.mark.slow
def test_cancel_from_another_process_reaches_the_site_queue(
    site: tuple[str, Any, Any, Path], tmp_path: Path, leaves_nothing: Leftovers
) -> None:
    """`launchers cancel` in another process knows the task only from its record, whose
    locator names the site: the queued task is taken out of pending/, the running one stopped
    (killed by the runner: neither it nor the pilot is left behind)."""

    kind, _server, inner, _root = site
    batch = inner.batched(slots=1, linger=1, walltime="10m", drain_margin="1m", kill_grace=2)
    leaves_nothing.watch(batch.executor())
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "exp", batch):
        # long sleeps: only the cancels end them, however slow the machine
        a, b = (command(["sleep", "300"], name=n).submit() for n in ("a", "b"))
        deadline = time.monotonic() + 60
        while a.state is not JobState.RUNNING and b.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, "no sleeper ran"
            time.sleep(0.1)
        running, queued = (a, b) if a.state is JobState.RUNNING else (b, a)
        assert running.record.extra["batch"]["locator"]["kind"] == kind
        for job in (queued, running):
            cancel_in_another_process(job, 60)
        assert running.wait(60) is JobState.CANCELLED and queued.wait(60) is JobState.CANCELLED
    assert running.exit_code != 0  # killed, not run to its end


def test_rest_transports_are_chosen_by_kind(
    unicore_server: UnicoreServer, firecrest_server: FirecrestServer
) -> None:
    from launchers.batch.rest import rest_queue as make

    assert isinstance(make(unicore_site(unicore_server)[0], "abc"), UnicoreQueue)
    assert isinstance(make(firecrest_site(firecrest_server)[0], "abc"), FirecrestQueue)


def test_snapshot_of_listings_is_pure() -> None:
    snap = snapshot_of(["12-a.json", ".tmp-b", "x.json"], ["c.json"], ["d.json", "e.json"])
    assert dict(snap.pending) == {"a": "12-a.json"}
    assert snap.running == {"c"} and snap.done == {"d", "e"} and snap.oldest_seq == 12


def test_entries_and_recovery_targets_are_pure() -> None:
    text = json.dumps({"id": "a", "seq": 5})
    assert (
        parse_entry(text[:-1]) is None and parse_entry(b"[1]") is None and parse_entry(None) is None
    )
    assert parse_entry(text.encode()) == {"id": "a", "seq": 5}
    running = {"a": {"runner": "r1", "seq": 5}, "b": {"runner": "r2", "seq": 7}}
    assert lost_claims(running, ["r1"]) == ["a"]
    assert requeue_target("a", running["a"], cancelled=False) == "pending/5-a.json"
    assert requeue_target("a", running["a"], cancelled=True) == "done/a.json"


def test_pilot_tag_is_read_from_the_runner_command_line() -> None:
    from launchers.batch.executor import pilot_tag

    assert (
        pilot_tag(
            ["python3", "runner.py", "--pilot", "lxpilot-abc-1-0f0f0f0f", "--lost-runner", "r"]
        )
        == "lxpilot-abc-1-0f0f0f0f"
    )
    assert pilot_tag(["python3", "runner.py", "--pilot"]) is None
