"""Slurm state mapping (docs/design/runtime.md §6), fatal pending reasons, and parsing of Slurm command output (docs/design/runtime.md §4, §5)."""

from __future__ import annotations

import logging

import pytest

from launchers.errors import ScriptError, SubmissionError
from launchers.jobs.state import JobState
from launchers.slurm import parse as P
from launchers.slurm.sbatch_options import check_sbatch_options
from launchers.slurm.states import (
    SLURM_STATES,
    UnknownStateWarner,
    cancel_reason,
    is_fatal_reason,
    map_state,
)

TABLE = {
    "PENDING": "PENDING", "CONFIGURING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_FED": "PENDING",
    "REQUEUE_HOLD": "PENDING", "RESV_DEL_HOLD": "PENDING", "SPECIAL_EXIT": "PENDING",
    "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "SIGNALING": "RUNNING", "STAGE_OUT": "RUNNING",
    "RESIZING": "RUNNING", "SUSPENDED": "SUSPENDED", "STOPPED": "SUSPENDED",
    "COMPLETED": "COMPLETED", "FAILED": "FAILED", "CANCELLED": "CANCELLED", "TIMEOUT": "TIMEOUT",
    "PREEMPTED": "PREEMPTED", "NODE_FAIL": "NODE_FAIL", "OUT_OF_MEMORY": "OUT_OF_MEMORY",
    "BOOT_FAIL": "BOOT_FAIL", "DEADLINE": "DEADLINE", "REVOKED": "FAILED",
}  # fmt: skip
CODES = {
    "PD": "PENDING", "CF": "PENDING", "RQ": "PENDING", "RF": "PENDING", "RH": "PENDING",
    "RD": "PENDING", "SE": "PENDING", "R": "RUNNING", "CG": "RUNNING", "SI": "RUNNING",
    "SO": "RUNNING", "RS": "RUNNING", "S": "SUSPENDED", "ST": "SUSPENDED", "CD": "COMPLETED",
    "F": "FAILED", "CA": "CANCELLED", "TO": "TIMEOUT", "PR": "PREEMPTED", "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY", "BF": "BOOT_FAIL", "DL": "DEADLINE", "RV": "FAILED",
}  # fmt: skip


@pytest.mark.parametrize(("slurm", "ours"), sorted(TABLE.items()))
def test_every_long_name(slurm: str, ours: str) -> None:
    assert map_state(slurm).state == ours
    assert map_state(slurm.lower()).state == ours
    assert JobState[ours]  # a real JobState name


@pytest.mark.parametrize(("code", "ours"), sorted(CODES.items()))
def test_every_compact_code(code: str, ours: str) -> None:
    assert map_state(code).state == ours
    assert map_state(code.lower()).state == ours


def test_table_is_complete() -> None:
    assert set(SLURM_STATES) == set(TABLE)


@pytest.mark.parametrize(
    ("text", "ours"),
    [("CANCELLED+", "CANCELLED"), ("OUT_OF_ME+", "OUT_OF_MEMORY"), ("NODE_FA+", "NODE_FAIL"),
     ("REQUEUE+", "PENDING"), ("COMPLETI+", "RUNNING"), ("out_of_me+", "OUT_OF_MEMORY")],
)  # fmt: skip
def test_truncated_names_match_as_prefix(text: str, ours: str) -> None:
    assert map_state(text).state == ours


def test_cancelled_by_uid() -> None:
    s = map_state("CANCELLED by 1234")
    assert s.state == "CANCELLED" and s.cancelled_by == 1234
    assert cancel_reason(1234, requested=True, my_uid=1234) == "cancelled on request"
    assert cancel_reason(1234, requested=False, my_uid=1234) == "cancelled by you"
    assert cancel_reason(1234, requested=False, my_uid=0) == "cancelled by uid 1234"


def test_revoked_and_holds_carry_a_reason() -> None:
    assert "federat" in (map_state("REVOKED").note or "")
    assert "REQUEUE_HOLD" in (map_state("RH").note or "")


@pytest.mark.parametrize("text", ["", "WEIRD", "R+", "BOGUS_STATE by 3"])
def test_unknown_states_are_not_guessed(text: str) -> None:
    assert map_state(text).state is None


