"""Files at a UNICORE or firecREST site as ``protocols.FileStore``s (docs/remote-sites.md,
"Remote files"): ``UnicoreStorage`` (a storage's ``/files/`` resource, e.g. a job's working
directory), ``FirecrestStorage`` (firecREST v2's ``ops/*``, byte-exact although firecREST
decodes what it reads) and ``FirecrestV1Storage`` (v1's ``/utilities``).

Each operation is a blocking call of pyunicore or pyfirecrest, retried on transient failures
(``remote.retry``); the ``*_sync`` methods run it in the calling thread, the ``FileStore``
methods in a worker thread. The executor that owns the client is the store's ``session``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from ..errors import LaunchersError
from .decide import block_at, exact_prefix, read_start, view_window
from .retry import MAX_TRIES, firecrest_transient, redact, status_of, with_retries

log = logging.getLogger("launchers.remote")

#: files up to this size are uploaded to UNICORE from memory (safe to repeat); larger ones are
#: streamed from their file
IN_MEMORY_UPLOAD = 64 * 1024 * 1024
#: what ``FirecrestStorage.op`` returns for a 404 and a 413
MISSING = object()
TOO_BIG = object()


class Session(Protocol):
    """What a store needs of the executor that owns the site's client."""

    #: secrets to keep out of messages
    _secrets: list[str]

    def client(self) -> Any: ...


def unicore_path(rel: str) -> str:
    """A path for a storage's ``/files/`` URL, percent-encoded twice: UNICORE decodes file paths
    twice (JAX-RS, then ``makeSMSLocal``) and pyunicore sends them as given, so ``x%41.txt``,
    ``a#b`` or ``c?d`` arrive as written only so (pure)."""
    return quote(quote(rel, safe="/"), safe="/")


def unicore_action_path(rel: str) -> str:
    """A path inside a storage action's JSON body (``rename``, ``copy``), decoded once (pure)."""
    return quote(rel, safe="/")


