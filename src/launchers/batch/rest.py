"""The queue directory protocol over a REST file API (docs/design/batching.md §3.3): UNICORE storages and
firecREST file systems.

Neither API offers a cheap, atomic publish-by-rename, so entries are written in place and every
reader skips a file that is not a complete JSON object (the next scan tries again). The runner,
which runs where the queue is, still does every other state change by ``rename(2)``. The manager
reads the queue with few requests per cycle: one listing each of ``pending/``, ``running/`` and
``done/``, plus one read per entry that appeared since the last cycle (entries are cached).

``RestQueue`` holds the protocol over the site's files (``remote.storage``: list, read, write,
remove, rename, mkdir, run in worker threads); ``UnicoreQueue`` and ``FirecrestQueue`` only say
where the queue is and which store holds it.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs

from ..errors import AuthenticationError, ConnectorError, LaunchersError
from ..remote.firecrest_kind import executor_from_record as firecrest_from_record
from ..remote.retry import with_retries
from ..remote.unicore_executor import executor_from_record as unicore_from_record
from ..runtime.files import fetch_outputs
from . import queue as Q
from . import runner as R
from .decide import entry_names, lost_claims, parse_entry, requeue_target, snapshot_of
from .remote import RemoteSnapshot, pending_entry

if TYPE_CHECKING:
    from ..remote.firecrest_executor import FirecrestExecutor
    from ..remote.storage import FirecrestStorage, UnicoreStorage
    from ..remote.unicore_executor import UnicoreExecutor

log = logging.getLogger("launchers.batch")

#: entries read at once during a scan (worker threads)
READ_PARALLEL = 8
TASKS = "tasks"


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
class RestQueue(abc.ABC):
    """A queue on a site reached through a REST file API; paths given to the primitives are
    relative to the queue directory. ``path`` is the queue's absolute path on the site."""

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
    store: UnicoreStorage | FirecrestStorage | None = None
    #: the queue directory in the store's paths (relative to a UNICORE storage's root)
    root: str = ""

    @abc.abstractmethod
    def locator(self) -> dict[str, Any]:
        """What a job record keeps to reach this queue again (``launchers cancel``)."""

    # primitives over the store (blocking; called in worker threads) ------------------------------

    @abc.abstractmethod
    def resolve_sync(self) -> None:
        """Find the queue on the site: its absolute ``path``, the ``store`` holding it and the
        queue's ``root`` in that store's paths."""

    def _at(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def _store(self) -> UnicoreStorage | FirecrestStorage:
        assert self.store is not None, "resolve_sync first"
        return self.store

    def list_sync(self, rel: str) -> list[str] | None:
        """Names in a directory; None when it does not exist."""
        try:
            return self._store().listdir_sync(self._at(rel))
        except FileNotFoundError:
            return None

    def read_sync(self, rel: str) -> bytes | None:
        """A whole file's bytes, exactly as on the site (one read); None when it does not exist."""
        return self._store().read_whole_sync(self._at(rel))

    def write_sync(self, rel: str, data: bytes) -> None:
        """Write a file in place (its directory exists)."""
        self._store().write_sync(self._at(rel), data)

    def delete_sync(self, rel: str) -> bool:
        """Remove a file or a directory tree; False when it did not exist (or could not go)."""
        try:
            return self._store().remove_sync(self._at(rel))
        except AuthenticationError:
            raise
        except LaunchersError as e:
            log.debug("batch queue %s: cannot remove %s: %s", self.path, rel, e)
            return False

    def mkdirs_sync(self, rels: Sequence[str]) -> None:
        """Create directories (with their parents)."""
        for rel in rels:
            self._store().mkdir_sync(self._at(rel))

    def rename_sync(self, src: str, dst: str) -> bool:
        """Rename ``src`` to ``dst``; False when ``src`` is gone (a runner claimed it) or the
        rename failed. Only when ``can_rename``."""
        if not self.can_rename:
            raise LaunchersError("this transport has no rename")
        try:
            self._store().rename_sync(self._at(src), self._at(dst))
        except AuthenticationError:
            raise
        except (FileNotFoundError, LaunchersError) as e:
            log.debug("batch queue %s: rename %s -> %s: %s", self.path, src, dst, e)
            return False
        return True

    # helpers ---------------------------------------------------------------------------------

    async def _call(self, fn: Any, *args: Any) -> Any:
        self.requests += 1
        return await asyncio.to_thread(fn, *args)

    async def _read_many(self, rels: Sequence[str]) -> list[bytes | None]:
        sem = asyncio.Semaphore(READ_PARALLEL)

        async def one(rel: str) -> bytes | None:
            async with sem:
                return await self._call(self.read_sync, rel)

        return list(await asyncio.gather(*(one(r) for r in rels)))

    async def _resolve(self) -> None:
        if not self.path:
            await self._call(self.resolve_sync)

    # the protocol ----------------------------------------------------------------------------

    async def ensure(self) -> None:
        """Create the subdirectories and upload ``runner.py`` (once per process)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._resolve()
            if self.ready:
                return
            await self._call(self.mkdirs_sync, [*R.SUBDIRS, TASKS])
            await self._call(self.write_sync, Q.RUNNER_FILE, Q.runner_source())
            self.ready = True

    def task_dir(self, task_id: str) -> str:
        """Where a task's outputs are written on the site."""
        return f"{self.path}/{TASKS}/{task_id}"

    async def prepare_task(self, task_id: str) -> str:
        """The task's directory on the site, emptied of a previous run's outputs and entries."""
        await self._resolve()
        for rel in (f"{TASKS}/{task_id}", f"{R.DONE}/{task_id}.json", f"{R.CANCEL}/{task_id}"):
            await self._call(self.delete_sync, rel)
        await self._call(self.mkdirs_sync, [f"{TASKS}/{task_id}"])
        self._done.pop(task_id, None)
        self._running.pop(task_id, None)
        self._cancelled.discard(task_id)
        return self.task_dir(task_id)

    async def publish(self, entry: Mapping[str, Any]) -> str:
        """Write ``pending/<seq>-<id>.json`` in place (readers skip it until it parses)."""
        await self._resolve()
        data, name = pending_entry(entry)
        await self._call(self.write_sync, f"{R.PENDING}/{name}", data)
        return name

    async def scan(self) -> RemoteSnapshot:
        """Three listings, then one read per done/running entry and runner not seen before."""
        await self._resolve()
        lists = await asyncio.gather(
            *(self._call(self.list_sync, s) for s in (R.PENDING, R.RUNNING, R.DONE))
        )
        pending, running, done = (entry_names(x or []) for x in lists)
        done_ids = [n[:-5] for n in done if n.endswith(".json")]
        running_ids = [n[:-5] for n in running if n.endswith(".json")]
        self._done = {t: e for t, e in self._done.items() if t in set(done_ids)}
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
        names = entry_names(await self._call(self.list_sync, R.PENDING) or [])
        name = next((n for n in names if (R.split_pending(n) or (0, ""))[1] == task_id), None)
        done = f"{R.DONE}/{task_id}.json"
        if (
            name is not None
            and self.can_rename
            and await self._call(self.rename_sync, f"{R.PENDING}/{name}", done)
        ):
            await self._call(self.write_sync, done, json.dumps(cancelled_entry(task_id)).encode())
            return "cancelled"
        if task_id in self._done:
            return "requested"
        # first the request (a runner claiming meanwhile sees it), then take the entry away
        await self._call(self.write_sync, f"{R.CANCEL}/{task_id}", (R.now_iso() + "\n").encode())
        if (
            name is not None
            and not self.can_rename
            and await self._call(self.delete_sync, f"{R.PENDING}/{name}")
        ):
            await self._call(self.write_sync, done, json.dumps(cancelled_entry(task_id)).encode())
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
            if await self._call(self.rename_sync, f"{R.RUNNING}/{tid}.json", target):
                moved.append(tid)
                self._running.pop(tid, None)
                if target.startswith(R.DONE):
                    await self._call(
                        self.write_sync, target, json.dumps(cancelled_entry(tid)).encode()
                    )
        return moved

    async def _note_requeue(self, task_id: str, runner: str) -> None:
        """Append ``launchers: runner R lost, task re-queued`` to the task's ``job.err`` on the
        site (read, then written whole: these file APIs have no append)."""
        rel = f"{TASKS}/{task_id}/job.err"
        try:
            old = await self._call(self.read_sync, rel) or b""
            line = f"launchers: runner {runner} lost, task re-queued\n".encode()
            await self._call(
                self.write_sync,
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
        present = set(await self._call(self.list_sync, f"{TASKS}/{task_id}") or [])
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
        data = await self._call(self.read_sync, rel)
        if data is None:
            raise FileNotFoundError(rel)
        return data[offset:] if size is None else data[offset : offset + size]


# -- UNICORE ----------------------------------------------------------------------------------------


@attrs.define(eq=False)
class UnicoreQueue(RestQueue):
    """The queue at ``launchers/batch/<shape>`` in a UNICORE storage (``site.batch_storage``):
    its files through the storage's ``UnicoreStorage`` (renames through its ``rename`` action)."""

    executor: UnicoreExecutor | None = None
    storage: str = "HOME"
    rel: str = ""

    def _ex(self) -> UnicoreExecutor:
        assert self.executor is not None
        return self.executor

    def locator(self) -> dict[str, Any]:
        return {
            "kind": "unicore",
            "site": self._ex()._site_record(),
            "storage": self.storage,
            "rel": self.rel,
        }

    def resolve_sync(self) -> None:
        ex = self._ex()
        url = f"{ex.site.url.rstrip('/')}/storages/{quote(self.storage)}"
        try:
            props = with_retries(
                lambda: ex._get(url),
                f"UNICORE {ex.site.url}: storage {self.storage}",
                tries=4,
                secrets=ex._secrets,
            )
        except LaunchersError:
            raise
        except Exception as e:
            raise ConnectorError(
                f"UNICORE site {ex.site.url}: cannot use the storage {self.storage!r} "
                f"(site.batch_storage) for the batch queue: {e}"
            ) from None
        links = props.get("_links") or {}
        mount = str(props.get("mountPoint") or "")
        if not mount:
            raise ConnectorError(
                f"UNICORE storage {self.storage!r} does not tell its mountPoint: the pilot "
                "could not find the queue"
            )
        files_url = str((links.get("files") or {}).get("href") or url + "/files").rstrip("/")
        rename_url = str((links.get("action:rename") or {}).get("href") or "")
        self.store = ex.storage(files_url, rename_url)
        self.can_rename = self.store.can_rename
        self.root = self.rel
        self.path = posixpath.join(mount.rstrip("/") or "/", self.rel)


# -- firecREST ------------------------------------------------------------------------------------------


@attrs.define(eq=False)
class FirecrestQueue(RestQueue):
    """The queue at ``<workdir>/batch/<shape>`` on a firecREST system, its files through the
    executor's ``FirecrestStorage`` (``ops/ls``, byte-exact reads, ``ops/upload``, ``ops/rm``,
    ``ops/mkdir``). firecREST v2 moves files only in a scheduler job (``transfer/mv``): no
    cheap rename, so cancel removes the pending entry and recovery is left to the next
    pilot's runner."""

    executor: FirecrestExecutor | None = None
    key: str = ""

    def _ex(self) -> FirecrestExecutor:
        assert self.executor is not None
        return self.executor

    def locator(self) -> dict[str, Any]:
        return {"kind": "firecrest", "site": self._ex()._site_record(), "key": self.key}

    def resolve_sync(self) -> None:
        ex = self._ex()
        self.store = ex.files
        self.root = self.path = posixpath.join(ex.base_dir(), "batch", self.key)


# -- choosing the transport -------------------------------------------------------------------------


def check_rest_site(inner: Any) -> None:
    """Before a task is recorded: the site can hold a queue and the credentials are set."""
    site = getattr(getattr(inner, "group", None), "site", None)
    if inner.kind == "firecrest" and getattr(site, "api_version", 2) != 2:
        raise LaunchersError(
            f"batching over the firecREST v1 site {getattr(site, 'api_url', '?')} is not supported: "
            "use its v2 API (api_version: 2)"
        )
    inner.executor().validate(inner, None)


@attrs.frozen
class _SiteRecord:
    """The two fields of a job record that the remote executors' ``executor_from_record`` read."""

    task_id: str
    extra: Mapping[str, Any]


def rest_queue_from_locator(task_id: str, locator: Mapping[str, Any]) -> RestQueue:
    """The queue a record's ``locator`` names, with an executor rebuilt from the recorded site."""
    kind = str(locator.get("kind"))
    record: Any = _SiteRecord(task_id, {f"{kind}_site": locator.get("site")})
    if kind == "unicore":
        ex_u = unicore_from_record({}, record)
        return UnicoreQueue(
            executor=ex_u,
            storage=str(locator.get("storage") or "HOME"),
            rel=str(locator.get("rel")),
        )
    if kind == "firecrest":
        ex_f = firecrest_from_record({}, record)
        return FirecrestQueue(executor=ex_f, key=str(locator.get("key")))
    raise LaunchersError(f"job {task_id}: no REST batch queue for {kind!r}")


def rest_queue(inner: Any, key: str) -> RestQueue:
    """The queue of shape ``key`` at the inner launcher's UNICORE or firecREST site."""
    executor = inner.executor()
    if inner.kind == "unicore":
        site = executor.site
        storage = str(getattr(site, "batch_storage", None) or "HOME")
        return UnicoreQueue(executor=executor, storage=storage, rel=f"launchers/batch/{key}")
    if inner.kind == "firecrest":
        return FirecrestQueue(executor=executor, key=key)
    raise LaunchersError(f"no REST batch queue for {inner.kind} launchers")


__all__ = [
    "FirecrestQueue",
    "RestQueue",
    "UnicoreQueue",
    "cancelled_entry",
    "check_rest_site",
    "entry_names",
    "lost_claims",
    "parse_entry",
    "requeue_target",
    "rest_queue",
    "snapshot_of",
]
