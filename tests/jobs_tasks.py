"""Module-level @task functions used by the job tests; the job's interpreter imports this file
(the tests put this directory on PYTHONPATH). It holds no tests of its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

from launchers.jobs.task import task


@task
def add(a: int, b: int = 10) -> int:
    """Return a + b."""
    return a + b


@task(name="pathy")
def touch(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` and return the path (a Path result is stored as JSON)."""
    path.write_text(text)
    return path


@task
def as_tuple(x: int) -> tuple[int, int]:
    """A tuple is not plain JSON: stored as result.pickle."""
    return (x, x)


@task
def boom(message: str) -> None:
    """Raise, to test error.json and JobFailedError."""
    raise ValueError(message)


@task
def echo_env(names: list[str]) -> dict[str, str | None]:
    """The values of some environment variables in the job."""
    return {n: os.environ.get(n) for n in names}


@task
def held(marker: str, release: str) -> int:
    """Append a line to ``marker`` at start, then wait (up to a minute) until ``release`` exists:
    a running task that ends when the test says, not after a guessed time."""
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    return 1


@task
def sleeper(seconds: float, marker: str) -> int:
    """Append a line to ``marker`` at start, then sleep."""
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return 1
