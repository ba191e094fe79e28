"""``SlurmExecutor``: submission (§4), tracking (§5), cancel (§7), arrays (§8), requeue (§9).

One executor per (connector, cluster) per process (``executor_key``). All its work runs on the
background loop. Pure pieces live in ``script``, ``parse`` and ``states``; this module only
decides and does I/O through a ``Connector`` (this machine or SSH).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import hashlib
import logging
import os
import random
import re
import shlex
import signal as signal_module
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..config.model import Position, SlurmGroup
from ..connectors.base import CommandResult, Connector
from ..connectors.local import LocalConnector
from ..connectors.registry import get_connector
from ..errors import ConnectorError, LaunchersError, ScriptError, SubmissionError
from ..fsutil import atomic_write_bytes
from ..jobs.record import RC, STDERR, STDOUT, iso_epoch, now_iso, parse_rc, submitting_since
from ..jobs.state import JobState
from ..jobs.update import StateUpdate
from ..runtime.core import current
from ..runtime.executor import Executor
from ..runtime.loop import background, blocking, call_soon
from ..units import parse_slurm_time, slurm_time
from . import parse as P
from .launcher import SlurmLauncher
from .limits import Allowance, allowance_command, parse_allowance
from .script import (
    ArraySpec,
    ScriptSpec,
    check_env,
    check_launcher_values,
    index_text,
    job_name,
    render_array_script,
    render_script,
    submission_variable,
)
from .settings import STATUS_SOURCES, Placement, SlurmSettings, SlurmTuning
from .states import SlurmStatus, UnknownStateWarner, cancel_reason, is_fatal_reason, map_state

if TYPE_CHECKING:
    from ..jobs.record import RcRecord
    from ..jobs.task import Task
    from ..launcher import Launcher
    from ..protocols import Clock, JobHandle

log = logging.getLogger("launchers.slurm")
#: Runs "$@" without SBATCH_*, SALLOC_*, SRUN_* and SLURM_* (but SLURM_CONF) on the cluster side
#: (POSIX sh and sed; ``command unset`` so that a read-only variable cannot end the shell).
_CLEAN_ENV = (
    "for v in $(env | sed -n -e 's/^\\(SBATCH_[A-Za-z0-9_]*\\)=.*/\\1/p' "
    "-e 's/^\\(SALLOC_[A-Za-z0-9_]*\\)=.*/\\1/p' -e 's/^\\(SRUN_[A-Za-z0-9_]*\\)=.*/\\1/p' "
    "-e 's/^\\(SLURM_[A-Za-z0-9_]*\\)=.*/\\1/p'); do "
    '[ "$v" = SLURM_CONF ] || command unset "$v" 2>/dev/null; done; exec "$@"'
)
#: retry jitter from a generator of our own: the global one is the user's (seeded runs)
_JITTER = random.Random()

#: Test hook: kill this process (SIGKILL) right after sbatch answers, before recording the id.
KILL_AFTER_SBATCH_ENV = "LAUNCHERS_TEST_KILL_AFTER_SBATCH"


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """``("slurm", connector, cluster)``, plus the group's ``status_source`` and ``poll_max``
    when it sets them: those shape the one tracker of an executor, so groups that disagree on
    them get executors of their own (the other group settings are read per job)."""
    return Placement.of(launcher).key()


def create_executor(launcher: Launcher) -> SlurmExecutor:
    """The executor for ``launcher``'s connector and cluster (called once per key)."""
    return SlurmExecutor(launcher)


def executor_from_record(info: Mapping[str, Any], record: Any) -> SlurmExecutor:
    """An executor for a job known only from its ``state.json`` (CLI ``cancel``, ``jobs``)."""
    group = SlurmGroup(
        id=info.get("group"),
        connector=str(info.get("connector") or "local"),
        position=Position(file=info.get("config")),
    )
    ex = SlurmExecutor(SlurmLauncher(group=group))
    cluster = getattr(record, "cluster", None)
    if cluster:
        ex.cluster = str(cluster)
    return ex


def _parse_time(text: str | None) -> float | None:
    """Epoch seconds of an ISO time (record or Slurm's local ``2026-01-01T10:00:00``)."""
    return iso_epoch(text)


def _slurm_time(text: str | None) -> str | None:
    """Slurm's local time with the local offset (as the records' other times)."""
    t = _parse_time(text)
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).astimezone().isoformat(timespec="seconds")


#: ``Row.source`` of a job whose line of output could not be read.
UNREADABLE = "unreadable"
_LEADING_ID = re.compile(r"\s*(\d+(?:_\d+)?)\s*$")


def _unreadable(command: str, bad: Sequence[str], any_read: bool) -> dict[str, Row]:
    """Rows standing for the jobs named by lines that could not be read: those jobs stay
    unchanged for the cycle, not taken for gone (§5). Output with no readable line at all is a
    failed query (``ConnectorError``): it changes nothing either."""
    rows = [line for line in bad if "|" in line]  # not a message (over SSH stderr is merged)
    if rows and not any_read:
        raise ConnectorError(f"{command} printed nothing readable: {rows[0][:200]!r}")
    out: dict[str, Row] = {}
    for line in rows:
        log.debug("unreadable %s line: %r", command, line)
        for field in line.split("|")[:2]:  # JobIDRaw|JobID, or %A|%i
            m = _LEADING_ID.match(field)
            if m:
                out[m.group(1)] = Row(m.group(1), "", source=UNREADABLE)
    return out


@attrs.frozen
class Row:
    """One job's line, from sacct or squeue, normalised."""

    job_id: str
    state: str
    reason: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    start: str | None = None
    end: str | None = None
    source: str = "sacct"


