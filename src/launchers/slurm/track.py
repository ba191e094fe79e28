"""Tracking (docs/slurm.md, "Tracking"): ONE poll path for this machine and for a connector.

A cycle observes (here: each ``job.rc``, then one sacct, squeue only when a decision needs it;
through a connector: one shell command for all of it, ``commands.remote_cycle``), decides each
job with ``decide.decide_job`` (pure), then carries out the decisions' effects. Also the fast
``job.rc`` check and cancel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from ..errors import ConnectorError, LaunchersError
from ..jobs.record import RcRecord, iso_epoch, now_iso
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.loop import background
from . import commands as C
from . import parse as P
from .cluster import AccountingDisabled, QueryFailed
from .decide import (
    Decision,
    JobFacts,
    Observation,
    RecordRestarts,
    Resubmit,
    Scancel,
    Seen,
    WakeTracker,
    WarnUnknownState,
    decide_fast,
    decide_job,
    decide_rc,
    is_pending,
    needs_live_reasons,
    needs_squeue,
    with_live_reasons,
)

if TYPE_CHECKING:
    from ..protocols import JobHandle
    from .executor import SlurmExecutor

log = logging.getLogger("launchers.slurm")
#: ``job.runtime`` key of the tracker's memory of a job (``decide.Seen``)
SEEN = "slurm_seen"


class Tracking:
    """Polls, fast checks and cancels the jobs of one executor."""

    def __init__(self, ex: SlurmExecutor) -> None:
        self.ex = ex
        #: squeue's rows of pending jobs, and when they were read (``decide.needs_live_reasons``)
        self._live_rows: dict[str, P.Row] = {}
        self._live_at = float("-inf")

    @staticmethod
    def facts(job: JobHandle) -> JobFacts:
        """What the decisions read of ``job``."""
        task = job.task
        return JobFacts(
            native_id=job.native_id,
            attempt=job.attempt,
            state=job.state,
            submitted=iso_epoch(job.record.submitted_at),
            cancel_requested=job.cancel_requested,
            resumable=bool(task is not None and task.resumable),
            seen=job.runtime.get(SEEN) or Seen(),
        )

    # -- a poll cycle ---------------------------------------------------------------------------

    async def poll(self, jobs: Sequence[JobHandle]) -> dict[JobHandle, StateUpdate]:
        ex = self.ex
        facts = [self.facts(job) for job in jobs]
        rcs: Sequence[RcRecord | None]
        if ex.files.is_local:
            rcs = [await ex.files.read_rc(ex.files.job_dir(job)) for job in jobs]
            rest = [f for f, rc in zip(facts, rcs, strict=True) if decide_rc(rc, f).update is None]
            obs = await self._observe(rest) if rest else Observation(None, None)
        else:
            rcs, obs = await self._cycle(jobs, facts)
        now = ex.clock.time()
        tuning, uid = ex.tuning, ex.slurm.my_uid()
        out: dict[JobHandle, StateUpdate] = {}
        for job, fact, rc in zip(jobs, facts, rcs, strict=True):
            settings = ex.settings(job.launcher)
            decision = decide_job(rc, obs, fact, settings, tuning, now, my_uid=uid)
            self.carry_out(job, decision)
            if decision.update is not None:
                out[job] = decision.update
        finals = [job for job, upd in out.items() if upd.state is not None and upd.state.is_final]
        if not ex.files.is_local:
            for job in finals:
                await ex.outputs(job, ex.files)
        if finals:
            ex.submitter.slots.signal()
        return out

    async def _observe(self, facts: Sequence[JobFacts]) -> Observation:
        """Here: ONE query for the jobs without a decisive job.rc (sacct, or squeue without
        accounting); squeue too when a job sacct does not list is past its grace, or when
        long-pending jobs need slurmctld's reasons (``decide.needs_live_reasons``)."""
        ex, slurm = self.ex, self.ex.slurm
        rows: dict[str, P.Row] | None = None
        if slurm.accounting is not False:
            try:
                rows = await slurm.sacct(await self._sacct_argv(facts))
            except AccountingDisabled:
                slurm.accounting_off()
            except QueryFailed as e:  # also with status_source: sacct ("that cycle uses squeue")
                log.info("sacct failed (%s); using squeue for this cycle", e)
        if rows is None:
            return Observation(None, await slurm.squeue())
        live = await self._live_pending(facts, rows)
        rows = with_live_reasons(rows, self._live_rows)
        squeue = live
        if squeue is None and needs_squeue(rows, facts, ex.tuning, ex.clock.time()):
            squeue = await slurm.squeue()
        return Observation(rows, squeue)

    async def _live_pending(
        self, facts: Sequence[JobFacts], rows: Mapping[str, P.Row]
    ) -> dict[str, P.Row] | None:
        """squeue's rows when pending reasons need refreshing (None: the cycle keeps its one
        query); they stand in for sacct's reasons until the next reading."""
        ex = self.ex
        mono = ex.clock.monotonic()
        if not needs_live_reasons(rows, facts, ex.tuning, ex.clock.time(), mono - self._live_at):
            return None
        try:
            live = await ex.slurm.squeue()
        except ConnectorError as e:  # sacct's rows still tell the states
            log.info("squeue for pending reasons failed (%s); using sacct's", e)
            return None
        self._live_at = mono
        self._live_rows = {jid: row for jid, row in live.items() if is_pending(row)}
        return live

    async def _sacct_argv(self, facts: Sequence[JobFacts]) -> list[str]:
        """sacct for the jobs: by id, or by user and start time above ``max_id_list`` bytes."""
        ex = self.ex
        ids = C.IdList.of(f.native_id for f in facts)
        window = None
        if ids.too_long(ex.tuning.max_id_list):
            user, _ = await ex.slurm.user()
            times = [f.submitted for f in facts if f.submitted is not None]
            oldest = min(times) if times else ex.clock.time() - 86400
            window = (user, oldest, ex.slurm.is_local)
        return C.sacct_argv(ids, cluster=ex.slurm.name, window=window)

    async def _cycle(
        self, jobs: Sequence[JobHandle], facts: Sequence[JobFacts]
    ) -> tuple[Sequence[RcRecord | None], Observation]:
        """Through a connector: ONE command reads every ``job.rc``, sacct and squeue."""
        ex, slurm = self.ex, self.ex.slurm
        user, _ = await slurm.user()
        use_sacct = slurm.accounting is not False
        sacct = await self._sacct_argv(facts) if use_sacct else None
        argv, stdin = C.remote_cycle(
            [ex.files.job_dir(job) for job in jobs], sacct, C.squeue_argv(user, slurm.name)
        )
        slurm.count(C.REMOTE_CYCLE)
        res = await slurm.connector.run(argv, timeout=ex.tuning.query_timeout, input=stdin)
        out = C.read_remote_cycle(res.stdout, len(jobs))
        rows: dict[str, P.Row] | None = None
        sacct_text = out.sections.get("sacct", "")
        if use_sacct and out.status.get("sacct") == 0:
            rows = P.sacct_rows(sacct_text)
        elif use_sacct and P.sacct_accounting_disabled(out.status.get("sacct", 1), sacct_text):
            slurm.accounting_off()
        squeue_text = out.sections.get("squeue", "")
        if out.status.get("squeue") != 0 and rows is None:
            raise ConnectorError("squeue failed: " + squeue_text.replace("\n", " ")[:500])
        squeue = P.squeue_rows(squeue_text) if out.status.get("squeue") == 0 else None
        if rows is not None:  # slurmdbd's pending reasons go stale (see _live_pending)
            rows = with_live_reasons(rows, squeue or {})
        return out.rcs, Observation(rows, squeue)

    async def fast_poll(self, jobs: Sequence[JobHandle]) -> dict[JobHandle, StateUpdate]:
        """A ``job.rc`` with rc 0 completes a job, no Slurm call (every second here)."""
        files = self.ex.files
        out: dict[JobHandle, StateUpdate] = {}
        for job in jobs:
            rc = await files.read_rc(files.job_dir(job))
            if rc is None:
                continue
            decision = decide_fast(rc, self.facts(job))
            self.carry_out(job, decision)
            if decision.update is not None:
                out[job] = decision.update
        if out:
            self.ex.submitter.slots.signal()
        return out

    # -- effects --------------------------------------------------------------------------------

    def carry_out(self, job: JobHandle, decision: Decision) -> None:
        """Remember what the decision saw, and do its effects, in order."""
        job.runtime[SEEN] = decision.seen
        for effect in decision.effects:
            if isinstance(effect, RecordRestarts):
                self._note_restarts(job, effect.attempt)
            elif isinstance(effect, WarnUnknownState):
                self.ex.warn_unknown(effect.raw)
            elif isinstance(effect, Scancel):
                background(self.ex.slurm.scancel(effect.ids))
            elif isinstance(effect, Resubmit):
                self._resubmit(job, effect.state)
            elif isinstance(effect, WakeTracker):
                self.ex.tracker.wake()

    @staticmethod
    def _note_restarts(job: JobHandle, attempt: int) -> None:
        """Slurm requeued the job in place: record the new attempt (same id, appended output)."""
        if attempt <= job.attempt:
            return
        rec = job.record
        while rec.attempt < attempt:
            # the attempt ended when Slurm requeued it: say so, not the RUNNING it was last seen in
            ended = rec.ended_at or now_iso()
            summary = {**rec.archived("requeued by Slurm"), "state": "REQUEUED", "ended_at": ended}
            rec = attrs.evolve(
                rec, attempt=rec.attempt + 1, attempts=(*rec.attempts, summary), ended_at=None
            ).transition(detail=f"attempt {rec.attempt + 1} (requeued by Slurm)")
        job.replace_record(rec, write=True)

    def _resubmit(self, job: JobHandle, state: JobState) -> None:
        """A resumable job ended TIMEOUT/PREEMPTED/NODE_FAIL: its next attempt is submitted."""
        log.warning(
            "%s: %s in Slurm; resubmitting (attempt %d)", job.task_id, state.value, job.attempt + 1
        )
        rec = job.record.transition(slurm_state=state.value, reason=state.value.lower())
        rec = attrs.evolve(rec, state=state).next_attempt(f"{state.value}: resubmitted")
        self.ex.files.archive_rc(job)
        job.replace_record(rec, write=True)
        background(self._submit_again(job))

    async def _submit_again(self, job: JobHandle) -> None:
        try:
            await self.ex.submit(job)
        except Exception as e:
            log.error("%s: resubmission failed: %s", job.task_id, e)
            job.apply(StateUpdate(state=JobState.FAILED, detail="resubmission", reason=str(e)))

    # -- cancel ---------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        """ONE scancel for every job with an id; jobs still held here are CANCELLED at once."""
        ex = self.ex
        held, in_submit = ex.submitter.slots.held, ex.submitter.in_submit
        ids: list[str] = []
        for job in jobs:
            if id(job) in held or (
                job.state is JobState.WAITING and not job.native_id and id(job) not in in_submit
            ):
                held.pop(id(job), None)
                job.apply(StateUpdate(state=JobState.CANCELLED, detail="cancel",
                                      reason="cancelled on request"))  # fmt: skip
            elif job.native_id:
                ids.append(job.native_id)
            # SUBMITTING: cancelled as soon as the id is known (Submitter.accepted)
        if ids:
            try:
                await ex.slurm.scancel(ids)
            except (LaunchersError, OSError) as e:
                # e.g. slurmctld down: ask again later; a cancel request is never dropped
                retry = ex.tuning.cancel_retry
                log.warning("scancel failed (%s); retrying in %.0f s", e, retry)
                loop = asyncio.get_running_loop()
                for job in jobs:
                    if job.native_id in ids:
                        loop.call_later(retry, ex.tracker.request_cancel, job)
            ex.tracker.wake()


__all__ = ["SEEN", "Tracking"]
