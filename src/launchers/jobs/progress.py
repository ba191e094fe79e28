"""Progress while an experiment waits: a live status line in a terminal (counts per state and
the slowest unfinished jobs), one plain line per state change otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from .state import JobState

if TYPE_CHECKING:
    from .job import Job

REFRESH = 0.5
SLOWEST = 3


def _since(iso: str | None, now: float) -> float | None:
    if not iso:
        return None
    try:
        return max(0.0, now - datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return None


def _fmt_elapsed(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def summary_line(jobs: Sequence[Job], now: float | None = None) -> str:
    """``3 RUNNING, 1 PENDING, 5 COMPLETED | slowest: a-12ab (RUNNING 4m02s), ...``."""
    now = time.time() if now is None else now
    counts = Counter(j.state for j in jobs)
    order = [s for s in JobState if counts[s]]
    text = ", ".join(f"{counts[s]} {s.value}" for s in order) or "no jobs"
    waiting = []
    for j in jobs:
        if j.state.is_final:
            continue
        rec = j.record
        elapsed = _since(rec.started_at or rec.submitted_at, now)
        if elapsed is not None:
            waiting.append((elapsed, j))
    waiting.sort(key=lambda p: -p[0])
    if waiting:
        slow = ", ".join(
            f"{j.task_id} ({j.state.value} {_fmt_elapsed(e)})" for e, j in waiting[:SLOWEST]
        )
        text += f" | slowest: {slow}"
    return text


def change_line(job: Job) -> str:
    """One plain line for a state change: ``launchers: ID STATE [native id] (reason)``."""
    nid = f" [{job.native_id}]" if job.native_id else ""
    reason = f" ({job.reason})" if job.reason else ""
    return f"launchers: {job.task_id} {job.state.value}{nid}{reason}"


def wait_with_progress(
    jobs: Sequence[Job],
    *,
    enabled: bool | None = None,
    timeout: float | None = None,
    stream: TextIO | None = None,
) -> None:
    """Block until every job is final (``TimeoutError`` after ``timeout``), showing progress."""
    out = stream if stream is not None else sys.stderr
    tty = out.isatty() if enabled is None else enabled and out.isatty()
    plain = enabled is not False and not tty
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: dict[int, JobState] = {}
    width = 0
    try:
        while True:
            pending = [j for j in jobs if not j.state.is_final]
            if plain:
                for j in jobs:
                    if seen.get(id(j)) is not j.state:
                        if id(j) in seen or j.state is not JobState.WAITING:
                            print(change_line(j), file=out, flush=True)
                        seen[id(j)] = j.state
            elif tty:
                line = summary_line(jobs)
                out.write("\r" + line.ljust(width))
                out.flush()
                width = len(line)
            if not pending:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"{len(pending)} job(s) still unfinished after {timeout} s")
            step = REFRESH if remaining is None else min(REFRESH, remaining)
            try:
                pending[0].wait(step)
            except TimeoutError:
                pass
    finally:
        if tty and width:
            out.write("\n")
            out.flush()
