"""Module-level @task functions of the dependency tests (docs/design/runtime.md §15); the jobs'
interpreters import this file (the tests put this directory on PYTHONPATH). No tests here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from launchers.jobs.task import task


@task
def prepare(n: int, where: Path) -> Path:
    """Write ``n`` numbers to a file under ``where``; the file's path is the result."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"data-{n}.txt"
    path.write_text("\n".join(str(i) for i in range(n)) + "\n")
    return path


@task
def train(data: Path, lr: float) -> float:
    """A "model": the sum of the data times ``lr`` (the data arrives as a Path)."""
    assert isinstance(data, Path), type(data)
    return sum(int(x) for x in data.read_text().split()) * lr


@task
def evaluate(models: list[Any], tag: str = "") -> dict[str, Any]:
    """Gather the models' results (a list of job results) and where this ran."""
    return {"total": sum(models), "tag": tag, "host": os.uname().nodename}


@task
def pair(x: int) -> tuple[int, int]:
    """A result that is not JSON (pickled)."""
    return (x, x + 1)


@task
def first(values: dict[str, Any]) -> int:
    """The first element of the pair in ``values["p"]`` (a dict parameter holding a job)."""
    return int(values["p"][0])


@task
def fail(message: str) -> None:
    """Raise: a dependency that fails."""
    raise ValueError(message)


@task
def mark(marker: Path, value: Any = None) -> Any:
    """Append a line to ``marker`` (so that a test sees whether it ran), return ``value``."""
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    return value
