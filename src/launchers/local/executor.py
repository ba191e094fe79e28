"""The direct launcher's executor (slurm-runtime.md §10): runs ``job.sh`` with bash on this
machine, in its own session, and follows it by ``job.rc`` and ``/proc``.

The record keeps pid, start time (``/proc/PID/stat`` field 22) and boot id under ``process``,
so a reused pid or a reboot is never taken for the job. State is checked every second:
``job.rc`` ends it, else a live process is RUNNING, else LOST. At most ``max_jobs`` jobs of one
local group run at once in a process (the rest wait in order); counter tokens limit across
processes (``launchers.local.tokens``). Cancel: SIGTERM to the process group, SIGKILL after
``kill_grace`` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..config.model import LocalGroup
from ..errors import ConfigurationError, LaunchersError
from ..fsutil import atomic_write_bytes, atomic_write_text
from ..jobs.proc import ProcessId
from ..jobs.record import RcRecord, now_iso, parse_rc, read_rc
from ..jobs.state import JobState
from ..jobs.task import KIND_COMMAND
from ..jobs.update import StateUpdate
from ..runtime.executor import Executor, update_from_rc
from ..runtime.loop import background
from ..slurm.script import ScriptSpec, job_name, render_script
from .launcher import DirectLauncher
from .tokens import acquire_and_start, check_requests, holder_path, load_totals, release

if TYPE_CHECKING:
    from ..config.model import LocalGroup
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import JobHandle

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

    def __init__(
        self, key: Any = ("local", "local", None), *, kill_grace: float = KILL_GRACE
    ) -> None:
        super().__init__(key)
        self.kill_grace = kill_grace
        self._queue: list[JobHandle] = []
        self._running: dict[Any, set[int]] = {}
        self._waiter: asyncio.Task[None] | None = None

    # -- submission ---------------------------------------------------------------------------

    def _group(self, job: JobHandle) -> LocalGroup:
        group = getattr(job.launcher, "group", None)
        return group if isinstance(group, LocalGroup) else LocalGroup(implicit=True)

    def _totals(self, group: LocalGroup) -> dict[str, int]:
        return load_totals(group.position.file)

    def _render(
        self, job: JobHandle, job_dir: str | None = None, default_python: str = sys.executable
    ) -> str:
        task = job.task
        if task is None:
            raise LaunchersError(f"job {job.task_id}: the task is unknown, cannot write job.sh")
        group = self._group(job)
        job_dir = job_dir or str(job.directory)
        python = group.python or default_python
        if task.kind == KIND_COMMAND:
            argv = tuple(task.target)
        else:
            argv = (python, "-m", "launchers.run", job_dir)
        env = dict(group.env)
        env.update(task.env)
        cleanup = tuple(str(holder_path(name, job.task_id)) for name, _ in group.tokens)
        spec = ScriptSpec(
            job_dir=job_dir,
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
        group = getattr(launcher, "group", None)
        if not isinstance(group, LocalGroup):
            return
        if group.connector != "local" and group.tokens:
            raise ConfigurationError(
                f"local group {group.label}: counter tokens work only with the local connector"
            )
        if group.tokens:
            check_requests(dict(group.tokens), self._totals(group))

    async def submit(self, job: JobHandle) -> None:
        """Write ``job.sh`` and queue the job; it starts when a slot and its tokens are free."""
        script = self._render(job)
        atomic_write_text(job.paths.script, script, mode=0o755)

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

    def _slot_key(self, job: JobHandle) -> Any:
        return self._group(job)

    def _dispatch(self) -> None:
        """Start queued jobs in order while slots and tokens allow."""
        blocked_groups: set[Any] = set()
        blocked_tokens: set[str] = set()
        for job in list(self._queue):
            if job.cancel_requested or job.state.is_final:
                self._queue.remove(job)
                job.apply(
                    StateUpdate(
                        state=JobState.CANCELLED,
                        detail="cancelled while waiting",
                        reason="cancelled on request",
                    )
                )
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
                job.apply(
                    StateUpdate(
                        state=JobState.WAITING,
                        reason=f"waiting for a free slot ({len(running)} of {limit} jobs running)",
                    )
                )
                continue
            try:
                outcome = self._try_start(job, tokens, group)
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
            if outcome is not None:
                self._started(job, outcome)

    def _try_start(
        self, job: JobHandle, tokens: dict[str, int], group: LocalGroup
    ) -> ProcessId | str | None:
        """Start ``job`` now if its tokens allow: its process, a waiting reason, or None when
        the start goes on asynchronously (``_started`` is then called later)."""
        return acquire_and_start(
            tokens,
            self._totals(group) if tokens else {},
            job.task_id,
            str(job.directory),
            lambda: self._launch(job),
        )

    def _started(self, job: JobHandle, proc: ProcessId) -> None:
        job.apply(
            StateUpdate(
                state=JobState.RUNNING,
                detail=f"pid {proc.pid}",
                native_id=str(proc.pid),
                reason="",
                extra={"process": proc.to_json()},
            )
        )
        self.tracker.wake()

    def _launch(self, job: JobHandle) -> ProcessId:
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

    def _state_of(self, job: JobHandle) -> StateUpdate | None:
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
            return StateUpdate(
                state=JobState.CANCELLED,
                detail="killed",
                reason="cancelled on request",
                signal=signal.SIGKILL.value,
            )
        return StateUpdate(state=JobState.LOST, detail="no process, no job.rc", reason=LOST_REASON)

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """Check every job: ``job.rc``, else a live process, else LOST."""
        out: dict[JobHandle, StateUpdate] = {}
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

    def _finished(self, job: JobHandle) -> None:
        key = job.runtime.pop("slot", None)
        if key is not None:
            self._running.get(key, set()).discard(id(job))
        group = self._group(job)
        if group.tokens:
            release([name for name, _ in group.tokens], job.task_id)

    # -- cancel -------------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        """Drop waiting jobs at once; SIGTERM running ones' process groups, SIGKILL after grace."""
        for job in jobs:
            if job in self._queue:
                self._queue.remove(job)
                job.apply(
                    StateUpdate(
                        state=JobState.CANCELLED,
                        detail="cancelled while waiting",
                        reason="cancelled on request",
                    )
                )
                continue
            proc = ProcessId.from_json(job.record.extra.get("process"))
            if proc is None:
                continue  # not started yet: dispatch sees cancel_requested
            self._signal(proc, signal.SIGTERM)
            grace = getattr(getattr(job.launcher, "group", None), "kill_grace", None)
            asyncio.get_running_loop().call_later(
                self.kill_grace if grace is None else float(grace), self._kill_if_alive, proc
            )

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

    async def reconcile(self, job: JobHandle) -> None:
        """A record left in SUBMITTING: adopt the running process, or its exit record, or
        call it LOST when it started and vanished; submit only when it never started."""
        proc = find_process(str(job.directory), job.attempt)
        if proc is not None:
            job.apply(
                StateUpdate(
                    state=JobState.RUNNING,
                    detail="adopted after a crash",
                    native_id=str(proc.pid),
                    extra={"process": proc.to_json()},
                )
            )
            return
        rc: RcRecord | None = read_rc(job.directory)
        if rc is not None and (rc.attempt is None or rc.attempt == job.attempt):
            update = update_from_rc(job)
            if update is not None:
                job.apply(update)
                return
        if has_banner(job.directory, job.attempt):
            job.apply(
                StateUpdate(state=JobState.LOST, detail="found after a crash", reason=LOST_REASON)
            )
            return
        await self.submit(job)


