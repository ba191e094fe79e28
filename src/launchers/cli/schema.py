"""``launchers schema``: print the JSON Schema of launchers.yaml (for editors and CI checks)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from launchers.config.schema import json_schema


def register(subparsers: Any) -> None:
    """Add the ``schema`` command."""
    p = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of launchers.yaml",
        description="Print the JSON Schema (Draft 2020-12) of launchers.yaml on stdout.",
    )
    p.add_argument("--indent", type=int, default=2, help="indentation (default 2; 0 = one line)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the schema."""
    indent = args.indent if args.indent > 0 else None
    print(json.dumps(json_schema(), indent=indent, sort_keys=False))
    return 0
