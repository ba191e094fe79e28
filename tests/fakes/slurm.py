"""``FakeSlurm``: a Slurm cluster in memory for decision tests (docs/testing.md, "Fakes").

It answers the command lines the Slurm executor runs (``slurm.commands``, ``slurm.limits``,
``slurm.cluster``): ``sbatch --parsable``, the poll's ``sacct`` and ``squeue``, ``scancel``,
``scontrol show config``, the lookups by name and the submit-allowance ``sh -c``, in the output
formats of the real Slurm 22.05 of ``tests/cluster`` (``tests/integration/slurm/test_fake_slurm_fidelity.py``
compares them). Files go through a real ``LocalConnector``: the job directories are real.

With ``remote=DIR`` it is a cluster reached through a connector instead (``connector``, a
``FakeSSH``: the executor treats it as not local): DIR stands for the cluster's side (the
connector's ``workdir``; job directories, scripts and outputs are real files under it), and each
poll cycle is the one command of ``slurm.commands.remote_cycle``, answered as the remote ``sh``
would: every directory's ``job.rc`` from disk, then the sacct and squeue sections from the
simulation, each with its exit status. ``unreachable`` makes the way there fail (an SSH outage).

A test scripts it: the state, reason and exit code of each job (``pend``, ``start``, ``finish``,
``cancel``, ``purge``), what new jobs look like (``on_submit``), answers to hand out first
(``answer``: a transient error, a refusal), a submit limit (``max_submit``), accounting off,
slurmctld down (``down``).
Every command is counted (``commands``) and kept (``calls``). With a ``FakeClock``, every query
moves it ``tick`` seconds on: each poll cycle is that much virtual time.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from launchers.config.model import SSHConnectorConfig
from launchers.connectors.base import CommandResult, Connector
from launchers.connectors.local import LocalConnector
from launchers.errors import ConnectorError
from launchers.jobs.record import RC
from launchers.slurm import commands as C

from .clock import FakeClock

#: sbatch's words for a submit limit (Slurm 22.05, QoS ``MaxSubmitJobsPerUser``)
SUBMIT_LIMIT_ERROR = (
    "sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
    "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
    "(job submit limit, user's size and/or time limits)\n"
)
#: sacct on a cluster without accounting storage
NO_ACCOUNTING_ERROR = "sacct: error: Slurm accounting storage is disabled\n"
#: sbatch when slurmctld does not answer
TRANSIENT_ERROR = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n"
#: what the commands that need slurmctld say while it is down
CONTROLLER_DOWN = {
    "squeue": "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
    "scancel": "scancel: error: Kill job error on job id 1: Unable to contact slurm controller "
    "(connect failure)\n",
    "scontrol": "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n",
}
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


def _stamp(epoch: float | None) -> str:
    return "Unknown" if epoch is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


@attrs.define
class FakeJob:
    """One job (or one array element: ``index`` set) of the fake cluster."""

    job_id: str  # what the executor tracks: ``123`` or ``123_4``
    raw_id: str  # JobIDRaw / %A
    name: str
    workdir: str
    script: str
    submit: float
    state: str = "PENDING"
    reason: str = "None"
    exit_code: int = 0
    signal: int = 0
    start: float | None = None
    end: float | None = None
    cancelled_by: int | None = None
    index: int | None = None
    master: str = ""
    qos: str = "normal"
    account: str = "root"
    #: squeue forgot it (MinJobAge passed) / accounting forgot it too (purged)
    in_squeue: bool = True
    in_sacct: bool = True

    @property
    def ended(self) -> bool:
        return self.state in ENDED


class FakeSlurm(LocalConnector):
    """Answers Slurm command lines from memory (see the module docstring)."""

    def __init__(
        self,
        clock: FakeClock | None = None,
        *,
        tick: float = 0.0,
        accounting: bool = True,
        max_submit: int | None = None,
        qos: str = "normal",
        first_id: int = 9_000_000,
        cluster: str | None = None,
        uid: int = 0,
        remote: str | Path | None = None,
    ) -> None:
        super().__init__("fake-slurm")
        #: the cluster's side when reached through a connector (None: this machine)
        self.remote = None if remote is None else Path(remote)
        self._ssh = None if self.remote is None else FakeSSH(self, self.remote)
        #: the way to a remote cluster is down: every command and file operation fails
        self.unreachable = False
        self.clock = clock
        self.tick = tick
        self.accounting = accounting
        #: MaxSubmitJobsPerUser of QoS ``qos`` (None: no limit)
        self.max_submit = max_submit
        self.qos = qos
        #: sbatch answers ``ID;CLUSTER`` when set (a federation / ``--clusters``)
        self.cluster = cluster
        self.uid = uid
        self.jobs: dict[str, FakeJob] = {}
        self._next = first_id
        self._lock = threading.Lock()
        #: answers handed out before the simulation, by command name (``answer``)
        self._answers: dict[str, list[CommandResult | BaseException]] = {}
        #: every command run: (argv, cwd, whether it ran without sbatch's variables)
        self.calls: list[tuple[list[str], str | None, bool]] = []
        self.commands: dict[str, int] = {}
        #: called with each new job (or element) at submission: set its state and reason
        self.on_submit: Callable[[FakeJob], None] | None = None
        #: called with the jobs before each sacct/squeue answer: move them on
        self.on_query: Callable[[FakeSlurm], None] | None = None
        #: seconds an sbatch takes (real time: a slow slurmctld)
        self.sbatch_delay = 0.0
        #: slurmctld is down: its commands fail as they do then (sacct needs only slurmdbd)
        self.down = False

    # -- scripting ------------------------------------------------------------------------------

    def now(self) -> float:
        return self.clock.time() if self.clock is not None else time.time()

    def answer(self, command: str, *answers: CommandResult | BaseException) -> None:
        """Hand out ``answers`` (in order) to the next ``command`` calls (``sbatch``, ``sacct``,
        ``squeue``, ``scancel``, ``scontrol``, ``sh``, ``remote-cycle``: the whole command of a
        remote poll cycle; ``sacct``/``squeue`` also answer its sections) before simulating
        them; an exception is raised as a connector would."""
        self._answers.setdefault(command, []).extend(answers)

    def pend(self, job_id: str, reason: str) -> None:
        job = self.jobs[job_id]
        job.state, job.reason = "PENDING", reason

    def start(self, job_id: str) -> None:
        job = self.jobs[job_id]
        job.state, job.reason, job.start = "RUNNING", "None", self.now()

    def finish(
        self, job_id: str, rc: int = 0, *, state: str | None = None, write_rc: bool = True
    ) -> None:
        """End a job as its script would: ``job.rc`` in its directory, COMPLETED or FAILED."""
        job = self.jobs[job_id]
        if job.start is None:
            job.start = self.now()
        job.end = self.now()
        job.exit_code = rc
        job.state = state or ("COMPLETED" if rc == 0 else "FAILED")
        job.reason = "None"
        if write_rc:
            self.write_rc(job_id, rc)

    def write_rc(self, job_id: str, rc: int) -> None:
        """The ``job.rc`` a job's script writes as it exits (before Slurm sees the end)."""
        job = self.jobs[job_id]
        directory = self.job_directory(job)
        if directory is not None:
            record = {"rc": rc, "signal": None, "attempt": _attempt(directory, job.script),
                      "native_id": job.job_id, "host": "fake01",
                      "start": _iso(job.start), "end": _iso(job.end or self.now())}  # fmt: skip
            (Path(directory) / "job.rc").write_text(json.dumps(record))

    def cancel(self, job_id: str, by: int | None = None) -> None:
        job = self.jobs[job_id]
        if job.ended:
            return
        # sacct's allocation row of a cancelled job says ExitCode 0:0, running or not
        job.state, job.end = "CANCELLED", self.now()
        job.cancelled_by = self.uid if by is None else by

    def purge(self, job_id: str) -> None:
        """Slurm forgets the job: squeue after MinJobAge, accounting after its purge."""
        job = self.jobs[job_id]
        job.in_squeue = job.in_sacct = False

    def run_all(self, rc: int = 0) -> None:
        """Finish every job not ended yet (an ``on_query`` hook: jobs end at the next poll)."""
        for job in list(self.jobs.values()):
            if not job.ended:
                self.finish(job.job_id, rc)

    def step_all(self) -> None:
        """Move every job one step on (an ``on_query`` hook): a PENDING job without a scripted
        reason starts, a RUNNING one completes (exit 0)."""
        for job in list(self.jobs.values()):
            if job.state == "RUNNING":
                self.finish(job.job_id)
            elif job.state == "PENDING" and job.reason == "None":
                self.start(job.job_id)

    def job_directory(self, job: FakeJob) -> str | None:
        """The task directory a job (or array element) runs in, as its script finds it."""
        if job.index is None:
            return job.workdir
        text = Path(job.script).read_text()
        for line in text.splitlines():
            if line.startswith("_l_dir=$(sed -n"):
                index_file = shlex.split(line.rsplit('p" ', 1)[1].rstrip(")"))[0]
                lines = Path(index_file).read_text().splitlines()
                return lines[job.index] if job.index < len(lines) else None
        return None

    def params(self, job: FakeJob) -> str:
        """The ``params.json`` of the task a job runs (what a test tells its jobs apart by)."""
        directory = self.job_directory(job)
        try:
            return (Path(directory) / "params.json").read_text() if directory else ""
        except OSError:
            return ""

    def queued(self) -> list[FakeJob]:
        return [j for j in self.jobs.values() if not j.ended]

    # -- the connector --------------------------------------------------------------------------

    @property
    def connector(self) -> Connector:
        """What the executor runs its commands through: this fake here, its ``FakeSSH`` when
        ``remote``."""
        return self if self._ssh is None else self._ssh

    async def run(  # type: ignore[override]
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        unset: Any = None,
        clean_env: bool = False,
        input: bytes | None = None,
    ) -> CommandResult:
        argv = list(argv)
        # run without sbatch's variables: locally by ``unset``, over a connector by a wrapper
        wrapped = argv[:3] == ["sh", "-c", C.CLEAN_ENV]
        if wrapped:
            argv = argv[4:]
        self.calls.append((argv, cwd, clean_env or wrapped or unset is not None))
        cycle = _is_cycle(argv)
        name = C.REMOTE_CYCLE if cycle else argv[0]
        self.commands[name] = self.commands.get(name, 0) + 1
        answer = self._queued(name)
        if answer is not None:
            return answer
        if name == "sbatch" and self.sbatch_delay:
            await asyncio.sleep(self.sbatch_delay)
        with self._lock:
            if cycle:
                return self._cycle(argv, input or b"")
            return self._simulate(argv, cwd)

    def _queued(self, name: str) -> CommandResult | None:
        """The next answer handed out for ``name`` (raised if it is an exception), or None."""
        queued = self._answers.get(name)
        if not queued:
            return None
        answer = queued.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _moved_on(self) -> None:
        """Before a query: the test's ``on_query`` moves the jobs, the clock moves ``tick``."""
        if self.on_query is not None:
            self.on_query(self)
        if self.clock is not None and self.tick:
            self.clock.advance(self.tick)

    def _cycle(self, argv: list[str], stdin: bytes) -> CommandResult:
        """The one command of a remote poll cycle, answered as ``sh`` runs it: ``@@rc i`` and the
        ``job.rc`` of each directory read on stdin (an empty line: the next argument), then
        sacct and squeue (answered or simulated), each followed by ``@@status N``. The cycle
        is one query: ``on_query`` and ``tick`` once, after the ``job.rc`` reads."""
        sacct, squeue = _cycle_commands(argv[2])
        text = stdin.decode("utf-8", "surrogateescape")
        lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")[: bool(text)]
        odd = iter(argv[4:])
        directories = [line or next(odd, "") for line in lines]
        if squeue is None or C.remote_cycle(directories, sacct, squeue) != (argv, stdin):
            return CommandResult(2, "", "fake slurm: not a command of remote_cycle\n")
        out: list[str] = []
        for i, directory in enumerate(directories):
            out.append(f"@@rc {i}\n")
            path = Path(self.remote or "/", directory, RC)  # relative: from the login directory
            if path.is_file():
                try:
                    out.append(path.read_bytes().decode("utf-8", "surrogateescape"))
                except OSError:
                    pass
            out.append("\n")
        self._moved_on()
        for section, command in (("sacct", sacct), ("squeue", squeue)):
            if command is None:
                continue
            res = self._queued(section) or self._simulate(command, None, query=False)
            out.append(f"@@{section}\n{res.stdout}{res.stderr}@@status {res.returncode}\n")
        return CommandResult(0, "".join(out), "")

    def _simulate(self, argv: list[str], cwd: str | None, *, query: bool = True) -> CommandResult:
        name = argv[0]
        if name in ("sacct", "squeue") and query:
            self._moved_on()
        if self.down and name in ("sbatch", "squeue", "scancel", "scontrol"):
            return CommandResult(1, "", CONTROLLER_DOWN.get(name, TRANSIENT_ERROR))
        if name == "sbatch":
            return self._sbatch(argv, cwd)
        if name == "sacct":
            return self._sacct(argv)
        if name == "squeue":
            return self._squeue(argv)
        if name == "scancel":
            for jid in (a for a in argv[1:] if not a.startswith("-")):
                for job in self._select(jid):
                    self.cancel(job.job_id)
            return CommandResult(0, "", "")
        if argv[:3] == ["scontrol", "show", "config"]:
            return CommandResult(
                0, "MaxArraySize            = 1001\nMaxJobCount             = 10000\n", ""
            )
        if name == "sh" and "sacctmgr -nP show user" in argv[2]:
            return self._allowance()
        if argv == list(C.USER_ARGV):
            return CommandResult(0, f"root\n{self.uid}\n", "")
        return CommandResult(127, "", f"fake slurm: {name}: command not known\n")

    # -- commands -------------------------------------------------------------------------------

    def _select(self, job_id: str) -> list[FakeJob]:
        """The jobs ``job_id`` names: one job, one element, or every element of an array."""
        if job_id in self.jobs:
            return [self.jobs[job_id]]
        return [j for j in self.jobs.values() if j.master == job_id]

    def _sbatch(self, argv: list[str], cwd: str | None) -> CommandResult:
        script = str(Path(cwd or ".", argv[-1]))
        text = Path(script).read_text()
        options = _directives(text)
        size = len(_indices(options["array"])) if "array" in options else 1
        qos = options.get("qos", self.qos)
        if self.max_submit is not None and qos == self.qos:
            used = sum(1 for j in self.queued() if j.qos == qos)
            if used + size > self.max_submit:
                return CommandResult(1, "", SUBMIT_LIMIT_ERROR)
        if qos not in (self.qos, "normal"):
            return CommandResult(
                1, "", "sbatch: error: Batch job submission failed: Invalid qos specification\n"
            )
        master = str(self._next)
        self._next += 1 + (size if "array" in options else 0)
        base = {"name": options.get("job-name", "sbatch"), "script": script,
                "workdir": options.get("chdir") or cwd or str(Path(script).parent),
                "submit": self.now(), "qos": qos}  # fmt: skip
        if "array" in options:
            for k, i in enumerate(_indices(options["array"])):
                job = FakeJob(job_id=f"{master}_{i}", raw_id=str(int(master) + 1 + k), index=i,
                              master=master, **base)  # fmt: skip
                self._add(job)
        else:
            self._add(FakeJob(job_id=master, raw_id=master, master=master, **base))
        out = f"{master};{self.cluster}\n" if self.cluster else f"{master}\n"
        return CommandResult(0, out, "")

    def _add(self, job: FakeJob) -> None:
        self.jobs[job.job_id] = job
        if self.on_submit is not None:
            self.on_submit(job)

    def _option(self, argv: list[str], name: str) -> str | None:
        prefix = f"--{name}="
        return next((a[len(prefix) :] for a in argv if a.startswith(prefix)), None)

    def _sacct(self, argv: list[str]) -> CommandResult:
        if not self.accounting:
            return CommandResult(1, "", NO_ACCOUNTING_ERROR)
        ids = self._option(argv, "jobs")
        name = self._option(argv, "name")
        fmt = self._option(argv, "format") or ""
        jobs = [j for j in self.jobs.values() if j.in_sacct]
        if ids is not None:
            wanted = set(ids.split(","))
            jobs = [j for j in jobs if j.master in wanted or j.job_id in wanted]
        if name is not None:
            jobs = [j for j in jobs if j.name == name]
        lines: list[str] = []
        for group in _by_array(jobs):
            first = group[0]
            pending_array = first.index is not None and all(j.state == "PENDING" for j in group)
            if pending_array:
                shown = [
                    (
                        first.master,
                        f"{first.master}_[{_ranges([j.index or 0 for j in group])}]",
                        first,
                    )
                ]
            else:
                shown = [(j.raw_id, j.job_id, j) for j in group]
            for raw, jid, j in shown:
                if fmt == "JobID,Submit,WorkDir":
                    lines.append(f"{jid}|{_stamp(j.submit)}|{j.workdir}")
                    continue
                state = j.state
                if state == "CANCELLED":
                    state = f"CANCELLED by {j.cancelled_by}"
                start = "None" if j.state == "CANCELLED" and j.start is None else _stamp(j.start)
                lines.append(f"{raw}|{jid}|{state}|{j.exit_code}:{j.signal}|{_stamp(j.submit)}|"
                             f"{start}|{_stamp(j.end)}|{j.reason}")  # fmt: skip
        return CommandResult(0, "".join(f"{ln}\n" for ln in lines), "")

    def _squeue(self, argv: list[str]) -> CommandResult:
        name = self._option(argv, "name")
        fmt = self._option(argv, "format") or ""
        jobs = [j for j in self.jobs.values() if j.in_squeue]
        if name is not None:
            jobs = [j for j in jobs if j.name == name]
        lines = []
        for j in jobs:
            if fmt == "%F|%V|%Z":
                lines.append(f"{j.master}|{_stamp(j.submit)}|{j.workdir}")
                continue
            reason = j.reason
            if j.state == "FAILED":
                reason = "NonZeroExitCode"
            raw = j.master if j.index is not None and j.state == "PENDING" else j.raw_id
            lines.append(f"{raw}|{j.job_id}|{j.state}|{reason}")
        if fmt == "%F|%V|%Z":
            lines = list(dict.fromkeys(lines))
        return CommandResult(0, "".join(f"{ln}\n" for ln in lines), "")

    def _allowance(self) -> CommandResult:
        mark = "@@launchers@@"
        limit = "" if self.max_submit is None else str(self.max_submit)
        queued = "".join(f"{j.account}|{j.qos}\n" for j in self.queued())
        text = (f"root\n{mark}\nroot|||normal\n{mark}\nnormal|\n{self.qos}|{limit}\n{mark}\n"
                f"{queued}")  # fmt: skip
        return CommandResult(0, text, "")