# -- the direct launcher over an SSH connector ------------------------------------------------------

#: argv after ``sh -c START sh``: DIR EXPORT JOB_DIR ATTEMPT TASK_ID; prints "PID START BOOT_ID".
_REMOTE_START = r"""dir=$1 mode=$2 jd=$3 att=$4 tid=$5
cd "$dir" || exit 97
rm -f job.rc result.json result.pickle error.json
if [ "$mode" = NONE ]; then
    set -- env -i
    for v in HOME USER LOGNAME PATH LANG LC_ALL TMPDIR; do
        eval "x=\${$v-__unset__}"
        [ "$x" = __unset__ ] || set -- "$@" "$v=$x"
    done
else
    set -- env
fi
"$@" LAUNCHERS_JOB_DIR="$jd" LAUNCHERS_ATTEMPT="$att" LAUNCHERS_TASK_ID="$tid" \
    setsid bash job.sh </dev/null >>job.out 2>>job.err &
pid=$!
start=$(awk '{print $22}' /proc/$pid/stat 2>/dev/null)
printf '%s %s %s\n' "$pid" "${start:--}" "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
"""

#: stdin: per job a line "INDEX PID START" and a line DIR (an empty DIR line stands for the next
#: argument: a directory with a newline in it); prints "BOOT id", then "RC i json" or
#: "PS i start state". The jobs are not in argv: one argument is limited to 128 KiB on Linux.
_REMOTE_POLL = r"""printf 'BOOT %s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
while IFS=' ' read -r i pid start && IFS= read -r dir; do
    [ -n "$dir" ] || { dir=$1; shift; }
    info=$(awk '{print $22" "$3}' /proc/$pid/stat 2>/dev/null)
    if [ -f "$dir/job.rc" ]; then
        printf 'RC %s %s\n' "$i" "$(tr -d '\n' < "$dir/job.rc")"
    else
        printf 'PS %s %s\n' "$i" "${info:-- -}"
    fi
done
"""

