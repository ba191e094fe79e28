"""The direct launcher's executor (docs/jobs.md, "The direct launcher"): runs ``job.sh`` with
bash in its own session, on this machine or on the host of an SSH connector, and follows it by
``job.rc`` and its process.

One class for both hosts. What differs is in the two objects it is given: its *processes*
(``local.processes``: start, observe, kill and find a job's process) and its *files*
(``local.files``: where the job directory is, staging, copying the outputs home). What a poll or
a crash recovery finds is decided by ``local.decide``; the settings come from
``local.settings``, resolved once per launcher configuration. The executor keeps the queue and
the slots (at most ``max_jobs`` jobs of one group run at once in a process, the rest wait in
order) and takes counter tokens across processes (``local.tokens``). State is checked every
second: ``job.rc`` ends a job, else a live process is RUNNING, else LOST. Cancel: SIGTERM to the
process group, SIGKILL after ``kill_grace`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..config.environment import EMPTY, merge_all, requested_gpus
from ..errors import ConfigurationError, LaunchersError
from ..fsutil import atomic_write_text
from ..jobs.proc import ProcessId
from ..jobs.record import RcRecord, epoch_iso, read_rc
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.core import current
from ..runtime.executor import Executor
from ..runtime.loop import background
from ..slurm.envscript import check_environment
from ..slurm.script import job_name, render_script
from .decide import (
    CANCELLED_WHILE_WAITING,
    LOST_REASON,
    Submit,
    decide_direct,
    decide_found,
    start_failed,
    started,
    submitting,
    waiting_for_slot,
)
from .files import FETCHED, ConnectorJobFiles, JobFiles, LocalJobFiles, has_banner
from .launcher import DirectLauncher
from .processes import LocalProcesses, Processes, RemoteProcesses, Watched, find_process
from .settings import (
    KILL_GRACE,
    NONE_VARS,
    LocalSettings,
    connector_of,
    group_of,
    job_environment,
    resolve_group,
    script_spec,
)
from .tokens import acquire_and_start, check_requests, holder_path, load_totals, release

if TYPE_CHECKING:
    from ..config.model import LocalGroup
    from ..connectors.base import Connector
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import Clock, JobHandle

log = logging.getLogger("launchers.local")


class DirectExecutor(Executor):
    """Runs the jobs of every local launcher of this process that reach one host."""

    kind = "local"
    poll_min = 1.0
    #: "state, checked every second": over SSH, one remote command per second for all jobs
    poll_max = 1.0

    def __init__(
        self,
        key: Any = ("local", "local", None),
        *,
        kill_grace: float = KILL_GRACE,
        processes: Processes | None = None,
        files: JobFiles | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(key)
        self.kill_grace = kill_grace
        self.processes = processes or LocalProcesses(default_python=sys.executable)
        self.files = files or LocalJobFiles()
        self.clock = clock or current().clock
        self._queue: list[JobHandle] = []
        self._running: dict[LocalGroup, set[int]] = {}
        self._waiter: asyncio.Task[None] | None = None
        self._settings: dict[LocalGroup, LocalSettings] = {}

    @classmethod
    def over_ssh(cls, key: Any, connector: str, config_file: str | None) -> DirectExecutor:
        """The executor for the host of SSH connector ``connector`` (declared in
        ``config_file``): job directories under the connector's ``workdir``, each poll cycle
        one remote command for all jobs, outputs copied home when a job ends."""
        link = _connector_link(connector, config_file)
        return cls(key, processes=RemoteProcesses(connector, link), files=ConnectorJobFiles(link))

    # -- settings -------------------------------------------------------------------------------

    def settings_for(self, launcher: Launcher | None) -> LocalSettings:
        """The settings of ``launcher``, resolved once per group configuration."""
        group = group_of(launcher)
        found = self._settings.get(group)
        if found is None:
            found = self._settings[group] = resolve_group(
                group, cpu_count=os.cpu_count() or 1, kill_grace=self.kill_grace
            )
        return found

    def _settings_of(self, job: JobHandle) -> LocalSettings:
        found: LocalSettings | None = job.runtime.get("settings")
        if found is None:
            found = job.runtime["settings"] = self.settings_for(job.launcher)
        return found

    # -- submission -------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Refuse at submission: counter tokens over an SSH connector, n > N tokens."""
        settings = self.settings_for(launcher)
        if settings.connector != "local" and settings.tokens:
            raise ConfigurationError(
                f"local group {settings.label}: counter tokens work only with the local connector"
            )
        if settings.tokens:
            check_requests(dict(settings.tokens), load_totals(settings.config_file))
        if getattr(launcher, "use_environment", True):
            check_environment(
                merge_all(
                    settings.group.job_environment,
                    getattr(launcher, "environment", EMPTY),
                    task.environment,
                ),
                slurm=False,
            )

    def _render(self, job: JobHandle, settings: LocalSettings, where: str) -> str:
        task = job.task
        if task is None:
            raise LaunchersError(f"job {job.task_id}: the task is unknown, cannot write job.sh")
        cleanup = tuple(str(holder_path(name, job.task_id)) for name, _ in settings.tokens)
        spec = script_spec(
            task,
            settings,
            task_id=job.task_id,
            attempt=job.attempt,
            job_dir=where,
            default_python=self.processes.default_python,
            cleanup=cleanup,
            environment=getattr(job.launcher, "environment", EMPTY),
            use_environment=getattr(job.launcher, "use_environment", True),
            gpus=requested_gpus(job.launcher),
        )
        return render_script(spec)

    async def submit(self, job: JobHandle) -> None:
        """Write ``job.sh`` (here, and where the job runs) and queue the job; it starts when a
        slot and its tokens are free."""
        settings = self._settings_of(job)
        where = await self.files.job_dir(job)
        script = self._render(job, settings, where)
        atomic_write_text(job.paths.script, script, mode=0o755)
        await self.files.stage(job, where, script)

        assert job.task is not None
        job.runtime["job_name"] = job_name(job.task.name, job.task.digest, job.attempt)
        job.runtime["where"] = where
        extra = self.files.record_extra(where)
        if extra:
            job.apply(StateUpdate(extra=extra))
        self._queue.append(job)
        self._dispatch()
        self._ensure_waiter()

    def _ensure_waiter(self) -> None:
        if self._queue and (self._waiter is None or self._waiter.done()):
            self._waiter = asyncio.get_running_loop().create_task(self._retry_waiting())

    async def _retry_waiting(self) -> None:
        while self._queue:
            await asyncio.sleep(1.0)
            self._dispatch()

    def _dispatch(self) -> None:
        """Start queued jobs in order while slots and tokens allow."""
        blocked_groups: set[LocalGroup] = set()
        blocked_tokens: set[str] = set()
        for job in list(self._queue):
            if job.cancel_requested or job.state.is_final:
                self._queue.remove(job)
                job.apply(CANCELLED_WHILE_WAITING)
                continue
            settings = self._settings_of(job)
            key = settings.group
            tokens = dict(settings.tokens)
            if key in blocked_groups or blocked_tokens & set(tokens):
                continue
            running = self._running.setdefault(key, set())
            if len(running) >= settings.max_jobs:
                blocked_groups.add(key)
                job.apply(waiting_for_slot(len(running), settings.max_jobs))
                continue
            try:
                outcome = self._try_start(job, settings, tokens)
            except Exception as e:
                self._queue.remove(job)
                job.apply(start_failed(e))
                continue
            if isinstance(outcome, str):
                blocked_tokens |= set(tokens)
                if job.reason != outcome:
                    job.apply(StateUpdate(state=JobState.WAITING, reason=outcome))
                continue
            self._queue.remove(job)
            running.add(id(job))
            job.runtime["slot"] = key
            if outcome is not None:
                self._started(job, outcome)

    def _try_start(
        self, job: JobHandle, settings: LocalSettings, tokens: dict[str, int]
    ) -> ProcessId | str | None:
        """Start ``job`` now if its tokens allow: its process, a waiting reason, or None when
        the start goes on in the background (``_started`` is then called later)."""
        if not self.processes.inline:
            background(self._start_in_background(job, settings))
            return None
        return acquire_and_start(
            tokens,
            load_totals(settings.config_file) if tokens else {},
            job.task_id,
            str(job.directory),
            lambda: self._start_now(job, settings),
        )

    def _submitting(self, job: JobHandle) -> None:
        job.apply(submitting(job.runtime.get("job_name"), epoch_iso(self.clock.time())))

    def _start_now(self, job: JobHandle, settings: LocalSettings) -> ProcessId:
        """Record SUBMITTING, then start the process (under the token locks)."""
        self._submitting(job)
        return self.processes.start_now(
            job,
            job.runtime["where"],
            settings.export,
            lambda: self.tracker.wake(poll_now=True),  # our child exited: poll at once
        )

    async def _start_in_background(self, job: JobHandle, settings: LocalSettings) -> None:
        """Record SUBMITTING, then start the process with a remote command."""
        self._submitting(job)
        try:
            proc = await self.processes.start(job, job.runtime["where"], settings.export)
        except Exception as e:
            self._finished(job)
            # the start command may have run: reconcile looks for the process before resubmitting
            job.apply(start_failed(e))
            return
        self._started(job, proc)

    def _started(self, job: JobHandle, proc: ProcessId) -> None:
        job.apply(started(proc))
        self.tracker.wake()

    # -- tracking ---------------------------------------------------------------------------------

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """Check every started job at once: ``job.rc``, else a live process, else LOST."""
        watched: list[Watched] = []
        for job in jobs:
            recorded = job.record.extra.get("process")
            where = self.files.recorded_dir(job)
            if recorded is None or where is None:
                continue
            watched.append((job, ProcessId.from_json(recorded), where))
        if not watched:
            return {}
        seen = await self.processes.observe(watched, self._collect)
        out: dict[JobHandle, StateUpdate] = {}
        for job, what in seen.items():
            update = decide_direct(
                what,
                attempt=job.attempt,
                running=job.state is JobState.RUNNING,
                cancel_requested=job.cancel_requested,
                kill_signal=self.processes.kill_signal,
            )
            if update is not None:
                out[job] = update
                if update.state is not None and update.state.is_final:
                    self._finished(job)
        if out:
            self._dispatch()
        return out

    async def _collect(self, job: JobHandle, where: str) -> RcRecord | None:
        """The job's ``job.rc``, read in its local directory once the outputs are there."""
        await self.files.fetch(job, where)
        return read_rc(job.directory)

    def _finished(self, job: JobHandle) -> None:
        key = job.runtime.pop("slot", None)
        if key is not None:
            self._running.get(key, set()).discard(id(job))
        settings = self._settings_of(job)
        if settings.tokens:
            release([name for name, _ in settings.tokens], job.task_id)

    # -- cancel -----------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        """Drop waiting jobs at once; SIGTERM the process groups of running ones (one call for
        all), SIGKILL after each group's ``kill_grace``."""
        by_grace: dict[float, list[ProcessId]] = {}
        for job in jobs:
            if job in self._queue:
                self._queue.remove(job)
                job.apply(CANCELLED_WHILE_WAITING)
                continue
            proc = ProcessId.from_json(job.record.extra.get("process"))
            if proc is None:
                continue  # not started yet: dispatch sees cancel_requested
            by_grace.setdefault(self._settings_of(job).kill_grace, []).append(proc)
        if not by_grace:
            return
        await self.processes.kill([p for procs in by_grace.values() for p in procs], "TERM")
        for grace, procs in by_grace.items():
            background(self._kill_later(grace, procs))

    async def _kill_later(self, grace: float, procs: list[ProcessId]) -> None:
        await asyncio.sleep(grace)
        try:
            await self.processes.kill(procs, "KILL")
        except Exception as e:
            log.warning("SIGKILL after the grace period failed: %s", e)

    # -- crash recovery ---------------------------------------------------------------------------

    async def reconcile(self, job: JobHandle) -> None:
        """A record left in SUBMITTING: adopt the running process, or its exit record, or
        call it LOST when it started and vanished; submit only when it never started."""
        where = await self.files.job_dir(job)
        proc = await self.processes.find(where, job.attempt)
        rc: RcRecord | None = None
        banner = False
        if proc is None:
            rc = await self._collect(job, where)
            banner = has_banner(job.directory, job.attempt)
        found = decide_found(
            proc,
            rc,
            banner_seen=banner,
            attempt=job.attempt,
            cancel_requested=job.cancel_requested,
            extra=self.files.record_extra(where),
        )
        if isinstance(found, Submit):
            await self.submit(job)
        else:
            job.apply(found.update)


