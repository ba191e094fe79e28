"""The processes of direct jobs: start, observe, kill and find them (docs/jobs.md, "The direct
launcher"). ``LocalProcesses`` on this machine (``setsid bash job.sh``, ``/proc``, process-group
signals); ``RemoteProcesses`` on the host of an SSH connector, where each operation is one remote
command for all the jobs concerned (the shell scripts below).

A process is known by pid, start time (field 22 of ``/proc/PID/stat``) and boot id
(``jobs.proc.ProcessId``), so a reused pid or a reboot is never taken for the job. ``observe``
reports ``local.decide.Seen`` per job; the executor decides with ``local.decide``. The job's
``job.rc`` is read through the ``collect`` callback the executor passes (over SSH it copies the
outputs home first), at the moment each kind of host needs it.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import LaunchersError
from ..jobs.proc import ProcessId
from ..jobs.record import RcRecord, parse_rc
from .decide import Seen
from .settings import job_environment

if TYPE_CHECKING:
    from ..connectors.base import Connector
    from ..protocols import JobHandle

log = logging.getLogger("launchers.local")

#: A started job to observe: the job, its process as recorded (None when the record's is
#: unreadable), the directory it runs in.
Watched = tuple["JobHandle", "ProcessId | None", str]
#: Reads a job's ``job.rc`` (after copying it home when it runs elsewhere).
Collect = Callable[["JobHandle", str], Awaitable["RcRecord | None"]]


class Processes(abc.ABC):
    """Starts, observes, kills and finds the processes of direct jobs on one host."""

    #: ``local`` or the connector's name (messages; the host of a remote ``ProcessId``)
    name: str = "local"
    #: the interpreter for callables when the group names none
    default_python: str = "python3"
    #: the signal recorded for a job that vanished after a cancel (None: not known)
    kill_signal: int | None = None
    #: True: ``start_now`` starts a job at once, in the executor's dispatch and under its token
    #: locks; False: ``start`` does it, awaited in the background
    inline: bool = False

    def start_now(
        self, job: JobHandle, where: str, export: str, on_exit: Callable[[], None]
    ) -> ProcessId:
        """Start ``job`` in ``where`` now (``inline`` hosts); ``on_exit`` is called, in the
        loop, when the process exits."""
        raise NotImplementedError

    async def start(self, job: JobHandle, where: str, export: str) -> ProcessId:
        """Start ``job`` in ``where`` (``bash job.sh`` in a new session, stdin ``/dev/null``,
        outputs appended to ``job.out``/``job.err``); raises when it could not."""
        raise NotImplementedError

    @abc.abstractmethod
    async def observe(self, watched: Sequence[Watched], collect: Collect) -> dict[JobHandle, Seen]:
        """What each job's process and ``job.rc`` show now; raises when the host cannot be
        asked (the tracker then changes nothing)."""

    @abc.abstractmethod
    async def kill(self, processes: Sequence[ProcessId], sig: str) -> None:
        """Send ``SIG<sig>`` (``TERM``, ``KILL``) to the process group of each process still
        running as recorded."""

    @abc.abstractmethod
    async def find(self, where: str, attempt: int) -> ProcessId | None:
        """The live session leader started for the job in ``where`` and ``attempt``."""


# -- this machine -----------------------------------------------------------------------------


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


class LocalProcesses(Processes):
    """Jobs on this machine: children of this process, followed through ``/proc``."""

    name = "local"
    kill_signal = signal.SIGKILL.value
    inline = True

    def __init__(self, default_python: str) -> None:
        self.default_python = default_python

    def start_now(
        self, job: JobHandle, where: str, export: str, on_exit: Callable[[], None]
    ) -> ProcessId:
        env = job_environment(export, os.environ)
        env["LAUNCHERS_JOB_DIR"] = where
        env["LAUNCHERS_ATTEMPT"] = str(job.attempt)
        env["LAUNCHERS_TASK_ID"] = job.task_id
        with open(job.paths.stdout, "ab") as out, open(job.paths.stderr, "ab") as err:
            popen = subprocess.Popen(
                ["bash", str(job.paths.script)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=where,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        job.runtime["popen"] = popen
        self._watch(popen, on_exit)
        proc = ProcessId.of(popen.pid)
        if proc.start is None:  # exited already (and not reaped yet: cannot happen) - keep the pid
            proc = ProcessId(popen.pid, None, proc.boot_id, proc.host)
        return proc

    @staticmethod
    def _watch(popen: subprocess.Popen[bytes], on_exit: Callable[[], None]) -> None:
        """Call ``on_exit`` in the loop the moment our child exits (the 1 s check stays the rule)."""
        loop = asyncio.get_running_loop()

        def wait() -> None:
            try:
                popen.wait()
            finally:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(on_exit)

        threading.Thread(target=wait, name=f"launchers-wait-{popen.pid}", daemon=True).start()

    async def observe(self, watched: Sequence[Watched], collect: Collect) -> dict[JobHandle, Seen]:
        """The process first, then ``job.rc``: a process found gone without a ``job.rc`` read
        after it never wrote one (the exit handler writes it before the process ends)."""
        out: dict[JobHandle, Seen] = {}
        for job, proc, where in watched:
            popen = job.runtime.get("popen")
            if popen is not None:
                popen.poll()  # reap our own child so that it does not linger as a zombie
            alive = proc is not None and proc.is_alive()
            out[job] = Seen(rc=await collect(job, where), alive=alive)
        return out

    async def kill(self, processes: Sequence[ProcessId], sig: str) -> None:
        number = signal.Signals[f"SIG{sig}"]
        for proc in processes:
            if not proc.is_alive():
                continue
            try:
                os.killpg(proc.pid, number)
            except ProcessLookupError:
                pass
            except PermissionError as e:
                log.error("cannot signal process group %d: %s", proc.pid, e)

    async def find(self, where: str, attempt: int) -> ProcessId | None:
        return find_process(where, attempt)


# -- a host reached through an SSH connector ---------------------------------------------------

#: argv after ``sh -c START sh``: DIR EXPORT JOB_DIR ATTEMPT TASK_ID; prints "PID START BOOT_ID".
REMOTE_START = r"""dir=$1 mode=$2 jd=$3 att=$4 tid=$5
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
REMOTE_POLL = r"""printf 'BOOT %s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
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
REMOTE_KILL = r"""sig=$1
while read -r pid start; do
    [ -n "$pid" ] || continue
    st=$(awk '{print $22}' /proc/$pid/stat 2>/dev/null)
    [ -n "$st" ] && [ "$st" = "$start" ] && kill -s "$sig" -- "-$pid" 2>/dev/null
