"""The batch runner (docs/design/pilots.md §3.4, §3.5): runs the tasks of one queue directory inside one
allocation. Standard library only, Python >= 3.8: the manager writes this file into the queue
directory and the pilot runs ``python3 runner.py --queue DIR --slots K --walltime S ...``.

It is also imported by ``launchers.batch.queue`` so that both sides share one implementation of
the protocol (names, claim by rename, atomic writes, heartbeats, lost-runner recovery).
"""

# ruff: noqa: UP031
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

PENDING = "pending"
RUNNING = "running"
DONE = "done"
CANCEL = "cancel"
RUNNERS = "runners"
SUBDIRS = (PENDING, RUNNING, DONE, CANCEL, RUNNERS)
HEARTBEAT_EVERY = 10.0
LOST_CHECK_EVERY = 30.0
LOST_AFTER = 600.0
CANCEL_SCAN_EVERY = 1.0
IDLE_SCAN_EVERY = 0.5
BUSY_TICK = 0.05
PR_SET_PDEATHSIG = 1
GAVE_UP = "gave up after {n} attempts, the runner was lost each time"


def now_iso() -> str:
    """UTC time as ISO-8601 with a Z (the banner's and job.rc's form)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def fsync_dir(path: str) -> None:
    """fsync a directory so that a rename in it is durable (ignored where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes | str) -> None:
    """Write bytes (or text) to ``path`` under a temporary name in its directory, then rename."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, ".tmp-%s.%d" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def write_json(path: str, value: Any) -> None:
    """``value`` as JSON at ``path``, atomically."""
    write_atomic(path, json.dumps(value, indent=1, sort_keys=True) + "\n")


def read_entry(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when missing or not a complete JSON object."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def pending_name(seq: int, task_id: str) -> str:
    """``<seq>-<task id>.json``: ``seq`` is the submit time in ns (readers sort by it: FIFO)."""
    return "%d-%s.json" % (int(seq), task_id)


def split_pending(name: str) -> tuple[int, str] | None:
    """``(seq, task id)`` of a pending file name, or None for anything else (temporaries)."""
    if name.startswith(".") or not name.endswith(".json"):
        return None
    head, sep, rest = name[:-5].partition("-")
    if not sep or not head.isdigit() or not rest:
        return None
    return int(head), rest


def listing(queue: str, sub: str) -> list[str]:
    """The entry names of one subdirectory (hidden temporaries excluded)."""
    try:
        return [n for n in os.listdir(os.path.join(queue, sub)) if not n.startswith(".")]
    except FileNotFoundError:
        return []


def fs_now(queue: str, who: str) -> float:
    """The queue filesystem's own clock: the mtime of a probe file just written."""
    probe = os.path.join(queue, RUNNERS, ".probe-%s" % who)
    with open(probe, "w") as f:
        f.write("probe\n")
    return os.stat(probe).st_mtime