#: argv: SIGNAL; stdin: one "PID START" a line: signal each process group whose leader has that
#: start time (on stdin, the command stays the same size whatever the number of jobs).
_REMOTE_KILL = r"""sig=$1
while read -r pid start; do
    [ -n "$pid" ] || continue
    st=$(awk '{print $22}' /proc/$pid/stat 2>/dev/null)
    [ -n "$st" ] && [ "$st" = "$start" ] && kill -s "$sig" -- "-$pid" 2>/dev/null
done
exit 0
"""

#: argv: JOB_DIR ATTEMPT: the session leader started for it ("PID START BOOT") or nothing.
_REMOTE_FIND = r"""for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    env=$(tr '\0' '\n' < "$e" 2>/dev/null) || continue
    printf '%s\n' "$env" | grep -qxF "LAUNCHERS_JOB_DIR=$1" || continue
    printf '%s\n' "$env" | grep -qxF "LAUNCHERS_ATTEMPT=$2" || continue
    set -- "$1" "$2" $(awk '{print $22" "$6" "$3}' /proc/$p/stat 2>/dev/null)
    [ "$4" = "$p" ] && [ "$5" != Z ] || { set -- "$1" "$2"; continue; }
    printf '%s %s %s\n' "$p" "$3" "$(cat /proc/sys/kernel/random/boot_id)"
    exit 0
done
exit 0
"""

#: Files copied back from the remote job directory once a job has ended.
FETCHED = ("job.out", "job.err", "job.rc", "result.json", "result.pickle", "error.json")


