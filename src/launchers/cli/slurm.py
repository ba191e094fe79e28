"""``launchers slurm convert [--no-hosts] [--id NAME] [--partitions FILE] [--all] [--groups G,...]
[--accounts A,...]``: ``scontrol show nodes`` on stdin -> launchers.yaml on stdout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import LaunchersError


def register(subparsers: Any) -> None:
    """Add the ``slurm`` command group and its ``convert`` subcommand."""
    parser = subparsers.add_parser(
        "slurm", help="Slurm helpers (convert scontrol output, discover a live cluster)"
    )
    sub = parser.add_subparsers(dest="slurm_command", metavar="SUBCOMMAND")
    convert = sub.add_parser(
        "convert",
        help="read `scontrol show nodes` on stdin, write a launchers.yaml on stdout",
        description=(
            "Read the output of `scontrol show nodes` on stdin and write a launchers.yaml "
            "with one slurm group on stdout: partitions from each node's Partitions=, node "
            "groups of nodes sharing features, usable cores (CPUEfctv, else CPUTot less core "
            "specialization), usable memory (RealMemory less MemSpecLimit) and GPU count."
        ),
    )
    convert.add_argument(
        "--no-hosts",
        action="store_true",
        help="leave the host lists empty and write use_hosts: false",
    )
    convert.add_argument(
        "--id",
        dest="group_id",
        default=None,
        help="group id (default: the cluster named in the text, else 'slurm')",
    )
    convert.add_argument(
        "--partitions",
        metavar="FILE",
        default=None,
        help="also read `scontrol show partitions` output from FILE: partition order, "
        "MaxTime as max_duration, State other than UP as disabled; hidden partitions and "
        "those you may not use (AllowGroups, AllowAccounts, DenyAccounts, RootOnly) are left out",
    )
    convert.add_argument(
        "--all",
        dest="keep_all",
        action="store_true",
        help="with --partitions: keep the partitions you may not use (after the others)",
    )
    convert.add_argument(
        "--groups",
        metavar="G1,G2",
        default=None,
        help="your Unix groups on the cluster, for AllowGroups (default: yours on this machine)",
    )
    convert.add_argument(
        "--accounts",
        metavar="A1,A2",
        default=None,
        help="your Slurm accounts, for AllowAccounts/DenyAccounts (default: unknown, so "
        "partitions restricted to some accounts are left out)",
    )
    convert.set_defaults(func=run_convert)
    # lazy: a command's own modules load only when it runs
    from .discover import register as register_discover

    register_discover(sub)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _read_stdin() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LaunchersError(
            f"<stdin>: not UTF-8 text (byte {e.start}); expected the output of `scontrol show nodes` "
            "(experimaestro 1.5.7's slurm convert skipped the lines it could not read)"
        ) from None


def _read_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LaunchersError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LaunchersError(f"{path}: not UTF-8 text (byte {e.start})") from None


def _names(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


def run_convert(args: argparse.Namespace) -> int:
    """Convert stdin to stdout; warnings (such as nodes in no partition) go to stderr."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..slurm.convert import convert_text
    from ..slurm.query import local_access

    if args.partitions is None and (
        args.keep_all or args.groups is not None or args.accounts is not None
    ):
        raise LaunchersError(
            "--all, --groups and --accounts need --partitions FILE (`scontrol show partitions`)"
        )
    access = local_access(_names(args.groups), _names(args.accounts))
    partitions_text = None
    if args.partitions is not None:
        partitions_text = _read_file(args.partitions)
    if sys.stdin.isatty():
        print(
            "launchers: reading `scontrol show nodes` output from stdin (end with Ctrl-D)",
            file=sys.stderr,
        )
    result = convert_text(
        _read_stdin(),
        no_hosts=args.no_hosts,
        group_id=args.group_id,
        partitions_text=partitions_text,
        partitions_source=args.partitions or "<partitions>",
        access=access,
        keep_all=args.keep_all,
    )
    for warning in result.warnings:
        print(f"launchers: warning: {warning}", file=sys.stderr)
    sys.stdout.write(result.text)
    sys.stdout.flush()
    return 0