done
exit 0
"""

#: argv: JOB_DIR ATTEMPT: the session leader started for it ("PID START BOOT") or nothing.
REMOTE_FIND = r"""for e in /proc/[0-9]*/environ; do
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


def poll_request(processes: Sequence[tuple[ProcessId, str]]) -> tuple[list[str], bytes]:
    """The argv and stdin of ``REMOTE_POLL`` for ``processes`` (each with its directory), in
    that order: a few hundred bytes of argv, whatever the number of jobs."""
    argv = ["sh", "-c", REMOTE_POLL, "sh"]
    lines: list[str] = []
    for index, (proc, where) in enumerate(processes):
        if "\n" in where:
            argv.append(where)
            where = ""
        lines += [f"{index} {proc.pid} {proc.start}\n", where + "\n"]
    return argv, "".join(lines).encode("utf-8", "surrogateescape")


def remote_alive(proc: ProcessId, start: str, state: str, boot: str) -> bool:
    """Whether a ``PS`` line of ``REMOTE_POLL`` (``start`` and ``state`` of the pid, ``-`` when
    it is gone; ``boot`` the host's boot id) shows the recorded process still running."""
    return (
        start == str(proc.start)
        and state not in ("Z", "X", "-")
        and (not proc.boot_id or proc.boot_id == boot)
    )


class RemoteProcesses(Processes):
    """Jobs on the host of an SSH connector (``connector()`` returns it, connected on first
    use): one remote command per start, per poll cycle (all jobs), per kill and per search."""

    default_python = "python3"

    def __init__(self, name: str, connector: Callable[[], Connector]) -> None:
        self.name = name
        self.connector = connector

    async def start(self, job: JobHandle, where: str, export: str) -> ProcessId:
        argv = ["sh", "-c", REMOTE_START, "sh", where, export.upper(), where]
        res = await self.connector().run([*argv, str(job.attempt), job.task_id])
        if res.returncode != 0:
            raise LaunchersError(
                f"cannot start the job in {where} on {self.name}: "
                f"{res.stderr.strip() or f'exit {res.returncode}'}"
            )
        pid, start, boot = [*res.stdout.split(), "", "", ""][:3]
        return ProcessId(int(pid), None if start == "-" else int(start), boot, self.name)

    async def observe(self, watched: Sequence[Watched], collect: Collect) -> dict[JobHandle, Seen]:
        """One remote command for every job: its ``job.rc`` if there is one (then copied home
        and read), else its process (copied home and read when gone)."""
        known: list[tuple[JobHandle, ProcessId, str]] = []
        for job, proc, where in watched:
            if proc is not None:
                known.append((job, proc, where))
        if not known:
            return {}
        argv, stdin = poll_request([(proc, where) for _, proc, where in known])
        res = await self.connector().run(argv, input=stdin)
        if res.returncode != 0:
            raise LaunchersError(f"status command failed on {self.name}: {res.stderr.strip()}")
        boot = ""
        out: dict[JobHandle, Seen] = {}
        for line in res.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "BOOT":
                boot = rest.strip()
                continue
            index, _, data = rest.partition(" ")
            try:
                job, proc, where = known[int(index)]
            except (ValueError, IndexError):
                continue
            if kind == "RC":
                rc = parse_rc(data)
                if rc is None or (rc.attempt is not None and rc.attempt != job.attempt):
                    continue
                out[job] = Seen(rc=await collect(job, where), alive=None)
            elif kind == "PS":
                start, _, state = data.partition(" ")
                if remote_alive(proc, start, state, boot):
                    out[job] = Seen(alive=True)
                else:
                    out[job] = Seen(rc=await collect(job, where), alive=False)
        return out

    async def kill(self, processes: Sequence[ProcessId], sig: str) -> None:
        lines = "".join(f"{proc.pid} {proc.start}\n" for proc in processes)
        res = await self.connector().run(["sh", "-c", REMOTE_KILL, "sh", sig], input=lines.encode())
        if res.returncode != 0:
            raise LaunchersError(f"kill failed on {self.name}: {res.stderr.strip()}")

    async def find(self, where: str, attempt: int) -> ProcessId | None:
        res = await self.connector().run(["sh", "-c", REMOTE_FIND, "sh", where, str(attempt)])
        fields = res.stdout.split()
        if res.returncode == 0 and len(fields) == 3:
            return ProcessId(int(fields[0]), int(fields[1]), fields[2], self.name)
        return None


__all__ = [
    "REMOTE_FIND",
    "REMOTE_KILL",
    "REMOTE_POLL",
    "REMOTE_START",
    "Collect",
    "LocalProcesses",
    "Processes",
    "RemoteProcesses",
    "Watched",
    "find_process",
    "poll_request",
    "remote_alive",
]