def append_line(path: str, text: str) -> None:
    """Append one line to a log file (``job.err``), ignoring a vanished directory."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError:
        pass


def requeue(queue: str, task_id: str, why: str) -> bool:
    """Rename ``running/<id>.json`` back to ``pending/<seq>-<id>.json`` (attempt kept).

    Returns True when this call moved it (the rename makes recovery happen once)."""
    src = os.path.join(queue, RUNNING, task_id + ".json")
    entry = read_entry(src)
    if entry is None:
        return False
    if os.path.exists(os.path.join(queue, CANCEL, task_id)):
        # a cancel was asked meanwhile: end it instead of running it again
        return finish_entry(queue, task_id, {"state": "CANCELLED", "reason": "cancelled on request",
                                             "rc": None, "signal": None, "end": now_iso()})
    dst = os.path.join(queue, PENDING, pending_name(entry.get("seq", 0), task_id))
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return False
    fsync_dir(os.path.join(queue, PENDING))
    if entry.get("dir"):
        append_line(os.path.join(entry["dir"], "job.err"), "launchers: %s, task re-queued" % why)
    return True


def recover_lost(
    queue: str, who: str, lost_after: float = LOST_AFTER, final_runners: Iterable[str] = (),
    skip_runner: str | None = None,
) -> list[str]:
    """Re-queue claims whose runner's heartbeat is older than ``lost_after`` seconds (queue
    clock), or whose runner id is in ``final_runners`` (its pilot is known to be final).

    ``skip_runner`` is never considered lost (the caller itself). Returns the re-queued ids."""
    names = listing(queue, RUNNING)
    if not names:
        return []
    now = fs_now(queue, who)
    ages: dict[str, float] = {}
    for name in listing(queue, RUNNERS):
        if name.endswith(".json"):
            try:
                ages[name[:-5]] = now - os.stat(os.path.join(queue, RUNNERS, name)).st_mtime
            except OSError:
                pass
    out = []
    final = set(final_runners)
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(queue, RUNNING, name)
        entry = read_entry(path)
        if entry is None:
            continue
        runner = str(entry.get("runner"))
        if runner == skip_runner:
            continue
        age = ages.get(runner)
        if age is None:
            try:
                age = now - os.stat(path).st_mtime
            except OSError:
                continue
        lost = runner in final or age > lost_after
        if lost and requeue(queue, name[:-5], "runner %s lost" % runner):
            out.append(name[:-5])
    return out


def finish_entry(queue: str, task_id: str, summary: dict[str, Any], runner: str | None = None) -> bool:
    """Rewrite ``running/<id>.json`` with ``summary`` and rename it to ``done/<id>.json``.

    With ``runner`` set, only when the claim is still that runner's. Returns success."""
    src = os.path.join(queue, RUNNING, task_id + ".json")
    entry = read_entry(src)
    if entry is None or (runner is not None and entry.get("runner") != runner):
        return False
    entry.update(summary)
    write_json(src, entry)
    try:
        os.rename(src, os.path.join(queue, DONE, task_id + ".json"))
    except FileNotFoundError:
        return False
    fsync_dir(os.path.join(queue, DONE))
    return True


def claim(queue: str, name: str, runner: str, now_wall: float) -> dict[str, Any] | str | None:
    """Claim ``pending/<name>`` by renaming it to ``running/<id>.json``; exactly one caller wins.

    Returns the updated entry (attempt + 1, runner, claim time), the string "gave-up" when the
    attempt would exceed ``max_attempts`` (the entry is then in ``done/`` as FAILED), or None."""
    parsed = split_pending(name)
    if parsed is None:
        return None
    task_id = parsed[1]
    src = os.path.join(queue, PENDING, name)
    dst = os.path.join(queue, RUNNING, task_id + ".json")
    entry = read_entry(src)
    if entry is None:
        return None  # truncated (written in place by a transport without rename): next scan
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return None  # another runner won
    attempt = int(entry.get("attempt", 0)) + 1
    max_attempts = int(entry.get("max_attempts", 3))
    entry.update(runner=runner, attempt=attempt, claimed_at=now_wall)
    if os.path.exists(os.path.join(queue, CANCEL, task_id)):
        write_json(dst, entry)
        finish_entry(queue, task_id, {"state": "CANCELLED", "reason": "cancelled on request", "rc": None,
                                      "signal": None, "start": None, "end": now_iso()})
        return "gave-up"
    if attempt > max_attempts:
        reason = GAVE_UP.format(n=attempt - 1)
        write_json(dst, entry)
        finish_entry(queue, task_id, {"state": "FAILED", "reason": reason, "rc": None, "signal": None,
                                      "start": None, "end": now_iso()})
        if entry.get("dir"):
            append_line(os.path.join(entry["dir"], "job.err"), "launchers: " + reason)
        return "gave-up"
    write_json(dst, entry)
    return entry


