"""The process state of launchers in one ``Runtime`` (docs/jobs.md, Layers), and the services
through which values reach the layers above them (``launchers.hooks``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from launchers import hooks
from launchers.config.model import LocalGroup
from launchers.jobs.experiment import current_experiment, experiment
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.local.launcher import DirectLauncher
from launchers.registry import executor_for, executor_for_record
from launchers.runtime.core import Runtime
from launchers.runtime.loop import get_loop, run_sync


def test_one_executor_per_key_until_reset(fresh_runtime: Runtime) -> None:
    launcher = DirectLauncher(group=LocalGroup(max_jobs=2))
    first = executor_for(launcher)
    assert executor_for(launcher) is first
    assert fresh_runtime.executors_of("local") == [first]
    fresh_runtime.forget_executors("local")
    assert fresh_runtime.executors_of("local") == []
    assert executor_for(launcher) is not first


def test_reset_gives_a_fresh_process_state(fresh_runtime: Runtime, tmp_path: Path) -> None:
    with experiment(tmp_path, DirectLauncher()):
        job = command(["true"]).submit()
    assert job.state is JobState.COMPLETED
    loop = get_loop()
    assert fresh_runtime.jobs and fresh_runtime.executors
    fresh_runtime.reset()
    assert not fresh_runtime.jobs and not fresh_runtime.executors
    assert not fresh_runtime.experiments and not fresh_runtime.connectors
    assert get_loop() is not loop  # a new loop thread, started on use

    async def answer() -> int:
        return 42

    assert run_sync(answer(), timeout=10) == 42
    # a new process re-attaches to the finished job instead of running it again
    with experiment(tmp_path, DirectLauncher()):
        again = command(["true"]).submit()
    assert again is not job and again.native_id == job.native_id


def test_forget_job_is_a_new_process_for_that_directory(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    with experiment(tmp_path, DirectLauncher()):
        job = command(["true"]).submit()
        assert command(["true"]).submit() is job
        fresh_runtime.forget_job(job.directory)
        assert command(["true"]).submit() is not job


def test_experiments_nest_in_the_runtime(fresh_runtime: Runtime, tmp_path: Path) -> None:
    with experiment(tmp_path / "a", DirectLauncher()) as a:
        assert current_experiment() is a
        with experiment(tmp_path / "b", DirectLauncher()) as b:
            assert fresh_runtime.experiments == [a, b]
        assert current_experiment() is a
    assert current_experiment() is None


def test_batch_jobs_known_from_records_share_the_process_batch_executor(
    fresh_runtime: Runtime,
) -> None:
    from launchers.jobs.record import StateRecord

    batch = DirectLauncher().batched(slots=1)
    executor = executor_for(batch)
    record = StateRecord(task_id="t-0", launcher={"kind": "batch"})
    assert executor_for_record(record) is executor


class FakeServices:
    """Services that record what the values asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def executor_for(self, launcher: Any) -> Any:
        self.calls.append(("executor_for", launcher))
        return "an executor"

    def submit_task(self, task: Any, launcher: Any, *, force: bool, after: Any = None) -> Any:
        self.calls.append(("submit_task", (task, launcher, force)))
        return "a job"

    def attach(self, task: Any, directory: Path, launcher: Any) -> Any:
        raise AssertionError("not used here")

    def adopt(self, directory: Path, record: Any, launcher: Any) -> Any:
        raise AssertionError("not used here")

    def refresh_group(self, group: Any) -> Any:
        self.calls.append(("refresh_group", group))
        return group


@pytest.fixture
def fake_services() -> Any:
    fake = FakeServices()
    hooks.install(fake)
    try:
        yield fake
    finally:
        hooks.install(None)


def test_values_reach_the_runtime_through_the_installed_services(fake_services: Any) -> None:
    launcher = DirectLauncher()
    task = command(["true"])
    assert launcher.executor() == "an executor"
    assert task.submit(launcher, force=True) == "a job"
    assert fake_services.calls == [
        ("executor_for", launcher),
        ("submit_task", (task, launcher, True)),
    ]


def test_the_default_services_come_back_after_a_test_installed_its_own() -> None:
    hooks.install(None)
    from launchers.services import DEFAULT

    assert hooks.services() is DEFAULT


def test_the_loop_thread_runs_coroutines_for_any_thread(fresh_runtime: Runtime) -> None:
    results: list[int] = []

    async def double(x: int) -> int:
        return 2 * x

    threads = [
        threading.Thread(target=lambda i=i: results.append(run_sync(double(i), timeout=10)))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 2, 4, 6]
