"""``launchers run PROJECT_DIR``: run an MLproject entry point on a remote site (docs/design/sites.md §3.4).

Parsing, checks and ``--dry-run`` live here and in ``launchers.remote.plan``; the submission
itself is ``launchers.remote.submit.run_project(plan, follow=..., cancel_on_interrupt=...)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from ..units import format_size


def register(subparsers: Any) -> None:
    """Add the ``run`` command."""
    p = subparsers.add_parser(
        "run",
        help="run an MLproject entry point on a UNICORE, firecREST or SSH site",
        description=(
            "Upload PROJECT_DIR (minus Exclude), submit its MLproject entry point with the site and "
            "resources of a Compute Backend Config (or those the finder chooses for -r), follow "
            "job.out and job.err, and exit with the job's code."
        ),
    )
    p.add_argument("project_dir", metavar="PROJECT_DIR", help="directory holding MLproject")
    p.add_argument(
        "-e",
        "--entry-point",
        dest="entry",
        default="main",
        metavar="ENTRY",
        help="entry point (default main); an undeclared FILE.py or FILE.sh runs as MLflow runs it",
    )
    p.add_argument(
        "-P",
        "--param",
        dest="params",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter value (repeatable)",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--backend-config", metavar="FILE", help="Compute Backend Config (.yaml, .yml or .json)"
    )
    where.add_argument(
        "-r",
        "--requirement",
        metavar="REQUIREMENT",
        help="let the finder choose among the groups of launchers.yaml",
    )
    p.add_argument(
        "--config", metavar="FILE", help="launchers.yaml (file or directory) for --group and -r"
    )
    p.add_argument(
        "--group",
        metavar="ID",
        help="unicore or firecrest group giving the site of --backend-config",
    )
    p.add_argument("--account", metavar="A", help="account (UNICORE Project, sbatch --account)")
    p.add_argument(
        "--pass-env",
        dest="pass_env",
        action="append",
        default=[],
        metavar="NAME",
        help="copy this variable of the current environment into the job (repeatable)",
    )
    p.add_argument(
        "--workdir",
        metavar="DIR",
        default="launchers-runs",
        help="local directory of run records (default ./launchers-runs)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print uploads (and exclusions), the description or script and the command; submit nothing",
    )
    p.add_argument(
        "--no-follow", action="store_true", help="submit and return without following the output"
    )
    p.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="Ctrl-C cancels the job instead of detaching",
    )
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Plan the run; print it with ``--dry-run``, else hand it to ``run_project``."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..remote.plan import plan_run

    plan = plan_run(
        args.project_dir,
        entry=args.entry,
        params=args.params,
        backend_config=args.backend_config,
        requirement=args.requirement,
        config=args.config,
        group=args.group,
        account=args.account,
        pass_env=args.pass_env,
        workdir=args.workdir,
    )
    for note in plan.notes:
        print(f"launchers: {note}", file=sys.stderr)
    if args.dry_run:
        print_plan(plan, sys.stdout)
        return 0
    run_project = submitter()
    return int(
        run_project(plan, follow=not args.no_follow, cancel_on_interrupt=args.cancel_on_interrupt)
    )


def submitter() -> Callable[..., int]:
    """``launchers.remote.submit.run_project`` (a seam: tests replace it)."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..remote.submit import run_project

    return run_project


def print_plan(plan: Any, out: TextIO) -> None:
    """The ``--dry-run`` report: site, uploads, exclusions, description or script, command."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..remote.ssh_site import SSHSite

    site = plan.site
    where = f"{plan.kind}"
    if isinstance(site, SSHSite):
        where += f" {site.address} (user ${site.username_env}, sbatch over SSH)"
    elif site is not None:
        where += f" {getattr(site, 'url', None) or getattr(site, 'api_url', '')}"
        if getattr(site, "machine", None):
            where += f" (machine {site.machine})"
    if plan.launcher is not None and plan.kind != "ssh":  # an SSH site's launcher is the file's own
        where += f", group {plan.launcher.group_id}" if hasattr(plan.launcher, "group_id") else ""
    elif plan.backend is not None and plan.backend.group:
        where += f", group {plan.backend.group}"
    out.write(f"run: {plan.run_id}\n")
    out.write(f"site: {where}\n")
    out.write(f"entry point: {plan.entry.name}\n")
    out.write(f"account: {plan.account or '(site default)'}\n")
    ups = plan.all_uploads
    total = sum(u.size for u in ups)
    out.write(f"\nuploads ({len(ups)} files, {format_size(total)}):\n")
    for u in ups:
        note = f"  [{u.note}]" if u.note else ""
        link = f"  (link to {u.local})" if u.local.name != u.relpath.rsplit("/", 1)[-1] else ""
        out.write(f"  {u.relpath}  {format_size(u.size)}{link}{note}\n")
    out.write(f"\nexcluded ({len(plan.uploads.excluded)}):\n")
    for e in plan.uploads.excluded:
        out.write(f"  {e.relpath}  (pattern {e.pattern!r})\n")
    if plan.kind == "unicore":
        out.write("\njob description:\n")
        out.write(json.dumps(plan.description(), indent=2) + "\n")
        out.write("\nBSS file (job.sbatch):\n" + plan.bss_file())
    if plan.kind == "ssh":
        out.write("\nsbatch options:\n")
        for arg in plan.launcher.sbatch_args():
            out.write(f"  {arg}\n")
        out.write(
            f"\nrun by the Slurm job script with bash -l in {plan.default_run_dir()} (JOB_DIR: the job's "
            f"directory under {plan.site.workdir} on the site, chosen at submission):\n"
        )
        out.write(plan.script(plan.default_run_dir()))
    elif plan.kind in ("unicore", "firecrest"):
        out.write("\njob.sh:\n")
        out.write(plan.script(plan.default_run_dir()))
    else:
        out.write(f"\nlauncher: {plan.launcher!r}\n")
    out.write("\ncommand:\n")
    out.write(plan.command + "\n")
