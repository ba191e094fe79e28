"""The monitor's in-memory view of its experiments, kept true as job directories change, and
the live updates it sends to the pages (server-sent events).

Changes are found two ways (``watch``): inotify events for what changes on this machine, at
once, and a **stat sweep** for what inotify cannot see (a shared filesystem written from other
hosts) or could not watch. The sweep reads no file: it compares the ``(inode, mtime, size)`` of
``state.json`` (renamed into place at every write, so the inode changes) and the modification
times of ``jobs/`` and ``jobs/NAME/`` (new job directories) with what it saw last. Unfinished
jobs are swept often (every ``HOT_INTERVAL`` s, every ``HOT_INTERVAL_ALONE`` s without
inotify), finished ones rarely (``COLD_INTERVAL``: their record changes only when a new attempt
starts); each interval also stays at least 50 (100) times the time its last sweep took, so the
sweep never takes more than 2 % of a core even on a slow shared filesystem. The job folders
are listed again only when their modification times change (and, as a safety net, every
``RELIST_EVERY`` cold sweeps). An experiment of 10,000 finished jobs costs a few ``stat`` calls
a second while nothing happens (docs/monitor.md, "Performance").

Every change re-reads the records that changed (after ``SETTLE`` s, so that a burst of writes
is read once) and publishes their new rows to every page.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .model import Totals, is_final, rows_payload
from .scan import ExperimentDir, Reading, Stamp, job_keys, read_job, stamp_of
from .watch import Watches

log = logging.getLogger("launchers.monitor")

SETTLE = 0.05
HOT_INTERVAL = 2.0
HOT_INTERVAL_ALONE = 1.0
COLD_INTERVAL = 60.0
HOT_BUDGET = 50
COLD_BUDGET = 100
#: Every how many cold sweeps the job folders are listed again even though their modification
#: times did not change (a safety net: a listing re-adds 10,000 watches).
RELIST_EVERY = 10
#: Updates a page may fall behind by before it is told to reload its rows instead.
QUEUE_LIMIT = 256
#: A comment line on idle event streams, so that proxies and tunnels keep them open.
KEEPALIVE = 15.0


class Payload:
    """The JSON of an experiment's rows at one version, and its gzip compression kept open:
    a response ``{"table": ROWS, ...}`` puts the rows first, so that each request compresses
    only its own few fields after them (a copy of the compressor) instead of megabytes."""

    def __init__(self, version: int, data: bytes) -> None:
        self.version = version
        self.data = data
        self._gzip: tuple[bytes, Any] | None = None

    def body(self, rest: bytes) -> bytes:
        """``{"table":ROWS,REST}`` where ``rest`` is an encoded JSON object's inside."""
        return b'{"table":' + self.data + b"," + rest + b"}"

    def gzipped(self, rest: bytes) -> bytes:
        """``body(rest)`` gzipped (level 1: a tunnel's bandwidth, not the CPU, is short)."""
        if self._gzip is None:
            compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
            head = compressor.compress(b'{"table":' + self.data + b",")
            self._gzip = (head + compressor.flush(zlib.Z_SYNC_FLUSH), compressor)
        head, compressor = self._gzip
        tail = compressor.copy()
        return head + tail.compress(rest + b"}") + tail.flush()