class FakeSSH(Connector):
    """The way to a remote ``FakeSlurm`` (``FakeSlurm(remote=DIR).connector``): a connector that
    is not this machine's for the executor (so sbatch goes through the ``CLEAN_ENV`` wrapper, a
    poll cycle is one ``remote_cycle`` command), whose commands the fake answers and whose files
    are real files under DIR (its ``workdir`` and home) through a ``LocalConnector``. While the
    fake is ``unreachable`` every operation fails as an SSH connection that is down."""

    is_local = False
    can_rename = True

    def __init__(self, fake: FakeSlurm, root: Path) -> None:
        self.name = "fake-ssh"
        self.fake = fake
        self.root = root
        self.config = SSHConnectorConfig(name=self.name, hostname="fake", workdir=str(root))
        self._files = LocalConnector(self.name)

    def _check(self, what: str) -> None:
        if self.fake.unreachable:
            raise ConnectorError(f"connector {self.name}: cannot run {what!r}: connection lost")

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Any = None,
        cwd: str | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
    ) -> CommandResult:
        self._check(" ".join(argv)[:60])
        return await self.fake.run(argv, timeout=timeout, cwd=cwd, input=input)

    async def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        self._check(f"write {path}")
        await self._files.write_file(path, data, mode=mode)

    async def read_file(self, path: str, *, offset: int = 0, max_bytes: int | None = None) -> bytes:
        self._check(f"read {path}")
        return await self._files.read_file(path, offset=offset, max_bytes=max_bytes)

    async def exists(self, path: str) -> bool:
        self._check(f"stat {path}")
        return await self._files.exists(path)

    async def mkdir(self, path: str) -> None:
        self._check(f"mkdir {path}")
        await self._files.mkdir(path)

    async def stat_size(self, path: str) -> int | None:
        self._check(f"stat {path}")
        return await self._files.stat_size(path)

    async def remove(self, path: str) -> bool:
        self._check(f"remove {path}")
        return await self._files.remove(path)

    async def rename(self, src: str, dst: str) -> None:
        self._check(f"rename {src}")
        await self._files.rename(src, dst)

    async def listdir(self, path: str) -> list[str]:
        self._check(f"list {path}")
        return await self._files.listdir(path)

    async def home(self) -> str:
        self._check("home")
        return str(self.root)


