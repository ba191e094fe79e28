"""Pure rules of the Slurm executor, without a cluster (slurm-runtime.md §4-§6): what an unknown
state, an unreadable line of output or a recorded cluster does."""

from __future__ import annotations

import time
import types

import pytest

from launchers.config.model import SlurmGroup
from launchers.jobs.state import JobState
from launchers.slurm.executor import SlurmExecutor
from launchers.slurm.launcher import SlurmLauncher


def _executor() -> SlurmExecutor:
    return SlurmExecutor(SlurmLauncher(group=SlurmGroup(id="u")))


def test_unknown_slurm_state_keeps_the_job_until_its_exit_record_ends_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """slurm-runtime §6: an unknown state is warned about and changes nothing, but ``job.rc``
    can still end the job (here with its own exit code)."""
    from launchers.jobs.record import RcRecord
    from launchers.slurm.executor import Row

    ex = _executor()
    job = types.SimpleNamespace(native_id="77", attempt=1, cancel_requested=False, runtime={},
                                state=JobState.RUNNING, launcher=None)  # fmt: skip
    row = Row("77", "WEIRD_NEW_STATE", "", source="sacct")
    assert ex._from_row(job, row, None, time.time()) is None  # type: ignore[arg-type]
    rc = RcRecord(rc=3, signal=None, attempt=1, native_id="77")
    update = ex._from_row(job, row, rc, time.time())  # type: ignore[arg-type]
    assert update is not None and update.state is JobState.FAILED and update.exit_code == 3


def test_an_unreadable_line_leaves_only_its_job_unchanged() -> None:
    """slurm-runtime §5: one bad line leaves only that job unchanged (not taken for gone);
    output with no readable line at all is a failed query, which changes nothing."""
    from launchers.errors import ConnectorError
    from launchers.slurm.executor import UNREADABLE

    ex = _executor()
    rows = ex._squeue_rows("11|11|RUNNING|None\n12|12\nsqueue: warning: something\n")
    assert rows["11"].state == "RUNNING" and rows["12"].source == UNREADABLE
    job = types.SimpleNamespace(native_id="12", attempt=1, cancel_requested=False, runtime={},
                                state=JobState.RUNNING, launcher=None)  # fmt: skip
    assert ex._from_row(job, rows["12"], None, time.time()) is None  # type: ignore[arg-type]
    sacct = ex._sacct_rows("21|21|COMPLETED|0:0|2026-01-01T00:00:00|x|y|None\n22|22|RUNN")
    assert sacct["21"].state == "COMPLETED" and sacct["22"].source == UNREADABLE
    with pytest.raises(ConnectorError, match="nothing readable"):
        ex._squeue_rows("garbage|line\n")
    assert ex._squeue_rows("squeue: only a message\n") == {}


def test_a_recorded_cluster_is_used_by_later_commands() -> None:
    """§4: a cluster after ';' in sbatch's answer is passed to every later command, also by a
    later process that re-attaches the job (its record keeps the cluster)."""
    ex = _executor()
    assert ex._cluster_args() == []
    ex._learn_cluster(types.SimpleNamespace(record=types.SimpleNamespace(cluster="c2")))  # type: ignore[arg-type]
    assert ex._cluster_args() == ["--clusters=c2"]
    ex._learn_cluster(types.SimpleNamespace(record=types.SimpleNamespace(cluster="c3")))  # type: ignore[arg-type]
    assert ex._cluster_args() == ["--clusters=c2"]  # the first one known stays


def test_cancelled_by_uid_is_recorded() -> None:
    """§6: ``CANCELLED by 1234`` is CANCELLED with the uid recorded, reason "cancelled by uid 1234"."""
    from launchers.slurm.executor import Row

    ex = _executor()
    ex._user = ("someone", 999)
    job = types.SimpleNamespace(native_id="5", attempt=1, cancel_requested=False, runtime={},
                                state=JobState.RUNNING, launcher=None)  # fmt: skip
    update = ex._from_row(job, Row("5", "CANCELLED by 1234", source="sacct"), None, time.time())  # type: ignore[arg-type]
    assert update is not None and update.state is JobState.CANCELLED
    assert update.reason == "cancelled by uid 1234" and update.extra == {"cancelled_by": 1234}
