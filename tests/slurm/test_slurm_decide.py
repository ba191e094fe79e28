"""What Slurm's answers mean for a job, as tables (docs/slurm.md, "Inside the executor"): the
pure decisions of ``launchers.slurm.decide`` (state updates, effects, the tracker's memory),
with no cluster, no file and no command. Each rule runs in microseconds."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from launchers.config.model import SlurmGroup
from launchers.jobs.record import RcRecord
from launchers.jobs.state import JobState
from launchers.slurm.decide import (
    GONE,
    LOST_REASON,
    SKIP,
    JobFacts,
    Observation,
    RecordRestarts,
    Resubmit,
    Scancel,
    Seen,
    WakeTracker,
    WarnUnknownState,
    choose_adoption,
    decide,
    decide_fast,
    decide_gone,
    decide_job,
    decide_rc,
    needs_live_reasons,
    needs_squeue,
    pick_row,
    rc_matches,
    with_live_reasons,
)
from launchers.slurm.launcher import SlurmLauncher
from launchers.slurm.parse import UNREADABLE, Row
from launchers.slurm.settings import SlurmSettings, SlurmTuning

NOW = 1_800_000_000.0
TUNING = SlurmTuning()
SETTINGS = SlurmSettings.resolve(SlurmLauncher(group=SlurmGroup(id="u")))


def facts(**kw: Any) -> JobFacts:
    """A job submitted as 42, attempt 1, RUNNING, submitted an hour ago (override any field)."""
    base: dict[str, Any] = dict(native_id="42", attempt=1, state=JobState.RUNNING,
                                submitted=NOW - 3600)  # fmt: skip
    return JobFacts(**{**base, **kw})


def rc(code: int | None = 0, **kw: Any) -> RcRecord:
    return RcRecord(rc=code, **{"attempt": 1, "native_id": "42", **kw})


def row(state: str, **kw: Any) -> Row:
    return Row("42", state, **kw)


def run(r: Row, job: JobFacts | None = None, rcr: RcRecord | None = None, **kw: Any) -> Any:
    settings = kw.pop("settings", SETTINGS)
    return decide(r, rcr, job or facts(), settings, TUNING, kw.pop("now", NOW),
                  my_uid=kw.pop("my_uid", 1000))  # fmt: skip


# -- job.rc ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "job", "matches"),
    [
        (rc(native_id="42"), facts(), True),
        (rc(native_id="41"), facts(), False),  # an earlier submission's
        (rc(native_id=None, attempt=1), facts(), True),  # no id: by attempt
        (rc(native_id=None, attempt=0), facts(), False),
        (rc(native_id=None, attempt=2), facts(), True),  # Slurm requeued it since
        (rc(native_id=None, attempt=None), facts(), True),
        (rc(native_id="41", attempt=1), facts(native_id=None), True),  # not submitted yet here
    ],
)
def test_rc_matches_by_id_else_attempt(record: RcRecord, job: JobFacts, matches: bool) -> None:
    assert rc_matches(record, job) is matches


def test_decide_rc_table() -> None:
    ok = decide_rc(rc(0, start="s", end="e"), facts())
    assert ok.update is not None and ok.update.state is JobState.COMPLETED
    assert (ok.update.detail, ok.update.exit_code, ok.update.reason) == ("job.rc", 0, "")
    assert (ok.update.started_at, ok.update.ended_at) == ("s", "e")
    assert ok.effects == ()
    # a failure waits for Slurm's word (the state may be OUT_OF_MEMORY, TIMEOUT...)
    assert decide_rc(rc(3), facts()).update is None
    assert decide_rc(rc(0, native_id="7"), facts()).update is None  # another submission's
    assert decide_rc(None, facts()).update is None
    # a later attempt's record: Slurm requeued the job in place
    later = decide_rc(rc(1, attempt=3), facts())
    assert later.update is None and later.effects == (RecordRestarts(3),)


def test_fast_check_wakes_the_tracker_once() -> None:
    """The fast check completes on rc 0; any other matching job.rc wakes the tracker, once."""
    assert decide_fast(rc(0), facts()).update is not None
    first = decide_fast(rc(2), facts())
    assert first.update is None and first.effects == (WakeTracker(),) and first.seen.rc_woke
    again = decide_fast(rc(2), facts(seen=first.seen))
    assert again.effects == () and again.seen == first.seen
    assert decide_fast(rc(2, native_id="9"), facts()).effects == ()  # not this submission's


# -- which row speaks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sacct", "squeue", "submitted", "expected"),
    [
        ({"42": row("RUNNING")}, None, NOW - 3600, "sacct"),
        ({}, {"42": row("RUNNING", source="squeue")}, NOW - 10, SKIP),  # slurmdbd may lag
        ({}, {"42": row("RUNNING", source="squeue")}, NOW - 3600, "squeue"),
        ({}, {}, NOW - 3600, GONE),
        ({}, None, NOW - 3600, SKIP),  # squeue could not be read: nothing is concluded
        (None, {"42": row("PENDING", source="squeue")}, NOW - 10, "squeue"),  # no accounting
        (None, {}, NOW - 10, GONE),
        (None, None, NOW - 10, SKIP),
    ],
)
def test_pick_row(sacct: Any, squeue: Any, submitted: float, expected: Any) -> None:
    got = pick_row(Observation(sacct, squeue), facts(submitted=submitted), TUNING, NOW)
    assert (got.source if isinstance(got, Row) else got) == expected


def test_unknown_submission_time_counts_as_now() -> None:
    """A record without ``submitted_at`` is within the grace (not taken for gone at once)."""
    assert pick_row(Observation({}, {}), facts(submitted=None), TUNING, NOW) is SKIP
    assert not needs_squeue({}, [facts(submitted=None)], TUNING, NOW)


def test_needs_squeue_only_past_the_grace() -> None:
    listed = {"42": row("RUNNING")}
    assert not needs_squeue(listed, [facts()], TUNING, NOW)
    assert not needs_squeue({}, [facts(submitted=NOW - TUNING.sacct_grace + 1)], TUNING, NOW)
    assert needs_squeue({}, [facts(submitted=NOW - TUNING.sacct_grace)], TUNING, NOW)


@pytest.mark.parametrize(
    ("state", "pended", "since_last", "expected"),
    [
        ("PENDING", 3600, 3600, True),
        ("PENDING", 3600, 29, False),  # read less than fatal_confirm / 2 ago
        ("PENDING", 29, 3600, False),  # too young to have a reason worth confirming
        ("RUNNING", 3600, 3600, False),
        ("PD", 3600, 3600, True),
    ],
)
def test_needs_live_reasons(state: str, pended: float, since_last: float, expected: bool) -> None:
    rows = {"42": row(state)}
    job = facts(submitted=NOW - pended)
    assert needs_live_reasons(rows, [job], TUNING, NOW, since_last) is expected


def test_live_reasons_stand_in_for_sacct_only_while_both_pend() -> None:
    rows = {"1": Row("1", "PENDING", "Dependency"), "2": Row("2", "RUNNING", "None"),
            "3": Row("3", "PENDING", "Priority")}  # fmt: skip
    live = {"1": Row("1", "PENDING", "DependencyNeverSatisfied", source="squeue"),
            "2": Row("2", "PENDING", "BeginTime", source="squeue"),
            "3": Row("3", "RUNNING", "None", source="squeue")}  # fmt: skip
    out = with_live_reasons(rows, live)
    assert out["1"] == Row("1", "PENDING", "DependencyNeverSatisfied")  # state and source kept
    assert out["2"] == rows["2"] and out["3"] == rows["3"]


# -- states --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("r", "state", "reason", "exit_code", "signal"),
    [
        (row("RUNNING", start="2026-01-01T10:00:00"), JobState.RUNNING, "", None, None),
        (row("COMPLETED", exit_code=0), JobState.COMPLETED, "", 0, None),
        (row("FAILED", exit_code=3), JobState.FAILED, "exit code 3", 3, None),
        (row("FAILED", exit_code=0, exit_signal=9), JobState.FAILED, "killed by signal 9", 0, 9),
        (row("TIMEOUT"), JobState.TIMEOUT, "time limit reached", None, None),
        (row("OUT_OF_MEMORY"), JobState.OUT_OF_MEMORY, "out of memory", None, None),
        (row("OUT_OF_ME+"), JobState.OUT_OF_MEMORY, "out of memory", None, None),
        (row("NODE_FAIL"), JobState.NODE_FAIL, "node failure", None, None),
        (row("PREEMPTED"), JobState.PREEMPTED, "preempted", None, None),
        (row("BOOT_FAIL"), JobState.BOOT_FAIL, "node boot failure", None, None),
        (row("DEADLINE"), JobState.DEADLINE, "deadline reached", None, None),
        (row("CANCELLED"), JobState.CANCELLED, "cancelled", None, None),
        (row("CANCELLED by 1000"), JobState.CANCELLED, "cancelled by you", None, None),
        (row("CANCELLED by 0"), JobState.CANCELLED, "cancelled by uid 0", None, None),
    ],
)  # fmt: skip
def test_states_and_reasons(
    r: Row, state: JobState, reason: str, exit_code: int | None, signal: int | None
) -> None:
    d = run(r)
    assert d.update is not None and d.effects == ()
    assert (d.update.state, d.update.reason) == (state, reason)
    assert (d.update.exit_code, d.update.signal) == (exit_code, signal)
    assert d.update.detail == "sacct" and d.update.slurm_state == r.state.strip()


def test_started_at_is_read_from_a_running_row_only() -> None:
    running = run(row("RUNNING", start="2026-01-01T10:00:00")).update
    assert running.started_at is not None and running.started_at.startswith("2026-01-01T10:00:00")
    pending = run(row("PENDING", start="2026-01-01T10:00:00"), facts(state=JobState.PENDING))
    assert pending.update.started_at is None


def test_job_rc_gives_the_exit_code_of_a_final_row() -> None:
    d = run(row("FAILED", exit_code=1, end="2026-01-01T11:00:00"), rcr=rc(7, signal=None, end="E"))
    assert (d.update.state, d.update.exit_code, d.update.reason) == (
        JobState.FAILED,
        7,
        "exit code 7",
    )
    assert d.update.ended_at == "E"
    other = run(row("FAILED", exit_code=1), rcr=rc(7, native_id="9"))  # not this submission's
    assert other.update.exit_code == 1


def test_cancel_reasons() -> None:
    asked = run(row("CANCELLED by 1000"), facts(cancel_requested=True))
    assert asked.update.reason == "cancelled on request"
    by = run(row("CANCELLED by 1234"))
    assert by.update.reason == "cancelled by uid 1234" and by.update.extra == {"cancelled_by": 1234}
    assert run(row("CANCELLED"), my_uid=None).update.extra is None


def test_unreadable_and_unknown_rows() -> None:
    assert run(Row("42", "", source=UNREADABLE)).update is None
    unknown = run(row("WEIRD"))
    assert unknown.update is None and unknown.effects == (WarnUnknownState("WEIRD"),)
    ended = run(row("WEIRD"), rcr=rc(0))
    assert ended.update.state is JobState.COMPLETED and ended.effects == (
        WarnUnknownState("WEIRD"),
    )


def test_a_row_resets_the_missing_count() -> None:
    job = facts(seen=Seen(missing=(NOW - 100, 2)))
    assert run(row("RUNNING"), job).seen.missing is None


# -- requeues and resubmission ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("r", "before", "attempt"),
    [
        (row("REQUEUED"), JobState.RUNNING, 2),
        (row("PENDING"), JobState.RUNNING, 2),  # back in the queue after running
        (row("PENDING"), JobState.SUSPENDED, 2),
        (row("PENDING"), JobState.PENDING, None),  # still waiting: no requeue
    ],
)
def test_requeue_in_place_records_the_next_attempt_once(
    r: Row, before: JobState, attempt: int | None
) -> None:
    d = run(r, facts(state=before))
    restarts = [e for e in d.effects if isinstance(e, RecordRestarts)]
    assert restarts == ([RecordRestarts(attempt)] if attempt else [])
    if attempt:
        assert d.seen.requeue_seen == attempt
        # the next poll sees the record at that attempt: not counted twice
        again = run(r, facts(state=before, attempt=attempt, seen=d.seen))
        assert not [e for e in again.effects if isinstance(e, RecordRestarts)]


def test_a_later_job_rc_records_the_restarts_before_the_state() -> None:
    d = run(row("RUNNING"), facts(), rcr=rc(1, attempt=3))
    assert d.effects == (RecordRestarts(3),) and d.update.state is JobState.RUNNING


@pytest.mark.parametrize("state", ["TIMEOUT", "PREEMPTED", "NODE_FAIL"])
@pytest.mark.parametrize(
    ("resumable", "cancel", "attempt", "resubmit"),
    [
        (True, False, 1, True),
        (True, False, 3, True),  # max_requeues 3: attempts 2, 3, 4
        (True, False, 4, False),
        (False, False, 1, False),
        (True, True, 1, False),  # a cancel was asked: the job ends
    ],
)
def test_resumable_jobs_are_resubmitted(
    state: str, resumable: bool, cancel: bool, attempt: int, resubmit: bool
) -> None:
    job = facts(resumable=resumable, cancel_requested=cancel, attempt=attempt)
    d = run(row(state), job, rcr=rc(None, attempt=attempt))
    if resubmit:
        assert d.update is None and d.effects == (Resubmit(JobState[state]),)
    else:
        assert d.update is not None and d.update.state is JobState[state]


def test_max_requeues_is_the_groups() -> None:
    settings = attrs.evolve(SETTINGS, max_requeues=0)
    d = run(row("TIMEOUT"), facts(resumable=True), settings=settings)
    assert d.update.state is JobState.TIMEOUT


# -- pending reasons ----------------------------------------------------------------------------


def pend(reason: str, seen: Seen | None = None, now: float = NOW, **kw: Any) -> Any:
    job = facts(state=JobState.PENDING, seen=seen or Seen())
    return run(row("PENDING", reason=reason), job, now=now, **kw)


@pytest.mark.parametrize(
    ("reason", "shown"),
    [("Priority", "Priority"), ("None", ""), ("", ""), ("Resources", "Resources")],
)
def test_pending_reasons_shown(reason: str, shown: str) -> None:
    d = pend(reason)
    assert (d.update.state, d.update.reason, d.effects) == (JobState.PENDING, shown, ())
    assert d.seen.fatal is None


def test_fatal_reason_confirmed_after_fatal_confirm_cancels() -> None:
    first = pend("PartitionTimeLimit")
    assert first.update.state is JobState.PENDING and first.update.reason == "PartitionTimeLimit"
    assert first.seen.fatal == ("PartitionTimeLimit", NOW) and first.effects == ()
    early = pend("PartitionTimeLimit", first.seen, NOW + TUNING.fatal_confirm - 1)
    assert early.update.state is JobState.PENDING and early.seen == first.seen
    late = pend("PartitionTimeLimit", first.seen, NOW + TUNING.fatal_confirm)
    assert late.update.state is JobState.UNRUNNABLE and late.effects == (Scancel(("42",)),)
    assert late.update.reason == "Slurm cannot run this job: PartitionTimeLimit"
    assert late.update.slurm_state == "PENDING" and late.update.started_at is None


def test_fatal_reason_reported_with_fatal_pending_report() -> None:
    settings = attrs.evolve(SETTINGS, fatal_pending="report")
    first = pend("InvalidQOS", settings=settings)
    late = pend("InvalidQOS", first.seen, NOW + TUNING.fatal_confirm, settings=settings)
    assert late.update.state is JobState.PENDING and late.effects == ()
    assert late.update.reason == "pending forever: InvalidQOS"


def test_a_changed_or_cleared_reason_restarts_the_confirmation() -> None:
    first = pend("PartitionTimeLimit")
    other = pend("InvalidQOS", first.seen, NOW + 100)
    assert other.update.state is JobState.PENDING and other.seen.fatal == ("InvalidQOS", NOW + 100)
    cleared = pend("Priority", first.seen, NOW + 100)
    assert cleared.seen.fatal is None
    running = run(row("RUNNING"), facts(seen=first.seen))
    assert running.seen.fatal is None


def test_group_fatal_reason_adjustments() -> None:
    add = attrs.evolve(SETTINGS, fatal_reasons_add=("Licenses",))
    assert pend("Licenses", settings=add).seen.fatal is not None
    remove = attrs.evolve(SETTINGS, fatal_reasons_remove=("PartitionTimeLimit",))
    assert pend("PartitionTimeLimit", settings=remove).seen.fatal is None


# -- gone ----------------------------------------------------------------------------------------


def test_gone_decided_by_job_rc() -> None:
    gone = decide_gone(rc(0), facts(), SETTINGS, TUNING, NOW)
    assert (gone.update.state, gone.update.detail) == (JobState.COMPLETED, "job.rc")
    failed = decide_gone(rc(2, end="E"), facts(), SETTINGS, TUNING, NOW).update
    assert (failed.state, failed.reason, failed.ended_at) == (JobState.FAILED, "exit code 2", "E")
    killed = decide_gone(rc(143, signal=15), facts(), SETTINGS, TUNING, NOW).update
    assert (killed.state, killed.reason) == (JobState.FAILED, "killed by signal 15")
    asked = decide_gone(rc(143, signal=15), facts(cancel_requested=True), SETTINGS, TUNING, NOW)
    assert (asked.update.state, asked.update.reason) == (JobState.CANCELLED, "cancelled on request")


@pytest.mark.parametrize("cancel", [False, True])
@pytest.mark.parametrize("code,signal", [(0, None), (1, None), (143, 15), (0, 9), (None, 15)])
def test_slurm_judges_job_rc_by_the_one_rule(
    code: int | None, signal: int | None, cancel: bool
) -> None:
    """A matching job.rc, read before Slurm answers or once Slurm forgot the job, ends the job
    exactly as ``update_for_rc`` says for every kind (docs/design/runtime.md §5)."""
    from launchers.jobs.update import update_for_rc

    record = rc(code, signal=signal, start="S", end="E")
    job = facts(cancel_requested=cancel)
    want = update_for_rc(record, attempt=None, cancelled=cancel)
    assert decide_gone(record, job, SETTINGS, TUNING, NOW).update == want
    early = decide_rc(record, job).update
    assert early == (want if want is not None and want.state is JobState.COMPLETED else None)


def test_failed_in_squeue_before_job_rc_was_read_waits_one_cycle() -> None:
    """Without accounting, squeue's FAILED gives no exit code, and the cycle read job.rc before
    asking Slurm: one more cycle (at once) reads the job.rc the job wrote in between; with none
    then either, FAILED says the exit code is unknown instead of "exit code None"."""
    failed = row("FAILED", source="squeue")
    first = decide(failed, None, facts(), SETTINGS, TUNING, NOW, my_uid=0)
    assert first.update is None and WakeTracker() in first.effects and first.seen.rc_awaited
    then = decide(failed, rc(3), facts(seen=first.seen), SETTINGS, TUNING, NOW, my_uid=0)
    assert (then.update.state, then.update.exit_code, then.update.reason) == (
        JobState.FAILED,
        3,
        "exit code 3",
    )
    never = decide(failed, None, facts(seen=first.seen), SETTINGS, TUNING, NOW, my_uid=0)
    assert never.update.state is JobState.FAILED and never.update.exit_code is None
    assert never.update.reason == "exit code unknown (no accounting, no job.rc)"
    # sacct gives the exit code: no wait
    now = decide(row("FAILED", exit_code=2), None, facts(), SETTINGS, TUNING, NOW, my_uid=0)
    assert now.update.state is JobState.FAILED and now.update.reason == "exit code 2"


def test_lost_after_polls_spanning_lost_after() -> None:
    seen = Seen()
    t = NOW
    for _ in range(TUNING.lost_polls - 1):
        d = decide_gone(None, facts(seen=seen), SETTINGS, TUNING, t)
        assert d.update is None
        seen, t = d.seen, t + TUNING.lost_after
    assert seen.missing == (NOW, TUNING.lost_polls - 1)
    d = decide_gone(None, facts(seen=seen), SETTINGS, TUNING, t)
    assert d.update.state is JobState.LOST and d.update.reason == LOST_REASON
    # enough polls but not yet lost_after: still waiting
    quick = Seen(missing=(NOW, 10))
    assert decide_gone(None, facts(seen=quick), SETTINGS, TUNING, NOW + 1).update is None
    # the group's lost_after replaces the tuning's
    short = attrs.evolve(SETTINGS, lost_after=1.0)
    assert (
        decide_gone(None, facts(seen=quick), short, TUNING, NOW + 1).update.state is JobState.LOST
    )


# -- one job in one cycle -----------------------------------------------------------------------


def test_decide_job_rc_first_then_the_row() -> None:
    obs = Observation({"42": row("RUNNING")}, None)
    done = decide_job(rc(0), obs, facts(), SETTINGS, TUNING, NOW, my_uid=None)
    assert done.update.state is JobState.COMPLETED and done.update.detail == "job.rc"
    running = decide_job(None, obs, facts(), SETTINGS, TUNING, NOW, my_uid=None)
    assert running.update.state is JobState.RUNNING
    # within the grace, no row: the job.rc's restarts are still recorded
    young = decide_job(rc(1, attempt=2), Observation({}, None), facts(submitted=NOW),
                       SETTINGS, TUNING, NOW, my_uid=None)  # fmt: skip
    assert young.update is None and young.effects == (RecordRestarts(2),)
    # gone with a failing job.rc: FAILED, restarts recorded once
    gone = decide_job(rc(1, attempt=2), Observation({}, {}), facts(), SETTINGS, TUNING, NOW,
                      my_uid=None)  # fmt: skip
    assert gone.update.state is JobState.FAILED and gone.effects == (RecordRestarts(2),)
    row_too = decide_job(rc(1, attempt=2), obs, facts(), SETTINGS, TUNING, NOW, my_uid=None)
    assert row_too.effects == (RecordRestarts(2),)


# -- adoption -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "foreign", "keep", "duplicates"),
    [
        ([], set(), None, None),
        (["5"], set(), "5", ()),
        (["5", "6", "7"], set(), "5", ("6", "7")),
        (["5", "6", "7"], {"5"}, "6", ("7",)),  # another experiment's job is never cancelled
        (["5", "6"], {"5", "6"}, "5", ("6",)),  # none in our directory: the oldest, as before
    ],
)
def test_choose_adoption(ids: list[str], foreign: set[str], keep: Any, duplicates: Any) -> None:
    got = choose_adoption(ids, foreign)
    assert (got.keep, got.duplicates) == (keep, duplicates) if got else keep is None