#: how ``remote_cycle`` runs a command section: ``printf '@@NAME\n'; ARGV 2>&1; printf ...``
_SECTION_END = " 2>&1; printf '@@status %s\\n' $?"


def _is_cycle(argv: list[str]) -> bool:
    """Whether ``argv`` is the command of ``commands.remote_cycle``."""
    return len(argv) >= 3 and argv[:2] == ["sh", "-c"] and "printf '@@squeue\\n'; " in argv[2]


def _cycle_commands(script: str) -> tuple[list[str] | None, list[str] | None]:
    """The sacct and squeue argv of a ``remote_cycle`` script (None: no such section)."""
    found: dict[str, list[str]] = {}
    for line in script.split("\n"):
        for name in ("sacct", "squeue"):
            head = f"printf '@@{name}\\n'; "
            if line.startswith(head) and line.endswith(_SECTION_END):
                found[name] = shlex.split(line[len(head) : -len(_SECTION_END)])
    return found.get("sacct"), found.get("squeue")


def _directives(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line[len("#SBATCH --") :].partition("=")
            out[key] = value
    return out


def _indices(spec: str) -> list[int]:
    spec = spec.split("%")[0]
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def _ranges(indices: list[int]) -> str:
    indices = sorted(indices)
    parts: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


def _by_array(jobs: list[FakeJob]) -> list[list[FakeJob]]:
    groups: dict[str, list[FakeJob]] = {}
    for j in jobs:
        groups.setdefault(j.master if j.index is not None else j.job_id, []).append(j)
    return list(groups.values())


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(epoch))