def set_pdeathsig() -> None:
    """In the child: die with SIGKILL when the runner dies (Linux ``prctl``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def gpu_devices(environ: Any) -> list[str]:
    """The allocation's GPUs (``CUDA_VISIBLE_DEVICES``, else Slurm's ``SLURM_JOB_GPUS``)."""
    text = environ.get("CUDA_VISIBLE_DEVICES") or environ.get("SLURM_STEP_GPUS") or environ.get("SLURM_JOB_GPUS")
    if not text:
        return []
    return [d for d in text.split(",") if d != ""]


class GroupGuard:
    """A forked child that SIGKILLs the process groups of the tasks still running when the
    runner dies, even by SIGKILL (its pipe then reads end of file): the parent-death signal
    reaches only a task's first process, not what that process started."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.pid = 0
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            return  # no guard: the parent-death signal alone
        if pid == 0:  # the guard
            code = 0
            try:
                os.close(write_end)
                guard_groups(read_end)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(read_end)
        self.fd, self.pid = write_end, pid

    def add(self, pgid: int) -> None:
        self._send("+%d\n" % pgid)

    def add_self(self) -> None:
        """In a task's child, before it runs anything: its new group is watched from the start
        (the runner's own ``add`` after ``Popen`` comes too late if the runner dies in between)."""
        if self.fd is not None:
            try:
                os.write(self.fd, b"+%d\n" % os.getpgrp())
            except OSError:
                pass

    def remove(self, pgid: int) -> None:
        self._send("-%d\n" % pgid)

    def _send(self, text: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, text.encode())
        except OSError:
            self.fd = None

    def close(self) -> None:
        """The runner ends normally: the guard reads end of file, finds no group left, exits."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid:
            try:
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = 0


def guard_groups(fd: int) -> None:
    """The guard's loop: ``+PGID`` / ``-PGID`` lines; at end of file, SIGKILL the groups left.
    Termination signals are ignored, so the guard outlives the runner it watches."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    with os.fdopen(fd, "rb") as pipe:
        for line in pipe:
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line[:1] == b"+":
                groups.add(pgid)
            else:
                groups.discard(pgid)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


class Running:
    """A task started by this runner."""

    def __init__(
        self, entry: dict[str, Any], popen: Any, slot: int, start_wall: str, deadline: float | None
    ) -> None:
        self.entry = entry
        self.popen = popen
        self.slot = slot
        self.start = start_wall
        self.deadline = deadline
        self.final: str | None = None  # TIMEOUT or CANCELLED once we signalled it
        self.kill_at: float | None = None


