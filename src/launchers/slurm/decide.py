"""What Slurm's answers mean for a job: pure decisions, carried out by the executor
(docs/slurm.md, "Decide, then do").

A decision reads a job's facts (``JobFacts``: its record, cancel request, what the tracker saw
in earlier cycles), a row of sacct or squeue, its ``job.rc``, the settings and the time, and
returns a ``Decision``: the state update to record, the effects to carry out (scancel, record
a requeue by Slurm, resubmit, ...) and the tracker's new memory of the job (``Seen``). It
never writes a file nor runs a command, so every rule is tested in milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

import attrs

from ..jobs.record import RcRecord, epoch_iso, iso_epoch
from ..jobs.state import JobState
from ..jobs.update import StateUpdate, update_for_rc
from ..units import parse_slurm_time, slurm_time
from .parse import UNREADABLE, Row
from .settings import SlurmSettings, SlurmTuning
from .states import SlurmStatus, cancel_reason, is_fatal_reason, map_state

LOST_REASON = "Slurm has no record of the job and it left no exit record"


@attrs.frozen
class Seen:
    """The tracker's memory of one job between cycles."""

    #: when the job was first found in no Slurm answer, and in how many polls since
    missing: tuple[float, int] | None = None
    #: a fatal pending reason and when it was first seen
    fatal: tuple[str, float] | None = None
    #: the attempt a requeue seen in Slurm's state was recorded as
    requeue_seen: int | None = None
    #: a job.rc of this attempt woke the tracker already (fast checks)
    rc_woke: bool = False
    #: Slurm said FAILED with no exit code (squeue: no accounting) before any job.rc was read:
    #: one more cycle reads it
    rc_awaited: bool = False


@attrs.frozen
class JobFacts:
    """What a decision may read of a job."""

    native_id: str | None
    attempt: int
    state: JobState
    #: when sbatch accepted this attempt (epoch), if known
    submitted: float | None = None
    cancel_requested: bool = False
    #: the task can resume (TIMEOUT/PREEMPTED/NODE_FAIL resubmit it); False when unknown
    resumable: bool = False
    seen: Seen = Seen()


# -- effects: what the executor does after a decision, in this order -----------------------------


@attrs.frozen
class RecordRestarts:
    """Slurm requeued the job in place: record attempts up to ``attempt`` (same id)."""

    attempt: int


@attrs.frozen
class WarnUnknownState:
    """An unknown Slurm state: warn once per state name."""

    raw: str


@attrs.frozen
class Scancel:
    """Cancel these Slurm ids, in the background (a fatal pending reason)."""

    ids: tuple[str, ...]


@attrs.frozen
class Resubmit:
    """A resumable job ended ``state``: archive its job.rc, start the next attempt, submit it."""

    state: JobState


@attrs.frozen
class WakeTracker:
    """A job.rc of this attempt appeared: run a full poll cycle soon."""


Effect = Union[RecordRestarts, WarnUnknownState, Scancel, Resubmit, WakeTracker]  # noqa: UP007


@attrs.frozen
class Decision:
    """A state update (or None), the effects to carry out, the tracker's new memory."""

    update: StateUpdate | None = None
    effects: tuple[Effect, ...] = ()
    seen: Seen = Seen()


# -- job.rc ---------------------------------------------------------------------------------------


def rc_matches(rc: RcRecord, job: JobFacts) -> bool:
    """Whether ``rc`` is the exit record of the job's current submission (by id, else attempt)."""
    if rc.native_id is not None and job.native_id is not None:
        return rc.native_id == job.native_id
    return rc.attempt is None or rc.attempt >= job.attempt


def _restarts(rc: RcRecord | None, job: JobFacts) -> int | None:
    """The attempt a matching ``rc`` shows Slurm requeued the job to, if later than the record."""
    if rc is None or rc.attempt is None or rc.attempt <= job.attempt or not rc_matches(rc, job):
        return None
    return rc.attempt


def decide_rc(rc: RcRecord | None, job: JobFacts) -> Decision:
    """A matching job.rc with rc 0 completes the job, before Slurm says so; any matching one
    from a later attempt records Slurm's requeues."""
    seen = job.seen
    if rc is None or not rc_matches(rc, job):
        return Decision(seen=seen)
    restarts = _restarts(rc, job)
    effects: tuple[Effect, ...] = () if restarts is None else (RecordRestarts(restarts),)
    if rc.success:
        return Decision(update_for_rc(rc, attempt=None), effects, seen)
    return Decision(None, effects, seen)


