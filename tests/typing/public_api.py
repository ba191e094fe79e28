"""What a type checker sees of the public API (docs/api.md): mypy checks this file
(tests/spec/test_public_api.py); it is never run. Each ``assert_type`` fails the check when a name
is seen as ``Any`` or as something else than what it is."""

from __future__ import annotations

from typing import Any

from typing_extensions import assert_type, reveal_type

import launchers
from launchers import (
    BatchLauncher,
    ConfigurationError,
    DirectLauncher,
    FirecrestLauncher,
    Job,
    JobState,
    LaunchersError,
    SlurmLauncher,
    Task,
    UnicoreLauncher,
    command,
    cpu,
    cuda_gpu,
    duration,
    experiment,
    find_launcher,
    finished,
    load_config,
    parse,
    task,
)
from launchers.config.model import LaunchersConfig
from launchers.jobs.experiment import Experiment
from launchers.jobs.task import TaskFunction
from launchers.language.values import HostRequirement, RequirementUnion
from launchers.launcher import Launcher


def functions() -> None:
    assert_type(parse("cpu(cores=2) & duration=1h"), RequirementUnion)
    assert_type(launchers.parse("cpu(cores=2)"), RequirementUnion)
    assert_type(cpu(cores=2), HostRequirement)
    assert_type(cuda_gpu(mem="16G") & duration("1h"), HostRequirement | RequirementUnion)
    assert_type(load_config(None), LaunchersConfig)
    # the function with its parameters (tests/spec/test_public_api.py reads what mypy reveals); its
    # answer is a launcher of the kind found (SlurmLauncher, DirectLauncher...), whose own
    # attributes (options, sbatch_args()) are used as they are (docs/finder.md): Any
    reveal_type(find_launcher)
    assert_type(find_launcher("cpu", tags=("a",), default=None), Any)
    assert_type(command(["echo", "hi"], name="hi"), Task)
    assert_type(experiment("/tmp/xp"), Experiment)


def values(job: Job, t: Task, fn: TaskFunction) -> None:
    assert_type(t.submit(), Job)
    assert_type(t.submit(after=[job, finished(job)]), Job)
    assert_type(job.wait(), JobState)
    assert_type(job.state, JobState)
    assert_type(task(print), TaskFunction)
    assert_type(fn(1), Task)
    with experiment("/tmp/xp") as xp:
        assert_type(xp, Experiment)


def launcher_kinds(
    s: SlurmLauncher, d: DirectLauncher, u: UnicoreLauncher, f: FirecrestLauncher
) -> None:
    kinds: list[Launcher] = [s, d, u, f]
    assert_type(s.batched(slots=2), BatchLauncher)
    assert_type(BatchLauncher(s, slots=2), BatchLauncher)
    assert_type(kinds[0].kind, str)


def errors() -> None:
    try:
        find_launcher("cpu")
    except ConfigurationError as e:
        assert_type(e.line, int | None)
    except LaunchersError as e:
        assert_type(e, LaunchersError)