class SlurmExecutor(Executor):
    """Runs jobs of Slurm launchers sharing one connector and cluster."""

    kind = "slurm"

    def __init__(
        self, launcher: Launcher, *, tuning: SlurmTuning | None = None, clock: Clock | None = None
    ) -> None:
        placement = Placement.of(launcher)
        super().__init__(placement.key())
        self.launcher = launcher
        self._tuning = tuning
        self.clock: Clock = clock or current().clock
        tuned = self.tuning
        self.connector_name: str = placement.connector
        self.cluster: str | None = placement.cluster
        self.group = getattr(launcher, "group", None)
        self._connector: Connector | None = None
        self.poll_min = tuned.poll_min
        self.poll_max = float(placement.poll_max) if placement.poll_max else tuned.poll_max
        self.poll_timeout = tuned.poll_timeout
        self.fast_interval = tuned.fast_interval if self.connector_name == "local" else None
        source = placement.status_source
        if source not in STATUS_SOURCES:
            raise LaunchersError(f"status_source: {source!r} is not auto, sacct or squeue")
        self.status_source = source
        self._accounting: bool | None = None if source == "auto" else source == "sacct"
        self._sem: asyncio.Semaphore | None = None
        #: ids of the jobs inside ``submit`` (staging, sbatch): a cancel there is handled by it
        self._in_submit: set[int] = set()
        self._backoff_until = 0.0
        self._held: dict[int, JobHandle] = {}
        self._slot_freed: asyncio.Event | None = None
        self._user: tuple[str, int] | None = None
        self._max_array: int | None = None
        self.warn_unknown = UnknownStateWarner()
        #: Slurm commands run, by name (benchmarks and tests read it).
        self.commands: dict[str, int] = {}
        self._collect = threading.local()
        #: squeue's rows of pending jobs, and when they were read (see ``_live_pending``)
        self._live_rows: dict[str, Row] = {}
        self._live_at = float("-inf")
        #: launchers whose script values were checked (``validate``)
        self._checked: set[Any] = set()
        #: id(launcher) -> (launcher, its settings), resolved once per launcher
        self._settings: dict[int, tuple[Launcher, SlurmSettings]] = {}

    @property
    def tuning(self) -> SlurmTuning:
        """The timings in force: the executor's own, else the runtime's (``Runtime.tune``)."""
        return self._tuning or current().tuned(SlurmTuning)

    def settings(self, launcher: Launcher | None) -> SlurmSettings:
        """The settings of ``launcher`` (this executor's own when None), resolved once."""
        launcher = launcher or self.launcher
        found = self._settings.get(id(launcher))
        if found is not None and found[0] is launcher:
            return found[1]
        settings = SlurmSettings.resolve(launcher, self.group)
        if len(self._settings) >= 1024:
            self._settings.clear()
        self._settings[id(launcher)] = (launcher, settings)
        return settings

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def connector(self) -> Connector:
        if self._connector is None:
            config = None
            if self.connector_name != "local":
                # lazy: the configuration loader (~80 ms to import) only for a connector
                from ..config.loader import load_config

                path = getattr(getattr(self.group, "position", None), "file", None)
                config = load_config(path)
            self._connector = get_connector(self.connector_name, config)
        return self._connector

    @property
    def is_local(self) -> bool:
        return self.connector_name == "local"

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.tuning.max_concurrent_sbatch)
        return self._sem

    def _slot_event(self) -> asyncio.Event:
        if self._slot_freed is None:
            self._slot_freed = asyncio.Event()
        return self._slot_freed

    def _signal_slot(self) -> None:
        """A job of ours left the queue: wake the jobs held by a submit limit (once)."""
        event, self._slot_freed = self._slot_freed, None
        if event is not None:
            event.set()

    def _cluster_args(self, cluster: str | None = None) -> list[str]:
        c = cluster or self.cluster
        return [f"--clusters={c}"] if c else []

    async def _run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        clean_env: bool = False,
    ) -> CommandResult:
        """Run a Slurm command, counted by name; ``clean_env`` runs it without the variables
        sbatch reads as options (§3): locally through the child's environment (no extra exec per
        job), over a connector by a small ``sh`` wrapper that unsets them there."""
        self.commands[argv[0]] = self.commands.get(argv[0], 0) + 1
        if timeout is None:
            timeout = self.tuning.query_timeout
        if clean_env and isinstance(self.connector, LocalConnector):
            unset = frozenset(k for k in os.environ if not submission_variable(k))
            return await self.connector.run(list(argv), timeout=timeout, cwd=cwd, unset=unset)
        if clean_env:
            argv = ["sh", "-c", _CLEAN_ENV, "sh", *argv]
        return await self.connector.run(list(argv), timeout=timeout, cwd=cwd)

    async def user(self) -> tuple[str, int]:
        """The submitting user's name and uid on the cluster side."""
        if self._user is None:
            if self.is_local:
                self._user = (getpass.getuser(), os.getuid())
            else:
                res = await self.connector.run(
                    ["sh", "-c", "id -un; id -u"], timeout=self.tuning.query_timeout
                )
                lines = res.stdout.split()
                if res.returncode != 0 or len(lines) < 2:
                    raise ConnectorError(f"cannot read the remote user: {res.stderr.strip()}")
                self._user = (lines[0], int(lines[1]))
        return self._user

    def _job_dir(self, job: JobHandle) -> str:
        """Where the job's files are on the cluster side (the local directory on this machine;
        under the SSH connector's ``workdir`` otherwise, recorded as ``remote_dir``)."""
        if self.is_local:
            return str(job.directory)
        remote = job.runtime.get("remote_dir") or job.record.extra.get("remote_dir")
        return str(remote) if remote else str(job.directory)

    async def _prepare_remote(self, job: JobHandle) -> str:
        """Choose (once) and create the remote job directory, and copy ``params.json`` there."""
        remote = job.runtime.get("remote_dir") or job.record.extra.get("remote_dir")
        if not remote:
            base = str(
                getattr(getattr(self.connector, "config", None), "workdir", None)
                or "~/.local/share/launchers"
            )
            if base.startswith("~"):
                base = (await self.connector.home()).rstrip("/") + base[1:]
            root = Path(job.directory).parent.parent.parent
            tag = hashlib.sha256(str(root).encode()).hexdigest()[:12]
            remote = f"{base.rstrip('/')}/{root.name}-{tag}/jobs/{job.directory.parent.name}/{job.directory.name}"
        job.runtime["remote_dir"] = remote
        await self.connector.mkdir(remote)
        params = Path(job.directory) / "params.json"
        if params.exists():
            await self.connector.write_file(f"{remote}/params.json", params.read_bytes())
        return str(remote)

    async def _fetch_outputs(self, job: JobHandle) -> None:
        """Copy a finished remote job's outputs back into the local job directory."""
        if self.is_local:
            return
        remote = self._job_dir(job)
        for name in (STDOUT, STDERR, RC, "result.json", "result.pickle", "error.json"):
            try:
                data = await self.connector.read_file(
                    f"{remote}/{name}", max_bytes=64 * 1024 * 1024
                )
            except (FileNotFoundError, OSError, ConnectorError):
                continue
            # up to 64 MiB: always in a worker thread, however fast the disk was so far
            await asyncio.to_thread(
                atomic_write_bytes, str(Path(job.directory) / name), data, sync_dir=False
            )

    # -- script ---------------------------------------------------------------------------------

    def validate(self, launcher: Launcher, task: Task) -> None:
        """In ``task.submit``: the values the script will carry can be written (§3), so a bad
        one is a ``ScriptError`` there, not a FAILED job; each launcher is checked once."""
        key = _launcher_key(launcher)
        if key not in self._checked:
            settings = self.settings(launcher)
            check_launcher_values(
                directives=list(settings.directives),
                sbatch_options=settings.sbatch_options,
                env=settings.env,
                export=settings.export,
                resume_signal=settings.resume_signal,
            )
            if len(self._checked) < 1024:
                self._checked.add(key)
        check_env(task.env)

    def script_spec(self, job: JobHandle, launcher: Any) -> ScriptSpec:
        """The script inputs of ``job``'s current attempt."""
        task = job.task
        if task is None:
            raise LaunchersError(
                f"job {job.task_id}: the task is unknown (re-submit it from its experiment)"
            )
        directory = self._job_dir(job)
        settings = self.settings(launcher)
        python = settings.python or (sys.executable if self.is_local else "python3")
        if task.kind == "command":
            argv = tuple(task.target)
            check = None
        else:
            argv = (python, "-m", "launchers.run", directory)
            check = python
        return ScriptSpec(
            job_dir=directory,
            task_id=task.task_id,
            job_name=job_name(task.name, task.digest, job.attempt),
            argv=argv,
            attempt=job.attempt,
            cwd=task.cwd,
            export=settings.export,
            env=settings.job_env(task.env),
            directives=settings.directives,
            sbatch_options=settings.sbatch_options,
            resumable=bool(task.resumable),
            max_requeues=settings.max_requeues,
            resume_signal=settings.resume_signal,
            resume_grace=settings.resume_grace,
            python=check,
        )

    def _sbatch_argv(self, script: str) -> list[str]:
        return ["sbatch", "--parsable", *self._cluster_args(), script]

    # -- submission (§4) ------------------------------------------------------------------------

    def owns_waiting(self, job: JobHandle) -> bool:
        return id(job) in self._held

    def _learn_cluster(self, job: JobHandle) -> None:
        """A job recorded with the cluster sbatch named (``ID;CLUSTER``) gives it to every later
        command of this executor, also in a later process (§4)."""
        if job.record.cluster and not self.cluster:
            self.cluster = job.record.cluster

    def track(self, job: JobHandle) -> None:
        self._learn_cluster(job)
        super().track(job)

    def enqueue(self, job: JobHandle, *, reconcile: bool = False) -> None:
        """Collect jobs inside ``array()`` blocks; otherwise as every executor."""
        self._learn_cluster(job)
        bucket = getattr(self._collect, "bucket", None)
        if bucket is not None and not reconcile and job.launcher is not None:
            bucket.append(job)
            return
        super().enqueue(job, reconcile=reconcile)

    async def submit(self, job: JobHandle) -> None:
        # a cancel arriving while the job is staged is left to the submission: it stops before
        # sbatch, or cancels the id sbatch returns; nothing runs unrecorded (§4, §7)
        key = id(job)
        outer = key not in self._in_submit
        self._in_submit.add(key)
        try:
            await self._submit(job)
        finally:
            if outer:
                self._in_submit.discard(key)

    def _cancelled_before_sbatch(self, job: JobHandle) -> bool:
        """A cancel was asked before sbatch ran: record CANCELLED (nothing was submitted)."""
        if not job.cancel_requested:
            return False
        job.apply(
            StateUpdate(state=JobState.CANCELLED, detail="cancel", reason="cancelled on request")
        )
        return True

    async def _submit(self, job: JobHandle) -> None:
        launcher = job.launcher or self.launcher
        # Nothing is submitted yet, so a transport failure while staging is retried (§4).
        deadline = self.clock.monotonic() + self.tuning.retry_total
        delay = self.tuning.retry_first
        while True:
            try:
                if not self.is_local:
                    await self._prepare_remote(job)  # chooses the remote directory the script names
                spec = self.script_spec(job, launcher)
                text = render_script(spec)
                if not self.is_local:
                    local_copy = str(Path(job.directory) / "job.sh")
                    await blocking(
                        atomic_write_bytes, local_copy, text.encode(), mode=0o755, sync_dir=False
                    )
                directory = self._job_dir(job)
                if self.is_local:
                    # no fsync here: the SUBMITTING record written next fsyncs job.sh, params.json
                    # and the directory together, before sbatch runs
                    script = f"{directory}/job.sh"
                    await blocking(
                        atomic_write_bytes, script, text.encode("utf-8"), mode=0o755, sync=False
                    )
                    job.defer_sync(Path(script))
                else:
                    await self._write(
                        f"{directory}/job.sh", text.encode("utf-8"), mode=0o755, sync_dir=False
                    )
                break
            except ConnectorError as e:
                if self._cancelled_before_sbatch(job):
                    return
                if self.clock.monotonic() + delay > deadline:
                    job.apply(
                        StateUpdate(
                            state=JobState.FAILED,
                            detail="staging",
                            reason=f"could not stage the job: {e}",
                        )
                    )
                    log.error("%s: could not stage the job: %s", job.task_id, e)
                    return
                log.warning("%s: staging failed (%s); retrying in %.0f s", job.task_id, e, delay)
                await asyncio.sleep(delay * _JITTER.uniform(0.8, 1.2))
                delay = min(delay * 2, 60.0)
        extra = None if self.is_local else {"remote_dir": directory}
        if self._cancelled_before_sbatch(job):
            return
        await _apply(job, StateUpdate(state=JobState.SUBMITTING, detail="sbatch", job_name=spec.job_name, reason="",
                                      extra=extra))  # fmt: skip
        await self._submit_loop(job, spec.job_name, directory)

    async def _write(
        self, path: str, data: bytes, *, mode: int | None = None, sync_dir: bool = True
    ) -> None:
        """Write a file on the cluster side (local: ``blocking``, inline while the disk is fast)."""
        if self.is_local:
            await blocking(atomic_write_bytes, path, data, mode=mode, sync_dir=sync_dir)
        else:
            await self.connector.write_file(path, data, mode=mode)

    async def _submit_loop(self, job: JobHandle, name: str, directory: str) -> None:
        deadline = self.clock.monotonic() + self.tuning.retry_total
        delay = self.tuning.retry_first
        last_error = ""
        while True:
            wait = self._backoff_until - self.clock.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            # first pass: nothing ran yet; later passes: the lookup by name found nothing
            if self._cancelled_before_sbatch(job):
                return
            try:
                async with self._semaphore():
                    res = await self._run(
                        self._sbatch_argv("job.sh"),
                        timeout=self.tuning.sbatch_timeout,
                        cwd=directory,
                        clean_env=True,
                    )
                if os.environ.get(KILL_AFTER_SBATCH_ENV) and res.returncode == 0:
                    os.kill(os.getpid(), signal_module.SIGKILL)
                if res.returncode == 0:
                    native_id, cluster = P.parse_sbatch_id(res.stdout, res.stderr)
                    await self._accepted(job, native_id, cluster)
                    return
                message = P.sbatch_message(res.stdout, res.stderr)
                kind = P.classify_sbatch_error(message)
            except ConnectorError as e:
                message, kind = str(e), P.TRANSIENT
            except SubmissionError as e:
                job.apply(StateUpdate(state=JobState.FAILED, detail="sbatch", reason=str(e)))
                log.error("%s: %s", job.task_id, e)
                return
            if kind == P.SUBMIT_LIMIT:
                await self._hold_for_limit(job, message)
                return
            if kind == P.REJECTED:
                log.error("%s: sbatch refused the job: %s", job.task_id, message)
                job.apply(
                    StateUpdate(state=JobState.FAILED, detail="sbatch refused", reason=message)
                )
                return
            # transient: the submission may have been accepted; look for it by name first
            last_error = message
            with contextlib.suppress(Exception):
                if await self._adopt_by_name(job, name):
                    return
            if self.clock.monotonic() + delay > deadline:
                log.error(
                    "%s: sbatch kept failing for %.0f s: %s",
                    job.task_id,
                    self.tuning.retry_total,
                    last_error,
                )
                job.apply(StateUpdate(state=JobState.FAILED, detail="sbatch", reason=last_error))
                return
            log.warning("%s: sbatch failed (%s); retrying in %.0f s", job.task_id, message, delay)
            jittered = delay * _JITTER.uniform(0.8, 1.2)
            self._backoff_until = max(self._backoff_until, self.clock.monotonic() + jittered)
            await asyncio.sleep(jittered)
            delay *= 2

    async def _accepted(self, job: JobHandle, native_id: str, cluster: str | None) -> None:
        if cluster and not self.cluster:
            self.cluster = cluster
        job.runtime["submitted_mono"] = self.clock.monotonic()
        await _apply(
            job,
            StateUpdate(
                state=JobState.PENDING,
                detail=f"submitted as {native_id}",
                native_id=native_id,
                cluster=cluster or self.cluster,
                submitted_at=now_iso(),
                reason="",
            ),
        )
        self.tracker.wake()
        if job.native_id != native_id:
            # the record refused the id (final already, e.g. cancelled elsewhere): never leave
            # a job running that nothing follows
            log.warning(
                "%s: job %s was submitted after the task ended (%s); cancelling it",
                job.task_id,
                native_id,
                job.state.value,
            )
            with contextlib.suppress(LaunchersError, OSError):
                await self._cancel_ids([native_id])
            return
        if job.cancel_requested:
            await self.cancel([job])

    async def _hold_for_limit(self, job: JobHandle, message: str) -> None:
        self._held[id(job)] = job
        job.apply(
            StateUpdate(
                state=JobState.WAITING,
                detail="submit limit",
                reason=f"waiting: submit limit reached ({message})",
            )
        )
        try:
            event = self._slot_event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(event.wait(), self.tuning.submit_limit_wait)
        finally:
            self._held.pop(id(job), None)
        if job.cancel_requested or job.state.is_final:
            return
        await self.submit(job)

    async def find_by_name(self, name: str, since: float | None = None) -> list[str]:
        """Ids (array master ids for arrays) of this user's jobs named ``name`` (squeue, and
        sacct over 7 days if available), oldest first. ``since`` (epoch) drops jobs submitted before it (minus clock skew): the
        same task in another experiment directory has the same name, but an earlier job."""
        ids, _ = await self._named(name, since, None)
        return ids

    async def _named(
        self, name: str, since: float | None, workdir: str | None
    ) -> tuple[list[str], set[str]]:
        """``find_by_name``, and which of the ids Slurm says run in another directory than
        ``workdir``: the same task submitted at the same time from another experiment."""
        user, _ = await self.user()
        found: dict[str, float | None] = {}
        others: set[str] = set()

        def elsewhere(jid: str, where: str) -> None:
            if (
                workdir is not None
                and where.strip()
                and where.strip().rstrip("/") != workdir.rstrip("/")
            ):
                others.add(jid)

        res = await self._run(
            ["squeue", "--noheader", "--states=all", f"--user={user}", f"--name={name}", "--format=%F|%V|%Z",
             *self._cluster_args()]
        )  # fmt: skip
        if res.returncode == 0:
            for line in res.stdout.splitlines():
                jid, _, rest = line.strip().partition("|")
                submit, _, where = rest.partition("|")
                if jid.isdigit():
                    found[jid] = _parse_time(submit)
                    elsewhere(jid, where)
        if self._accounting is not False:
            start = (datetime.now() - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%S")
            res2 = await self._run(
                ["sacct", "--noheader", "--parsable2", "--allocations", f"--name={name}", f"--user={user}",
                 f"--starttime={start}", "--format=JobID,Submit,WorkDir", *self._cluster_args()]
            )  # fmt: skip
            if res2.returncode == 0:
                for line in res2.stdout.splitlines():
                    jid, _, rest = line.strip().partition("|")
                    submit, _, where = rest.partition("|")
                    jid = P.master_id(jid)
                    if jid.isdigit():
                        found.setdefault(jid, _parse_time(submit))
                        elsewhere(jid, where)
            elif P.sacct_accounting_disabled(res2.returncode, res2.stderr, res2.stdout):
                self._accounting = False
        if res.returncode != 0 and not found:
            raise ConnectorError(f"squeue failed: {res.stderr.strip()}")
        if since is not None:
            found = {
                j: t for j, t in found.items() if t is None or t >= since - self.tuning.clock_skew
            }
        return sorted(found, key=int), others & set(found)

    @staticmethod
    def _submitting_since(job: JobHandle) -> float | None:
        """When this attempt's SUBMITTING was recorded (epoch), from the record's history."""
        return submitting_since(job.record)

    def _workdir(self, job: JobHandle) -> str | None:
        """The working directory the job's script asks for (``--chdir``), when it is known."""
        if job.task is None:
            return None
        return job.task.cwd or self._job_dir(job)

    async def _adopt_by_name(self, job: JobHandle, name: str) -> bool:
        ids, foreign = await self._named(name, self._submitting_since(job), self._workdir(job))
        if not ids:
            return False
        # Jobs of this directory first, and only they are duplicates to cancel; when none is
        # (a job submitted by other means, without --chdir), the oldest of all, as before.
        mine = [i for i in ids if i not in foreign] or ids
        keep, extra = mine[0], mine[1:]
        if extra:
            log.warning("%s: several Slurm jobs named %s (%s); keeping %s and cancelling the others",
                        job.task_id, name, ", ".join(mine), keep)  # fmt: skip
            await self._run(["scancel", *self._cluster_args(), *extra])
        await self._accepted(job, keep, None)
        return True

    async def _adopt_array_element(self, job: JobHandle) -> bool:
        """A SUBMITTING element of an array: find the array by its name, then our index."""
        arr = job.record.extra.get("array")
        if not isinstance(arr, Mapping) or not arr.get("name") or not arr.get("dir"):
            return False
        ids = await self.find_by_name(str(arr["name"]), since=self._submitting_since(job))
        if not ids:
            return False
        try:
            index = (await self.connector.read_file(f"{arr['dir']}/index")).decode(
                "utf-8", errors="replace"
            )
        except (FileNotFoundError, OSError):
            return False
        lines = index.splitlines()
        me = self._job_dir(job)
        if me not in lines:
            return False
        await self._accepted(job, f"{ids[0]}_{lines.index(me)}", None)
        return True

    async def reconcile(self, job: JobHandle) -> None:
        """A record found in SUBMITTING: adopt the job found by name, else submit (§4)."""
        if await self._adopt_array_element(job):
            return
        if isinstance(job.record.extra.get("array"), Mapping):
            directory = self._job_dir(job)
            if not await self._banner_seen(directory, job.attempt):
                await self.submit(job)
                return
        name = job.record.job_name
        launcher = job.launcher or self.launcher
        if not name and job.task is not None:
            name = self.script_spec(job, launcher).job_name
        if name and await self._adopt_by_name(job, name):
            return
        directory = self._job_dir(job)
        if await self._banner_seen(directory, job.attempt):
            rc = await self._read_rc(directory)
            if rc is not None and rc.native_id:
                job.apply(StateUpdate(native_id=rc.native_id, detail="found by job.rc"))
                update = self._rc_update(job, rc)
                if update is not None:
                    job.apply(update)
                    return
            job.apply(StateUpdate(state=JobState.LOST, detail="reconcile",
                                  reason="Slurm has no record of the job and it left no exit record"))  # fmt: skip
            return
        await self.submit(job)

    async def _banner_seen(self, directory: str, attempt: int) -> bool:
        try:
            data = await self.connector.read_file(f"{directory}/{STDOUT}")
        except (FileNotFoundError, ConnectorError, OSError):
            return False
        return f"==== launchers: attempt {attempt}, ".encode() in data

    # -- job.rc ---------------------------------------------------------------------------------

    async def _read_rc(self, directory: str) -> RcRecord | None:
        try:
            data = await self.connector.read_file(f"{directory}/{RC}", max_bytes=4096)
        except (FileNotFoundError, OSError):
            return None
        return parse_rc(data.decode("utf-8", errors="replace"))

    def _rc_matches(self, job: JobHandle, rc: RcRecord) -> bool:
        if rc.native_id is not None and job.native_id is not None:
            return rc.native_id == job.native_id
        return rc.attempt is None or rc.attempt >= job.attempt

    def _rc_update(self, job: JobHandle, rc: RcRecord) -> StateUpdate | None:
        if not self._rc_matches(job, rc):
            return None
        self._note_restarts(job, rc.attempt)
        if rc.success:
            return StateUpdate(state=JobState.COMPLETED, detail="job.rc", exit_code=0, reason="",
                               started_at=rc.start, ended_at=rc.end)  # fmt: skip
        return None

    def _note_restarts(self, job: JobHandle, attempt: int | None) -> None:
        """Slurm requeued the job in place: record the new attempt (same id, appended output)."""
        if attempt is None or attempt <= job.attempt:
            return
        rec = job.record
        while rec.attempt < attempt:
            # the attempt ended when Slurm requeued it: say so, not the RUNNING it was last seen in
            summary = {
                **rec.archived("requeued by Slurm"),
                "state": "REQUEUED",
                "ended_at": rec.ended_at or now_iso(),
            }
            rec = attrs.evolve(
                rec, attempt=rec.attempt + 1, attempts=(*rec.attempts, summary), ended_at=None
            ).transition(detail=f"attempt {rec.attempt + 1} (requeued by Slurm)")
        job.replace_record(rec, write=True)

    async def fast_poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        """Every second on this machine: a ``job.rc`` with rc 0 completes a job, no Slurm call."""
        out: dict[JobHandle, StateUpdate] = {}
        for job in jobs:
            rc = await self._read_rc(self._job_dir(job))
            if rc is None:
                continue
            update = self._rc_update(job, rc)
            if update is not None:
                out[job] = update
            elif self._rc_matches(job, rc) and not job.runtime.get("rc_woke"):
                job.runtime["rc_woke"] = True
                self.tracker.wake()
        if out:
            self._signal_slot()
        return out

    # -- tracking (§5) --------------------------------------------------------------------------

    async def poll(self, jobs: Sequence[JobHandle]) -> Mapping[JobHandle, StateUpdate]:
        if not self.is_local:
            return await self._poll_remote(jobs)
        rcs = {job: await self._read_rc(self._job_dir(job)) for job in jobs}
        return await self._poll_with(jobs, rcs)

    async def _poll_with(
        self, jobs: Sequence[JobHandle], rcs: Mapping[JobHandle, RcRecord | None]
    ) -> dict[JobHandle, StateUpdate]:
        out: dict[JobHandle, StateUpdate] = {}
        rest: list[JobHandle] = []
        for job in jobs:
            rc = rcs.get(job)
            update = self._rc_update(job, rc) if rc is not None else None
            if update is not None:
                out[job] = update
            else:
                rest.append(job)
        if rest:
            rows, source = await self._query(rest)
            live: dict[str, Row] | None = None  # read in this cycle
            if source == "sacct":
                live = await self._live_pending(rest, rows)
                rows = _with_live_reasons(rows, self._live_rows)
            now = self.clock.time()
            missing: list[JobHandle] = []
            for job in rest:
                row = rows.get(job.native_id or "")
                if row is None:
                    if source == "sacct":
                        submitted = _parse_time(job.record.submitted_at) or now
                        if now - submitted >= self.tuning.sacct_grace:
                            missing.append(job)
                        continue
                    upd = self._gone(job, rcs.get(job), now)
                else:
                    job.runtime.pop("missing", None)
                    upd = self._from_row(job, row, rcs.get(job), now)
                if upd is not None:
                    out[job] = upd
            if missing:
                rows2 = live if live is not None else await self._squeue(missing)
                for job in missing:
                    row = rows2.get(job.native_id or "")
                    upd = (
                        self._from_row(job, row, rcs.get(job), now)
                        if row
                        else self._gone(job, rcs.get(job), now)
                    )
                    if upd is not None:
                        out[job] = upd
        if any(u.state is not None and u.state.is_final for u in out.values()):
            self._signal_slot()
        return out

    async def _query(self, jobs: Sequence[JobHandle]) -> tuple[dict[str, Row], str]:
        """ONE Slurm query for ``jobs``: sacct, or squeue without accounting (§5)."""
        if self._accounting is not False:
            try:
                return await self._sacct(jobs), "sacct"
            except _AccountingDisabled:
                log.warning(
                    "Slurm accounting storage is disabled: following jobs with squeue and job.rc"
                )
                self._accounting = False
            except (
                _QueryFailed
            ) as e:  # also with status_source: sacct (§5: "that cycle uses squeue")
                log.info("sacct failed (%s); using squeue for this cycle", e)
        return await self._squeue(jobs), "squeue"

    async def _live_pending(
        self, jobs: Sequence[JobHandle], rows: Mapping[str, Row]
    ) -> dict[str, Row] | None:
        """squeue's rows, read when sacct lists a job pending for ``FATAL_CONFIRM / 2`` or more
        and the last reading is that old (None otherwise: the cycle keeps its one query).

        slurmdbd keeps the reason a job had when it was first recorded, so a dependency that fails
        later stays ``Dependency`` there and a fatal pending reason is only seen in slurmctld's.
        The reasons read stand in for sacct's until the next reading, so a fatal reason is seen
        twice ``FATAL_CONFIRM`` apart; only long-pending jobs can have one worth confirming."""
        half = self.tuning.fatal_confirm / 2
        now = self.clock.monotonic()
        if now - self._live_at < half:
            return None
        wall = self.clock.time()
        if not any(
            (r := rows.get(j.native_id or "")) is not None
            and _is_pending(r)
            and wall - (_parse_time(j.record.submitted_at) or wall) >= half
            for j in jobs
        ):
            return None
        try:
            live = await self._squeue(jobs)
        except ConnectorError as e:  # sacct's rows still tell the states
            log.info("squeue for pending reasons failed (%s); using sacct's", e)
            return None
        self._live_at = now
        self._live_rows = {jid: row for jid, row in live.items() if _is_pending(row)}
        return live

    async def _sacct_argv(self, jobs: Sequence[JobHandle]) -> list[str]:
        """sacct for ``jobs``: ``--jobs=ID,...``, or ``--user=U --starttime=T`` (T one hour before
        the oldest submission) when the id list would pass ``self.tuning.max_id_list`` bytes (§5)."""
        ids = sorted({P.master_id(j.native_id or "") for j in jobs if j.native_id}, key=int)
        argv = ["sacct", "--noheader", "--parsable2", "--allocations", f"--format={P.SACCT_FORMAT}",
                *self._cluster_args()]  # fmt: skip
        id_list = ",".join(ids)
        if len(id_list) > self.tuning.max_id_list:
            user, _ = await self.user()
            times = [t for t in (_parse_time(j.record.submitted_at) for j in jobs) if t is not None]
            oldest = min(times) if times else self.clock.time() - 86400
            # sacct reads the time in the cluster's time zone: over SSH it may differ from ours
            # by up to 26 h, so the window opens that much earlier (more rows, none missed)
            margin = 3600 if self.is_local else 27 * 3600
            start = datetime.fromtimestamp(oldest - margin).strftime("%Y-%m-%dT%H:%M:%S")
            argv += [f"--user={user}", f"--starttime={start}"]
        else:
            argv.append(f"--jobs={id_list}")
        return argv

    async def _sacct(self, jobs: Sequence[JobHandle]) -> dict[str, Row]:
        argv = await self._sacct_argv(jobs)
        res = await self._run(argv)
        if res.returncode != 0:
            if P.sacct_accounting_disabled(res.returncode, res.stderr, res.stdout):
                raise _AccountingDisabled(res.stderr.strip())
            raise _QueryFailed(f"sacct exited {res.returncode}: {res.stderr.strip()}")
        return self._sacct_rows(res.stdout)

    def _sacct_rows(self, stdout: str) -> dict[str, Row]:
        rows, bad = P.parse_sacct(stdout)
        out = _unreadable("sacct", bad, bool(rows))
        out.update(
            (
                r.job_id,
                Row(
                    r.job_id, r.state, r.reason, r.exit_code, r.exit_signal, r.start, r.end, "sacct"
                ),
            )
            for r in rows
        )
        return out

    def _squeue_argv(self, user: str) -> list[str]:
        return ["squeue", "--noheader", "--array", "--states=all", f"--user={user}",
                f"--format={P.SQUEUE_FORMAT}", *self._cluster_args()]  # fmt: skip

    async def _squeue(self, jobs: Sequence[JobHandle]) -> dict[str, Row]:
        user, _ = await self.user()
        res = await self._run(self._squeue_argv(user))
        if res.returncode != 0:
            raise ConnectorError(f"squeue exited {res.returncode}: {res.stderr.strip()}")
        return self._squeue_rows(res.stdout)

    def _squeue_rows(self, stdout: str) -> dict[str, Row]:
        rows, bad = P.parse_squeue(stdout)
        out = _unreadable("squeue", bad, bool(rows))
        out.update((r.job_id, Row(r.job_id, r.state, r.reason, source="squeue")) for r in rows)
        return out

    # -- deciding a state -----------------------------------------------------------------------

    def _from_row(
        self, job: JobHandle, row: Row, rc: RcRecord | None, now: float
    ) -> StateUpdate | None:
        if row.source == UNREADABLE:
            return None  # its line could not be read: this job stays as it was (§5)
        status = map_state(row.state)
        if not status.known:
            self.warn_unknown(row.state)
            # the job keeps its state, but its exit record can still end it (§6)
            return (
                self._gone(job, rc, now) if rc is not None and self._rc_matches(job, rc) else None
            )
        state = JobState[status.state or "PENDING"]
        rc_ok = rc is not None and self._rc_matches(job, rc)
        if rc_ok and rc is not None:
            self._note_restarts(job, rc.attempt)
        common: dict[str, Any] = {"slurm_state": status.raw}
        if row.start and status.slurm_state != "PENDING":
            common["started_at"] = _slurm_time(row.start)
        requeued = status.slurm_state in ("REQUEUED", "REQUEUE_FED") or (
            state is JobState.PENDING and job.state in (JobState.RUNNING, JobState.SUSPENDED)
        )
        if requeued and job.runtime.get("requeue_seen") != job.record.attempt:
            job.runtime["requeue_seen"] = job.record.attempt + 1
            self._note_restarts(job, job.record.attempt + 1)
        if state is JobState.PENDING:
            return self._pending(job, status, row, now, common)
        job.runtime.pop("fatal", None)
        if not state.is_final:
            return StateUpdate(state=state, detail=row.source, reason=status.note or "", **common)
        if state in (
            JobState.TIMEOUT,
            JobState.PREEMPTED,
            JobState.NODE_FAIL,
        ) and self._requeue_fallback(job, state):
            return None
        ended = _slurm_time(row.end)
        exit_code, sig = row.exit_code, row.exit_signal or None
        if rc_ok and rc is not None:
            exit_code, sig = rc.rc, rc.signal
            ended = rc.end or ended
        reason: str | None = None
        if state is JobState.CANCELLED:
            uid = self._user[1] if self._user else (os.getuid() if self.is_local else None)
            reason = cancel_reason(status.cancelled_by, requested=job.cancel_requested, my_uid=uid)
            if status.cancelled_by is not None:  # "CANCELLED by 1234": the uid is recorded (§6)
                common["extra"] = {"cancelled_by": status.cancelled_by}
        elif state is JobState.FAILED:
            reason = status.note or (f"killed by signal {sig}" if sig else f"exit code {exit_code}")
        elif state is not JobState.COMPLETED:
            reason = status.note or {
                JobState.TIMEOUT: "time limit reached",
                JobState.OUT_OF_MEMORY: "out of memory",
                JobState.NODE_FAIL: "node failure",
                JobState.PREEMPTED: "preempted",
                JobState.BOOT_FAIL: "node boot failure",
                JobState.DEADLINE: "deadline reached",
            }.get(state, state.value.lower())
        return StateUpdate(
            state=state, detail=row.source, reason=reason or "", exit_code=exit_code, signal=sig,
            ended_at=ended, **common,
        )  # fmt: skip

    def _group_of(self, job: JobHandle) -> Any:
        """The job's own group (several groups may share this executor's connector and cluster)."""
        return self.settings(job.launcher).group or self.group

    def _pending(
        self, job: JobHandle, status: SlurmStatus, row: Row, now: float, common: dict[str, Any]
    ) -> StateUpdate:
        reason = row.reason or ""
        settings = self.settings(job.launcher)
        add, remove = settings.fatal_reasons_add, settings.fatal_reasons_remove
        if is_fatal_reason(reason, add=add, remove=remove):
            seen = job.runtime.get("fatal")
            if seen is None or seen[0] != reason:
                job.runtime["fatal"] = (reason, now)
            elif now - seen[1] >= self.tuning.fatal_confirm:
                if settings.fatal_pending == "cancel":
                    job.runtime["unrunnable"] = reason
                    background(self._cancel_ids([job.native_id or ""]))
                    known = limit_detail(settings.group, settings.options, reason)
                    return StateUpdate(state=JobState.UNRUNNABLE, detail=row.source, slurm_state=status.raw,
                                       reason=f"Slurm cannot run this job: {reason}"
                                       + (f" ({known})" if known else ""))  # fmt: skip
                return StateUpdate(state=JobState.PENDING, detail=row.source,
                                   reason=f"pending forever: {reason}", **common)  # fmt: skip
        else:
            job.runtime.pop("fatal", None)
        text = status.note or (reason if reason and reason != "None" else "")
        return StateUpdate(state=JobState.PENDING, detail=row.source, reason=text, **common)

    def _gone(self, job: JobHandle, rc: RcRecord | None, now: float) -> StateUpdate | None:
        """No scheduler record: decided by job.rc, else LOST after 3 polls spanning lost_after."""
        if rc is not None and self._rc_matches(job, rc):
            if rc.success:
                return StateUpdate(
                    state=JobState.COMPLETED, detail="job.rc", exit_code=0, reason=""
                )
            if job.cancel_requested and rc.signalled:
                return StateUpdate(state=JobState.CANCELLED, detail="job.rc", exit_code=rc.rc,
                                   signal=rc.signal, reason="cancelled on request")  # fmt: skip
            reason = f"killed by signal {rc.signal}" if rc.signal else f"exit code {rc.rc}"
            return StateUpdate(state=JobState.FAILED, detail="job.rc", exit_code=rc.rc,
                               signal=rc.signal, reason=reason, ended_at=rc.end)  # fmt: skip
        first, count = job.runtime.get("missing", (now, 0))
        count += 1
        job.runtime["missing"] = (first, count)
        tuning = self.tuning
        lost_after = self.settings(job.launcher).lost_after or tuning.lost_after
        if count >= tuning.lost_polls and now - first >= lost_after:
            return StateUpdate(state=JobState.LOST, detail="no record",
                               reason="Slurm has no record of the job and it left no exit record")  # fmt: skip
        return None

    def _requeue_fallback(self, job: JobHandle, state: JobState) -> bool:
        """Resubmit a resumable job that ended in TIMEOUT/PREEMPTED/NODE_FAIL (§9)."""
        task = job.task
        if task is None or not task.resumable or job.cancel_requested:
            return False
        if job.attempt - 1 >= self.settings(job.launcher).max_requeues:
            return False
        log.warning(
            "%s: %s in Slurm; resubmitting (attempt %d)", job.task_id, state.value, job.attempt + 1
        )
        rec = job.record.transition(slurm_state=state.value, reason=state.value.lower())
        rec = attrs.evolve(rec, state=state).next_attempt(f"{state.value}: resubmitted")
        rc = Path(job.directory) / RC
        if rc.exists():
            dest = Path(job.directory) / "attempts" / str(job.attempt)
            dest.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.replace(rc, dest / RC)
        job.replace_record(rec, write=True)
        background(self._resubmit(job))
        return True

    async def _resubmit(self, job: JobHandle) -> None:
        try:
            await self.submit(job)
        except Exception as e:
            log.error("%s: resubmission failed: %s", job.task_id, e)
            job.apply(StateUpdate(state=JobState.FAILED, detail="resubmission", reason=str(e)))

    # -- remote poll: one command per cycle ----------------------------------------------------

    async def _poll_remote(self, jobs: Sequence[JobHandle]) -> dict[JobHandle, StateUpdate]:
        user, _ = await self.user()
        # The job directories go on stdin, one a line, so that the command stays the same size
        # whatever the number of jobs (one argument is limited to 128 KiB on Linux). A directory
        # with a newline in it (never made by launchers) is passed as an argument instead: an
        # empty line stands for the next one.
        lines: list[str] = []
        odd: list[str] = []
        for job in jobs:
            directory = self._job_dir(job)
            if "\n" in directory:
                odd.append(directory)
                directory = ""
            lines.append(directory + "\n")
        parts = [
            "i=0",
            "while IFS= read -r d; do",
            '    [ -n "$d" ] || { d=$1; shift; }',
            "    printf '@@rc %s\\n' \"$i\"",
            f'    [ ! -f "$d"/{shlex.quote(RC)} ] || cat -- "$d"/{shlex.quote(RC)} 2>/dev/null',
            "    echo",
            "    i=$((i + 1))",
            "done",
        ]
        use_sacct = self._accounting is not False
        sacct = shlex.join(await self._sacct_argv(jobs))
        squeue = shlex.join(self._squeue_argv(user))
        if use_sacct:
            parts.append(f"printf '@@sacct\\n'; {sacct} 2>&1; printf '@@status %s\\n' $?")
        parts.append(f"printf '@@squeue\\n'; {squeue} 2>&1; printf '@@status %s\\n' $?")
        self.commands["remote-cycle"] = self.commands.get("remote-cycle", 0) + 1
        res = await self.connector.run(
            ["sh", "-c", "\n".join(parts), "sh", *odd],
            timeout=self.tuning.query_timeout,
            input="".join(lines).encode("utf-8", "surrogateescape"),
        )
        sections: dict[str, list[str]] = {}
        status: dict[str, int] = {}
        current = ""
        for line in res.stdout.splitlines():
            if line.startswith("@@status "):
                status[current] = int(line.split()[1])
            elif line.startswith("@@"):
                current = line[2:]
                sections.setdefault(current, [])
            else:
                sections.setdefault(current, []).append(line)
        rcs = {job: parse_rc("\n".join(sections.get(f"rc {i}", []))) for i, job in enumerate(jobs)}
        out: dict[JobHandle, StateUpdate] = {}
        rest = []
        for job in jobs:
            rc = rcs[job]
            upd = self._rc_update(job, rc) if rc is not None else None
            if upd is not None:
                out[job] = upd
            else:
                rest.append(job)
        sacct_text = "\n".join(sections.get("sacct", []))
        rows: dict[str, Row] | None = None
        if use_sacct and status.get("sacct") == 0:
            rows = self._sacct_rows(sacct_text)
        elif use_sacct and P.sacct_accounting_disabled(status.get("sacct", 1), sacct_text):
            log.warning(
                "Slurm accounting storage is disabled: following jobs with squeue and job.rc"
            )
            self._accounting = False
        if status.get("squeue") != 0 and rows is None:
            raise ConnectorError("squeue failed: " + " ".join(sections.get("squeue", []))[:500])
        sq = (
            self._squeue_rows("\n".join(sections.get("squeue", [])))
            if status.get("squeue") == 0
            else {}
        )
        now = self.clock.time()
        if rows is not None:
            rows = _with_live_reasons(
                rows, sq
            )  # slurmdbd's pending reasons go stale (see _live_pending)
        for job in rest:
            nid = job.native_id or ""
            row = rows.get(nid) if rows is not None else None
            if row is None and rows is not None:
                submitted = _parse_time(job.record.submitted_at) or now
                if now - submitted < self.tuning.sacct_grace:
                    continue
            if row is None:
                row = sq.get(nid)
            if row is None and status.get("squeue") != 0:
                continue
            upd = self._from_row(job, row, rcs[job], now) if row else self._gone(job, rcs[job], now)
            if upd is not None:
                out[job] = upd
        for job, upd in out.items():
            if upd.state is not None and upd.state.is_final:
                await self._fetch_outputs(job)
        if any(u.state is not None and u.state.is_final for u in out.values()):
            self._signal_slot()
        return out

    # -- cancel (§7) ----------------------------------------------------------------------------

    async def cancel(self, jobs: Sequence[JobHandle]) -> None:
        ids: list[str] = []
        for job in jobs:
            if id(job) in self._held or (
                job.state is JobState.WAITING
                and not job.native_id
                and id(job) not in self._in_submit
            ):
                self._held.pop(id(job), None)
                job.apply(
                    StateUpdate(
                        state=JobState.CANCELLED, detail="cancel", reason="cancelled on request"
                    )
                )
            elif job.native_id:
                ids.append(job.native_id)
            # SUBMITTING: cancelled as soon as the id is known (_accepted)
        if ids:
            try:
                await self._cancel_ids(ids)
            except (LaunchersError, OSError) as e:
                # e.g. slurmctld down: ask again later; a cancel request is never dropped
                log.warning("scancel failed (%s); retrying in %.0f s", e, self.tuning.cancel_retry)
                loop = asyncio.get_running_loop()
                for job in jobs:
                    if job.native_id in ids:
                        loop.call_later(self.tuning.cancel_retry, self.tracker.request_cancel, job)
            self.tracker.wake()

    async def _cancel_ids(self, ids: Sequence[str]) -> None:
        ids = [i for i in ids if i]
        if not ids:
            return
        res = await self._run(["scancel", *self._cluster_args(), *ids])
        if res.returncode != 0 and not P.scancel_harmless(res.stderr):
            raise LaunchersError(f"scancel failed: {res.stderr.strip()}")

    # -- arrays (§8) ----------------------------------------------------------------------------

    def array(
        self, launcher: Launcher, max_parallel: int | None = None
    ) -> AbstractContextManager[list[JobHandle]]:
        """``SlurmLauncher.array``: the module's ``array`` (documented there)."""
        return array(launcher, max_parallel=max_parallel)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[JobHandle]]:
        """Jobs submitted in this thread inside the block are collected instead of submitted."""
        if getattr(self._collect, "bucket", None) is not None:
            raise LaunchersError("array() blocks cannot be nested")
        bucket: list[JobHandle] = []
        self._collect.bucket = bucket
        try:
            yield bucket
        finally:
            self._collect.bucket = None

    def enqueue_array(self, jobs: Sequence[JobHandle], max_parallel: int | None) -> None:
        """Thread-safe: submit ``jobs`` as array chunks on the loop."""
        call_soon(self._start_array, list(jobs), max_parallel)

    def _start_array(self, jobs: list[JobHandle], max_parallel: int | None) -> None:
        for job in jobs:
            self.tracker.add(job)
        background(self._submit_array_guarded(jobs, max_parallel))

    async def _submit_array_guarded(self, jobs: list[JobHandle], max_parallel: int | None) -> None:
        try:
            await self.submit_array(jobs, max_parallel=max_parallel)
        except Exception as e:
            log.error("array submission failed: %s", e, exc_info=not isinstance(e, LaunchersError))
            for job in jobs:
                if not job.state.is_final and not job.native_id:
                    job.apply(
                        StateUpdate(state=JobState.FAILED, detail="array submission", reason=str(e))
                    )
        finally:
            self.tracker.wake()

    async def max_array_size(self) -> int:
        """``MaxArraySize`` from ``scontrol show config`` (read once per cluster)."""
        if self._max_array is None:
            res = await self._run(["scontrol", "show", "config", *self._cluster_args()])
            value = (
                P.parse_config_value(res.stdout, "MaxArraySize") if res.returncode == 0 else None
            )
            self._max_array = int(value) if value and value.isdigit() else 1001
        return self._max_array

    async def submit_array(
        self, jobs: Sequence[JobHandle], *, max_parallel: int | None = None
    ) -> None:
        """Submit ``jobs`` (all WAITING, same launcher options) as arrays of at most
        ``MaxArraySize - 1`` elements; each element is tracked as ``ID_INDEX``.

        With accounting, each chunk also fits the submit allowance read with ``sacctmgr`` and
        ``squeue`` (:mod:`.limits`); with none left, the rest waits (WAITING) until one of our
        jobs leaves the queue or 60 s. Without readable limits, a chunk refused for a submit
        limit is halved until it fits; a single element still refused waits the same way."""
        pending = [j for j in jobs if not j.state.is_final]
        size = max(1, await self.max_array_size() - 1)
        launcher = pending[0].launcher or self.launcher if pending else None
        while pending:
            allowance = await self.submit_allowance(launcher)
            if allowance is not None and allowance.jobs <= 0:
                pending = await self._wait_for_room(
                    pending, f"waiting: submit limit reached ({allowance.limit})"
                )
                continue
            chunk = pending[: size if allowance is None else min(size, allowance.jobs)]
            outcome = await self._submit_chunk(chunk, max_parallel)
            if outcome == P.SUBMIT_LIMIT:
                if size > 1:
                    size = max(1, min(size, len(chunk)) // 2)
                    continue
                pending = await self._wait_for_room(pending, "waiting: submit limit reached", chunk)
                continue
            pending = pending[len(chunk) :]

    async def _wait_for_room(
        self, pending: list[JobHandle], reason: str, shown: list[JobHandle] | None = None
    ) -> list[JobHandle]:
        """Array elements held by a submit limit: ``shown`` (default all) become WAITING with
        ``reason``; wait until one of our jobs leaves the queue, or 60 s; the ones still to go."""
        for job in pending if shown is None else shown:
            await _apply(
                job, StateUpdate(state=JobState.WAITING, detail="submit limit", reason=reason)
            )
        event = self._slot_event()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), self.tuning.submit_limit_wait)
        return [j for j in pending if not j.cancel_requested and not j.state.is_final]

    async def submit_allowance(self, launcher: Any) -> Allowance | None:
        """How many more jobs Slurm accepts from this user now (§8), or None: no accounting, no
        limit, or limits that cannot be read (a rejection then teaches them)."""
        if self._accounting is False:
            return None
        try:
            user = (await self.user())[0]
            res = await self._run(allowance_command(user, self.cluster))
        except (ConnectorError, OSError) as e:
            log.debug("submit limits not readable: %s", e)
            return None
        if res.returncode != 0:
            return None
        options = self.settings(launcher).options
        return parse_allowance(res.stdout, account=options.account, qos=options.qos,
                               partition=options.partition)  # fmt: skip

    async def _submit_chunk(self, jobs: list[JobHandle], max_parallel: int | None) -> str:
        """One ``sbatch --array`` for ``jobs``; "ok", "failed" or ``P.SUBMIT_LIMIT``."""
        launcher = jobs[0].launcher or self.launcher
        if not self.is_local:
            for job in jobs:
                await self._prepare_remote(job)
        specs = [self.script_spec(job, launcher) for job in jobs]
        for job, spec in zip(jobs, specs, strict=True):
            await self._write(
                f"{self._job_dir(job)}/job.sh", render_script(spec).encode("utf-8"), mode=0o755
            )
        base = Path(self._job_dir(jobs[0])).parent.parent.parent
        key = f"{specs[0].job_name}-{specs[-1].job_name.rsplit('-', 2)[-2]}-n{len(jobs)}"
        array_dir = str(base / "arrays" / key)
        index_file = f"{array_dir}/index"
        await self._write(index_file, index_text([self._job_dir(j) for j in jobs]).encode())
        name = f"array-{key}"
        script = render_array_script(
            ArraySpec(array_dir=array_dir, index_file=index_file, count=len(jobs), job_name=name,
                      template=specs[0], max_parallel=max_parallel)
        )  # fmt: skip
        await self._write(f"{array_dir}/array.sh", script.encode(), mode=0o755)
        for job, spec in zip(jobs, specs, strict=True):
            extra: dict[str, Any] = {"array": {"dir": array_dir, "name": name}}
            if not self.is_local:
                extra["remote_dir"] = self._job_dir(job)
            await _apply(job, StateUpdate(state=JobState.SUBMITTING, detail="sbatch array", job_name=spec.job_name,
                                          reason="", extra=extra))  # fmt: skip
        deadline = self.clock.monotonic() + self.tuning.retry_total
        delay = self.tuning.retry_first
        array_since = self.clock.time()
        while True:
            try:
                async with self._semaphore():
                    res = await self._run(
                        self._sbatch_argv("array.sh"),
                        timeout=self.tuning.sbatch_timeout,
                        cwd=array_dir,
                        clean_env=True,
                    )
                if res.returncode == 0:
                    master, cluster = P.parse_sbatch_id(res.stdout, res.stderr)
                    break
                message = P.sbatch_message(res.stdout, res.stderr)
                kind = P.classify_sbatch_error(message)
            except ConnectorError as e:
                message, kind = str(e), P.TRANSIENT
            if kind == P.SUBMIT_LIMIT:
                return P.SUBMIT_LIMIT
            if kind == P.REJECTED or self.clock.monotonic() + delay > deadline:
                log.error("array %s: sbatch refused it: %s", name, message)
                for job in jobs:
                    await _apply(
                        job,
                        StateUpdate(state=JobState.FAILED, detail="sbatch refused", reason=message),
                    )
                return "failed"
            with contextlib.suppress(Exception):
                found = await self.find_by_name(name, since=array_since)
                if found:
                    master, cluster = P.master_id(found[0]), None
                    break
            await asyncio.sleep(delay * _JITTER.uniform(0.8, 1.2))
            delay *= 2
        for i, job in enumerate(jobs):
            await self._accepted(job, f"{master}_{i}", cluster)
        return "ok"

    def __repr__(self) -> str:
        return f"<SlurmExecutor connector={self.connector_name} cluster={self.cluster}>"