def decide_fast(rc: RcRecord | None, job: JobFacts) -> Decision:
    """The fast check (job.rc only, no Slurm call): ``decide_rc``, and a job.rc that does not
    end the job yet wakes the tracker once, so that Slurm is asked at once."""
    first = decide_rc(rc, job)
    if first.update is not None or rc is None or not rc_matches(rc, job) or job.seen.rc_woke:
        return first
    seen = attrs.evolve(job.seen, rc_woke=True)
    return Decision(None, (*first.effects, WakeTracker()), seen)


# -- which row speaks for a job -------------------------------------------------------------------


@attrs.frozen
class Observation:
    """One cycle's answers: sacct's rows (None: not asked, or failed) and squeue's (None: not
    read, or failed). Pending reasons from squeue are already merged into sacct's rows."""

    sacct: Mapping[str, Row] | None
    squeue: Mapping[str, Row] | None


class _Skip:
    """No answer this cycle: the job stays as it is."""

    def __repr__(self) -> str:
        return "SKIP"


class _Gone:
    """No Slurm command knows the job."""

    def __repr__(self) -> str:
        return "GONE"


SKIP = _Skip()
GONE = _Gone()


def pick_row(
    obs: Observation, job: JobFacts, tuning: SlurmTuning, now: float
) -> Row | _Skip | _Gone:
    """sacct's row; else, within ``sacct_grace`` of the submission, nothing yet (slurmdbd may
    not have the job); else squeue's row; else gone, unless squeue could not be read."""
    nid = job.native_id or ""
    if obs.sacct is not None:
        row = obs.sacct.get(nid)
        if row is not None:
            return row
        submitted = job.submitted if job.submitted is not None else now
        if now - submitted < tuning.sacct_grace:
            return SKIP
    if obs.squeue is None:
        return SKIP
    return obs.squeue.get(nid) or GONE


def needs_squeue(
    sacct: Mapping[str, Row], jobs: Sequence[JobFacts], tuning: SlurmTuning, now: float
) -> bool:
    """Whether a job sacct does not list is past its ``sacct_grace`` (squeue must say where
    it is)."""
    return any(
        (j.native_id or "") not in sacct
        and now - (j.submitted if j.submitted is not None else now) >= tuning.sacct_grace
        for j in jobs
    )


def is_pending(row: Row) -> bool:
    """Whether a row says the job waits in the queue (PENDING and its aliases)."""
    return map_state(row.state).state == "PENDING"


def needs_live_reasons(
    rows: Mapping[str, Row],
    jobs: Sequence[JobFacts],
    tuning: SlurmTuning,
    now: float,
    since_last: float,
) -> bool:
    """Whether to read squeue's pending reasons: a job sacct lists as pending has pended for
    ``fatal_confirm / 2`` or more, and the last reading is that old.

    slurmdbd keeps the reason a job had when it was first recorded, so a dependency that fails
    later stays ``Dependency`` there and a fatal pending reason is only seen in slurmctld's.
    The reasons read stand in for sacct's until the next reading, so a fatal reason is seen
    twice ``fatal_confirm`` apart; only long-pending jobs can have one worth confirming."""
    half = tuning.fatal_confirm / 2
    if since_last < half:
        return False
    return any(
        (r := rows.get(j.native_id or "")) is not None
        and is_pending(r)
        and now - (j.submitted if j.submitted is not None else now) >= half
        for j in jobs
    )


def with_live_reasons(rows: Mapping[str, Row], live: Mapping[str, Row]) -> dict[str, Row]:
    """``rows`` where a job pending in both keeps its state but takes the reason of ``live``."""
    out = dict(rows)
    for jid, row in rows.items():
        now = live.get(jid)
        if now is not None and is_pending(row) and is_pending(now) and now.reason != row.reason:
            out[jid] = attrs.evolve(row, reason=now.reason)
    return out


# -- states -----------------------------------------------------------------------------------


def _slurm_time(text: str | None) -> str | None:
    """Slurm's local time with the local offset (as the records' other times)."""
    t = iso_epoch(text)
    return None if t is None else epoch_iso(t)


_FINAL_REASONS = {
    JobState.TIMEOUT: "time limit reached",
    JobState.OUT_OF_MEMORY: "out of memory",
    JobState.NODE_FAIL: "node failure",
    JobState.PREEMPTED: "preempted",
    JobState.BOOT_FAIL: "node boot failure",
    JobState.DEADLINE: "deadline reached",
}


