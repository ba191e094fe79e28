"""Typed Slurm settings (docs/slurm.md, "Settings and tuning"): one precedence rule, launcher >
group > default with ``None`` as "not set", resolved once per launcher; the executor's timings
as one tuning value owned by the runtime."""

from __future__ import annotations

from typing import Any

import pytest

from launchers.config.model import Partition, SlurmGroup
from launchers.runtime.core import Runtime
from launchers.slurm.executor import SlurmExecutor
from launchers.slurm.kind import executor_key
from launchers.slurm.launcher import SlurmLauncher
from launchers.slurm.settings import Placement, SlurmSettings, SlurmTuning, pick


@pytest.mark.parametrize(
    ("launcher", "group", "default", "expected"),
    [
        ("L", "G", "D", "L"),
        (None, "G", "D", "G"),
        (None, None, "D", "D"),
        ("L", None, "D", "L"),
        (0, 5, 9, 0),  # a falsy launcher value is still a value
        (None, 0, 9, 0),
        ("", "G", "D", ""),
        (False, True, True, False),
    ],
)
def test_pick_launcher_then_group_then_default(
    launcher: Any, group: Any, default: Any, expected: Any
) -> None:
    assert pick(launcher, group, default) == expected


#: field -> (launcher's value, group's value, default)
PRECEDENCE: dict[str, tuple[Any, Any, Any]] = {
    "export": ("NONE", "ALL", "ALL"),
    "python": ("/l/python", "/g/python", None),
    "max_requeues": (1, 5, 3),
    "resume_signal": ("TERM", "HUP", "USR1"),
    "resume_grace": (7, 30, 120),
}


@pytest.mark.parametrize("field", sorted(PRECEDENCE))
def test_every_launcher_setting_goes_launcher_then_group_then_default(field: str) -> None:
    mine, groups, default = PRECEDENCE[field]
    group_value = {field: groups}
    both = SlurmLauncher(group=SlurmGroup(id="g", **group_value)).config(**{field: mine})
    only_group = SlurmLauncher(group=SlurmGroup(id="g", **group_value))
    neither = SlurmLauncher(group=SlurmGroup(id="g"))
    assert getattr(SlurmSettings.resolve(both), field) == mine
    assert getattr(SlurmSettings.resolve(only_group), field) == groups
    assert getattr(SlurmSettings.resolve(neither), field) == default


def test_group_settings_env_and_options() -> None:
    group = SlurmGroup(
        id="g",
        env={"A": "group", "B": "group"},
        sbatch_options=(("hold", True), ("comment", "g")),
        fatal_pending="report",
        fatal_reasons_add=("X",),
        fatal_reasons_remove=("Y",),
        lost_after=30,
    )
    launcher = SlurmLauncher(group=group, options={"partition": "debug"}).config(
        env={"B": "launcher", "C": "launcher"}, sbatch_options={"comment": "l"}
    )
    s = SlurmSettings.resolve(launcher)
    assert s.env == (("A", "group"), ("B", "launcher"), ("C", "launcher"))
    assert s.job_env({"C": "task", "D": "task"}) == (
        ("A", "group"),
        ("B", "launcher"),
        ("C", "task"),
        ("D", "task"),
    )
    assert s.directives == ("--partition=debug",)
    assert s.sbatch_options == (("hold", True), ("comment", "l"))
    assert (s.fatal_pending, s.fatal_reasons_add, s.fatal_reasons_remove) == (
        "report",
        ("X",),
        ("Y",),
    )
    assert s.lost_after == 30.0
    assert s.group is group and s.options.partition == "debug"


def test_lost_after_zero_is_not_set() -> None:
    """``lost_after: 0`` was always read as "not set" (the default applies): it stays so."""
    assert SlurmSettings.resolve(SlurmLauncher(group=SlurmGroup(lost_after=0))).lost_after is None
    assert SlurmSettings.resolve(SlurmLauncher(group=SlurmGroup())).lost_after is None


def test_placement_and_executor_key() -> None:
    """``status_source`` and ``poll_max`` shape an executor's one tracker: they are in its key
    only when a group sets them; the cluster comes from ``--clusters``/``--cluster``."""
    plain = SlurmLauncher(group=SlurmGroup(id="a"))
    assert executor_key(plain) == ("slurm", "local", None)
    assert Placement.of(plain) == Placement()
    sq = SlurmLauncher(group=SlurmGroup(id="b", status_source="SQUEUE", connector="box"))
    assert executor_key(sq) == ("slurm", "box", None, "squeue", None)
    pm = SlurmLauncher(group=SlurmGroup(id="c", poll_max=10)).config(
        sbatch_options={"clusters": "c2"}
    )
    assert executor_key(pm) == ("slurm", "local", "c2", "auto", 10)


def test_the_executor_resolves_each_launcher_once_and_reads_its_tuning(
    fresh_runtime: Runtime,
) -> None:
    group = SlurmGroup(id="g", partitions=(Partition(name="debug"),), poll_max=10)
    launcher = SlurmLauncher(group=group)
    ex = SlurmExecutor(launcher)
    assert ex.settings(launcher) is ex.settings(launcher) is ex.settings(None)
    other = launcher.config(export="NONE")
    assert ex.settings(other).export == "NONE"
    assert ex.poll_max == 10.0 and ex.poll_min == SlurmTuning().poll_min
    assert ex.tuning == SlurmTuning()
    fresh_runtime.tune(SlurmTuning(fatal_confirm=3.0, poll_min=0.5))
    assert ex.tuning.fatal_confirm == 3.0  # read when used
    assert SlurmExecutor(launcher).poll_min == 0.5
    own = SlurmExecutor(launcher, tuning=SlurmTuning(lost_polls=1))
    assert own.tuning.lost_polls == 1 and own.tuning.fatal_confirm == 60.0
    fresh_runtime.reset()
    assert ex.tuning == SlurmTuning()
