"""Paths the tests share: the repository, its ``src/`` and ``tests/``, and the ``PYTHONPATH`` a
job needs to import the tasks defined in any test module."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SRC = ROOT / "src"
BENCHMARKS = ROOT / "benchmarks"


def test_dirs() -> list[Path]:
    """``tests/`` and every folder below it that holds test modules."""
    found = {p.parent for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts}
    return [TESTS, *sorted(d for d in found if d != TESTS)]


def job_pythonpath(src: Path | str = SRC) -> str:
    """``PYTHONPATH`` for a job that imports test modules (their tasks) and ``launchers``."""
    return os.pathsep.join([*map(str, test_dirs()), str(src)])