def decide(
    row: Row,
    rc: RcRecord | None,
    job: JobFacts,
    settings: SlurmSettings,
    tuning: SlurmTuning,
    now: float,
    *,
    my_uid: int | None,
) -> Decision:
    """The update a row of sacct or squeue means for the job (docs/slurm.md, "States")."""
    seen = attrs.evolve(job.seen, missing=None)  # seen again: the count of misses restarts
    if row.source == UNREADABLE:
        return Decision(seen=seen)  # its line could not be read: the job stays as it was
    status = map_state(row.state)
    if not status.known:
        # the job keeps its state, but its exit record can still end it
        after = decide_gone(rc, job, settings, tuning, now) if rc and rc_matches(rc, job) else None
        update = after.update if after is not None else None
        return Decision(update, (WarnUnknownState(row.state),), seen)
    state = JobState[status.state or "PENDING"]
    rc_ok = rc is not None and rc_matches(rc, job)
    attempt = job.attempt
    restarts = _restarts(rc, job)
    if restarts is not None:
        attempt = restarts
    common: dict[str, Any] = {"slurm_state": status.raw}
    if row.start and status.slurm_state != "PENDING":
        common["started_at"] = _slurm_time(row.start)
    requeued = status.slurm_state in ("REQUEUED", "REQUEUE_FED") or (
        state is JobState.PENDING and job.state in (JobState.RUNNING, JobState.SUSPENDED)
    )
    if requeued and seen.requeue_seen != attempt:
        attempt += 1
        seen = attrs.evolve(seen, requeue_seen=attempt)
        restarts = attempt
    effects: tuple[Effect, ...] = () if restarts is None else (RecordRestarts(restarts),)
    if state is JobState.PENDING:
        pending = decide_pending(
            row, status, attrs.evolve(job, seen=seen), settings, tuning, now, common
        )
        return Decision(pending.update, effects + pending.effects, pending.seen)
    seen = attrs.evolve(seen, fatal=None)
    if not state.is_final:
        update = StateUpdate(state=state, detail=row.source, reason=status.note or "", **common)
        return Decision(update, effects, seen)
    if (
        state in (JobState.TIMEOUT, JobState.PREEMPTED, JobState.NODE_FAIL)
        and job.resumable
        and not job.cancel_requested
        and attempt - 1 < settings.max_requeues
    ):
        return Decision(None, (*effects, Resubmit(state)), seen)
    if state is JobState.FAILED and row.exit_code is None and not rc_ok and not seen.rc_awaited:
        # squeue gives no exit code, and this cycle read job.rc before asking Slurm: the job may
        # have written it in between. One more cycle, at once, reads it.
        return Decision(None, (*effects, WakeTracker()), attrs.evolve(seen, rc_awaited=True))
    ended = _slurm_time(row.end)
    exit_code, sig = row.exit_code, row.exit_signal or None
    if rc_ok and rc is not None:
        exit_code, sig = rc.rc, rc.signal
        ended = rc.end or ended
    reason: str | None = None
    if state is JobState.CANCELLED:
        reason = cancel_reason(status.cancelled_by, requested=job.cancel_requested, my_uid=my_uid)
        if status.cancelled_by is not None:  # "CANCELLED by 1234": the uid is recorded
            common["extra"] = {"cancelled_by": status.cancelled_by}
    elif state is JobState.FAILED:
        code = "unknown (no accounting, no job.rc)" if exit_code is None else exit_code
        reason = status.note or (f"killed by signal {sig}" if sig else f"exit code {code}")
        if rc_ok and rc is not None and rc.step:
            reason += f" in environment step {rc.step}"
    elif state is not JobState.COMPLETED:
        reason = status.note or _FINAL_REASONS.get(state, state.value.lower())
    update = StateUpdate(
        state=state, detail=row.source, reason=reason or "", exit_code=exit_code, signal=sig,
        ended_at=ended, **common,
    )  # fmt: skip
    return Decision(update, effects, seen)


def decide_pending(
    row: Row,
    status: SlurmStatus,
    job: JobFacts,
    settings: SlurmSettings,
    tuning: SlurmTuning,
    now: float,
    common: Mapping[str, Any],
) -> Decision:
    """A pending job: its reason, and a fatal reason seen twice ``fatal_confirm`` apart makes
    it UNRUNNABLE (cancelled; ``fatal_pending: report`` keeps it pending, said so)."""
    seen = job.seen
    reason = row.reason or ""
    add, remove = settings.fatal_reasons_add, settings.fatal_reasons_remove
    if is_fatal_reason(reason, add=add, remove=remove):
        first = seen.fatal
        if first is None or first[0] != reason:
            seen = attrs.evolve(seen, fatal=(reason, now))
        elif now - first[1] >= tuning.fatal_confirm:
            if settings.fatal_pending == "cancel":
                known = limit_detail(settings.group, settings.options, reason)
                update = StateUpdate(state=JobState.UNRUNNABLE, detail=row.source, slurm_state=status.raw,
                                     reason=f"Slurm cannot run this job: {reason}"
                                     + (f" ({known})" if known else ""))  # fmt: skip
                return Decision(update, (Scancel((job.native_id or "",)),), seen)
            update = StateUpdate(state=JobState.PENDING, detail=row.source,
                                 reason=f"pending forever: {reason}", **common)  # fmt: skip
            return Decision(update, (), seen)
    else:
        seen = attrs.evolve(seen, fatal=None)
    text = status.note or (reason if reason and reason != "None" else "")
    return Decision(
        StateUpdate(state=JobState.PENDING, detail=row.source, reason=text, **common), (), seen
    )