#: The direct executor of an SSH connector's host (the name of the former subclass).
RemoteDirectExecutor = DirectExecutor.over_ssh


def _connector_link(name: str, config_file: str | None) -> Callable[[], Connector]:
    """The connector ``name`` of ``config_file``, looked up on first use."""
    found: list[Connector] = []

    def connector() -> Connector:
        if not found:
            # lazy: the configuration loader and the connectors only for a direct launcher over
            # SSH (import time of a local submission)
            from ..config.loader import load_config
            from ..connectors.registry import get_connector

            found.append(get_connector(name, load_config(config_file)))
        return found[0]

    return connector


# -- the kind's entry points (launchers.registry) -----------------------------------------------


def create_executor(launcher: Launcher) -> DirectExecutor:
    """The executor for local launchers: one for this machine, one per SSH connector."""
    connector = connector_of(launcher)
    if connector == "local":
        return DirectExecutor(("local", "local", None))
    return DirectExecutor.over_ssh(
        ("local", connector, None), connector, group_of(launcher).position.file
    )


def executor_key(launcher: Launcher) -> tuple[str, str, None]:
    """All local launchers of a process reaching one host share one executor (slots are
    counted per group)."""
    return ("local", connector_of(launcher), None)


def executor_from_record(info: Mapping[str, Any], record: object) -> DirectExecutor:
    """The executor used to cancel/inspect a direct job known only from its record."""
    connector = str(info.get("connector") or "local")
    if connector == "local":
        return cast(DirectExecutor, DirectLauncher().executor())
    # lazy: the configuration loader only for a connector over SSH (import time)
    from ..config.loader import load_config

    cfg_file = info.get("config")
    load_config(cfg_file)  # fails clearly when the connector's configuration is gone
    return DirectExecutor.over_ssh(("record", connector, None), connector, cfg_file)


__all__ = [
    "FETCHED",
    "KILL_GRACE",
    "LOST_REASON",
    "NONE_VARS",
    "DirectExecutor",
    "RemoteDirectExecutor",
    "create_executor",
    "executor_from_record",
    "executor_key",
    "find_process",
    "has_banner",
    "job_environment",
]