class ExperimentState:
    """The rows of one experiment and what the sweep compares."""

    def __init__(self, exp: ExperimentDir) -> None:
        self.exp = exp
        self.rows: dict[str, dict[str, Any]] = {}
        self.stamps: dict[str, Stamp] = {}
        self.owners: dict[str, Any] = {}
        #: modification time (ns) of ``jobs/`` and of each ``jobs/NAME/`` at the last listing
        self.folder_times: dict[str, int] = {}
        self.totals = Totals()
        #: keys of the unfinished jobs (kept with the rows: the sweep asks every two seconds)
        self.open: set[str] = set()
        self.version = 0
        self._payload: Payload | None = None

    def unfinished(self) -> list[str]:
        """Keys of the jobs not in a final state."""
        return list(self.open)

    def payload(self) -> Payload:
        """Every row as JSON (``rows_payload``), cached until the next change."""
        if self._payload is None or self._payload.version != self.version:
            rows = sorted(self.rows.values(), key=lambda r: str(r["key"]))
            data = json.dumps(rows_payload(rows), separators=(",", ":")).encode()
            self._payload = Payload(self.version, data)
        return self._payload

    def summary(self, now: float) -> dict[str, Any]:
        """The experiment's summary (``model.Totals``: kept up to date row by row)."""
        return self.totals.summary(now)

    def set_row(self, key: str, row: dict[str, Any] | None) -> None:
        """Row ``key`` is now ``row`` (None: removed)."""
        if row is None:
            self.rows.pop(key, None)
        else:
            self.rows[key] = row
        if row is None or is_final(str(row.get("state"))):
            self.open.discard(key)
        else:
            self.open.add(key)
        self.totals.set(key, row)

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "id": self.exp.id,
            "path": str(self.exp.path),
            "name": self.exp.path.name,
            "summary": self.summary(now),
        }


class Subscriber:
    """One page's event stream: encoded events waiting to be sent."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.overflowed = False

    def put(self, message: str) -> None:
        if self.overflowed:
            return
        if self.queue.qsize() >= QUEUE_LIMIT:
            self.overflowed = True
            self.queue.put_nowait(sse("resync", {}))
            return
        self.queue.put_nowait(message)


def sse(event: str, data: Any) -> str:
    """One server-sent event (``data`` as JSON on one line)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _read_many(items: Sequence[tuple[str, Path]]) -> list[tuple[str, Reading | None]]:
    return [(key, read_job(key, directory)) for key, directory in items]


