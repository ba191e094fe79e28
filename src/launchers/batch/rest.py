"""The queue directory protocol over a REST file API (docs/design/pilots.md §3.3): UNICORE storages and
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
import logging
import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs

from ..errors import ConnectorError, LaunchersError
from ..remote.firecrest_kind import executor_from_record as firecrest_from_record
from ..remote.retry import with_retries
from ..remote.unicore_executor import executor_from_record as unicore_from_record
from .decide import entry_names, lost_claims, parse_entry, requeue_target, snapshot_of
from .remote import StoreQueue, cancelled_entry

if TYPE_CHECKING:
    from ..remote.firecrest_executor import FirecrestExecutor
    from ..remote.unicore_executor import UnicoreExecutor

log = logging.getLogger("launchers.batch")


# -- the protocol over a site's files ------------------------------------------------------------


@attrs.define(eq=False)
class RestQueue(StoreQueue):
    """A queue on a site reached through a REST file API (``StoreQueue`` over the site's store:
    entries written in place, no Python run there). ``path`` is the queue's absolute path on
    the site."""

    @abc.abstractmethod
    def resolve_sync(self) -> None:
        """Find the queue on the site: its absolute ``path``, the ``store`` holding it and the
        queue's ``root`` in that store's paths (blocking: runs in a worker thread)."""

    async def _resolve(self) -> None:
        if not self.path:
            self.requests += 1
            await asyncio.to_thread(self.resolve_sync)


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


def check_rest_site(inner: Any, task: Any = None) -> None:
    """Before a task is recorded: the site can hold a queue, the credentials are set, and the
    task's environment takes the group's form (docs/remote-sites.md, "The same model")."""
    site = getattr(getattr(inner, "group", None), "site", None)
    if inner.kind == "firecrest" and getattr(site, "api_version", 2) != 2:
        raise LaunchersError(
            f"batching over the firecREST v1 site {getattr(site, 'api_url', '?')} is not supported: "
            "use its v2 API (api_version: 2)"
        )
    inner.executor().validate(inner, task)


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
