"""``launchers jobs [WORKDIR] [--watch]``, ``launchers cancel JOB...|--all WORKDIR`` and
``launchers logs JOB [--err] [--follow]``: look at and act on the jobs of a working directory.

JOB is a job directory, or a task id (``NAME-DIGEST``), a digest or a unique prefix of either,
looked up under ``--workdir`` (default: the current directory).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import LaunchersError
from ..jobs.depends import explain
from ..jobs.record import StateRecord, read_record
from ..jobs.state import JobState
from .jobdirs import job_dirs, resolve_job
from .status import dependencies, refresh

COLUMNS = ("TASK ID", "STATE", "NATIVE ID", "ATTEMPT", "REASON")


def register(subparsers: Any) -> None:
    """Add ``jobs``, ``cancel`` and ``logs``."""
    p = subparsers.add_parser(
        "jobs",
        help="list the jobs of a working directory",
        description="Table of the jobs under WORKDIR/jobs/: task id, state, "
        "native id, attempt, reason (read from each state.json).",
    )
    p.add_argument(
        "workdir",
        nargs="?",
        default=".",
        metavar="WORKDIR",
        help="experiment directory (default: .)",
    )
    p.add_argument("--watch", action="store_true", help="redraw every 2 s until every job is final")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=run_jobs)

    c = subparsers.add_parser(
        "cancel",
        help="cancel jobs",
        description="Cancel jobs (one request for all of them) and wait until "
        "they are recorded final. Exit 0 when every job ended.",
    )
    c.add_argument("jobs", nargs="*", metavar="JOB", help="job directory, task id or unique prefix")
    c.add_argument("--all", metavar="WORKDIR", help="cancel every unfinished job under WORKDIR")
    c.add_argument(
        "--workdir", default=".", metavar="DIR", help="where task ids are looked up (default: .)"
    )
    c.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="how long to wait for the end (default 30)",
    )
    c.set_defaults(func=run_cancel)

    lg = subparsers.add_parser(
        "logs",
        help="print a job's output",
        description="Print job.out (or job.err) of a job; --follow keeps printing until it ends.",
    )
    lg.add_argument("job", metavar="JOB", help="job directory, task id or unique prefix")
    lg.add_argument("--err", action="store_true", help="job.err instead of job.out")
    lg.add_argument(
        "--follow", "-f", action="store_true", help="wait for more output until the job is final"
    )
    lg.add_argument(
        "--workdir", default=".", metavar="DIR", help="where task ids are looked up (default: .)"
    )
    lg.set_defaults(func=run_logs)


# -- finding jobs ---------------------------------------------------------------------------------


def _records(workdir: str) -> list[tuple[Path, StateRecord]]:
    out = []
    for d in job_dirs(workdir):
        try:
            rec = read_record(d)
        except LaunchersError as e:
            print(f"launchers: {e}", file=sys.stderr)
            continue
        if rec is not None:
            out.append((d, rec))
    return out


# -- jobs -----------------------------------------------------------------------------------------


def _reason(record: StateRecord) -> str:
    """The reason column: the recorded reason, and for a job that waits for others, each of
    them with its state (why it is not running)."""
    reason = (record.reason or "").replace("\n", " ")
    why = explain(dependencies(record))
    return f"{reason}; {why}" if reason and why else reason or why


def table(records: list[tuple[Path, StateRecord]]) -> str:
    """The aligned table printed by ``launchers jobs``."""
    rows = [COLUMNS] + [
        (r.task_id, r.state.value, r.native_id or "-", str(r.attempt), _reason(r))
        for _, r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def run_jobs(args: argparse.Namespace) -> int:
    while True:
        records = _records(args.workdir)
        if args.json:
            for d, r in records:
                row: dict[str, Any] = {
                    "task_id": r.task_id,
                    "state": r.state.value,
                    "native_id": r.native_id,
                    "attempt": r.attempt,
                    "reason": r.reason,
                    "exit_code": r.exit_code,
                    "directory": str(d),
                }
                deps = dependencies(r)
                if deps:  # a job that waits for others: each with its state
                    row["after"] = [{**e.to_json(), "state": st and st.value} for e, st in deps]
                print(json.dumps(row))
        else:
            if args.watch and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            print(table(records) if records else f"no jobs under {Path(args.workdir) / 'jobs'}")
        sys.stdout.flush()
        if not args.watch or all(r.state.is_final for _, r in records):
            return 0
        time.sleep(2.0)
        if not sys.stdout.isatty():
            print()


# -- cancel ---------------------------------------------------------------------------------------


def run_cancel(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..jobs.job import load_job

    if args.all and args.jobs:
        raise LaunchersError("cancel: give JOB arguments or --all WORKDIR, not both")
    if args.all:
        dirs = [d for d, r in _records(args.all) if not r.state.is_final]
    elif args.jobs:
        dirs = [resolve_job(ref, args.workdir) for ref in args.jobs]
    else:
        raise LaunchersError("cancel: name at least one JOB, or use --all WORKDIR")
    jobs = [load_job(d) for d in dirs]
    pending = [j for j in jobs if not j.state.is_final]
    for job in jobs:
        if job.state.is_final:
            print(f"{job.task_id}\t{job.state.value}\t(already final)")
    for job in pending:
        job.cancel()
    status = 0
    deadline = time.monotonic() + args.timeout
    for job in pending:
        try:
            job.wait(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            print(
                f"launchers: {job.task_id} still {job.state.value} after {args.timeout:g} s",
                file=sys.stderr,
            )
            status = 1
            continue
        print(f"{job.task_id}\t{job.state.value}")
    return status


# -- logs -----------------------------------------------------------------------------------------


def run_logs(args: argparse.Namespace) -> int:
    directory = resolve_job(args.job, args.workdir)
    path = directory / ("job.err" if args.err else "job.out")
    out = sys.stdout.buffer
    offset = 0

    def pump() -> None:
        nonlocal offset
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                while chunk := f.read(1 << 16):
                    out.write(chunk)
                    offset += len(chunk)
        except FileNotFoundError:
            pass
        out.flush()

    pump()
    if not args.follow:
        if offset == 0 and not path.exists():
            print(f"launchers: {path} does not exist yet", file=sys.stderr)
        return 0
    follower = SiteFollower(directory)
    while True:
        rec = read_record(directory)
        final = rec is None or rec.state.is_final
        if not final and rec is not None:
            final = follower.step(rec)
            if final:
                rec = read_record(directory)
        pump()
        if final:
            return 0 if rec is None or rec.state is JobState.COMPLETED else 1
        time.sleep(follower.delay)


class SiteFollower:
    """Drives a job that no live process follows (a detached ``launchers run``, a finished
    experiment script): asks its executor about it once per step (``launchers status``'s refresh:
    state recorded, remote outputs copied), every 1 s growing to 5 s while nothing changes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.job: Any = None
        self.delay = 0.5
        self.warned = False
        self.last: tuple[Any, ...] | None = None

    def step(self, rec: StateRecord) -> bool:
        """One refresh unless another process owns the job; True once the job is final."""
        # lazy: loaded when this subcommand runs, not at every CLI start
        from ..jobs.job import load_job, owner_alive

        if owner_alive(rec):
            self.delay = 0.5
            return False
        if self.job is None:
            self.job = load_job(self.directory)
        else:
            self.job.replace_record(rec)
        warning = refresh(self.job)
        if warning and not self.warned:
            print(f"launchers: {warning} (trying again)", file=sys.stderr)
            self.warned = True
        seen = (self.job.state, self.job.native_id, self._sizes())
        self.delay = 1.0 if seen != self.last else min(5.0, self.delay * 1.5)
        self.last = seen
        return bool(self.job.state.is_final)

    def _sizes(self) -> tuple[int, ...]:
        return tuple(
            (self.directory / n).stat().st_size if (self.directory / n).exists() else -1
            for n in ("job.out", "job.err")
        )
