"""The direct launcher's executor (slurm-runtime.md §10): runs ``job.sh`` with bash on this
machine, in its own session, and follows it by ``job.rc`` and ``/proc``.

The record keeps pid, start time (``/proc/PID/stat`` field 22) and boot id under ``process``,
so a reused pid or a reboot is never taken for the job. State is checked every second:
``job.rc`` ends it, else a live process is RUNNING, else LOST. At most ``max_jobs`` jobs of one
local group run at once in a process (the rest wait in order); counter tokens limit across
processes (``launchers.jobs.tokens``). Cancel: SIGTERM to the process group, SIGKILL after
``kill_grace`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LaunchersError
from ..fsutil import atomic_write_text
from ..jobs.executor import Executor, StateUpdate, update_from_rc
from ..jobs.proc import ProcessId
from ..jobs.record import RcRecord, now_iso, read_rc
from ..jobs.state import JobState
from ..jobs.task import KIND_COMMAND
from ..jobs.tokens import acquire_and_start, check_requests, holder_path, load_totals, release

if TYPE_CHECKING:
    from ..config.model import LocalGroup
    from ..jobs.job import Job
    from ..jobs.task import Task
    from ..launcher import Launcher

log = logging.getLogger("launchers.local")

#: Seconds between SIGTERM and SIGKILL when cancelling.
KILL_GRACE = 10.0
#: Variables passed with ``export: NONE``.
NONE_VARS = ("HOME", "USER", "LOGNAME", "PATH", "LANG", "LC_ALL", "TMPDIR")
LOST_REASON = "ended without an exit record: SIGKILL, the OOM killer or a restart"


def max_jobs_of(group: LocalGroup) -> int:
    """``max_jobs``, else the group's ``cpu.cores``, else this machine's CPU count."""
    if group.max_jobs:
        return int(group.max_jobs)
    if group.cpu.cores:
        return int(group.cpu.cores)
    return os.cpu_count() or 1


def job_environment(export: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the job starts with: everything (``ALL``) or the few ``NONE_VARS``."""
    if export.upper() == "NONE":
        return {k: environ[k] for k in NONE_VARS if k in environ}
    return dict(environ)


def has_banner(directory: Path, attempt: int) -> bool:
    """Whether ``job.out`` shows that attempt ``attempt`` started."""
    needle = f"==== launchers: attempt {attempt}, ".encode()
    try:
        with open(directory / "job.out", "rb") as f:
            return needle in f.read()
    except OSError:
        return False


def find_process(job_dir: str, attempt: int) -> ProcessId | None:
    """The session leader started for this job directory and attempt (found in ``/proc``)."""
    want = {f"LAUNCHERS_JOB_DIR={job_dir}".encode(), f"LAUNCHERS_ATTEMPT={attempt}".encode()}
    me = os.getuid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != me:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if want <= env and os.getsid(pid) == pid:
            proc = ProcessId.of(pid)
            if proc.is_alive():
                return proc
    return None