class _Threaded:
    """The ``FileStore`` methods over the blocking ``*_sync`` ones of a subclass."""

    can_rename = False

    def read_sync(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        raise NotImplementedError

    def write_sync(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def stat_size_sync(self, path: str) -> int | None:
        raise NotImplementedError

    def mkdir_sync(self, path: str) -> None:
        raise NotImplementedError

    def remove_sync(self, path: str) -> bool:
        raise NotImplementedError

    def rename_sync(self, src: str, dst: str) -> None:
        raise LaunchersError(f"{type(self).__name__}: this site has no cheap rename")

    def listdir_sync(self, path: str) -> list[str]:
        raise NotImplementedError

    async def read(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        return await asyncio.to_thread(self.read_sync, path, offset, size)

    def read_whole_sync(self, path: str) -> bytes | None:
        raise NotImplementedError

    async def read_whole(self, path: str) -> bytes | None:
        """The whole file in as few requests as the site allows; None when it does not exist."""
        return await asyncio.to_thread(self.read_whole_sync, path)

    async def write(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(self.write_sync, path, data)

    async def stat_size(self, path: str) -> int | None:
        return await asyncio.to_thread(self.stat_size_sync, path)

    async def mkdir(self, path: str) -> None:
        await asyncio.to_thread(self.mkdir_sync, path)

    async def remove(self, path: str) -> bool:
        return await asyncio.to_thread(self.remove_sync, path)

    async def rename(self, src: str, dst: str) -> None:
        await asyncio.to_thread(self.rename_sync, src, dst)

    async def listdir(self, path: str) -> list[str]:
        return await asyncio.to_thread(self.listdir_sync, path)


# -- UNICORE --------------------------------------------------------------------------------------


class UnicoreStorage(_Threaded):
    """A UNICORE storage's files (paths relative to its root), through pyunicore's transport.

    A ``Range`` starting past a file's end makes UNICORE skip bytes forever, so a read from an
    offset asks the file's size first (``GET`` with ``Accept: application/json``) and asks
    nothing more when there is nothing new. ``refused(error, what)`` raises the executor's
    ``AuthenticationError`` for a 401 or 403."""

    def __init__(
        self,
        session: Session,
        files_url: str,
        *,
        site: str,
        refused: Callable[[BaseException, str], None] = lambda e, what: None,
        rename_url: str = "",
    ) -> None:
        self.session = session
        self.files_url = files_url.rstrip("/")
        self.site = site
        self.refused = refused
        self.rename_url = rename_url
        self.can_rename = bool(rename_url)

    def url(self, path: str) -> str:
        return f"{self.files_url}/{unicore_path(path)}"  # the site decodes file paths twice

    def _retried(self, fn: Callable[[], Any], what: str, tries: int = 4) -> Any:
        return with_retries(fn, what, tries=tries, secrets=self.session._secrets)

    def _size(self, url: str) -> int:
        transport = self.session.client().transport
        return int(transport.get(url=url, headers={"Accept": "application/json"}).get("size") or 0)

    def _fetch(self, path: str, start_for: Callable[[int], int | None] | None) -> bytes | None:
        """``path``'s bytes from where ``start_for(size)`` says (the size is read first; None:
        nothing new), or all of them when ``start_for`` is None; None: no such file."""
        url = self.url(path)

        def get() -> bytes | None:
            headers = {"Accept": "application/octet-stream"}
            try:
                if start_for is not None:
                    start = start_for(self._size(url))
                    if start is None:
                        return b""
                    if start > 0:
                        headers["Range"] = f"bytes={start}-"
                resp = self.session.client().transport.get(url=url, headers=headers, to_json=False)
            except Exception as e:
                code = status_of(e)
                if code == 416:
                    return b""
                if code == 404:
                    return None
                self.refused(e, f"reading {path}")
                raise
            return bytes(resp.content)

        return self._retried(get, f"UNICORE read {path}")

    def read_after(self, path: str, copied: int, shifts: dict[str, int]) -> bytes | None:
        """The bytes of ``path`` not yet copied home (``copied`` of them were; None: no such
        file). A file smaller than what was copied (a requeue truncated it) is read again from
        its start: ``shifts[path]`` remembers where it was truncated (``decide.read_start``)."""

        def start_for(size: int) -> int | None:
            start, shifts[path] = read_start(copied, size, shifts.get(path, 0))
            return start

        return self._fetch(path, start_for if copied > 0 else None)

    def read_whole_sync(self, path: str) -> bytes | None:
        """The whole file in one ``GET``; None when it does not exist."""
        return self._fetch(path, None)

    def read_sync(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        def start_for(length: int) -> int | None:
            return offset if offset < length else None

        data = self._fetch(path, start_for if offset > 0 else None)
        if data is None:
            raise FileNotFoundError(path)
        return data if size is None else data[:size]

    def stat_size_sync(self, path: str) -> int | None:
        def get() -> int | None:
            try:
                return self._size(self.url(path))
            except Exception as e:
                if status_of(e) == 404:
                    return None
                self.refused(e, f"reading {path}")
                raise

        return self._retried(get, f"UNICORE stat {path}")

    def write_sync(self, path: str, data: bytes) -> None:
        """``PUT`` from memory: pyunicore repeats a request once after a 432 (expired session)
        with the same body, which a stream would send empty."""
        transport = self.session.client().transport
        self._retried(
            lambda: transport.put(
                url=self.url(path),
                headers={"Content-Type": "application/octet-stream"},
                content=data,
            ).close(),
            f"UNICORE {self.site}: upload {unicore_path(path)}",
            tries=MAX_TRIES,
        )

    def upload_sync(self, local: Path, path: str) -> None:
        """The local file ``local`` to ``path``: from memory up to ``IN_MEMORY_UPLOAD``,
        streamed above (parents are created by the site)."""
        if local.stat().st_size <= IN_MEMORY_UPLOAD:
            self.write_sync(path, local.read_bytes())
            return
        transport = self.session.client().transport

        def put() -> None:
            with open(local, "rb") as f:
                transport.put(
                    url=self.url(path),
                    headers={"Content-Type": "application/octet-stream"},
                    content=f,
                ).close()

        self._retried(put, f"UNICORE {self.site}: upload {unicore_path(path)}", tries=MAX_TRIES)

    def mkdir_sync(self, path: str) -> None:
        transport = self.session.client().transport
        self._retried(
            lambda: transport.post(url=self.url(path), json={}).close(), f"UNICORE mkdir {path}"
        )

    def remove_sync(self, path: str) -> bool:
        transport = self.session.client().transport
        try:
            self._retried(
                lambda: transport.delete(url=self.url(path)).close(), f"UNICORE delete {path}"
            )
        except LaunchersError:
            raise
        except Exception as e:
            if status_of(e) == 404:
                return False
            raise LaunchersError(
                f"UNICORE delete {path}: {redact(str(e), self.session._secrets)}"
            ) from None
        return True

    def rename_sync(self, src: str, dst: str) -> None:
        """The storage's ``rename`` action (paths in its body are decoded once)."""
        if not self.rename_url:
            super().rename_sync(src, dst)
        transport = self.session.client().transport
        body = {"from": unicore_action_path(src), "to": unicore_action_path(dst)}
        try:
            self._retried(
                lambda: transport.post(url=self.rename_url, json=body).close(),
                f"UNICORE rename {src}",
            )
        except LaunchersError:
            raise
        except Exception as e:  # UNICORE answers 500 for a missing source too
            text = f"UNICORE rename {src} -> {dst}: {redact(str(e), self.session._secrets)}"
            if self.stat_size_sync(src) is None:
                raise FileNotFoundError(text) from None
            raise LaunchersError(text) from None

    def listdir_sync(self, path: str) -> list[str]:
        transport = self.session.client().transport
        try:
            props = self._retried(
                lambda: transport.get(url=self.url(path), headers={"Accept": "application/json"}),
                f"UNICORE list {path}",
            )
        except Exception as e:
            if status_of(e) == 404:
                raise FileNotFoundError(path) from None
            raise
        return [posixpath.basename(str(k).rstrip("/")) for k in (props.get("content") or {})]


# -- firecREST v2 ---------------------------------------------------------------------------------


class FirecrestSession(Session, Protocol):
    """What a firecREST store needs of its executor besides the client."""

    def _call(self, what: str, fn: Any, *, tries: int = 8, transient: Any = ...) -> Any: ...

    def _message(self, e: BaseException) -> str: ...

    def max_ops(self) -> int: ...


class FirecrestStorage(_Threaded):
    """A firecREST v2 machine's files (absolute paths), read byte-exactly.

    firecREST decodes what it reads as UTF-8 with replacement (``ops/tail``, ``ops/view``),
    slices ``ops/view`` in characters, and refuses any output of ``max_ops_file_size`` bytes
    (413): a whole file goes by ``ops/download`` (binary) while its base64 fits; new bytes
    by ``tail --bytes=+N``, kept up to a U+FFFD; what follows one comes by ``download``; a
    file too big for that goes by ``ops/view`` from block boundaries, and a byte there that
    is not UTF-8 becomes ``?`` (logged once). It has no cheap rename (``transfer/mv`` is a
    scheduler job). An empty file is never uploaded (firecREST never answers)."""

    def __init__(self, session: FirecrestSession, machine: str) -> None:
        self.session = session
        self.machine = machine
        self._lossy: set[str] = set()

    def op(self, what: str, op: str, params: dict[str, Any], *, as_json: bool = True) -> Any:
        """``GET /filesystem/{machine}/ops/OP`` with retries: its JSON ``output`` (or its body);
        ``MISSING`` for 404, ``TOO_BIG`` for 413 (the output did not fit firecREST's buffer)."""
        machine = self.machine

        def get() -> Any:
            c = self.session.client()
            resp = c._get_request(endpoint=f"/filesystem/{machine}/ops/{op}", params=dict(params))
            if resp.status_code == 404:
                return MISSING
            if resp.status_code == 413:
                return TOO_BIG
            if as_json:
                return c._check_response(resp, 200)["output"]
            c._check_response(resp, 200, return_json=False)
            return resp.content

        try:
            return with_retries(
                get, what, tries=4, transient=firecrest_transient, secrets=self.session._secrets
            )
        except LaunchersError:
            raise
        except Exception as e:
            raise LaunchersError(f"{what}: {self.session._message(e)}") from None

    def stat_size_sync(self, path: str) -> int | None:
        """``ops/stat``'s size of ``path``; None when it does not exist."""
        out = self.op(f"firecREST stat {path}", "stat", {"path": path})
        return None if out is MISSING else int(out.get("size") or 0)

    def read_sync(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        """Every byte from ``offset`` (``read_bytes_sync`` until the end)."""
        out = bytearray()
        while size is None or len(out) < size:
            data = self.read_bytes_sync(path, offset + len(out))
            if data is None and not out:
                raise FileNotFoundError(path)
            if not data:
                break
            out += data
        return bytes(out if size is None else out[:size])

    def read_whole_sync(self, path: str) -> bytes | None:
        """The whole file, byte-exact (``read_bytes_sync`` from 0 reads it all); None when it
        does not exist."""
        return self.read_bytes_sync(path, 0)

    def read_bytes_sync(self, path: str, offset: int = 0) -> bytes | None:
        """The bytes of ``path`` from ``offset`` known exactly now (None: no such file): all of
        them, but for a read from an offset that stops before bytes that are not UTF-8 (the
        next read, from there, gets them: how outputs are followed)."""
        self.session.max_ops()  # the system's max_ops_file_size, read once
        download = f"firecREST download {path}"
        if offset == 0:
            data = self.op(download, "download", {"path": path}, as_json=False)
            if data is MISSING:
                return None
            if data is not TOO_BIG:
                return bytes(data)
        else:
            params = {"path": path, "bytes": offset + 1, "skipHeading": True}
            out = self.op(f"firecREST tail {path}", "tail", params)
            if out is MISSING:
                return None
            if out is not TOO_BIG:
                text = str(out.get("content") or "")
                good = exact_prefix(text)
                if good or not text:
                    return good
                # not UTF-8 right at ``offset`` (or a character still being written)
                data = self.op(download, "download", {"path": path}, as_json=False)
                if data is MISSING:
                    return None
                if data is not TOO_BIG:
                    return bytes(data)[offset:]
        total = self.stat_size_sync(path)
        if total is None:
            return None
        out_bytes, pos = bytearray(), offset
        while pos < total:
            chunk = self._view_from(path, pos, total - pos)
            if not chunk:
                if path not in self._lossy:
                    self._lossy.add(path)
                    log.warning(
                        "%s: byte %d is not UTF-8 and the file is too big for ops/download: firecREST "
                        "cannot send it exactly, written as '?'",
                        path,
                        pos,
                    )
                chunk = b"?"
            out_bytes += chunk
            pos += len(chunk)
        return bytes(out_bytes)

    def _view_from(self, path: str, offset: int, want: int) -> bytes:
        """Exact bytes from ``offset`` through ``ops/view`` (about ``want`` at most); b"" when
        the byte at ``offset`` is not UTF-8."""
        max_ops = self.session.max_ops()
        start, size = view_window(offset, want, max_ops)
        while True:
            text = self.op(
                f"firecREST view {path}", "view", {"path": path, "offset": start, "size": size}
            )
            if text is MISSING or text is TOO_BIG:
                raise LaunchersError(f"firecREST view {path}: the file is gone or cannot be read")
            good = exact_prefix(str(text))
            if len(good) > offset - start:
                return good[offset - start :]
            if start == offset:
                return b""
            # bytes before ``offset`` in the block are not UTF-8: a block that starts at offset
            start, size = offset, block_at(offset, max(1, max_ops // 2 - 1))

    def tail_text(self, path: str, nbytes: int) -> str | None:
        """The end of a small remote text file (``ops/tail``); None if absent or too big."""
        out = self.op(f"firecREST tail {path}", "tail", {"path": path, "bytes": nbytes})
        return None if out is MISSING or out is TOO_BIG else str(out.get("content") or "")

    def upload_direct(self, client: Any, path: str, data: bytes) -> None:
        """``POST /filesystem/{machine}/ops/upload?path=DIR``, multipart ``file``: direct, whatever
        the size up to ``max_ops_file_size`` (pyfirecrest's ``upload`` stages files from 1 MiB).
        Never an empty file: firecREST sends it nothing and never closes its input, the answer
        is 408 after its command timeout."""
        directory, filename = posixpath.split(path)
        if not data:
            raise LaunchersError(
                f"{path}: an empty file cannot be uploaded through "
                "firecREST (it never answers); launchers creates empty files another way"
            )
        resp = client._post_request(
            endpoint=f"/filesystem/{self.machine}/ops/upload",
            params={"path": directory},
            files={"file": (filename, data)},
        )
        client._check_response(resp, 204, return_json=False)

    def write_sync(self, path: str, data: bytes, *, what: str | None = None) -> None:
        self.session._call(
            what or f"firecREST upload {path}", lambda c: self.upload_direct(c, path, data)
        )

    def mkdir_sync(self, path: str) -> None:
        self.session._call(
            f"firecREST mkdir {path}",
            lambda c: c.mkdir(self.machine, path, create_parents=True),
        )

    #: the statuses of a removal that found nothing to remove
    absent: tuple[int, ...] = (404,)

    def _delete(self, client: Any, path: str) -> None:
        client.rm(self.machine, path)

    def _try(
        self, what: str, fn: Callable[[Any], Any], *, tries: int = MAX_TRIES, label: str = ""
    ) -> Any:
        """``fn(client)`` with retries; ``MISSING`` when the site says nothing is there
        (``absent``); another failure is a ``LaunchersError`` (``label``, else ``what``)."""
        try:
            return with_retries(
                lambda: fn(self.session.client()),
                what,
                tries=tries,
                transient=firecrest_transient,
                secrets=self.session._secrets,
            )
        except LaunchersError:
            raise
        except Exception as e:
            if status_of(e) in self.absent:
                return MISSING
            raise LaunchersError(f"{label or what}: {self.session._message(e)}") from None

    def remove_sync(self, path: str, *, what: str | None = None) -> bool:
        """``ops/rm``; False when there was nothing to remove."""
        gone = self._try(f"firecREST rm {path}", lambda c: self._delete(c, path), label=what or "")
        return gone is not MISSING

    def listdir_sync(self, path: str) -> list[str]:
        rows = self._try(
            f"firecREST ls {path}", lambda c: c.list_files(self.machine, path), tries=4
        )
        if rows is MISSING:
            raise FileNotFoundError(path)
        return [str(r.get("name")) for r in rows]


# -- firecREST v1 ---------------------------------------------------------------------------------


class FirecrestV1Storage(FirecrestStorage):
    """A firecREST v1 machine's files: ``/utilities`` calls, small files only. ``view`` sends a
    whole file as text (new bytes are cut from it); an upload may be empty (v1 takes one)."""

    absent = (400, 404)

    def read_bytes_sync(self, path: str, offset: int = 0) -> bytes | None:
        """``GET /utilities/view`` of the whole file (UTF-8 text), from ``offset``; None if missing."""
        text = self._try(f"firecREST view {path}", lambda c: c.view(self.machine, path), tries=4)
        return None if text is MISSING else str(text).encode("utf-8")[offset:]

    def stat_size_sync(self, path: str) -> int | None:
        data = self.read_bytes_sync(path)
        return None if data is None else len(data)

    def upload_direct(self, client: Any, path: str, data: bytes) -> None:
        directory, filename = posixpath.split(path)
        client.simple_upload(self.machine, io.BytesIO(data), directory, filename=filename)

    def mkdir_sync(self, path: str) -> None:
        self.session._call(f"firecREST mkdir {path}", lambda c: c.mkdir(self.machine, path, p=True))

    def _delete(self, client: Any, path: str) -> None:
        client.simple_delete(self.machine, path)


if TYPE_CHECKING:
    from ..protocols import FileStore

    def _file_stores(u: UnicoreStorage, f: FirecrestStorage) -> list[FileStore]:
        """Each store is a ``protocols.FileStore`` (mypy checks it here)."""
        return [u, f]


__all__ = [
    "IN_MEMORY_UPLOAD",
    "FirecrestStorage",
    "FirecrestV1Storage",
    "UnicoreStorage",
    "unicore_action_path",
    "unicore_path",
]
