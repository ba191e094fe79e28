"""Tasks of the environment tests (tests/integration/slurm/test_environment_real.py), importable by their jobs."""

from __future__ import annotations

import os
import sys

from launchers import task


@task
def where_am_i(note: str) -> list[str]:
    """The interpreter's prefix, the marker package's value (a venv's), a module's variable."""
    try:
        import marker_pkg  # type: ignore[import-not-found]

        marker = str(marker_pkg.VALUE)
    except ImportError:
        marker = "no marker"
    return [sys.prefix, marker, os.environ.get("MARKER_MODULE", ""), note]