class Runner:
    """Claims and runs tasks of one queue directory until idle for ``linger`` or drained."""

    def __init__(self, args: Any) -> None:
        self.queue = os.path.abspath(args.queue)
        self.slots = max(1, int(args.slots))
        self.started = time.time()
        self.walltime = float(args.walltime or 0)
        self.end = self.started + self.walltime if self.walltime > 0 else None
        self.linger = float(args.linger)
        self.drain_margin = float(args.drain_margin)
        self.kill_grace = float(args.kill_grace)
        self.lost_after = float(args.lost_after)
        self.host = socket.gethostname()
        self.native_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("LAUNCHERS_PILOT_ID") or str(os.getppid())
        self.runner_id = args.runner_id or "%s-%s-%d" % (self.native_id, self.host.split(".")[0], os.getpid())
        #: the pilot's tag (``lxpilot-<shape>-<n>-<random>``): the manager maps runners to pilots by it
        self.pilot = getattr(args, "pilot", None)
        #: runners the manager knows lost (their pilot is final): re-queued at start-up
        self.lost_runners = list(getattr(args, "lost_runner", None) or [])
        self.running: dict[str, Running] = {}
        self.stop_claiming = False
        self.terminating = False
        self.gpus = gpu_devices(os.environ)
        self.last_heartbeat = 0.0
        self.last_lost_check = 0.0
        self.last_cancel_scan = 0.0
        self.last_pending_scan = 0.0
        self.idle_since: float | None = None
        self.tasks_run = 0
        self.guard: GroupGuard | None = None

    # -- bookkeeping -------------------------------------------------------------------------

    def log(self, text: str) -> None:
        sys.stderr.write("[runner %s %s] %s\n" % (self.runner_id, now_iso(), text))
        sys.stderr.flush()

    def heartbeat(self) -> None:
        write_json(os.path.join(self.queue, RUNNERS, self.runner_id + ".json"), {
            "runner": self.runner_id, "native_id": self.native_id, "host": self.host, "pid": os.getpid(),
            "time": time.time(), "slots": self.slots, "started": self.started, "end": self.end,
            "running": sorted(self.running), "tasks_run": self.tasks_run, "draining": self.stop_claiming,
            "pilot": self.pilot,
        })
        self.last_heartbeat = time.monotonic()

    def on_usr1(self, signum: int, frame: Any) -> None:
        self.stop_claiming = True

    def on_term(self, signum: int, frame: Any) -> None:
        self.terminating = True

    # -- claiming ------------------------------------------------------------------------------

    def limit_of(self, entry: dict[str, Any]) -> float | None:
        """The task's timeout, else its declared duration (seconds), else None."""
        for key in ("timeout", "duration"):
            value = entry.get(key)
            if value:
                return float(value)
        return None

    def fits(self, entry: dict[str, Any], now: float) -> bool:
        """Whether the task can end before ``end - drain_margin``."""
        if self.end is None:
            return True
        limit = self.limit_of(entry)
        horizon = self.end - self.drain_margin
        if limit is None:
            return now < horizon
        return now + limit <= horizon

    def claim_some(self) -> bool:
        """Claim oldest-first while slots are free; set ``stop_claiming`` when nothing fits."""
        free = self.slots - len(self.running)
        names = sorted((n for n in listing(self.queue, PENDING) if split_pending(n)),
                       key=lambda n: split_pending(n) or (0, n))
        if not names:
            return False
        now = time.time()
        fitting = candidates = 0
        for name in names:
            if free <= 0:
                break
            entry = read_entry(os.path.join(self.queue, PENDING, name))
            if entry is None:
                continue  # truncated (in-place writer): neither run nor a reason to drain
            candidates += 1
            if not self.fits(entry, now):
                continue
            fitting += 1
            got = claim(self.queue, name, self.runner_id, now)
            if not isinstance(got, dict):
                continue
            self.start_task(got)
            free -= 1
        if fitting == 0 and candidates:
            # every pending task would end after end - drain_margin: drain and leave
            self.log("no pending task fits before the walltime; draining")
            self.stop_claiming = True
        return True

    # -- running -------------------------------------------------------------------------------

    def free_slot(self) -> int:
        used = {r.slot for r in self.running.values()}
        for i in range(self.slots):
            if i not in used:
                return i
        return len(used)

    def start_task(self, entry: dict[str, Any]) -> None:
        task_id = entry["id"]
        directory = entry["dir"]
        attempt = int(entry.get("base_attempt", 0)) + int(entry["attempt"])
        slot = self.free_slot()
        start = now_iso()
        banner = "==== launchers: attempt %d, job %s, %s, %s ====\n" % (attempt, self.native_id, self.host, start)
        env = dict(os.environ)
        env.update(entry.get("env") or {})
        env.update({
            "LAUNCHERS_JOB_DIR": directory, "LAUNCHERS_TASK_ID": task_id, "LAUNCHERS_ATTEMPT": str(attempt),
            "LAUNCHERS_RUNNER": self.runner_id, "LAUNCHERS_PILOT": self.native_id, "LAUNCHERS_SLOT": str(slot),
        })
        gpus = int((entry.get("resources") or {}).get("gpus") or 0)
        if gpus and self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus[slot * gpus:(slot + 1) * gpus])
        try:
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "job.out"), "ab") as out, \
                    open(os.path.join(directory, "job.err"), "ab") as err:
                out.write(banner.encode())
                err.write(banner.encode())
                out.flush()
                err.flush()
                guard = self.guard

                def in_child() -> None:  # after setsid, before exec (and before fds are closed)
                    set_pdeathsig()
                    if guard is not None:
                        guard.add_self()

                try:
                    popen = subprocess.Popen(
                        entry["argv"], cwd=entry.get("cwd") or directory, env=env, stdin=subprocess.DEVNULL,
                        stdout=out, stderr=err, start_new_session=True, close_fds=True,
                        preexec_fn=in_child,
                    )
                except (OSError, ValueError, KeyError, TypeError) as e:
                    err.write(("launchers: cannot start the task: %s\n" % e).encode())
                    popen = None
                    failure = "cannot start the task: %s" % e
        except OSError as e:
            popen = None
            failure = "cannot open the job's logs: %s" % e
        if popen is None:
            self.log("%s: %s" % (task_id, failure))
            self.write_rc(entry, 127, None, start, attempt)
            self.finish(entry, 127, None, start, "FAILED", failure)
            return
        limit = entry.get("timeout") or entry.get("duration")
        deadline = time.monotonic() + float(limit) if limit else None
        if self.guard is not None:
            self.guard.add(popen.pid)
        self.running[task_id] = Running(entry, popen, slot, start, deadline)
        self.tasks_run += 1

    def signal_task(self, run: Running, sig: int) -> None:
        try:
            os.killpg(run.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def forget(self, run: Running) -> None:
        """The task's group is dead: the guard no longer watches it (its id may be reused)."""
        if self.guard is not None:
            self.guard.remove(run.popen.pid)

    def stop_task(self, run: Running, final: str) -> None:
        if run.final is None:
            run.final = final
            self.signal_task(run, signal.SIGTERM)
            run.kill_at = time.monotonic() + self.kill_grace

    def write_rc(self, entry: dict[str, Any], rc: int, sig: int | None, start: str, attempt: int) -> None:
        try:
            write_json(os.path.join(entry["dir"], "job.rc"), {
                "rc": rc, "signal": sig, "attempt": attempt, "native_id": self.native_id, "host": self.host,
                "start": start, "end": now_iso(),
            })
        except OSError as e:
            self.log("cannot write job.rc of %s: %s" % (entry.get("id"), e))

    def finish(
        self, entry: dict[str, Any], rc: int | None, sig: int | None, start: str, state: str,
        reason: str | None = None,
    ) -> None:
        summary = {"state": state, "rc": rc, "signal": sig, "start": start, "end": now_iso(), "end_time": time.time(),
                   "runner": self.runner_id, "attempt": entry.get("attempt"), "native_id": self.native_id,
                   "host": self.host, "pilot": self.pilot}
        if reason:
            summary["reason"] = reason
        finish_entry(self.queue, entry["id"], summary, runner=self.runner_id)

    def still_mine(self, task_id: str, entry: dict[str, Any]) -> bool:
        current = read_entry(os.path.join(self.queue, RUNNING, task_id + ".json"))
        return (current is not None and current.get("runner") == self.runner_id
                and current.get("attempt") == entry.get("attempt"))

    def reap(self) -> None:
        now = time.monotonic()
        for task_id, run in list(self.running.items()):
            code = run.popen.poll()
            if code is None:
                if run.deadline is not None and now >= run.deadline and run.final is None:
                    self.stop_task(run, "TIMEOUT")
                if run.kill_at is not None and now >= run.kill_at:
                    self.signal_task(run, signal.SIGKILL)
                    run.kill_at = None
                continue
            # make sure nothing of the task's group outlives it
            self.signal_task(run, signal.SIGKILL)
            self.forget(run)
            del self.running[task_id]
            entry = run.entry
            if not self.still_mine(task_id, entry):
                self.log("task %s is no longer claimed by this runner; its result is discarded" % task_id)
                continue
            attempt = int(entry.get("base_attempt", 0)) + int(entry["attempt"])
            if code < 0:
                sig, rc = -code, 128 - code
            else:
                sig, rc = (code - 128 if 128 < code < 193 and run.final else None), code
            if run.final is not None:
                state = run.final
                reason = ("timed out after %s s" % (entry.get("timeout") or entry.get("duration"))
                          if state == "TIMEOUT" else "cancelled on request")
            elif rc == 0:
                state, reason = "COMPLETED", None
            else:
                state = "FAILED"
                reason = "killed by signal %d" % sig if sig else "exit code %d" % rc
            self.write_rc(entry, rc, sig, run.start, attempt)
            self.finish(entry, rc, sig, run.start, state, reason)

    def scan_cancels(self) -> None:
        names = set(listing(self.queue, CANCEL))
        for task_id, run in self.running.items():
            if task_id in names:
                self.stop_task(run, "CANCELLED")

    def check_claims(self) -> None:
        """A claim no longer ours (re-queued while we were frozen): kill that task at once."""
        for task_id, run in list(self.running.items()):
            if not self.still_mine(task_id, run.entry):
                self.log("claim of %s was taken over; killing it" % task_id)
                self.signal_task(run, signal.SIGKILL)
                run.popen.wait()
                self.forget(run)
                del self.running[task_id]

    def shutdown(self) -> None:
        """Killed (SIGTERM: scancel, walltime): stop the tasks and leave them re-claimable."""
        for run in self.running.values():
            self.signal_task(run, signal.SIGTERM)
        deadline = time.monotonic() + min(self.kill_grace, 5.0)
        while time.monotonic() < deadline and any(r.popen.poll() is None for r in self.running.values()):
            time.sleep(0.05)
        for task_id, run in self.running.items():
            self.signal_task(run, signal.SIGKILL)
            run.popen.wait()
            self.forget(run)
            if self.still_mine(task_id, run.entry):
                requeue(self.queue, task_id, "runner %s lost" % self.runner_id)
        self.running.clear()
        self.heartbeat()

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> int:
        self.guard = GroupGuard()  # forked first, before any handler or task exists
        try:
            return self.serve()
        finally:
            self.guard.close()

    def serve(self) -> int:
        for sub in SUBDIRS:
            os.makedirs(os.path.join(self.queue, sub), exist_ok=True)
        signal.signal(signal.SIGUSR1, self.on_usr1)
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        self.heartbeat()
        self.log("started: slots %d, walltime %s, linger %s, drain margin %s"
                 % (self.slots, self.walltime or "none", self.linger, self.drain_margin))
        recover_lost(self.queue, self.runner_id, self.lost_after, self.lost_runners, skip_runner=self.runner_id)
        self.last_lost_check = time.monotonic()
        while True:
            if self.terminating:
                self.shutdown()
                self.log("terminated by a signal")
                return 143
            now = time.monotonic()
            self.reap()
            if now - self.last_cancel_scan >= CANCEL_SCAN_EVERY:
                self.last_cancel_scan = now
                if self.running:
                    self.scan_cancels()
                    self.check_claims()
            if now - self.last_lost_check >= LOST_CHECK_EVERY:
                self.last_lost_check = now
                recover_lost(self.queue, self.runner_id, self.lost_after, skip_runner=self.runner_id)
            if now - self.last_heartbeat >= HEARTBEAT_EVERY:
                self.heartbeat()
            busy = bool(self.running)
            scan_due = busy or now - self.last_pending_scan >= IDLE_SCAN_EVERY or self.idle_since is None
            if not self.stop_claiming and len(self.running) < self.slots and scan_due:
                self.last_pending_scan = now
                self.claim_some()
            if self.running:
                self.idle_since = None
            elif self.stop_claiming:
                self.log("drained; exiting")
                break
            else:
                if self.idle_since is None:
                    self.idle_since = now
                elif now - self.idle_since >= self.linger:
                    self.log("idle for %s s; exiting" % self.linger)
                    break
            time.sleep(BUSY_TICK if self.running else min(IDLE_SCAN_EVERY, 0.1))
        self.heartbeat()
        return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="runner.py", description="launchers batch runner")
    p.add_argument("--queue", required=True)
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--walltime", type=float, default=0.0, help="seconds from start (0: no limit)")
    p.add_argument("--linger", type=float, default=120.0)
    p.add_argument("--drain-margin", type=float, default=300.0)
    p.add_argument("--kill-grace", type=float, default=30.0)
    p.add_argument("--lost-after", type=float, default=LOST_AFTER)
    p.add_argument("--runner-id", default=None)
    p.add_argument("--pilot", default=None, help="the pilot's tag (recorded in heartbeats)")
    p.add_argument("--lost-runner", action="append", default=[],
                   help="a runner whose pilot is known final: its claims are re-queued at start-up")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return Runner(args).run()


if __name__ == "__main__":
    sys.exit(main())
