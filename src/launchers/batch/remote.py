"""The queue directory protocol for queues that live elsewhere (docs/design/pilots.md §3.3):
``StoreQueue``, the protocol over a ``protocols.FileStore`` (publish, scan with cached entries,
cancel, recovery, outputs), the transports differing by capabilities (``can_rename``,
``runs_python``); and ``RemoteQueue``, the queue under an SSH connector's ``workdir``:
publication through SFTP (temporary name + rename), each manager cycle reading the whole queue
with ONE remote command (``runs_python``). The REST sites' queues are ``batch.rest``."""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import posixpath
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ..connectors.registry import get_connector
from ..errors import AuthenticationError, ConnectorError, LaunchersError
from ..jobs.record import RESULT_FILES
from ..runtime.files import configured_base, fetch_outputs
from . import queue as Q
from . import runner as R
from .decide import entry_names, lost_claims, parse_entry, requeue_target, snapshot_of

if TYPE_CHECKING:
    from ..connectors.base import Connector
    from ..protocols import FileStore

log = logging.getLogger("launchers.batch")

#: lists every subdirectory and reads done/, running/ and runners/ entries; prints one JSON object
SCAN_SCRIPT = r"""
import json, os, sys
q = sys.argv[1]
out = {}
for sub in ("pending", "running", "done", "cancel", "runners"):
    try:
        out[sub] = sorted(n for n in os.listdir(os.path.join(q, sub)) if not n.startswith("."))
    except OSError:
        out[sub] = []
for sub in ("done", "running", "runners"):
    data = {}
    for n in out[sub]:
        if n.endswith(".json"):
            try:
                with open(os.path.join(q, sub, n)) as f:
                    data[n[:-5]] = json.load(f)
            except (OSError, ValueError):
                pass
    out[sub + "_entries"] = data
print(json.dumps(out))
"""

#: rename pending/<name> to done/<id>.json (prints "cancelled"), else write cancel/<id> ("requested")
CANCEL_SCRIPT = r"""
import json, os, sys, time
q, tid = sys.argv[1], sys.argv[2]
end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
for n in sorted(os.listdir(os.path.join(q, "pending"))):
    if n.endswith(".json") and n[:-5].split("-", 1)[-1] == tid:
        src, dst = os.path.join(q, "pending", n), os.path.join(q, "done", tid + ".json")
        try:
            with open(src) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            entry = {"id": tid}
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            continue
        entry.update(state="CANCELLED", reason="cancelled on request", rc=None, signal=None, end=end)
        with open(dst + ".tmp", "w") as f:
            json.dump(entry, f)
        os.replace(dst + ".tmp", dst)
        print("cancelled")
        sys.exit(0)
if not os.path.exists(os.path.join(q, "done", tid + ".json")):
    with open(os.path.join(q, "cancel", "." + tid), "w") as f:
        f.write(end + "\n")
    os.replace(os.path.join(q, "cancel", "." + tid), os.path.join(q, "cancel", tid))
print("requested")
"""

#: re-queue claims of lost runners with the runner's own code (runner.py sits in the queue)
RECOVER_SCRIPT = r"""
import json, sys
q = sys.argv[1]
sys.path.insert(0, q)
import runner
print(json.dumps(runner.recover_lost(q, sys.argv[2], float(sys.argv[3]), sys.argv[4:])))
"""

OUTPUTS = RESULT_FILES
#: entries read at once during a scan (worker threads)
READ_PARALLEL = 8
TASKS = "tasks"


@attrs.frozen
class RemoteSnapshot:
    """One remote scan: the listing (same shape as a local scan) plus the entries read."""

    snap: Q.Snapshot
    done: Mapping[str, dict[str, Any]]
    running: Mapping[str, dict[str, Any]]
    runners: Mapping[str, dict[str, Any]]


