"""When would Slurm start a job? ``sbatch --test-only`` through a group's connector, and the
pure reading of its answer (the ``earliest_start`` strategy, docs/finder.md).

``sbatch --test-only`` submits nothing: slurmctld plans the job as its scheduler would now and
sbatch prints, on stderr, one of (by Slurm version)::

    sbatch: Job 12 to start at 2026-05-01T10:00:00 using 4 processors on nodes n1 in partition p
    sbatch: Job 12 to start at ... using 4 processors on n1                   (before 19.05)
    sbatch: Job 12 to start at ... on cluster c a using 4 processors on nodes n1 in partition p
                                                                              (25.05 and later)

The time is printed with ``SLURM_TIME_FORMAT``; it is set to ``%s`` (seconds since the epoch),
so that the answer does not depend on the cluster's time zone. A refusal is ``allocation
failure: REASON`` with exit status 1.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Sequence
from datetime import datetime

import attrs

from ..config.model import LaunchersConfig, SlurmGroup
from ..connectors.base import Connector
from ..connectors.registry import get_connector
from ..errors import LaunchersError
from ..runtime.loop import in_loop_thread, run_sync

#: Environment of the command: the start time in seconds since the epoch.
ENVIRONMENT = {"SLURM_TIME_FORMAT": "%s"}

_ANSWER = re.compile(
    r"Job (?P<job>\d+) to start at (?P<time>\S+)(?: on cluster (?P<cluster>\S+))?(?: a)? "
    r"using (?P<procs>\d+) (?:processors|cnodes) on (?:nodes )?(?P<nodes>\S+)"
    r"(?: in partition (?P<partition>\S+))?"
)
_REFUSAL = re.compile(r"allocation failure:\s*(?P<why>.+)")


@attrs.frozen
class Answer:
    """What ``sbatch --test-only`` said: the expected start (seconds since the epoch; None
    when it gave none) or why not, where it would run, and when it was asked."""

    start: float | None
    asked: float
    partition: str | None = None
    nodes: str | None = None
    error: str | None = None


def start_time(text: str) -> float | None:
    """Seconds since the epoch of a time sbatch printed: ``%s`` digits, else Slurm's default
    ``2026-05-01T10:00:00`` read as this machine's local time; None for ``Unknown``."""
    if text.isdigit():
        return float(text)
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def read_answer(returncode: int, stdout: str, stderr: str, asked: float) -> Answer:
    """The answer of ``sbatch --test-only`` from its exit status and output (pure)."""
    text = f"{stderr}\n{stdout}"
    m = _ANSWER.search(text)
    if returncode == 0 and m is not None:
        start = start_time(m.group("time"))
        if start is None:
            return Answer(None, asked, error=f"Slurm gave no start time ({m.group('time')!r})")
        return Answer(start, asked, m.group("partition"), m.group("nodes"))
    refusal = _REFUSAL.search(text)
    if refusal is not None:
        why = refusal.group("why").strip()
    else:
        lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
        why = " / ".join(lines[:3]) or "no message"
    return Answer(None, asked, error=f"sbatch --test-only: {why} (exit {returncode})")


def command(args: Sequence[str], path: str | None = None, local: bool = True) -> list[str]:
    """``sbatch --test-only ARGS --wrap true`` (``path``: the directory of the Slurm commands)."""
    sbatch = "sbatch"
    if path:
        sbatch = os.path.join(os.path.expanduser(path) if local else path, "sbatch")
    return [sbatch, "--test-only", *args, "--wrap", "true"]


async def ask(connector: Connector, argv: Sequence[str], timeout: float) -> Answer:
    """Run ``argv`` (see :func:`command`) through ``connector``; never raises: a transport
    failure or no answer within ``timeout`` seconds is an ``Answer`` with an error."""
    asked = time.time()
    try:
        result = await asyncio.wait_for(
            connector.run(list(argv), env=ENVIRONMENT, timeout=timeout), timeout
        )
    except asyncio.TimeoutError:
        return Answer(None, asked, error=f"no answer within {timeout:g} s")
    except (LaunchersError, OSError) as e:
        return Answer(None, asked, error=str(e))
    return read_answer(result.returncode, result.stdout, result.stderr, asked)


def ask_all(asks: Sequence[tuple[SlurmGroup, list[str]]], config: LaunchersConfig) -> list[Answer]:
    """``sbatch --test-only`` for every (group, args), concurrently, each within the timeout."""
    timeout = config.estimate_timeout
    asked = time.time()
    if in_loop_thread():
        return [Answer(None, asked, error="cannot ask from the launchers event loop")] * len(asks)
    coros = []
    failed: dict[int, Answer] = {}
    for i, (group, args) in enumerate(asks):
        try:
            connector = get_connector(group.connector, config)
        except LaunchersError as e:
            failed[i] = Answer(None, asked, error=str(e))
            continue
        coros.append((i, ask(connector, command(args, group.path, connector.is_local), timeout)))

    async def gather() -> list[Answer]:
        return list(await asyncio.gather(*(c for _, c in coros)))

    answers: list[Answer] = []
    if coros:
        try:
            answers = run_sync(gather(), timeout + 2)
        except Exception as e:  # the loop itself failed: every estimate is unknown
            answers = [Answer(None, asked, error=f"no answer: {e}")] * len(coros)
    results = dict(zip([i for i, _ in coros], answers, strict=True))
    results.update(failed)
    return [results[i] for i in range(len(asks))]