def test_unknown_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    warn = UnknownStateWarner()
    with caplog.at_level(logging.WARNING):
        assert warn("WEIRD") is True
        assert warn("weird extra") is False
        assert warn("OTHER") is True
    assert sum("WEIRD" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    "reason",
    ["PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig", "BadConstraints", "InvalidAccount",
     "InvalidQOS", "AccountNotAllowed", "DependencyNeverSatisfied", "QOSMaxWallDurationPerJobLimit",
     "QOSMaxGRESPerJob", "AssocMaxCpuPerJobLimit", "QOSMaxMemoryPerJob"],
)  # fmt: skip
def test_fatal_reasons(reason: str) -> None:
    assert is_fatal_reason(reason)


@pytest.mark.parametrize(
    "reason",
    ["Priority", "Resources", "QOSMaxJobsPerUserLimit", "AssocGrpCpuLimit", "QOSMaxSubmitJobPerUserLimit",
     "QOSMaxCpuPerUserLimit", "ReqNodeNotAvail, UnavailableNodes:gpu-a100-[01-02]", "None", "", None,
     "AssocMaxJobsLimit", "QOSGrpGRES"],
)  # fmt: skip
def test_waiting_reasons_are_not_fatal(reason: str | None) -> None:
    assert not is_fatal_reason(reason)


def test_fatal_reasons_adjustable() -> None:
    assert is_fatal_reason("ReqNodeNotAvail, UnavailableNodes:x", add=["ReqNodeNotAvail"])
    assert not is_fatal_reason("PartitionTimeLimit", remove=["partitiontimelimit"])
    assert not is_fatal_reason("QOSMaxGRESPerJob", remove=["QOSMaxGRESPerJob"])


# --- parsing ---------------------------------------------------------------------------------


def test_sbatch_id_last_matching_line() -> None:
    assert P.parse_sbatch_id("sbatch: warning: x\n123\n") == ("123", None)
    assert P.parse_sbatch_id("noise\n77;cluster2\n") == ("77", "cluster2")
    assert P.parse_sbatch_id("5\n6\n") == ("6", None)
    with pytest.raises(SubmissionError, match="Batch job submission failed: Invalid qos"):
        P.parse_sbatch_id(
            "", "sbatch: error: Batch job submission failed: Invalid qos specification"
        )


def test_sacct_rows_split_from_the_left() -> None:
    out = (
        "12|12|COMPLETED|0:0|2026-01-01T10:00:00|2026-01-01T10:00:01|2026-01-01T10:00:02|None\n"
        "13|13|FAILED|3:0|2026-01-01T10:00:00|2026-01-01T10:00:01|2026-01-01T10:00:02|a|b|c\n"
        "20|20_[5-7,9%4]|PENDING|0:0|2026-01-01T10:00:00|Unknown|Unknown|JobArrayTaskLimit\n"
        "garbage line\n"
        "14|14|CANCELLED by 0|0:15|2026-01-01T10:00:00|Unknown|Unknown|None\n"
    )
    rows, bad = P.parse_sacct(out)
    by = {r.job_id: r for r in rows}
    assert bad == ["garbage line"]
    assert by["13"].reason == "a|b|c" and by["13"].exit_code == 3
    assert [k for k in by if k.startswith("20_")] == ["20_5", "20_6", "20_7", "20_9"]
    assert by["20_5"].start is None
    assert by["14"].exit_signal == 15 and by["14"].state == "CANCELLED by 0"


def test_squeue_rows() -> None:
    rows, bad = P.parse_squeue(
        "5|5|RUNNING|None\n7|6_1|PENDING|Priority\n8|8_[2-3]|PENDING|x|y\nCLUSTER: a\n"
    )
    assert [r.job_id for r in rows] == ["5", "6_1", "8_2", "8_3"]
    assert rows[0].reason is None and rows[2].reason == "x|y"
    assert bad == ["CLUSTER: a"]


@pytest.mark.parametrize(
    ("text", "ids"),
    [("123_[5-9,12%4]", ["123_5", "123_6", "123_7", "123_8", "123_9", "123_12"]),
     ("4_[1-7:3]", ["4_1", "4_4", "4_7"]), ("9", ["9"]), ("9_3", ["9_3"])],
)  # fmt: skip
def test_array_ranges(text: str, ids: list[str]) -> None:
    assert P.expand_job_id(text) == ids


