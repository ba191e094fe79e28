"""Pure rules of the Slurm executor, without a cluster (docs/slurm.md, Tracking and States): what
an unknown state, an unreadable line of output or a recorded cluster does."""

from __future__ import annotations

import time
import types

import pytest

from launchers.config.model import SlurmGroup
from launchers.jobs.record import RcRecord
from launchers.jobs.state import JobState
from launchers.slurm.decide import JobFacts, WarnUnknownState, decide
from launchers.slurm.executor import SlurmExecutor
from launchers.slurm.launcher import SlurmLauncher
from launchers.slurm.parse import UNREADABLE, Row, sacct_rows, squeue_rows
from launchers.slurm.settings import SlurmSettings, SlurmTuning


def _executor() -> SlurmExecutor:
    return SlurmExecutor(SlurmLauncher(group=SlurmGroup(id="u")))


SETTINGS = SlurmSettings.resolve(SlurmLauncher(group=SlurmGroup(id="u")))


def _running(native_id: str) -> JobFacts:
    return JobFacts(native_id=native_id, attempt=1, state=JobState.RUNNING)


def test_unknown_slurm_state_keeps_the_job_until_its_exit_record_ends_it() -> None:
    """An unknown state is warned about and changes nothing, but ``job.rc`` can still end the
    job (here with its own exit code)."""
    job = _running("77")
    row = Row("77", "WEIRD_NEW_STATE", "", source="sacct")
    first = decide(row, None, job, SETTINGS, SlurmTuning(), time.time(), my_uid=None)
    assert first.update is None and first.effects == (WarnUnknownState("WEIRD_NEW_STATE"),)
    rc = RcRecord(rc=3, signal=None, attempt=1, native_id="77")
    update = decide(row, rc, job, SETTINGS, SlurmTuning(), time.time(), my_uid=None).update
    assert update is not None and update.state is JobState.FAILED and update.exit_code == 3


def test_unknown_state_is_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    ex = _executor()
    job = types.SimpleNamespace(runtime={})
    decision = decide(Row("7", "WEIRD", source="sacct"), None, _running("7"), SETTINGS,
                      SlurmTuning(), time.time(), my_uid=None)  # fmt: skip
    ex.tracking.carry_out(job, decision)  # type: ignore[arg-type]
    ex.tracking.carry_out(job, decision)  # type: ignore[arg-type]
    assert len([r for r in caplog.records if "unknown Slurm job state" in r.getMessage()]) == 1


def test_an_unreadable_line_leaves_only_its_job_unchanged() -> None:
    """One bad line leaves only that job unchanged (not taken for gone); output with no
    readable line at all is a failed query, which changes nothing."""
    from launchers.errors import ConnectorError

    rows = squeue_rows("11|11|RUNNING|None\n12|12\nsqueue: warning: something\n")
    assert rows["11"].state == "RUNNING" and rows["12"].source == UNREADABLE
    decision = decide(rows["12"], None, _running("12"), SETTINGS, SlurmTuning(), time.time(),
                      my_uid=None)  # fmt: skip
    assert decision.update is None and decision.effects == ()
    sacct = sacct_rows("21|21|COMPLETED|0:0|2026-01-01T00:00:00|x|y|None\n22|22|RUNN")
    assert sacct["21"].state == "COMPLETED" and sacct["22"].source == UNREADABLE
    with pytest.raises(ConnectorError, match="nothing readable"):
        squeue_rows("garbage|line\n")
    assert squeue_rows("squeue: only a message\n") == {}


def test_a_recorded_cluster_is_used_by_later_commands() -> None:
    """A cluster after ';' in sbatch's answer is passed to every later command, also by a
    later process that re-attaches the job (its record keeps the cluster)."""
    ex = _executor()
    assert ex.slurm.args() == []
    ex._learn_cluster(types.SimpleNamespace(record=types.SimpleNamespace(cluster="c2")))  # type: ignore[arg-type]
    assert ex.slurm.args() == ["--clusters=c2"]
    ex._learn_cluster(types.SimpleNamespace(record=types.SimpleNamespace(cluster="c3")))  # type: ignore[arg-type]
    assert ex.slurm.args() == ["--clusters=c2"]  # the first one known stays


def test_cancelled_by_uid_is_recorded() -> None:
    """``CANCELLED by 1234`` is CANCELLED with the uid recorded, reason "cancelled by uid 1234"."""
    update = decide(Row("5", "CANCELLED by 1234", source="sacct"), None, _running("5"), SETTINGS,
                    SlurmTuning(), time.time(), my_uid=999).update  # fmt: skip
    assert update is not None and update.state is JobState.CANCELLED
    assert update.reason == "cancelled by uid 1234" and update.extra == {"cancelled_by": 1234}
