"""The one sbatch-with-retries routine (docs/slurm.md, "Inside the executor") that single jobs and
array chunks share, on ``FakeSlurm`` (tests/fakes) handing out scripted answers: what each
answer of sbatch becomes, that a transient failure is looked up by name before the next try,
the cancel check and the shared backoff."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from fakes import FakeSlurm
from launchers.connectors.base import CommandResult
from launchers.errors import ConnectorError, SubmissionError
from launchers.runtime.core import SystemClock
from launchers.slurm.cluster import SlurmCluster
from launchers.slurm.settings import SlurmTuning
from launchers.slurm.submit import (
    Accepted,
    Adopted,
    AtLimit,
    Backoff,
    Cancelled,
    GaveUp,
    Refused,
    sbatch_with_retries,
)

FAST = SlurmTuning(retry_first=0.001, retry_total=5.0)
TRANSIENT = CommandResult(1, "", "sbatch: error: Batch job submission failed: Socket timed out")


def fake_cluster(answers: Sequence[CommandResult | Exception]) -> tuple[SlurmCluster, FakeSlurm]:
    """A ``SlurmCluster`` over a ``FakeSlurm`` that hands out ``answers`` to sbatch in order."""
    fake = FakeSlurm()
    fake.answer("sbatch", *answers)
    return SlurmCluster(lambda: fake, local=True, cluster=None, tuning=SlurmTuning), fake


def sbatch(cluster: SlurmCluster, tuning: SlurmTuning = FAST, **kw: Any) -> Any:
    async def nothing() -> Adopted | None:
        return None

    kw.setdefault("lookup", nothing)

    async def go() -> Any:
        return await sbatch_with_retries(cluster, asyncio.Semaphore(1), script="job.sh",
                                         cwd="/d", tuning=tuning, clock=SystemClock(), **kw)  # fmt: skip

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (CommandResult(0, "123\n", ""), Accepted("123")),
        (CommandResult(0, "123;c2\n", ""), Accepted("123", "c2")),
        (CommandResult(1, "", "sbatch: error: QOSMaxSubmitJobPerUserLimit"),
         AtLimit("sbatch: error: QOSMaxSubmitJobPerUserLimit")),
        (CommandResult(1, "", "sbatch: error: invalid partition specified: nope"),
         Refused("sbatch: error: invalid partition specified: nope")),
    ],
)  # fmt: skip
def test_one_answer(answer: CommandResult, outcome: Any) -> None:
    cluster, fake = fake_cluster([answer])
    assert sbatch(cluster) == outcome
    assert fake.calls == [(["sbatch", "--parsable", "job.sh"], "/d", True)]


def test_the_cluster_learnt_is_passed() -> None:
    cluster, fake = fake_cluster([CommandResult(0, "5\n", "")])
    cluster.name = "c2"
    sbatch(cluster)
    assert fake.calls[0][0] == ["sbatch", "--parsable", "--clusters=c2", "job.sh"]


def test_no_id_in_a_zero_exit_is_an_error() -> None:
    with pytest.raises(SubmissionError):
        sbatch(fake_cluster([CommandResult(0, "", "")])[0])


def test_transient_failures_are_retried_after_a_lookup_by_name() -> None:
    looked = []

    async def lookup() -> Adopted | None:
        looked.append(1)
        return None

    cluster, fake = fake_cluster([TRANSIENT, ConnectorError("ssh: connection lost"), CommandResult(0, "9\n", "")])  # fmt: skip
    assert sbatch(cluster, lookup=lookup) == Accepted("9")
    assert len(fake.calls) == 3 and len(looked) == 2


def test_a_job_found_by_name_after_a_transient_failure_is_adopted() -> None:
    async def lookup() -> Adopted | None:
        return Adopted("77")

    cluster, fake = fake_cluster([TRANSIENT])
    assert sbatch(cluster, lookup=lookup) == Adopted("77")
    assert len(fake.calls) == 1  # never submitted twice


def test_a_failing_lookup_is_not_an_answer() -> None:
    async def lookup() -> Adopted | None:
        raise ConnectorError("squeue failed")

    cluster, _ = fake_cluster([TRANSIENT, CommandResult(0, "8\n", "")])
    assert sbatch(cluster, lookup=lookup) == Accepted("8")


def test_gives_up_at_the_deadline_with_the_last_message() -> None:
    # the second try comes after 1 s, a third would come 2 s later, past the 1.5 s deadline (a
    # first try may take half a second on a loaded machine without changing the count)
    tuning = SlurmTuning(retry_first=1.0, retry_total=1.5)
    cluster, fake = fake_cluster([TRANSIENT, TRANSIENT, TRANSIENT])
    assert sbatch(cluster, tuning) == GaveUp(TRANSIENT.stderr.strip())
    assert len(fake.calls) == 2


def test_cancel_is_checked_before_every_try() -> None:
    asked = iter([False, True])
    cluster, fake = fake_cluster([TRANSIENT])
    assert sbatch(cluster, cancelled=lambda: next(asked)) == Cancelled()
    assert len(fake.calls) == 1


def test_failures_extend_the_shared_backoff() -> None:
    backoff = Backoff()
    cluster, _ = fake_cluster([TRANSIENT, CommandResult(0, "1\n", "")])
    before = time.monotonic()
    assert sbatch(cluster, backoff=backoff) == Accepted("1")
    assert backoff.until > before


def test_a_slot_freed_while_the_sbatch_was_refused_is_not_missed() -> None:
    """A job of ours leaving the queue between the sbatch that was refused for a submit limit
    and the wait: the wait returns at once (it used to sleep the whole ``submit_limit_wait``)."""

    from launchers.slurm.submit import SlotWaiters

    async def scenario() -> tuple[float, float]:
        slots = SlotWaiters()
        since = slots.generation  # read before the sbatch
        slots.signal()  # a job left while sbatch answered "limit"
        t0 = time.monotonic()
        await slots.wait(30.0, since)
        missed = time.monotonic() - t0
        since = slots.generation
        t0 = time.monotonic()
        asyncio.get_running_loop().call_later(0.05, slots.signal)
        await slots.wait(30.0, since)  # nothing since: waits for the next signal
        return missed, time.monotonic() - t0

    missed, waited = asyncio.run(scenario())
    assert missed < 1.0 and 0.04 < waited < 10.0
