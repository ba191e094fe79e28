"""The submit allowance of array chunks (docs/design/runtime.md §8), from sacctmgr/squeue text: pure."""

from __future__ import annotations

from launchers.slurm.limits import Allowance, allowance_command, parse_allowance

M = "@@launchers@@\n"


def out(default: str, assoc: list[str], qos: list[str], queued: list[str]) -> str:
    return "".join([default + "\n", M, *(a + "\n" for a in assoc), M, *(q + "\n" for q in qos), M,
                    *(q + "\n" for q in queued)])  # fmt: skip


ASSOC = ["sandbox|||normal", "root||5|normal", "root|gpu|2|normal", "research||9|high"]
QOS = ["normal|", "high|4", "bench|7"]


def test_association_limit_of_the_default_account_minus_its_queued_jobs() -> None:
    text = out("root", ASSOC, QOS, ["root|normal", "root|normal", "research|high"])
    assert parse_allowance(text) == Allowance(3, "MaxSubmitJobs=5 of account root, 2 queued")


def test_the_smaller_of_association_and_qos_wins() -> None:
    text = out("root", ASSOC, QOS, ["research|high"])
    assert parse_allowance(text, account="research") == Allowance(
        3, "MaxSubmitJobsPerUser=4 of QoS high, 1 queued"
    )
    assert parse_allowance(text, qos="bench") == Allowance(
        5, "MaxSubmitJobs=5 of account root, 0 queued"
    )


def test_partition_specific_association() -> None:
    text = out("root", ASSOC, QOS, [])
    assert parse_allowance(text, partition="gpu") == Allowance(
        2, "MaxSubmitJobs=2 of account root, 0 queued"
    )
    assert parse_allowance(text, partition="debug") == Allowance(
        5, "MaxSubmitJobs=5 of account root, 0 queued"
    )


def test_no_limit_or_unreadable_output_is_none() -> None:
    assert parse_allowance(out("sandbox", ASSOC, QOS, ["sandbox|normal"])) is None
    assert parse_allowance("sacctmgr: error: Problem talking to the database\n") is None
    assert parse_allowance("") is None


def test_allowance_can_be_exhausted() -> None:
    text = out("root", ASSOC, QOS, ["root|normal"] * 6)
    assert parse_allowance(text) == Allowance(-1, "MaxSubmitJobs=5 of account root, 6 queued")


def test_command_quotes_the_user_and_names_the_cluster() -> None:
    argv = allowance_command("o'brien", "c1")
    assert argv[:2] == ["sh", "-c"]
    assert (
        "user='o'\"'\"'brien'" in argv[2] and "cluster=c1" in argv[2] and "--clusters=c1" in argv[2]
    )
