"""``launchers clean RUN...``: remove finished UNICORE jobs (and their working directories) at the site.

UNICORE keeps every job and its working directory until it is destroyed (docs/design/sites.md
§3.2); other launcher kinds have nothing to remove at a site, so they get a message and no
action. Local records are kept (``launchers status`` still shows them, marked as cleaned).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import LaunchersError
from ..jobs.record import now_iso
from ..jobs.update import StateUpdate
from .jobdirs import resolve_job

#: seconds allowed for one DELETE at the site
DESTROY_TIMEOUT = 60.0


def register(subparsers: Any) -> None:
    """Add the ``clean`` command."""
    p = subparsers.add_parser(
        "clean",
        help="remove finished UNICORE jobs and their working directories at the site",
        description="For each finished UNICORE RUN, destroy the job at the site (its working "
        "directory goes with it) and report it. Unfinished jobs are left alone (cancel them "
        "first); other kinds have nothing to remove. Exit 1 when a job could not be cleaned.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="job directory, task id or unique prefix")
    p.add_argument(
        "--workdir", default=".", metavar="DIR", help="where task ids are looked up (default: .)"
    )
    p.set_defaults(func=run_clean)


def clean_one(job: Any) -> tuple[bool, str]:
    """Destroy one job at its site when that applies: (success, message for the user)."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..registry import executor_for_record
    from ..remote.retry import status_of
    from ..runtime.loop import run_sync

    rec = job.record
    kind = str(dict(rec.launcher).get("kind") or "?")
    if kind != "unicore":
        return True, f"{rec.task_id}: nothing to clean at a site for a {kind} job"
    if not rec.state.is_final:
        return False, (
            f"{rec.task_id}: still {rec.state.value}; not removed (cancel it first with "
            f"`launchers cancel {job.directory}`)"
        )
    url = rec.extra.get("unicore_url")
    if rec.extra.get("unicore_destroyed"):
        return True, f"{rec.task_id}: already removed from the site ({url})"
    if not url:
        return True, f"{rec.task_id}: never reached the site; nothing to remove"
    executor = executor_for_record(rec)
    destroy = getattr(executor, "destroy", None)
    if destroy is None:
        raise LaunchersError(f"{rec.task_id}: this installation cannot destroy UNICORE jobs")
    try:
        run_sync(destroy(job), timeout=DESTROY_TIMEOUT)
    except LaunchersError as e:
        return False, f"{rec.task_id}: cannot remove {url}: {e}"
    except Exception as e:  # the site's answer, shown without a traceback
        if status_of(e) != 404:
            return False, f"{rec.task_id}: cannot remove {url}: {type(e).__name__}: {e}"
        message = f"{rec.task_id}: {url} was already gone from the site"
    else:
        message = f"{rec.task_id}: removed {url} and its working directory"
    job.apply(StateUpdate(detail="cleaned at the site", extra={"unicore_destroyed": now_iso()}))
    return True, message


def run_clean(args: argparse.Namespace) -> int:
    """Clean every RUN; exit 0 when all could be cleaned (or had nothing to clean), else 1."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..jobs.job import load_job

    status = 0
    for ref in args.runs:
        job = load_job(resolve_job(ref, args.workdir))
        ok, message = clean_one(job)
        print(message, file=sys.stdout if ok else sys.stderr)
        if not ok:
            status = 1
    return status


__all__ = ["clean_one", "register", "run_clean"]