class DirectExecutor(Executor):
    """Runs the jobs of every local launcher of this process."""

    kind = "local"
    poll_min = 1.0
    poll_max = 1.0

    def __init__(self, key: Any = ("local", "local", None), *, kill_grace: float = KILL_GRACE) -> None:
        super().__init__(key)
        self.kill_grace = kill_grace
        self._queue: list[Job] = []
        self._running: dict[Any, set[int]] = {}
        self._waiter: asyncio.Task[None] | None = None

    # -- submission ---------------------------------------------------------------------------

    def _group(self, job: Job) -> LocalGroup:
        from ..config.model import LocalGroup

        group = getattr(job.launcher, "group", None)
        return group if isinstance(group, LocalGroup) else LocalGroup(implicit=True)

    def _totals(self, group: LocalGroup) -> dict[str, int]:
        return load_totals(group.position.file)

    def _render(self, job: Job) -> str:
        from ..slurm.script import ScriptSpec, job_name, render_script

        task = job.task
        if task is None:
            raise LaunchersError(f"job {job.task_id}: the task is unknown, cannot write job.sh")
        group = self._group(job)
        python = group.python or sys.executable
        if task.kind == KIND_COMMAND:
            argv = tuple(task.target)
        else:
            argv = (python, "-m", "launchers.run", str(job.directory))
        env = dict(group.env)
        env.update(task.env)
        cleanup = tuple(str(holder_path(name, job.task_id)) for name, _ in group.tokens)
        spec = ScriptSpec(
            job_dir=str(job.directory),
            task_id=job.task_id,
            job_name=job_name(task.name, task.digest, job.attempt),
            argv=argv,
            attempt=job.attempt,
            cwd=task.cwd,
            export=group.export,
            env=tuple(env.items()),
            python=None if task.kind == KIND_COMMAND else python,
            cleanup=cleanup,
            slurm=False,
        )
        return render_script(spec)

    def validate(self, launcher: Launcher, task: Task) -> None:
        """Refuse at submission: an SSH connector (not supported here), n > N tokens."""
        from ..config.model import LocalGroup

        group = getattr(launcher, "group", None)
        if not isinstance(group, LocalGroup):
            return
        if group.connector != "local":
            raise LaunchersError(
                f"local group {group.label}: running directly through connector "
                f"{group.connector!r} is not supported; use a slurm group with that connector"
            )
        if group.tokens:
            check_requests(dict(group.tokens), self._totals(group))

    async def submit(self, job: Job) -> None:
        """Write ``job.sh`` and queue the job; it starts when a slot and its tokens are free."""
        script = self._render(job)
        atomic_write_text(job.paths.script, script, mode=0o755)
        from ..slurm.script import job_name

        assert job.task is not None
        job.runtime["job_name"] = job_name(job.task.name, job.task.digest, job.attempt)
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

    def _slot_key(self, job: Job) -> Any:
        return self._group(job)

    def _dispatch(self) -> None:
        """Start queued jobs in order while slots and tokens allow."""
        blocked_groups: set[Any] = set()
        blocked_tokens: set[str] = set()
        for job in list(self._queue):
            if job.cancel_requested or job.state.is_final:
                self._queue.remove(job)
                job.apply(StateUpdate(state=JobState.CANCELLED, detail="cancelled while waiting",
                                      reason="cancelled on request"))
                continue
            group = self._group(job)
            key = self._slot_key(job)
            limit = max_jobs_of(group)
            tokens = dict(group.tokens)
            if key in blocked_groups or blocked_tokens & set(tokens):
                continue
            running = self._running.setdefault(key, set())
            if len(running) >= limit:
                blocked_groups.add(key)
                job.apply(StateUpdate(state=JobState.WAITING,
                                      reason=f"waiting for a free slot ({len(running)} of {limit} jobs running)"))
                continue
            try:
                outcome = acquire_and_start(
                    tokens, self._totals(group) if tokens else {}, job.task_id, str(job.directory),
                    lambda job=job: self._launch(job),  # type: ignore[misc]
                )
            except Exception as e:
                self._queue.remove(job)
                job.apply(StateUpdate(state=JobState.FAILED, detail="start failed", reason=str(e)))
                continue
            if isinstance(outcome, str):
                blocked_tokens |= set(tokens)
                if job.reason != outcome:
                    job.apply(StateUpdate(state=JobState.WAITING, reason=outcome))
                continue
            self._queue.remove(job)
            running.add(id(job))
            job.runtime["slot"] = key
            job.apply(
                StateUpdate(
                    state=JobState.RUNNING,
                    detail=f"pid {outcome.pid}",
                    native_id=str(outcome.pid),
                    reason="",
                    extra={"process": outcome.to_json()},
                )
            )
            self.tracker.wake()

    def _launch(self, job: Job) -> ProcessId:
        """Record SUBMITTING, then ``bash job.sh`` in a new session (stdin /dev/null, outputs appended)."""
        group = self._group(job)
        job.apply(
            StateUpdate(
                state=JobState.SUBMITTING,
                job_name=job.runtime.get("job_name"),
                submitted_at=now_iso(),
                reason="",
            )
        )
        env = job_environment(group.export, os.environ)
        env["LAUNCHERS_JOB_DIR"] = str(job.directory)
        env["LAUNCHERS_ATTEMPT"] = str(job.attempt)
        env["LAUNCHERS_TASK_ID"] = job.task_id
        with open(job.paths.stdout, "ab") as out, open(job.paths.stderr, "ab") as err:
            popen = subprocess.Popen(
                ["bash", str(job.paths.script)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(job.directory),
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        job.runtime["popen"] = popen
        self._watch(popen)
        proc = ProcessId.of(popen.pid)
        if proc.start is None:  # exited already (and not reaped yet: cannot happen) - keep the pid
            proc = ProcessId(popen.pid, None, proc.boot_id, proc.host)
        return proc

    def _watch(self, popen: subprocess.Popen[bytes]) -> None:
        """Wake the tracker the moment our child exits (the 1 s check stays the rule)."""
        loop = asyncio.get_running_loop()

        def wait() -> None:
            try:
                popen.wait()
            finally:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(lambda: self.tracker.wake(poll_now=True))

        threading.Thread(target=wait, name=f"launchers-wait-{popen.pid}", daemon=True).start()

    # -- tracking -------------------------------------------------------------------------------

    def _state_of(self, job: Job) -> StateUpdate | None:
        popen = job.runtime.get("popen")
        if popen is not None:
            popen.poll()  # reap our own child so that it does not linger as a zombie
        proc = ProcessId.from_json(job.record.extra.get("process"))
        alive = proc is not None and proc.is_alive()
        update = update_from_rc(job)
        if update is not None:
            return update
        if alive:
            if job.state is not JobState.RUNNING:
                return StateUpdate(state=JobState.RUNNING)
            return None
        if job.cancel_requested:
            return StateUpdate(state=JobState.CANCELLED, detail="killed", reason="cancelled on request",
                               signal=signal.SIGKILL.value)
        return StateUpdate(state=JobState.LOST, detail="no process, no job.rc", reason=LOST_REASON)

    async def poll(self, jobs: Sequence[Job]) -> Mapping[Job, StateUpdate]:
        """Check every job: ``job.rc``, else a live process, else LOST."""
        out: dict[Job, StateUpdate] = {}
        for job in jobs:
            if job.record.extra.get("process") is None:
                continue
            update = self._state_of(job)
            if update is not None:
                out[job] = update
                if update.state is not None and update.state.is_final:
                    self._finished(job)
        if out:
            self._dispatch()
        return out

    def _finished(self, job: Job) -> None:
        key = job.runtime.pop("slot", None)
        if key is not None:
            self._running.get(key, set()).discard(id(job))
        group = self._group(job)
        if group.tokens:
            release([name for name, _ in group.tokens], job.task_id)

    # -- cancel -------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[Job]) -> None:
        """Drop waiting jobs at once; SIGTERM running ones' process groups, SIGKILL after grace."""
        for job in jobs:
            if job in self._queue:
                self._queue.remove(job)
                job.apply(StateUpdate(state=JobState.CANCELLED, detail="cancelled while waiting",
                                      reason="cancelled on request"))
                continue
            proc = ProcessId.from_json(job.record.extra.get("process"))
            if proc is None:
                continue  # not started yet: dispatch sees cancel_requested
            self._signal(proc, signal.SIGTERM)
            asyncio.get_running_loop().call_later(self.kill_grace, self._kill_if_alive, proc)

    @staticmethod
    def _signal(proc: ProcessId, sig: signal.Signals) -> None:
        if not proc.is_alive():
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as e:
            log.error("cannot signal process group %d: %s", proc.pid, e)

    def _kill_if_alive(self, proc: ProcessId) -> None:
        self._signal(proc, signal.SIGKILL)

    # -- crash recovery ---------------------------------------------------------------------------

    async def reconcile(self, job: Job) -> None:
        """A record left in SUBMITTING: adopt the running process, or its exit record, or
        call it LOST when it started and vanished; submit only when it never started."""
        proc = find_process(str(job.directory), job.attempt)
        if proc is not None:
            job.apply(StateUpdate(state=JobState.RUNNING, detail="adopted after a crash",
                                  native_id=str(proc.pid), extra={"process": proc.to_json()}))
            return
        rc: RcRecord | None = read_rc(job.directory)
        if rc is not None and (rc.attempt is None or rc.attempt == job.attempt):
            update = update_from_rc(job)
            if update is not None:
                job.apply(update)
                return
        if has_banner(job.directory, job.attempt):
            job.apply(StateUpdate(state=JobState.LOST, detail="found after a crash", reason=LOST_REASON))
            return
        await self.submit(job)


def create_executor(launcher: Launcher) -> DirectExecutor:
    """The executor for local launchers (one per process)."""
    return DirectExecutor(("local", "local", None))


def executor_key(launcher: Launcher) -> tuple[str, str, None]:
    """All local launchers of a process share one executor (slots are counted per group)."""
    return ("local", "local", None)


def executor_from_record(info: Mapping[str, Any], record: object) -> DirectExecutor:
    """The executor used to cancel/inspect a direct job known only from its record."""
    from ..jobs.executor import executor_for
    from .launcher import DirectLauncher

    return executor_for(DirectLauncher())  # type: ignore[return-value]
