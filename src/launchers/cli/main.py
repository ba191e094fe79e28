"""The ``launchers`` command: a thin dispatcher over one module per command group.

Each module ``launchers.cli.<name>`` exposes ``register(subparsers)``, which adds its parser
and sets ``func`` (taking the parsed namespace, returning an exit status). Errors that are
``LaunchersError`` print one clear line on stderr and exit 2; nothing prints a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .._version import __version__
from ..errors import LaunchersError

#: Command modules, in the order ``launchers --help`` lists them.
COMMAND_MODULES = (
    "find",
    "validate",
    "schema",
    "slurm",
    "submit",
    "jobs",
    "run",
    "batch",
    "status",
    "clean",
    "monitor",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (its default, kept explicit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="launchers", description="Decide where a compute job runs, then run it.")
    parser.add_argument("--version", action="version", version=f"launchers {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"launchers.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"launchers.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except LaunchersError as e:
        print(f"launchers: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("launchers: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
