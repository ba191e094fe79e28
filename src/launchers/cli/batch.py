"""``launchers batch serve|status|cancel``: the pilot manager as a daemon, the hpc_batch
compatibility mode, and a view of a queue directory (docs/design/pilots.md §3.2, §3.6, §4)."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import attrs

from ..errors import ConfigurationError, LaunchersError


def register(subparsers: Any) -> None:
    """Add ``batch`` with its subcommands."""
    p = subparsers.add_parser("batch", help="n:1 batching: serve queues, show their status, cancel tasks",
                              description="n:1 batching through pilot jobs (see docs/batching.md).")  # fmt: skip
    sub = p.add_subparsers(dest="batch_command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser(
        "serve", help="run the pilot manager for a queue, or serve an hpc_batch dropbox"
    )
    s.add_argument(
        "queue", nargs="?", metavar="QUEUE", help="a queue directory <workdir>/batch/<shape>"
    )
    s.add_argument(
        "--hpc-batch", metavar="DROPBOX", help="serve hpc_batch's dropbox of *.job files"
    )
    s.add_argument("--templates", metavar="DIR", help="hpc_batch templates (<script>.template)")
    s.add_argument(
        "--launcher", metavar="GROUP", help="the launchers.yaml group (id) that runs the pilots"
    )
    s.add_argument(
        "--requirements",
        metavar="SPEC",
        help="what one task needs (default: the group's smallest request)",
    )
    s.add_argument("--config", metavar="PATH", help="launchers.yaml, or a directory holding it")
    s.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a template variable (repeatable)",
    )
    s.add_argument(
        "--workdir", metavar="DIR", help="where job directories go (default: DROPBOX/.launchers)"
    )
    s.add_argument(
        "--cleanup", action="store_true", help="remove each task's workspace after its result"
    )
    s.add_argument("--once", action="store_true", help="stop when nothing is left to do")
    s.set_defaults(func=serve)

    st = sub.add_parser("status", help="counts per state, pilots and runners, one line per task")
    st.add_argument("queue", metavar="QUEUE")
    st.set_defaults(func=status)

    c = sub.add_parser(
        "cancel", help="cancel tasks of a queue (pending: at once; running: within a second)"
    )
    c.add_argument("queue", metavar="QUEUE")
    c.add_argument("tasks", nargs="+", metavar="TASK_ID")
    c.set_defaults(func=cancel)


def parse_vars(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs; names as template placeholders."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ConfigurationError(
                f"--var {item!r}: expected NAME=VALUE with NAME like [A-Za-z_][A-Za-z0-9_]*"
            )
        out[name] = value
    return out


def group_launcher(group_id: str, config_path: str | None, requirements: str | None) -> Any:
    """The batch launcher of a configuration group (its ``batch:`` options, else the defaults)."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..batch.launcher import BatchLauncher
    from ..finder.search import _try_group, config_of, requirements_of
    from ..language.values import HostRequirement

    config = config_of(config_path)
    groups = [g for g in config.groups if g.id == group_id or g.label == group_id]
    if not groups:
        known = ", ".join(g.label for g in config.groups) or "none"
        raise ConfigurationError(f"--launcher {group_id!r}: no such group (groups: {known})")
    group = groups[0]
    alternatives = requirements_of([requirements]) if requirements else (HostRequirement(),)
    for i, alt in enumerate(alternatives):
        launcher = _try_group(group, i, alt, None)
        if launcher is not None:
            break
    else:
        raise LaunchersError(f"group {group.label} cannot run {requirements or 'a default task'}")
    options: dict[str, Any] = {}
    batch = getattr(group, "batch", None)
    if batch is not None:
        options = {k: v for k, v in attrs.asdict(batch).items() if v is not None}
    return launcher if isinstance(launcher, BatchLauncher) else launcher.batched(**options)


def serve(args: argparse.Namespace) -> int:
    """``batch serve``: an hpc_batch dropbox, or the pilot manager of one queue."""
    if not args.launcher:
        raise ConfigurationError(
            "batch serve: --launcher GROUP is required (the group that runs the pilots)"
        )
    launcher = group_launcher(args.launcher, args.config, args.requirements)
    if args.hpc_batch:
        # lazy: loaded when this subcommand runs, not at every CLI start
        from ..batch.hpc_batch import HpcBatchServer

        if not args.templates:
            raise ConfigurationError("batch serve --hpc-batch: --templates DIR is required")
        dropbox = Path(args.hpc_batch)
        if not dropbox.is_dir():
            raise ConfigurationError(f"--hpc-batch {dropbox}: not a directory")
        workdir = Path(args.workdir) if args.workdir else dropbox / ".launchers"
        server = HpcBatchServer(dropbox, args.templates, launcher, workdir=workdir,
                                variables=parse_vars(args.var), cleanup=args.cleanup)  # fmt: skip
        try:
            server.serve(once=args.once)
        except KeyboardInterrupt:
            return 130
        return 0
    if not args.queue:
        raise ConfigurationError("batch serve: give a QUEUE directory or --hpc-batch DROPBOX")
    return serve_queue(Path(args.queue), launcher, once=args.once)