def _clock(seconds: int) -> str:
    """Slurm's way of showing a limit: ``1:00:00``, ``2-00:00:00``."""
    text = slurm_time(seconds)
    return text[1:] if text.startswith("0") and "-" not in text else text


def limit_detail(group: Any, options: Any, reason: str) -> str | None:
    """The limit a fatal pending reason refers to, when the configuration knows it (§6):
    "--time=2-00:00:00 exceeds partition debug's MaxTime 1:00:00"."""
    wanted = getattr(options, "time", None)
    seconds = parse_slurm_time(str(wanted)) if wanted else None
    if not seconds or group is None:
        return None
    if reason == "PartitionTimeLimit":
        base = getattr(group, "configuration", None)
        names = set(str(getattr(options, "partition", "") or "").split(","))
        for part in getattr(group, "partitions", ()) or ():
            if part.name not in names:
                continue
            config = base.merged(part.configuration) if base is not None else part.configuration
            limit = config.max_duration
            if limit and seconds > limit:
                return f"--time={wanted} exceeds partition {part.name}'s MaxTime {_clock(limit)}"
    elif reason.startswith("QOSMaxWall"):
        name = getattr(options, "qos", None)
        qos = (getattr(group, "qos", None) or {}).get(name) if name else None
        limit = getattr(qos, "max_duration", None)
        if limit and seconds > limit:
            return f"--time={wanted} exceeds QoS {name}'s MaxWall {_clock(limit)}"
    return None