def decide_gone(
    rc: RcRecord | None, job: JobFacts, settings: SlurmSettings, tuning: SlurmTuning, now: float
) -> Decision:
    """No Slurm command knows the job: its job.rc decides, else it is LOST after
    ``lost_polls`` polls spanning ``lost_after``."""
    if rc is not None and rc_matches(rc, job):
        return Decision(
            update_for_rc(rc, attempt=None, cancelled=job.cancel_requested), (), job.seen
        )
    first, count = job.seen.missing or (now, 0)
    seen = attrs.evolve(job.seen, missing=(first, count + 1))
    lost_after = settings.lost_after or tuning.lost_after
    if count + 1 >= tuning.lost_polls and now - first >= lost_after:
        return Decision(
            StateUpdate(state=JobState.LOST, detail="no record", reason=LOST_REASON), (), seen
        )
    return Decision(None, (), seen)


def decide_job(
    rc: RcRecord | None,
    obs: Observation,
    job: JobFacts,
    settings: SlurmSettings,
    tuning: SlurmTuning,
    now: float,
    *,
    my_uid: int | None,
) -> Decision:
    """One job in one poll cycle: its job.rc first, then the row that speaks for it."""
    first = decide_rc(rc, job)
    if first.update is not None:
        return first
    choice = pick_row(obs, job, tuning, now)
    if isinstance(choice, _Skip):
        return first
    if isinstance(choice, _Gone):
        then = decide_gone(rc, job, settings, tuning, now)
    else:
        then = decide(choice, rc, job, settings, tuning, now, my_uid=my_uid)
    restarts = [e for e in then.effects if isinstance(e, RecordRestarts)]
    effects = then.effects if restarts else first.effects + then.effects
    return Decision(then.update, effects, then.seen)


# -- limits and lookups -------------------------------------------------------------------------


def _clock(seconds: int) -> str:
    """Slurm's way of showing a limit: ``1:00:00``, ``2-00:00:00``."""
    text = slurm_time(seconds)
    return text[1:] if text.startswith("0") and "-" not in text else text


def limit_detail(group: Any, options: Any, reason: str) -> str | None:
    """The limit a fatal pending reason refers to, when the configuration knows it:
    "--time=2-00:00:00 exceeds partition debug's MaxTime 1:00:00"."""
    wanted = getattr(options, "time", None)
    seconds = parse_slurm_time(str(wanted)) if wanted else None
    if not seconds or group is None:
        return None
    if reason == "PartitionTimeLimit":
        base = group.configuration
        names = set(str(options.partition or "").split(","))
        for part in group.partitions:
            if part.name not in names:
                continue
            config = base.merged(part.configuration) if base is not None else part.configuration
            limit = config.max_duration
            if limit and seconds > limit:
                return f"--time={wanted} exceeds partition {part.name}'s MaxTime {_clock(limit)}"
    elif reason.startswith("QOSMaxWall"):
        name = options.qos
        qos = (group.qos or {}).get(name) if name else None
        limit = qos.max_duration if qos is not None else None
        if limit and seconds > limit:
            return f"--time={wanted} exceeds QoS {name}'s MaxWall {_clock(limit)}"
    return None


@attrs.frozen
class Adoption:
    """The job kept among those found by name, and the duplicates to cancel."""

    keep: str
    duplicates: tuple[str, ...]
    candidates: tuple[str, ...]


def choose_adoption(ids: Sequence[str], foreign: set[str]) -> Adoption | None:
    """Among the ids found by name (oldest first): jobs of this directory first, and only they
    are duplicates to cancel; when none is (a job submitted without ``--chdir``), the oldest."""
    if not ids:
        return None
    mine = [i for i in ids if i not in foreign] or list(ids)
    return Adoption(mine[0], tuple(mine[1:]), tuple(mine))


__all__ = [
    "GONE",
    "LOST_REASON",
    "SKIP",
    "Adoption",
    "Decision",
    "Effect",
    "JobFacts",
    "Observation",
    "RecordRestarts",
    "Resubmit",
    "Scancel",
    "Seen",
    "WakeTracker",
    "WarnUnknownState",
    "choose_adoption",
    "decide",
    "decide_fast",
    "decide_gone",
    "decide_job",
    "decide_pending",
    "decide_rc",
    "is_pending",
    "limit_detail",
    "needs_live_reasons",
    "needs_squeue",
    "pick_row",
    "rc_matches",
    "with_live_reasons",
]