def parse_scan(text: str) -> RemoteSnapshot:
    """The remote scan's JSON as a snapshot (pure)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConnectorError(f"batch queue scan: unreadable answer {text[:200]!r}: {e}") from None
    pending: dict[str, str] = {}
    for name in data.get("pending", []):
        parsed = R.split_pending(name)
        if parsed is not None:
            pending[parsed[1]] = name

    def ids(sub: str, suffix: str = ".json") -> frozenset[str]:
        return frozenset(
            n[: -len(suffix)] if suffix and n.endswith(suffix) else n for n in data.get(sub, [])
        )

    snap = Q.Snapshot(
        pending=pending,
        running=ids(R.RUNNING),
        done=ids(R.DONE),
        cancel=ids(R.CANCEL, ""),
        runners=ids(R.RUNNERS),
    )
    return RemoteSnapshot(
        snap,
        data.get("done_entries", {}),
        data.get("running_entries", {}),
        data.get("runners_entries", {}),
    )


def connector_of(inner: Any) -> Connector:
    """The connector an inner launcher runs through (its group's launchers.yaml gives its settings)."""
    # lazy: the configuration loader (~80 ms to import) only for a connector
    from ..config.loader import load_config

    path = getattr(getattr(getattr(inner, "group", None), "position", None), "file", None)
    return get_connector(str(inner.connector), load_config(path))


def remote_base(connector: Connector) -> str:
    """The connector's ``workdir`` (where remote queues live; ``~`` expanded later)."""
    return configured_base(connector)


def pending_entry(entry: Mapping[str, Any]) -> tuple[bytes, str]:
    """The bytes and the ``pending/`` name of a task entry to publish (submit time as ``seq``)."""
    data = dict(entry)
    data.setdefault("seq", time.time_ns())
    data.setdefault("attempt", 0)
    return json.dumps(data).encode(), R.pending_name(int(data["seq"]), str(data["id"]))


# -- pure pieces --------------------------------------------------------------------------------


def cancelled_entry(task_id: str) -> dict[str, Any]:
    """The ``done/`` entry of a task cancelled before any runner claimed it (pure)."""
    return {
        "id": task_id,
        "state": "CANCELLED",
        "reason": "cancelled on request",
        "rc": None,
        "signal": None,
        "start": None,
        "end": R.now_iso(),
    }


# -- the protocol over file primitives -------------------------------------------------------------


@attrs.define(eq=False)
class StoreQueue(abc.ABC):
    """The queue directory protocol over a ``protocols.FileStore`` (a connector, a UNICORE
    storage, a firecREST file system); paths given to the primitives are relative to the queue
    directory, ``path`` is its absolute path where the runner runs. What differs between
    transports is a capability: ``can_rename`` (cancel and recovery by rename, else by removal
    and the next pilot's runner) and ``runs_python`` (a transport that runs Python where the
    queue is scans, cancels and recovers with one command: ``RemoteQueue``)."""

    #: whether the transport runs one Python command next to the queue (scan, cancel, recover)
    runs_python: ClassVar[bool] = False

    path: str = ""
    ready: bool = False
    #: whether the API renames files cheaply and atomically (recovery and cancel use it)
    can_rename: bool = False
    #: runners whose pilot is final and whose claims no rename could recover: the next pilot's
    #: runner re-queues them at start-up (``--lost-runner``)
    lost_runners: set[str] = attrs.field(factory=set)
    _done: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    _running: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    _runners: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    _cancelled: set[str] = attrs.field(factory=set)
    _lock: asyncio.Lock | None = None
    #: requests sent by this queue (tests and docs count them)
    requests: int = 0
    #: the site's files holding the queue (``remote.storage``), set by ``resolve_sync``
    store: FileStore | None = None
    #: the queue directory in the store's paths (relative to a UNICORE storage's root)
    root: str = ""

    @abc.abstractmethod
    def locator(self) -> dict[str, Any]:
        """What a job record keeps to reach this queue again (``launchers cancel``)."""

    # primitives over the store (``protocols.FileStore``) ----------------------------------------

    @abc.abstractmethod
    async def _resolve(self) -> None:
        """Find the queue (once): its absolute ``path``, the ``store`` and the queue's ``root``
        in the store's paths."""

    def _at(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def _store(self) -> FileStore:
        assert self.store is not None, "_resolve first"
        return self.store

    async def list_entries(self, rel: str) -> list[str] | None:
        """Names in a directory; None when it does not exist."""
        try:
            return await self._store().listdir(self._at(rel))
        except FileNotFoundError:
            return None

    async def read_entry(self, rel: str) -> bytes | None:
        """A whole file's bytes, exactly as on the site (one read where the store can: its
        ``read_whole``); None when it does not exist."""
        store = self._store()
        whole = getattr(store, "read_whole", None)
        if whole is not None:
            data: bytes | None = await whole(self._at(rel))
            return data
        try:
            return await store.read(self._at(rel))
        except FileNotFoundError:
            return None

    async def write_entry(self, rel: str, data: bytes) -> None:
        """Write a file (in place on a REST site, atomically through a connector)."""
        await self._store().write(self._at(rel), data)

    async def delete_entry(self, rel: str) -> bool:
        """Remove a file or a directory tree; False when it did not exist (or could not go)."""
        try:
            return await self._store().remove(self._at(rel))
        except AuthenticationError:
            raise
        except LaunchersError as e:
            log.debug("batch queue %s: cannot remove %s: %s", self.path, rel, e)
            return False

    async def make_dirs(self, rels: Sequence[str]) -> None:
        """Create directories (with their parents)."""
        for rel in rels:
            await self._store().mkdir(self._at(rel))

    async def rename_entry(self, src: str, dst: str) -> bool:
        """Rename ``src`` to ``dst``; False when ``src`` is gone (a runner claimed it) or the
        rename failed. Only when ``can_rename``."""
        if not self.can_rename:
            raise LaunchersError("this transport has no rename")
        try:
            await self._store().rename(self._at(src), self._at(dst))
        except AuthenticationError:
            raise
        except (FileNotFoundError, LaunchersError) as e:
            log.debug("batch queue %s: rename %s -> %s: %s", self.path, src, dst, e)
            return False
        return True

    # helpers ---------------------------------------------------------------------------------

    async def _call(self, fn: Any, *args: Any) -> Any:
        self.requests += 1
        return await fn(*args)

    async def _read_many(self, rels: Sequence[str]) -> list[bytes | None]:
        sem = asyncio.Semaphore(READ_PARALLEL)

        async def one(rel: str) -> bytes | None:
            async with sem:
                return await self._call(self.read_entry, rel)

        return list(await asyncio.gather(*(one(r) for r in rels)))

    # the protocol ----------------------------------------------------------------------------

    async def ensure(self) -> None:
        """Create the subdirectories and upload ``runner.py`` (once per process)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._resolve()
            if self.ready:
                return
            await self._call(self.make_dirs, [*R.SUBDIRS, TASKS])
            await self._call(self.write_entry, Q.RUNNER_FILE, Q.runner_source())
            self.ready = True

    def task_dir(self, task_id: str) -> str:
        """Where a task's outputs are written on the site."""
        return f"{self.path}/{TASKS}/{task_id}"

    async def prepare_task(self, task_id: str) -> str:
        """The task's directory on the site, emptied of a previous run's outputs and entries."""
        await self._resolve()
        for rel in (f"{TASKS}/{task_id}", f"{R.DONE}/{task_id}.json", f"{R.CANCEL}/{task_id}"):
            await self._call(self.delete_entry, rel)
        await self._call(self.make_dirs, [f"{TASKS}/{task_id}"])
        self._done.pop(task_id, None)
        self._running.pop(task_id, None)
        self._cancelled.discard(task_id)
        return self.task_dir(task_id)

    async def publish(self, entry: Mapping[str, Any]) -> str:
        """Write ``pending/<seq>-<id>.json`` in place (readers skip it until it parses)."""
        await self._resolve()
        data, name = pending_entry(entry)
        await self._call(self.write_entry, f"{R.PENDING}/{name}", data)
        return name

    async def scan(self) -> RemoteSnapshot:
        """Three listings, then one read per done/running entry and runner not seen before."""
        await self._resolve()
        lists = await asyncio.gather(
            *(self._call(self.list_entries, s) for s in (R.PENDING, R.RUNNING, R.DONE))
        )
        pending, running, done = (entry_names(x or []) for x in lists)
        done_ids = [n[:-5] for n in done if n.endswith(".json")]
        finished = set(done_ids)
        # a claim whose result is already in done/ is over: a runner writes done/ before it
        # removes running/ where the API cannot rename, and a listing may fall between the two
        running_ids = [n[:-5] for n in running if n.endswith(".json") and n[:-5] not in finished]
        self._done = {t: e for t, e in self._done.items() if t in finished}
        new_done = [t for t in done_ids if t not in self._done]
        # a claim is read when it appears (a re-claim passes through pending/ and appears again)
        self._running = {t: e for t, e in self._running.items() if t in set(running_ids)}
        new_running = [t for t in running_ids if t not in self._running]
        rels = [f"{R.DONE}/{t}.json" for t in new_done] + [
            f"{R.RUNNING}/{t}.json" for t in new_running
        ]
        for rel, data in zip(rels, await self._read_many(rels), strict=True):
            entry = parse_entry(data)
            if entry is None:
                continue  # written in place and not complete yet (or gone): next scan
            tid = rel.split("/", 1)[1][:-5]
            (self._done if rel.startswith(R.DONE) else self._running)[tid] = entry
        wanted = sorted(
            {str(e.get("runner")) for e in self._running.values() if e.get("runner")}
            - set(self._runners)
        )
        for runner, data in zip(
            wanted, await self._read_many([f"{R.RUNNERS}/{r}.json" for r in wanted]), strict=True
        ):
            entry = parse_entry(data)
            if entry is not None:
                self._runners[runner] = entry
        # a lost runner is handed to new pilots only while it still holds claims
        self.lost_runners &= {str(e.get("runner")) for e in self._running.values()}
        snap = snapshot_of(pending, running, done, list(self._runners))
        return RemoteSnapshot(snap, dict(self._done), dict(self._running), dict(self._runners))

    async def cancel_task(self, task_id: str) -> str:
        """ "cancelled" when still pending (renamed, or removed, into ``done/``), "requested"
        (``cancel/<id>`` written: the runner stops it) otherwise."""
        await self._resolve()
        self._cancelled.add(task_id)
        names = entry_names(await self._call(self.list_entries, R.PENDING) or [])
        name = next((n for n in names if (R.split_pending(n) or (0, ""))[1] == task_id), None)
        done = f"{R.DONE}/{task_id}.json"
        if (
            name is not None
            and self.can_rename
            and await self._call(self.rename_entry, f"{R.PENDING}/{name}", done)
        ):
            await self._call(self.write_entry, done, json.dumps(cancelled_entry(task_id)).encode())
            return "cancelled"
        if task_id in self._done:
            return "requested"
        # first the request (a runner claiming meanwhile sees it), then take the entry away
        await self._call(self.write_entry, f"{R.CANCEL}/{task_id}", (R.now_iso() + "\n").encode())
        if (
            name is not None
            and not self.can_rename
            and await self._call(self.delete_entry, f"{R.PENDING}/{name}")
        ):
            await self._call(self.write_entry, done, json.dumps(cancelled_entry(task_id)).encode())
            return "cancelled"
        return "requested"

    async def recover(
        self, who: str, final_runners: list[str], lost_after: float = R.LOST_AFTER
    ) -> list[str]:
        """Re-queue the claims of runners whose pilot is final: by rename where the API has
        one; else remember the runners for the next pilot, whose runner re-queues them."""
        lost = lost_claims(self._running, final_runners)
        if not lost:
            return []
        if not self.can_rename:
            self.lost_runners.update(str(self._running[t].get("runner")) for t in lost)
            return []
        moved = []
        for tid in lost:
            entry = self._running[tid]
            target = requeue_target(tid, entry, tid in self._cancelled)
            if not target.startswith(R.DONE):
                # before the rename: until then no runner can claim the task and append to job.err
                await self._note_requeue(tid, str(entry.get("runner")))
            if await self._call(self.rename_entry, f"{R.RUNNING}/{tid}.json", target):
                moved.append(tid)
                self._running.pop(tid, None)
                if target.startswith(R.DONE):
                    await self._call(
                        self.write_entry, target, json.dumps(cancelled_entry(tid)).encode()
                    )
        return moved

    async def _note_requeue(self, task_id: str, runner: str) -> None:
        """Append ``launchers: runner R lost, task re-queued`` to the task's ``job.err`` on the
        site (read, then written whole: these file APIs have no append)."""
        rel = f"{TASKS}/{task_id}/job.err"
        try:
            old = await self._call(self.read_entry, rel) or b""
            line = f"launchers: runner {runner} lost, task re-queued\n".encode()
            await self._call(
                self.write_entry,
                rel,
                old + (b"" if not old or old.endswith(b"\n") else b"\n") + line,
            )
        except LaunchersError:
            pass  # the note is informative; the re-queue itself must still happen

    def pilot_args(self) -> list[str]:
        """Runner arguments for the next pilot: ``--lost-runner R`` for every known lost runner."""
        out: list[str] = []
        for r in sorted(self.lost_runners):
            out += ["--lost-runner", r]
        return out

    async def fetch_outputs(self, task_id: str, local: Path) -> None:
        """Copy the task's outputs into its local job directory (one listing, one read each)."""
        await self._resolve()
        present = set(await self._call(self.list_entries, f"{TASKS}/{task_id}") or [])
        await fetch_outputs(
            self,
            f"{TASKS}/{task_id}",
            local,
            max_bytes=None,
            present=present,
            skip_failures=False,  # a failed read fails the cycle: the task is fetched next time
        )

    async def read(self, rel: str, offset: int = 0, size: int | None = None) -> bytes:
        """A file of the queue (``FileStore.read``: ``FileNotFoundError`` when absent)."""
        data = await self._call(self.read_entry, rel)
        if data is None:
            raise FileNotFoundError(rel)
        return data[offset:] if size is None else data[offset : offset + size]


# -- over an SSH connector ----------------------------------------------------------------------


@attrs.define(eq=False)
class RemoteQueue(StoreQueue):
    """A queue directory on the far side of an SSH connector: the connector is its
    ``FileStore`` (atomic writes, cheap renames) and runs Python there, so that a scan, a
    cancel and a recovery are one command each (``runs_python``)."""

    runs_python: ClassVar[bool] = True

    connector: Connector | None = None
    #: the launchers.yaml that declares the connector (recorded so a record alone reaches it)
    config_file: str | None = None
    can_rename: bool = True

    def _conn(self) -> Connector:
        assert self.connector is not None
        return self.connector

    def locator(self) -> dict[str, Any]:
        """What a job record keeps to reach this queue again (``launchers cancel``)."""
        return {
            "kind": "ssh",
            "connector": self._conn().name,
            "config": self.config_file,
            "path": self.path,
        }

    async def _resolve(self) -> None:
        """Expand a leading ``~`` of the queue path with the remote home (once): remote
        commands receive the path as an argument, where no shell expands it."""
        original = self.path
        if original == "~" or original.startswith("~/"):
            home = (await self._conn().home()).rstrip("/")
            # concurrent submissions may resolve at once: expand the path we read, once
            if self.path == original:
                self.path = home + original[1:]
        self.store = self.connector
        self.root = self.path

    async def _py(self, script: str, *args: str) -> str:
        await self._resolve()
        res = await self._conn().run(["python3", "-c", script, self.path, *args])
        if res.returncode != 0:
            raise ConnectorError(
                f"batch queue {self.path}: remote command failed: {res.stderr.strip()[:300]}"
            )
        return res.stdout

    async def ensure(self) -> None:
        """Create the subdirectories and write ``runner.py`` (once per process)."""
        await self._resolve()
        if self.ready:
            return
        subs = " ".join(shlex.quote(f"{self.path}/{s}") for s in (*R.SUBDIRS, "tasks"))
        res = await self._conn().run(["sh", "-c", f"mkdir -p {subs}"])
        if res.returncode != 0:
            raise LaunchersError(
                f"batch queue {self.path}: cannot prepare it: {res.stderr.strip()}"
            )
        await self._conn().write_file(f"{self.path}/{Q.RUNNER_FILE}", Q.runner_source())
        self.ready = True

    async def prepare_task(self, task_id: str) -> str:
        """Create the task's remote directory, emptied of a previous run's outputs and queue entries."""
        await self._resolve()
        d = self.task_dir(task_id)
        names = " ".join(shlex.quote(f"{d}/{n}") for n in OUTPUTS)
        old = f"{shlex.quote(self.path)}/done/{shlex.quote(task_id)}.json {shlex.quote(self.path)}/cancel/{shlex.quote(task_id)}"
        res = await self._conn().run(
            ["sh", "-c", f"mkdir -p {shlex.quote(d)} && rm -f {names} {old}"]
        )
        if res.returncode != 0:
            raise ConnectorError(
                f"batch queue {self.path}: cannot prepare {d}: {res.stderr.strip()}"
            )
        return d

    async def scan(self) -> RemoteSnapshot:
        """ONE remote command: every listing plus the done/, running/ and runners/ entries."""
        await self._resolve()
        return parse_scan(await self._py(SCAN_SCRIPT))

    async def cancel_task(self, task_id: str) -> str:
        """ "cancelled" when still pending (renamed to done/), "requested" (cancel/<id> written) otherwise."""
        await self._resolve()
        return (await self._py(CANCEL_SCRIPT, task_id)).strip() or "requested"

    async def recover(
        self, who: str, final_runners: list[str], lost_after: float = R.LOST_AFTER
    ) -> list[str]:
        """Re-queue claims whose runner's pilot is final or whose heartbeat is older than ``lost_after``."""
        await self._resolve()
        text = await self._py(RECOVER_SCRIPT, who, f"{lost_after:g}", *final_runners)
        try:
            return [str(t) for t in json.loads(text)]
        except ValueError:
            raise ConnectorError(
                f"batch queue {self.path}: unreadable recovery answer {text[:200]!r}"
            ) from None

    async def fetch_outputs(self, task_id: str, local: Path) -> None:
        """Copy the task's outputs back into its local job directory."""
        await self._resolve()
        await fetch_outputs(self._conn(), self.task_dir(task_id), local)


__all__ = [
    "READ_PARALLEL",
    "TASKS",
    "RemoteQueue",
    "RemoteSnapshot",
    "StoreQueue",
    "cancelled_entry",
    "connector_of",
    "parse_scan",
    "remote_base",
]