def _attempt(directory: str, script: str) -> int:
    """The attempt a job's script writes in its ``job.rc``: the record's (``state.json``, here),
    else the one its script exports (a remote job directory has no record)."""
    try:
        return int(json.loads((Path(directory) / "state.json").read_text()).get("attempt") or 1)
    except (OSError, ValueError):
        pass
    try:
        found = re.search(
            r"^export LAUNCHERS_ATTEMPT=(?:\$\(\( )?(\d+)", Path(script).read_text(), re.M
        )
    except OSError:
        return 1
    return int(found.group(1)) if found else 1


#: fast real-time polling for tests on the fakes: the virtual time of the decisions moves
#: with the fake clock (``slurm_tuning(**FAST_POLLING)``, the ``fast_fakes`` fixture)
FAST_POLLING = {"poll_min": 0.02, "poll_max": 0.1, "fast_interval": 0.02, "retry_first": 0.01}


def fake_launcher(id: str = "sb", **group: Any) -> Any:
    """A Slurm launcher of group ``id`` (partition debug, five minutes) to run on a fake."""
    from launchers.config.model import SlurmGroup
    from launchers.slurm.launcher import SlurmLauncher

    return SlurmLauncher(
        group=SlurmGroup(id=id, **group), options={"partition": "debug", "time": "00:05:00"}
    )


def fake_executor(launcher: Any, fake: FakeSlurm, clock: Any = None) -> Any:
    """Make ``fake`` the cluster of ``launcher``'s executor in the current runtime (before its
    first use; ``fresh_runtime`` drops it afterwards). Returns the executor."""
    from launchers.runtime.core import current
    from launchers.slurm.executor import SlurmExecutor
    from launchers.slurm.settings import Placement

    return current().executor(
        Placement.of(launcher).key(),
        lambda: SlurmExecutor(
            launcher, connect=lambda: fake.connector, local=fake.remote is None, clock=clock
        ),
    )


__all__ = ["NO_ACCOUNTING_ERROR", "SUBMIT_LIMIT_ERROR", "TRANSIENT_ERROR", "FakeJob", "FakeSSH",
           "FakeSlurm", "fake_executor"]  # fmt: skip
