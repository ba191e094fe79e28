"""``launchers submit [--requirements SPEC] [--launcher-config PATH] [--workdir DIR] -- CMD ARGS...``:
find a launcher, submit the command as a task, print its id and directory (``--wait`` to wait)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

from ..errors import LaunchersError

_ENV_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def register(subparsers: Any) -> None:
    """Add the ``submit`` command."""
    p = subparsers.add_parser(
        "submit",
        help="run a command where a requirement fits",
        description="Find a launcher for --requirements, submit CMD as a job under WORKDIR/jobs/ "
        "and print 'TASK_ID<TAB>NATIVE_ID<TAB>DIRECTORY'. The same command submitted again "
        "re-attaches to its job. Exit status: 0 submitted (with --wait: completed), 1 the job "
        "did not complete, 2 usage, configuration or submission error.",
    )
    p.add_argument(
        "-r",
        "--requirements",
        metavar="SPEC",
        default="cpu()",
        help='requirement such as "duration=1h & cuda(mem=24G)" (default: cpu())',
    )
    p.add_argument(
        "--launcher-config",
        "--config",
        dest="config",
        metavar="PATH",
        help="launchers.yaml, or a directory holding it (default: the search path)",
    )
    p.add_argument("--tags", metavar="a,b", help="only groups having one of these tags")
    p.add_argument(
        "--workdir",
        metavar="DIR",
        default=".",
        help="experiment directory; the job lives in DIR/jobs/NAME/DIGEST (default: .)",
    )
    p.add_argument("--name", help="task name (default: the basename of CMD)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment variable for the job (repeatable; part of the task identity)",
    )
    p.add_argument(
        "--cwd", metavar="DIR", help="working directory of the job (default: its job directory)"
    )
    p.add_argument(
        "--resumable",
        action="store_true",
        help="the command resumes from saved progress when restarted",
    )
    p.add_argument(
        "--force", action="store_true", help="run again even if the same job already completed"
    )
    p.add_argument(
        "--no-rerun-failed",
        dest="rerun_failed",
        action="store_false",
        help="report a failed previous run instead of running it again",
    )
    p.add_argument(
        "--wait", action="store_true", help="wait for the job to end; exit 0 only if it completed"
    )
    p.add_argument(
        "--environment",
        metavar="YAML",
        help="the task's environment: block as a YAML mapping, e.g. "
        "'{modules: [gcc/12], venv: ~/venvs/x}' (docs/configuration.md, Environment)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the job script that would run, and submit nothing",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a line")
    p.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the command to run"
    )
    p.set_defaults(func=run)


def parse_env(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` strings to a mapping; a malformed one is a ``LaunchersError``."""
    env: dict[str, str] = {}
    for item in items:
        m = _ENV_RE.match(item)
        if not m:
            raise LaunchersError(
                f"--env {item!r}: expected NAME=VALUE with NAME like [A-Za-z_][A-Za-z0-9_]*"
            )
        env[m.group(1)] = m.group(2)
    return env


def parse_environment(text: str | None) -> dict[str, Any] | None:
    """``--environment YAML``: a mapping (checked by ``command``), else a ``LaunchersError``."""
    if text is None:
        return None
    # lazy: YAML loads only when the option is given
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise LaunchersError(f"--environment: not YAML: {e}") from None
    if not isinstance(value, dict):
        raise LaunchersError("--environment: expected a YAML mapping such as '{modules: [gcc]}'")
    return value


def job_json(job: Any) -> dict[str, Any]:
    """The fields ``submit --json`` and ``jobs --json`` print for one job."""
    return {
        "task_id": job.task_id,
        "state": job.state.value,
        "native_id": job.native_id,
        "attempt": job.attempt,
        "reason": job.reason,
        "exit_code": job.exit_code,
        "directory": str(job.directory),
    }


def wait_started(job: Any, *, quiet: bool = False) -> None:
    """Block until the job has left WAITING/SUBMITTING (its submission is done or it ended)."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..jobs.state import JobState

    said = None
    while job.state in (JobState.WAITING, JobState.SUBMITTING) and not job.native_id:
        if job.reason and job.reason != said and not quiet:
            print(f"launchers: {job.task_id}: {job.reason}", file=sys.stderr)
            said = job.reason
        time.sleep(0.05)


def run(args: argparse.Namespace) -> int:
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..finder.search import find_launcher
    from ..jobs.experiment import experiment
    from ..jobs.state import JobState
    from ..jobs.task import command

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise LaunchersError(
            "submit: no command given; write it after --, e.g. launchers submit -- echo hi"
        )
    tags = [t for t in (args.tags or "").split(",") if t]
    launcher = find_launcher(args.requirements, tags=tags, config=args.config)
    task = command(
        argv,
        name=args.name,
        env=parse_env(args.env),
        cwd=args.cwd,
        resumable=args.resumable,
        environment=parse_environment(args.environment),
    )
    if args.dry_run:
        # lazy: the kinds' script renderers load only for a dry run
        from ..jobs.record import job_directory
        from .preview import job_script

        directory = job_directory(os.path.expanduser(args.workdir), task.name, task.digest)
        print(job_script(launcher, task, str(directory.absolute())), end="")
        return 0
    xp = experiment(
        os.path.expanduser(args.workdir), launcher, rerun_failed=args.rerun_failed, progress=False
    )
    xp.__enter__()
    try:
        job = task.submit(force=args.force)
        wait_started(job, quiet=args.json)
        if not args.wait:
            _print(job, args.json)
            if job.state.is_final and job.state is not JobState.COMPLETED and not job.native_id:
                print(
                    f"launchers: job {job.task_id} could not be submitted: {job.reason}",
                    file=sys.stderr,
                )
                return 2
            return 0
        job.wait()
        _print(job, args.json)
    finally:
        xp.leave()
    if job.state is not JobState.COMPLETED:
        detail = f" ({job.reason})" if job.reason else ""
        print(
            f"launchers: job {job.task_id} ended {job.state.value}{detail}; see {job.stderr_path}",
            file=sys.stderr,
        )
        return 1
    return 0


def _print(job: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(job_json(job)))
    else:
        print(f"{job.task_id}\t{job.native_id or '-'}\t{job.directory}")
