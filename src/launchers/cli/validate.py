"""``launchers validate [PATH]``: load a configuration, check all of it, print a summary.

Exit 0 when it loads, 2 (through the dispatcher) with every problem on stderr otherwise. A
Compute Backend Config (top-level ``Resources``, ``UnicoreApiUrl``, ``Firecrest`` or ``SSH``) is
handed to ``launchers.remote.backend_config.load_backend_config``; an MLproject (the file, or a
directory holding one and no ``launchers.yaml``) is checked entry point by entry point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from launchers.config.implicit import implicit_local_group
from launchers.config.loader import (
    ENV_VAR,
    default_search_path,
    find_config_file,
    load_config,
    summary,
)
from launchers.config.located import load_located
from launchers.errors import ConfigurationError
from launchers.units import format_size

BACKEND_KEYS = ("Resources", "UnicoreApiUrl", "Firecrest", "SSH")


def register(subparsers: Any) -> None:
    """Add the ``validate`` command."""
    p = subparsers.add_parser(
        "validate",
        help="check a launchers.yaml (or a Compute Backend Config)",
        description=(
            "Load and check a configuration. Without PATH, the file find_launcher would use "
            f"(${ENV_VAR}, then ~/.config/launchers/launchers.yaml, then "
            "~/.config/experimaestro/launchers.yaml)."
        ),
    )
    p.add_argument(
        "path",
        nargs="?",
        help="a launchers.yaml, a directory holding one, or a Compute Backend Config",
    )
    p.set_defaults(func=run)


def is_backend_config(path: Path) -> bool:
    """True when ``path`` holds a Compute Backend Config rather than a launchers.yaml."""
    if path.is_dir():
        return False
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        doc = load_located(text, str(path))
    except ConfigurationError:
        return path.suffix == ".json"
    return isinstance(doc, dict) and any(k in doc for k in BACKEND_KEYS)


def _validate_backend(path: Path) -> int:
    # lazy: loaded when this subcommand runs, not at every CLI start
    from ..remote.backend_config import load_backend_config

    load_backend_config(path)
    print(f"{path}: OK (Compute Backend Config)")
    return 0


def mlproject_of(path: Path) -> Path | None:
    """The MLproject to check: ``path`` itself when its name is ``MLproject`` in any case, or the
    one of a directory holding no ``launchers.yaml``; else None."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from launchers.remote.mlproject import FILE_NAME, find_mlproject

    if path.is_file():
        return path if path.name.lower() == FILE_NAME else None
    if path.is_dir() and not (path / "launchers.yaml").exists():
        return find_mlproject(path)
    return None


def _validate_mlproject(path: Path) -> int:
    """Every entry point of an MLproject: problems are errors (exit 2), warnings go to stderr."""
    # lazy: loaded when this subcommand runs, not at every CLI start
    from launchers.remote.mlproject import load_mlproject

    project = load_mlproject(path.parent)
    if project.file is None or Path(project.file).resolve() != path.resolve():
        raise ConfigurationError(
            "not the project's MLproject file (another name differs only in case)", file=str(path)
        )
    for line in (*project.warnings, *(w for ep in project.entry_points for w in ep.warnings)):
        print(f"launchers: warning: {line}", file=sys.stderr)
    problems = project.problems
    if problems:
        raise ConfigurationError(problems[0], file=str(path), problems=list(problems))
    names = ", ".join(ep.name for ep in project.entry_points) or "none"
    print(f"{path}: OK (MLproject; entry points: {names})")
    return 0


def _machine() -> str:
    """This machine as the implicit local launcher sees it."""
    g = implicit_local_group()
    memory = format_size(g.cpu.memory) if g.cpu.memory else "unknown memory"
    gpus = ", ".join(f"{x.count} x {x.model} ({format_size(x.memory)})" for x in g.gpus)
    return f"{g.cpu.cores} cores, {memory}, {gpus or 'no GPU'}"


def run(args: argparse.Namespace) -> int:
    """Validate ``args.path`` (or the configuration on the search path)."""
    if args.path is not None:
        path = Path(args.path).expanduser()
        if path.is_file() and is_backend_config(path):
            return _validate_backend(path)
        mlproject = mlproject_of(path)
        if mlproject is not None:
            return _validate_mlproject(mlproject)
    found = find_config_file(args.path)
    if found is None:
        searched = ", ".join(str(p) for p in default_search_path())
        print(
            f"no configuration found (${ENV_VAR} unset; searched {searched}): "
            f"find_launcher uses the implicit local launcher: {_machine()}"
        )
        return 0
    config = load_config(found)
    print(f"{found}: OK: {summary(config)}")
    return 0