def _stat_many(items: Sequence[tuple[str, str]]) -> list[tuple[str, Stamp | None]]:
    return [(key, stamp_of(directory)) for key, directory in items]


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class Index:
    """Every experiment's rows, the watches and sweeps that keep them true, and the pages
    subscribed to their changes. Lives on the server's event loop."""

    def __init__(
        self,
        experiments: Iterable[ExperimentDir],
        *,
        use_inotify: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.experiments: dict[str, ExperimentState] = {
            e.id: ExperimentState(e) for e in experiments
        }
        self.clock = clock
        self.use_inotify = use_inotify
        self.watches: Watches | None = None
        self.subscribers: set[Subscriber] = set()
        #: called after each batch of changes with (experiment, keys whose row changed)
        self.listeners: list[Callable[[ExperimentState, list[str]], None]] = []
        self._dirty: dict[str, set[str]] = {}
        self._rescan: set[str] = set()
        self._gone: dict[str, set[str]] = {}
        self._flush_handle: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._outputs: dict[tuple[str, str], set[asyncio.Event]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        #: statistics for the page and the benchmark
        self.stats: dict[str, float] = {"sweeps": 0, "swept": 0, "reads": 0, "scan_seconds": 0.0}

    # -- start and stop -----------------------------------------------------------------------

    async def start(self) -> None:
        """Read every experiment, then watch and sweep."""
        self.loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        if self.use_inotify:
            self.watches = Watches(self.notify)
            if self.watches.fd is not None:
                self.loop.add_reader(self.watches.fd, self.watches.handle)
        for state in self.experiments.values():
            await self._relist(state)
        self.stats["scan_seconds"] = time.perf_counter() - t0
        for state in self.experiments.values():
            state.payload().gzipped(b"")  # the first page load finds them ready
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def stop(self) -> None:
        for task in (self._sweeper, self._flushing):
            if task is not None:
                task.cancel()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        if self.watches is not None:
            if self.watches.fd is not None and self.loop is not None:
                self.loop.remove_reader(self.watches.fd)
            self.watches.close()

    def close_streams(self) -> None:
        """End every event stream (the server is stopping): an empty message ends one."""
        self.closed = True
        for sub in list(self.subscribers):
            sub.queue.put_nowait("")
        for events in self._outputs.values():
            for event in events:
                event.set()

    @property
    def inotify_active(self) -> bool:
        return self.watches is not None and self.watches.active

    # -- notifications (watch, sweep) -------------------------------------------------------------

    def notify(self, exp_id: str, key: str | None, what: str) -> None:
        """Something changed (``watch.Notify``); the rows are re-read after ``SETTLE`` s."""
        if exp_id not in self.experiments:
            return
        if what == "output":
            assert key is not None
            for event in self._outputs.get((exp_id, key), ()):
                event.set()
            return
        if what == "rescan" or key is None:
            self._rescan.add(exp_id)
        elif what == "gone":
            self._gone.setdefault(exp_id, set()).add(key)
        else:
            self._dirty.setdefault(exp_id, set()).add(key)
        self._schedule()

    def _schedule(self) -> None:
        if self._flush_handle is None and self.loop is not None:
            self._flush_handle = self.loop.call_later(SETTLE, self._start_flush)

    def _start_flush(self) -> None:
        self._flush_handle = None
        if self._flushing is not None and not self._flushing.done():
            self._schedule()  # one flush at a time; this one runs after it
            return
        assert self.loop is not None
        self._flushing = self.loop.create_task(self._flush())

    async def _flush(self) -> None:
        rescan, self._rescan = self._rescan, set()
        dirty, self._dirty = self._dirty, {}
        gone, self._gone = self._gone, {}
        for exp_id in rescan:
            await self._relist(self.experiments[exp_id])
        for exp_id, keys in gone.items():
            state = self.experiments[exp_id]
            still = [k for k in keys if not (state.exp.jobs / k).is_dir()]
            self._remove(state, still)
        for exp_id, keys in dirty.items():
            state = self.experiments[exp_id]
            await self._refresh(state, sorted(keys))

    def output_event(self, exp_id: str, key: str) -> asyncio.Event:
        """An event set whenever inotify sees ``job.out``/``job.err`` of that job change (the
        follow stream clears it, and checks sizes on its own once a second too)."""
        event = asyncio.Event()
        self._outputs.setdefault((exp_id, key), set()).add(event)
        return event

    def drop_output_event(self, exp_id: str, key: str, event: asyncio.Event) -> None:
        events = self._outputs.get((exp_id, key))
        if events is not None:
            events.discard(event)
            if not events:
                del self._outputs[(exp_id, key)]

    # -- reading ------------------------------------------------------------------------------

    async def _relist(self, state: ExperimentState) -> None:
        """List the experiment's job directories again: new ones read, vanished ones removed."""
        jobs = state.exp.jobs
        if self.watches is not None:
            self.watches.watch_experiment(state.exp.id, str(state.exp.path))

        def listing() -> tuple[list[tuple[str, Path]], dict[str, int]]:
            times = {"": _mtime(jobs) or 0}
            found = list(job_keys(jobs))
            for name in {k.split("/", 1)[0] for k, _ in found}:
                times[name] = _mtime(jobs / name) or 0
            return found, times

        found, times = await asyncio.to_thread(listing)
        state.folder_times = times
        keys = {k for k, _ in found}
        self._remove(state, [k for k in state.rows if k not in keys])
        if self.watches is not None:
            for name in times:
                if name:
                    self.watches.watch_name(state.exp.id, str(jobs), name)
            for key, _ in found:
                self.watches.watch_job(state.exp.id, str(jobs), key)
        new = [k for k in sorted(keys) if k not in state.rows]
        await self._refresh(state, new)

    async def _refresh(self, state: ExperimentState, keys: Sequence[str]) -> None:
        """Re-read ``keys`` and publish the rows that changed."""
        if not keys:
            return
        jobs = state.exp.jobs
        if self.watches is not None:
            for key in keys:
                self.watches.watch_name(state.exp.id, str(jobs), key.split("/", 1)[0])
                self.watches.watch_job(state.exp.id, str(jobs), key)
        readings = await asyncio.to_thread(_read_many, [(k, jobs / k) for k in keys])
        self.stats["reads"] += len(readings)
        changed = []
        for key, reading in readings:
            if reading is None:
                continue  # no state.json yet: its rename will tell
            state.stamps[key] = reading.stamp
            if reading.owner is not None:
                state.owners[key] = reading.owner
            else:
                state.owners.pop(key, None)
            if state.rows.get(key) != reading.row:
                state.set_row(key, reading.row)
                changed.append(key)
        if changed:
            state.version += 1
            self._publish(state, [state.rows[k] for k in changed], [])
            for listener in self.listeners:
                listener(state, changed)

    async def catch_up(self, state: ExperimentState) -> None:
        """List the experiment now, for an action that must see every job (cancel all)."""
        await self._relist(state)

    async def read_new(self, state: ExperimentState, key: str) -> None:
        """Read one job the watcher has not reported yet, if its record exists."""
        if (state.exp.jobs / key / "state.json").is_file():
            await self._refresh(state, [key])

    def _remove(self, state: ExperimentState, keys: Sequence[str]) -> None:
        keys = [k for k in keys if k in state.rows]
        if not keys:
            return
        for key in keys:
            state.set_row(key, None)
            state.stamps.pop(key, None)
            state.owners.pop(key, None)
            if self.watches is not None:
                self.watches.forget(str(state.exp.jobs / key))
        state.version += 1
        self._publish(state, [], keys)

    # -- publishing ---------------------------------------------------------------------------

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def _publish(
        self, state: ExperimentState, rows: list[dict[str, Any]], removed: list[str]
    ) -> None:
        if not self.subscribers:
            return
        message = sse(
            "rows",
            {
                "exp": state.exp.id,
                "version": state.version,
                "rows": rows_payload(rows),
                "removed": removed,
                "summary": state.summary(self.clock()),
                "now": self.clock(),
            },
        )
        for sub in list(self.subscribers):
            sub.put(message)

    # -- the stat sweep -----------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        hot_base = HOT_INTERVAL if self.inotify_active else HOT_INTERVAL_ALONE
        hot_every, cold_every = hot_base, COLD_INTERVAL
        next_cold = time.monotonic() + cold_every
        colds = 0
        while True:
            await asyncio.sleep(hot_every)
            cold = time.monotonic() >= next_cold
            colds += cold
            t0 = time.perf_counter()
            try:
                await self.sweep(cold=cold, relist=cold and colds % RELIST_EVERY == 0)
            except Exception as e:  # a sweep that fails is retried, never fatal to the server
                log.warning("stat sweep failed: %s", e)
            took = time.perf_counter() - t0
            if cold:
                cold_every = max(COLD_INTERVAL, COLD_BUDGET * took)
                next_cold = time.monotonic() + cold_every
            else:
                hot_every = max(hot_base, HOT_BUDGET * took)

    async def sweep(self, *, cold: bool, relist: bool = False) -> None:
        """One sweep: new folders, and the records of unfinished jobs (of every job if
        ``cold``) whose stamp changed; what changed is re-read and published. ``relist``: list
        the job folders even if their modification times say nothing changed."""
        for state in list(self.experiments.values()):
            jobs = state.exp.jobs
            keys = list(state.rows) if cold else state.unfinished()
            names = [n for n in state.folder_times if n]

            def stat_all(
                jobs: Path = jobs, keys: list[str] = keys, names: list[str] = names
            ) -> tuple[dict[str, int | None], list[tuple[str, Stamp | None]]]:
                times = {"": _mtime(jobs)}
                for name in names:
                    times[name] = _mtime(jobs / name)
                base = str(jobs)
                return times, _stat_many([(k, os.path.join(base, k)) for k in keys])

            times, stamps = await asyncio.to_thread(stat_all)
            self.stats["sweeps"] += 1
            self.stats["swept"] += len(stamps) + len(times)
            if relist or any(times.get(n) != state.folder_times.get(n) for n in times):
                await self._relist(state)
            changed = [k for k, s in stamps if s is not None and s != state.stamps.get(k)]
            await self._refresh(state, changed)


__all__ = ["ExperimentState", "Index", "Payload", "Subscriber", "sse"]