def serve_queue(queue: Path, launcher: Any, *, once: bool = False) -> int:
    """Keep one queue served: pilots while tasks are pending, lost claims re-queued."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..batch import queue as Q
    from ..batch.executor import BatchExecutor, Shape
    from ..runtime.loop import run_sync

    Q.ensure_queue(queue)
    executor = launcher.executor()
    assert isinstance(executor, BatchExecutor)
    shape = executor.shapes.setdefault(
        str(queue.absolute()), Shape(queue.name, queue.absolute(), launcher)
    )
    try:
        while True:
            snap = Q.scan(shape.queue)
            finals = [p.native_id for p in shape.pilots if p.state.is_final and p.native_id]
            if snap.running:
                Q.recover(shape.queue, final_natives=finals)
            run_sync(executor._manage(shape, snap))
            if (
                once
                and not snap.pending
                and not snap.running
                and not any(not p.state.is_final for p in shape.pilots)
            ):
                return 0
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 130


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago"


def status(args: argparse.Namespace) -> int:
    """``batch status QUEUE``."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..batch import queue as Q
    from ..jobs.record import read_rc, read_record

    queue = Path(args.queue)
    if not (queue / "pending").is_dir():
        raise LaunchersError(f"{queue}: not a batch queue directory (no pending/)")
    snap = Q.scan(queue)
    done = {tid: Q.read_done(queue, tid) or {} for tid in sorted(snap.done)}
    counts: dict[str, int] = {"PENDING": len(snap.pending), "RUNNING": len(snap.running)}
    for entry in done.values():
        state = str(entry.get("state", "?"))
        counts[state] = counts.get(state, 0) + 1
    print(
        "tasks: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        if any(counts.values())
        else "tasks: none"
    )
    pilots = sorted((queue / "pilots").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0) \
        if (queue / "pilots").is_dir() else []  # fmt: skip
    for p in pilots:
        try:
            rec = read_record(p)
        except LaunchersError:
            rec = None
        if rec is None:
            continue
        state = rec.state.value
        rc = read_rc(p)
        if not rec.state.is_final and rc is not None and rc.attempt in (None, rec.attempt):
            state = f"ended (rc {rc.rc})"  # its owner stopped tracking it; job.rc tells the end
        print(f"pilot {p.name}: {state} {rec.native_id or ''} {rec.reason or ''}".rstrip())
    for r in Q.read_runners(queue):
        running = ",".join(r.get("running") or []) or "-"
        print(f"runner {r.get('runner')}: pilot {r.get('native_id')} on {r.get('host')}, {r.get('slots')} slots, "
              f"heartbeat {_ago(float(r.get('age', 0)))}, running {running}")  # fmt: skip
    for tid in sorted(snap.pending, key=lambda t: snap.pending[t]):
        print(f"{tid} PENDING")
    for tid in sorted(snap.running):
        entry = Q.read_running(queue, tid) or {}
        print(f"{tid} RUNNING runner {entry.get('runner')} attempt {entry.get('attempt')}")
    for tid, entry in done.items():
        extra = f" rc {entry.get('rc')}" if entry.get("rc") is not None else ""
        reason = f" ({entry['reason']})" if entry.get("reason") else ""
        print(f"{tid} {entry.get('state', '?')}{extra} attempt {entry.get('attempt')}{reason}")
    return 0


def cancel(args: argparse.Namespace) -> int:
    """``batch cancel QUEUE TASK...``."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..batch import queue as Q

    queue = Path(args.queue)
    if not (queue / "pending").is_dir():
        raise LaunchersError(f"{queue}: not a batch queue directory (no pending/)")
    for tid in args.tasks:
        how = Q.cancel_task(queue, tid)
        print(
            f"{tid}: {'cancelled' if how == 'cancelled' else 'cancel requested (the runner stops it within a second)'}"
        )
    return 0
