"""``launchers status JOB...``: one job's state, ids, exit code, site and output paths.

JOB is a job directory (e.g. the run record printed by ``launchers run``), or a task id, digest
or unique prefix looked up under ``--workdir``. A job that is not final is asked about once
through its executor (rebuilt from ``state.json``) before it is shown; the answer is recorded.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import LaunchersError
from ..jobs.depends import Edge, edges_of, explain
from ..jobs.record import StateRecord, read_record
from ..jobs.state import JobState
from .jobdirs import resolve_job

log = logging.getLogger("launchers.cli")

#: seconds allowed for the one status query (and the output copy) of ``launchers status``
REFRESH_TIMEOUT = 60.0


def register(subparsers: Any) -> None:
    """Add the ``status`` command."""
    p = subparsers.add_parser(
        "status",
        help="show a job's state (refreshed once from its scheduler or site)",
        description="Show state, native id, attempt, reason, exit code, launcher/site and output "
        "paths of each JOB. A job that is not final is queried once through its executor first.",
    )
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job directory, task id or unique prefix")
    p.add_argument(
        "--workdir", default=".", metavar="DIR", help="where task ids are looked up (default: .)"
    )
    p.add_argument(
        "--no-refresh",
        action="store_true",
        help="show the recorded state without asking the scheduler",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per job")
    p.set_defaults(func=run_status)


def refresh(job: Any, timeout: float = REFRESH_TIMEOUT) -> str | None:
    """Ask the job's executor once about a job that is not final and record the answer.

    Remote executors also copy the new bytes of ``job.out``/``job.err``. Returns a warning
    (the query failed; the recorded state is shown) or None."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..registry import executor_for_record
    from ..runtime.loop import run_sync

    if job.state.is_final:
        return None
    try:
        executor = executor_for_record(job.record)
    except LaunchersError as e:
        return f"cannot ask about {job.task_id}: {e}"
    job.executor = executor
    try:
        updates: dict[Any, Any] = {}
        if job.native_id:
            updates.update(run_sync(executor.poll([job]), timeout=timeout))
        if job not in updates:
            updates.update(run_sync(executor.fast_poll([job]), timeout=timeout))
        update = updates.get(job)
        if update is not None:
            job.apply(update)
        sync = getattr(executor, "sync_outputs", None)
        if sync is not None and job.native_id and not job.state.is_final:
            run_sync(sync(job), timeout=timeout)
    except LaunchersError as e:
        return f"cannot refresh {job.task_id}: {e}"
    except Exception as e:  # a query that failed (network, scheduler): shown, never a traceback
        return f"cannot refresh {job.task_id}: {type(e).__name__}: {e}"
    return None


def site_of(record: Any) -> str | None:
    """The remote site a record names (UNICORE URL, firecREST API URL and machine, or the SSH
    site's address), if any."""
    extra: Mapping[str, Any] = record.extra if isinstance(record.extra, Mapping) else {}
    uc = extra.get("unicore_site")
    if isinstance(uc, Mapping) and uc.get("url"):
        return str(uc["url"])
    fc = extra.get("firecrest_site")
    if isinstance(fc, Mapping) and fc.get("api_url"):
        machine = f" (machine {fc['machine']})" if fc.get("machine") else ""
        return f"{fc['api_url']}{machine}"
    ssh = extra.get("ssh_site")
    if isinstance(ssh, Mapping) and ssh.get("hostname"):
        return f"ssh://{ssh['hostname']}:{ssh.get('port', 22)}"
    return None


def remote_location(record: Any) -> str | None:
    """Where the job lives at the site: UNICORE job URL or firecREST run directory."""
    extra: Mapping[str, Any] = record.extra if isinstance(record.extra, Mapping) else {}
    for key in ("unicore_url", "run_dir", "remote_dir"):
        value = extra.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def dependencies(record: StateRecord) -> list[tuple[Edge, JobState | None]]:
    """The edges of a job not final yet, each with its dependency's recorded state
    (docs/design/runtime.md §15); none for a final job."""
    if record.state.is_final:
        return []
    try:
        edges = edges_of(record.extra)
    except LaunchersError:
        return []
    out: list[tuple[Edge, JobState | None]] = []
    for edge in edges:
        try:
            dep = read_record(edge.directory)
        except LaunchersError:
            dep = None
        out.append((edge, dep.state if dep is not None else None))
    return out


def describe(directory: Path, job: Any) -> dict[str, Any]:
    """The fields ``launchers status`` shows, as plain data."""
    rec = job.record
    info = dict(rec.launcher)
    return {
        "task_id": rec.task_id,
        "state": rec.state.value,
        "native_id": rec.native_id,
        "attempt": rec.attempt,
        "reason": rec.reason,
        "exit_code": rec.exit_code,
        "signal": rec.signal,
        "launcher": info.get("kind"),
        "group": info.get("group"),
        "site": site_of(rec),
        "remote": remote_location(rec),
        "submitted_at": rec.submitted_at,
        "started_at": rec.started_at,
        "ended_at": rec.ended_at,
        "directory": str(directory),
        "stdout": str(job.paths.stdout),
        "stderr": str(job.paths.stderr),
        # what a job not final yet waits for, each with its state (why it is not running)
        "after": [{**e.to_json(), "state": st and st.value} for e, st in dependencies(rec)],
    }


def render(data: Mapping[str, Any]) -> str:
    """The human-readable block for one job."""

    def show(value: Any) -> str:
        return "-" if value is None or value == "" else str(value).replace("\n", " ")

    launcher = show(data["launcher"])
    if data.get("group"):
        launcher += f" (group {data['group']})"
    rows = [
        ("task id", data["task_id"]),
        ("state", data["state"]),
        ("native id", data["native_id"]),
        ("attempt", data["attempt"]),
        ("reason", data["reason"]),
        (
            "exit code",
            data["exit_code"]
            if data.get("signal") is None
            else f"{show(data['exit_code'])} (signal {data['signal']})",
        ),
        ("launcher", launcher),
    ]
    if data.get("after"):
        deps = [
            (Edge.from_json(d), JobState(d["state"]) if d["state"] else None) for d in data["after"]
        ]
        rows.append(("waits for", explain(deps).removeprefix("after ")))
    if data.get("site"):
        rows.append(("site", data["site"]))
    if data.get("remote"):
        rows.append(("remote", data["remote"]))
    rows += [
        ("submitted", data["submitted_at"]),
        ("started", data["started_at"]),
        ("ended", data["ended_at"]),
        ("directory", data["directory"]),
        ("stdout", data["stdout"]),
        ("stderr", data["stderr"]),
    ]
    return "\n".join(f"{name + ':':<11}{show(value)}" for name, value in rows)


def run_status(args: argparse.Namespace) -> int:
    """Show every JOB (refreshed once unless ``--no-refresh``); exit 0."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..jobs.job import load_job

    blocks = []
    for ref in args.jobs:
        directory = resolve_job(ref, args.workdir)
        job = load_job(directory)
        if not args.no_refresh:
            warning = refresh(job)
            if warning:
                print(f"launchers: {warning} (showing the recorded state)", file=sys.stderr)
        data = describe(directory, job)
        blocks.append(json.dumps(data) if args.json else render(data))
    print(("\n" if args.json else "\n\n").join(blocks))
    return 0


__all__ = ["describe", "refresh", "register", "render", "run_status"]