class RemoteDirectExecutor(DirectExecutor):
    """The direct launcher on a host reached through an SSH connector: the job directory lives
    under the connector's ``workdir``; each cycle is one remote command for all jobs; outputs
    and results are copied back to the local job directory when a job ends."""

    poll_min = 1.0
    poll_max = (
        1.0  # "state, checked every second" (§10): one remote command per second for all jobs
    )

    def __init__(self, key: Any, connector: str, config_file: str | None) -> None:
        super().__init__(key)
        self.connector_name = connector
        self.config_file = config_file
        self._connector: Any = None
        self._root: str | None = None

    @property
    def connector(self) -> Any:
        if self._connector is None:
            # lazy: the configuration loader and the connectors only for a direct launcher over
            # SSH (import time of a local submission)
            from ..config.loader import load_config
            from ..connectors.registry import get_connector

            self._connector = get_connector(self.connector_name, load_config(self.config_file))
        return self._connector

    async def _remote_root(self) -> str:
        if self._root is None:
            root = str(
                getattr(
                    getattr(self.connector, "config", None), "workdir", "~/.local/share/launchers"
                )
            )
            if root == "~" or root.startswith("~/"):
                root = (await self.connector.home()).rstrip("/") + root[1:]
            self._root = root.rstrip("/")
        return self._root

    async def remote_dir(self, job: JobHandle) -> str:
        """``<connector workdir>/<hash of the local workdir>/jobs/<name>/<digest>``."""
        known = job.record.extra.get("remote_dir")
        if isinstance(known, str) and known:
            return known
        workdir = job.directory.parent.parent.parent
        tag = hashlib.sha256(str(workdir).encode()).hexdigest()[:12]
        return f"{await self._remote_root()}/{tag}/jobs/{job.directory.parent.name}/{job.directory.name}"

    async def submit(self, job: JobHandle) -> None:
        rdir = await self.remote_dir(job)
        script = self._render(job, rdir, default_python="python3")
        atomic_write_text(job.paths.script, script, mode=0o755)  # the local copy
        await self.connector.write_file(f"{rdir}/job.sh", script.encode(), mode=0o755)
        params = job.paths.params.read_bytes()
        await self.connector.write_file(f"{rdir}/params.json", params)

        assert job.task is not None
        job.runtime["job_name"] = job_name(job.task.name, job.task.digest, job.attempt)
        job.apply(StateUpdate(extra={"remote_dir": rdir}))
        self._queue.append(job)
        self._dispatch()
        self._ensure_waiter()

    def _try_start(
        self, job: JobHandle, tokens: dict[str, int], group: LocalGroup
    ) -> ProcessId | str | None:
        background(self._start_remote(job, group))
        return None

    async def _start_remote(self, job: JobHandle, group: LocalGroup) -> None:
        rdir = str(job.record.extra.get("remote_dir"))
        job.apply(
            StateUpdate(
                state=JobState.SUBMITTING,
                job_name=job.runtime.get("job_name"),
                submitted_at=now_iso(),
                reason="",
            )
        )
        try:
            res = await self.connector.run(
                [
                    "sh",
                    "-c",
                    _REMOTE_START,
                    "sh",
                    rdir,
                    group.export.upper(),
                    rdir,
                    str(job.attempt),
                    job.task_id,
                ]
            )
            if res.returncode != 0:
                raise LaunchersError(
                    f"cannot start the job in {rdir} on {self.connector_name}: "
                    f"{res.stderr.strip() or f'exit {res.returncode}'}"
                )
            pid, start, boot = [*res.stdout.split(), "", "", ""][:3]
            proc = ProcessId(
                int(pid), None if start == "-" else int(start), boot, self.connector_name
            )
        except Exception as e:
            self._finished(job)
            # the start command may have run: reconcile looks for the process before resubmitting
            job.apply(StateUpdate(state=JobState.FAILED, detail="start failed", reason=str(e)))
            return
        self._started(job, proc)

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """One remote command for every job: ``job.rc``, else the process, else LOST."""
        argv = ["sh", "-c", _REMOTE_POLL, "sh"]
        lines: list[str] = []
        known: list[tuple[JobHandle, ProcessId]] = []
        for job in jobs:
            proc = ProcessId.from_json(job.record.extra.get("process"))
            rdir = job.record.extra.get("remote_dir")
            if proc is None or not isinstance(rdir, str):
                continue
            if "\n" in rdir:
                argv.append(rdir)
                rdir = ""
            lines += [f"{len(known)} {proc.pid} {proc.start}\n", rdir + "\n"]
            known.append((job, proc))
        if not known:
            return {}
        res = await self.connector.run(
            argv, input="".join(lines).encode("utf-8", "surrogateescape")
        )
        if res.returncode != 0:
            raise LaunchersError(
                f"status command failed on {self.connector_name}: {res.stderr.strip()}"
            )
        boot = ""
        out: dict[JobHandle, StateUpdate] = {}
        for line in res.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "BOOT":
                boot = rest.strip()
                continue
            index, _, data = rest.partition(" ")
            try:
                job, proc = known[int(index)]
            except (ValueError, IndexError):
                continue
            update: StateUpdate | None = None
            if kind == "RC":
                rc = parse_rc(data)
                if rc is None or (rc.attempt is not None and rc.attempt != job.attempt):
                    continue
                await self._fetch(job)
                update = update_from_rc(job)
            elif kind == "PS":
                start, _, state = data.partition(" ")
                alive = (
                    start == str(proc.start)
                    and state not in ("Z", "X", "-")
                    and (not proc.boot_id or proc.boot_id == boot)
                )
                if alive:
                    if job.state is not JobState.RUNNING:
                        update = StateUpdate(state=JobState.RUNNING)
                else:
                    await self._fetch(job)
                    update = update_from_rc(job) or (
                        StateUpdate(
                            state=JobState.CANCELLED, detail="killed", reason="cancelled on request"
                        )
                        if job.cancel_requested
                        else StateUpdate(
                            state=JobState.LOST, detail="no process, no job.rc", reason=LOST_REASON
                        )
                    )
            if update is not None:
                out[job] = update
                if update.state is not None and update.state.is_final:
                    self._finished(job)
        if out:
            self._dispatch()
        return out

    async def _fetch(self, job: JobHandle) -> None:
        """Copy the outputs and result files back to the local job directory."""
        rdir = job.record.extra.get("remote_dir")
        for name in FETCHED:
            try:
                data = await self.connector.read_file(f"{rdir}/{name}")
            except FileNotFoundError:
                continue
            except Exception as e:  # a missing output must not hide the job's state
                log.warning("%s: cannot copy %s back: %s", job.task_id, name, e)
                continue
            atomic_write_bytes(job.directory / name, data)

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        by_grace: dict[float, list[str]] = {}  # SIGKILL after each job's group's kill_grace
        for job in jobs:
            if job in self._queue:
                self._queue.remove(job)
                job.apply(
                    StateUpdate(
                        state=JobState.CANCELLED,
                        detail="cancelled while waiting",
                        reason="cancelled on request",
                    )
                )
                continue
            proc = ProcessId.from_json(job.record.extra.get("process"))
            if proc is not None:
                grace = getattr(getattr(job.launcher, "group", None), "kill_grace", None)
                by_grace.setdefault(self.kill_grace if grace is None else float(grace), []).extend(
                    [str(proc.pid), str(proc.start)]
                )
        if not by_grace:
            return
        await self._remote_kill("TERM", [t for targets in by_grace.values() for t in targets])

        async def later(grace: float, targets: list[str]) -> None:
            await asyncio.sleep(grace)
            try:
                await self._remote_kill("KILL", targets)
            except Exception as e:
                log.warning("SIGKILL after the grace period failed: %s", e)

        for grace, targets in by_grace.items():
            background(later(grace, targets))

    async def _remote_kill(self, sig: str, targets: list[str]) -> None:
        lines = "".join(f"{targets[i]} {targets[i + 1]}\n" for i in range(0, len(targets) - 1, 2))
        res = await self.connector.run(["sh", "-c", _REMOTE_KILL, "sh", sig], input=lines.encode())
        if res.returncode != 0:
            raise LaunchersError(f"kill failed on {self.connector_name}: {res.stderr.strip()}")

    async def reconcile(self, job: JobHandle) -> None:
        rdir = await self.remote_dir(job)
        res = await self.connector.run(["sh", "-c", _REMOTE_FIND, "sh", rdir, str(job.attempt)])
        fields = res.stdout.split()
        if res.returncode == 0 and len(fields) == 3:
            proc = ProcessId(int(fields[0]), int(fields[1]), fields[2], self.connector_name)
            job.apply(
                StateUpdate(
                    state=JobState.RUNNING,
                    detail="adopted after a crash",
                    native_id=fields[0],
                    extra={"process": proc.to_json(), "remote_dir": rdir},
                )
            )
            return
        await self._fetch(job)
        update = update_from_rc(job)
        if update is not None:
            job.apply(update)
        elif has_banner(job.directory, job.attempt):
            job.apply(
                StateUpdate(state=JobState.LOST, detail="found after a crash", reason=LOST_REASON)
            )
        else:
            await self.submit(job)


def create_executor(launcher: Launcher) -> DirectExecutor:
    """The executor for local launchers: one for this machine, one per SSH connector."""
    connector = executor_key(launcher)[1]
    if connector == "local":
        return DirectExecutor(("local", "local", None))
    group = getattr(launcher, "group", None)
    return RemoteDirectExecutor(
        ("local", connector, None),
        connector,
        getattr(getattr(group, "position", None), "file", None),
    )


def executor_key(launcher: Launcher) -> tuple[str, str, None]:
    """All local launchers of a process reaching one host share one executor (slots are
    counted per group)."""
    group = getattr(launcher, "group", None)
    return ("local", str(getattr(group, "connector", "local") or "local"), None)


def executor_from_record(info: Mapping[str, Any], record: object) -> DirectExecutor:
    """The executor used to cancel/inspect a direct job known only from its record."""
    connector = str(info.get("connector") or "local")
    if connector == "local":
        return cast(DirectExecutor, DirectLauncher().executor())
    # lazy: the configuration loader only for a connector over SSH (import time)
    from ..config.loader import load_config

    cfg_file = info.get("config")
    load_config(cfg_file)  # fails clearly when the connector's configuration is gone
    return RemoteDirectExecutor(("record", connector, None), connector, cfg_file)
