"""``launchers monitor [WORKDIR ...] [--port N] [--host H] [--track]``: a live web page over
experiments (docs/monitor.md). The web stack is the ``monitor`` extra, loaded only here."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ..errors import LaunchersError

#: Modules of the ``monitor`` extra: missing, the command says how to install them.
EXTRA_MODULES = ("starlette", "uvicorn", "h11", "anyio", "click")


def register(subparsers: Any) -> None:
    """Add the ``monitor`` command."""
    p = subparsers.add_parser(
        "monitor",
        help="serve a live web page over experiments (jobs, outputs, timeline, cancel)",
        description="Serve a page showing the experiments in WORKDIR (default: those found "
        "under the current directory): jobs with their states, one job's history, script and "
        "live output, a timeline of queue wait against run time, and cancel buttons. It listens "
        "on 127.0.0.1 and prints a URL with a random token; over SSH, forward the port with "
        "ssh -L (docs/monitor.md).",
    )
    p.add_argument(
        "workdirs",
        nargs="*",
        metavar="WORKDIR",
        help="experiment directory, or a directory with experiments below it",
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="N",
        help="port to listen on (default 8780, or the next free one; 0: any free port)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--track",
        action="store_true",
        help="also follow unfinished jobs that no live process follows (their scheduler is "
        "asked, as by `launchers jobs --watch`), so the page stays true after the experiment "
        "script has exited",
    )
    p.add_argument(
        "--no-inotify",
        action="store_true",
        help="find changes by the stat sweep only (inotify is used by default where available)",
    )
    p.set_defaults(func=run_monitor)


def run_monitor(args: argparse.Namespace) -> int:
    """Find the experiments, serve until Ctrl-C."""
    if args.port is not None and not 0 <= args.port <= 65535:
        raise LaunchersError(f"--port {args.port}: not a port number (0-65535)")
    try:
        # lazy: the web stack is the optional `monitor` extra, loaded for this command only
        from ..monitor.scan import find_experiments
        from ..monitor.server import DEFAULT_PORT, Monitor
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in EXTRA_MODULES:
            raise LaunchersError(
                f"launchers monitor needs the monitor extra (module {e.name} is missing): "
                "pip install 'launchers[monitor]'"
            ) from None
        raise
    experiments = find_experiments(args.workdirs, Path.cwd())
    # the monitor's own messages on stderr (set once the arguments are known to be good)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("launchers monitor: %(message)s"))
    for name in ("launchers.monitor", "launchers.jobs"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO if name == "launchers.monitor" else logging.WARNING)
        logger.propagate = False
    monitor = Monitor(
        experiments,
        host=args.host,
        port=DEFAULT_PORT if args.port is None else args.port,
        port_given=args.port is not None,
        track=args.track,
        use_inotify=not args.no_inotify,
    )
    return monitor.run()


__all__ = ["register", "run_monitor"]