def test_bad_array_range() -> None:
    with pytest.raises(P.ArrayRangeError):
        P.expand_job_id("1_[9-2]")


@pytest.mark.parametrize(
    ("text", "kind"),
    [("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", P.TRANSIENT),
     ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", P.TRANSIENT),
     ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", P.TRANSIENT),
     ("sbatch: error: QOSMaxSubmitJobPerUserLimit", P.SUBMIT_LIMIT),
     ("sbatch: error: AssocMaxSubmitJobLimit", P.SUBMIT_LIMIT),
     ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)", P.SUBMIT_LIMIT),
     ("sbatch: error: invalid partition specified: nope", P.REJECTED),
     ("sbatch: error: Batch job submission failed: Invalid qos specification", P.REJECTED)],
)  # fmt: skip
def test_classify_sbatch_errors(text: str, kind: str) -> None:
    assert P.classify_sbatch_error(text) == kind


def test_accounting_disabled_and_scancel_complaints() -> None:
    assert P.sacct_accounting_disabled(1, "sacct: error: Slurm accounting storage is disabled")
    assert not P.sacct_accounting_disabled(1, "sacct: error: Problem talking to the database")
    assert P.scancel_harmless(
        "scancel: error: Kill job error on job id 5: Job/step already completing or completed\n"
    )
    assert P.scancel_harmless("scancel: error: Invalid job id specified\n")
    assert not P.scancel_harmless("scancel: error: Unable to contact slurm controller")


def test_config_value() -> None:
    assert (
        P.parse_config_value("Foo = 1\nMaxArraySize            = 1001\n", "MaxArraySize") == "1001"
    )


# --- sbatch options ----------------------------------------------------------------------------


def test_sbatch_options_checked() -> None:
    assert check_sbatch_options([("mail_type", "END"), ("hold", True), ("nice", 5), ("exclusive", False)]) == (
        ("mail-type", "END"), ("hold", True), ("nice", "5"))  # fmt: skip
    with pytest.raises(ScriptError, match="did you mean reservation"):
        check_sbatch_options([("reservaton", "x")])
    for owned in ("job-name", "output", "error", "open-mode", "chdir", "export", "array", "parsable",
                  "requeue", "no-requeue", "signal"):  # fmt: skip
        with pytest.raises(ScriptError, match="set by the launcher"):
            check_sbatch_options([(owned, "x")])
    with pytest.raises(ScriptError, match="without dashes"):
        check_sbatch_options([("--qos", "x")])
    with pytest.raises(ScriptError, match="needs a value"):
        check_sbatch_options([("qos", True)])
    with pytest.raises(ScriptError, match="is a flag"):
        check_sbatch_options([("hold", "yes")])
    with pytest.raises(ScriptError, match="wrap"):
        check_sbatch_options([("wrap", "echo")])


def test_unrunnable_reason_names_the_known_limit() -> None:
    """docs/design/runtime.md §6: the reason names the limit when the configuration knows it."""
    from launchers.config.model import Partition, QoS, ResourceConfig, SlurmGroup
    from launchers.slurm.decide import limit_detail
    from launchers.slurm.options import SlurmOptions

    group = SlurmGroup(
        id="x",
        partitions=(Partition(name="debug", configuration=ResourceConfig(max_duration=3600)),),
        qos={"q": QoS(name="q", max_duration=7200)},
    )
    long = SlurmOptions(partition="debug", time="2-00:00:00", qos="q")
    assert (
        limit_detail(group, long, "PartitionTimeLimit")
        == "--time=2-00:00:00 exceeds partition debug's MaxTime 1:00:00"
    )
    assert (
        limit_detail(group, long, "QOSMaxWallDurationPerJobLimit")
        == "--time=2-00:00:00 exceeds QoS q's MaxWall 2:00:00"
    )
    assert (
        limit_detail(group, SlurmOptions(partition="debug", time="00:30:00"), "PartitionTimeLimit")
        is None
    )
    assert (
        limit_detail(
            group, SlurmOptions(partition="other", time="2-00:00:00"), "PartitionTimeLimit"
        )
        is None
    )
    assert limit_detail(None, long, "PartitionTimeLimit") is None