def _is_pending(row: Row) -> bool:
    """Whether a row says the job waits in the queue (PENDING and its aliases)."""
    return map_state(row.state).state == "PENDING"


def _with_live_reasons(rows: Mapping[str, Row], live: Mapping[str, Row]) -> dict[str, Row]:
    """``rows`` where a job pending in both keeps its state but takes the reason of ``live``."""
    out = dict(rows)
    for jid, row in rows.items():
        now = live.get(jid)
        if now is not None and _is_pending(row) and _is_pending(now) and now.reason != row.reason:
            out[jid] = attrs.evolve(row, reason=now.reason)
    return out


async def _apply(job: JobHandle, update: StateUpdate) -> bool:
    """``job.apply`` (a fsynced record write), inline while the disk is fast (``blocking``)."""
    return await blocking(job.apply, update)


class _AccountingDisabled(Exception):
    pass


class _QueryFailed(Exception):
    pass


# -- public helpers for arrays --------------------------------------------------------------------


def _executor(launcher: Launcher) -> SlurmExecutor:
    ex = launcher.executor()
    if not isinstance(ex, SlurmExecutor):
        raise LaunchersError(f"arrays need a Slurm launcher, not {launcher.kind!r}")
    return ex


@contextlib.contextmanager
def array(launcher: Launcher, max_parallel: int | None = None) -> Iterator[list[JobHandle]]:
    """``with array(launcher, max_parallel=None) as jobs:`` around ``task.submit`` calls:
    the tasks submitted with this launcher's executor in the block go in as job arrays."""
    if max_parallel is not None and max_parallel < 1:
        raise ScriptError(f"max_parallel must be at least 1, not {max_parallel}")
    ex = _executor(launcher)
    with ex.collecting() as bucket:
        yield bucket
    # one array per launcher: a task submitted in the block with another configuration of the
    # launcher (launcher.config(time=...)) keeps its own options and script header
    groups: dict[Any, list[JobHandle]] = {}
    for job in bucket:
        if job.state is JobState.WAITING:
            groups.setdefault(_launcher_key(job.launcher or launcher), []).append(job)
    for jobs in groups.values():
        ex.enqueue_array(jobs, max_parallel)


def _launcher_key(launcher: Launcher) -> Any:
    try:
        hash(launcher)
    except TypeError:
        return id(launcher)
    return launcher


def submit_array(
    launcher: Launcher, tasks: Sequence[Any], *, max_parallel: int | None = None
) -> list[JobHandle]:
    """Submit ``tasks`` (in the current experiment) as job arrays; returns their jobs."""
    with array(launcher, max_parallel=max_parallel):
        jobs = [t.submit(launcher) for t in tasks]
    return jobs


__all__ = [
    "SlurmExecutor",
    "array",
    "create_executor",
    "executor_from_record",
    "executor_key",
    "submit_array",
]
