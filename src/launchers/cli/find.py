"""``launchers find SPEC [SPEC...]``: which launcher would run a requirement, and why."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import LauncherNotFoundError


def register(subparsers: Any) -> None:
    """Add the ``find`` command."""
    p = subparsers.add_parser(
        "find",
        help="show the launcher chosen for a requirement",
        description="Show the launcher chosen for a requirement (alternatives of every SPEC in order). "
        "Exit status: 0 found, 1 no launcher fits (explanation on stderr), 2 syntax or configuration error.",
    )
    p.add_argument(
        "specs",
        nargs="+",
        metavar="SPEC",
        help='a requirement such as "cuda(mem=24G)*2 | cpu(cores=8)"',
    )
    p.add_argument("--config", metavar="PATH", help="launchers.yaml, or a directory holding it")
    p.add_argument("--tags", metavar="a,b", help="only groups having one of these tags")
    p.add_argument(
        "--explain",
        action="store_true",
        help="say why every group and partition was or was not chosen, and what the chosen "
        "launcher's environment: adds to the job script",
    )
    p.add_argument(
        "--strategy",
        choices=("order", "earliest_start"),
        default=None,
        help="how to pick among the groups that can run it: order (weight, then file order) or "
        "earliest_start (where Slurm expects it to start first); default: the file's strategy:",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def launcher_json(launcher: Any) -> dict[str, Any]:
    """``{"kind", "group", "alternative", "options", "sbatch_args"}`` of a launcher."""
    group = getattr(launcher, "group", None)
    group_ref: Any = None
    if group is not None:
        group_ref = group.id if group.id is not None else group.index
    options: Any = getattr(launcher, "options", None)
    return {
        "kind": launcher.kind,
        "group": group_ref,
        "alternative": getattr(launcher, "alternative", 0),
        "options": options.as_dict() if hasattr(options, "as_dict") else {},
        "sbatch_args": list(launcher.sbatch_args()) if hasattr(launcher, "sbatch_args") else [],
    }


def launcher_text(launcher: Any) -> str:
    """One line: kind, group, alternative and sbatch arguments."""
    data = launcher_json(launcher)
    group = getattr(launcher, "group", None)
    label = group.label if group is not None else "?"
    line = f"{data['kind']} {label} (alternative {data['alternative']})"
    if data["sbatch_args"]:
        line += ": " + " ".join(data["sbatch_args"])
    return line


def run(args: argparse.Namespace) -> int:
    """Search and print; ``LauncherNotFoundError`` becomes exit status 1."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..finder.search import config_of, explain_search, find_launcher

    config = config_of(args.config)
    tags = args.tags or ()
    try:
        launcher = find_launcher(*args.specs, tags=tags, config=config, strategy=args.strategy)
    except LauncherNotFoundError as e:
        print(f"launchers: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(launcher_json(launcher), indent=None, sort_keys=False))
    else:
        print(launcher_text(launcher))
    if args.explain:
        result = explain_search(*args.specs, tags=tags, config=config, strategy=args.strategy)
        out = sys.stderr if args.json else sys.stdout
        print(result.explanation.text(), file=out)
        # lazy: the kinds' script renderers load only when an explanation is asked
        from .preview import environment_lines

        for line in environment_lines(launcher):
            print(line, file=out)
    return 0
