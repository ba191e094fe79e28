"""``LoopThread``: the background asyncio loop, in a daemon thread, that runs every executor and
tracker of a ``Runtime`` (``launchers.runtime.core``).

User code stays synchronous (``task.submit``, ``job.wait``); coroutines are handed to this loop.
The thread is a daemon, so leaving the process (or Ctrl-C) never waits for, nor cancels, jobs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: A blocking file operation slower than this (seconds) sends the next ones to worker threads:
#: a small fsynced write takes about 0.2 ms on an idle local disk, and 2-5 ms on the same disk
#: while jobs start, when several writes in flight at once (threads) beat one after another.
INLINE_LIMIT = 0.002
#: ... for this long (seconds); then inline calls are tried again.
INLINE_BACKOFF = 10.0


def _run(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


class LoopThread:
    """One asyncio loop in one daemon thread, started on first use (and again after a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        #: Tasks started with ``background``: the loop keeps only weak references to tasks, so
        #: one nobody awaits could be garbage-collected before it ends.
        self._background: set[asyncio.Task[Any]] = set()
        #: see ``INLINE_LIMIT`` and ``INLINE_BACKOFF``
        self.inline_limit = INLINE_LIMIT
        self.inline_backoff = INLINE_BACKOFF
        #: ``time.monotonic()`` until which blocking calls go to worker threads
        self.threads_until = 0.0

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started on first use (and again after a fork)."""
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                self._loop = asyncio.new_event_loop()
                # Blocking calls (local commands' waits, remote sites' HTTP with retries, fsyncs)
                # go to the default pool; asyncio's default is cpu_count + 4 threads (6 on 2
                # cores), which an unreachable site's retrying calls alone could fill, stalling
                # every other executor's submissions. Threads are only started when needed.
                self._loop.set_default_executor(
                    concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="launchers-io")
                )
                self._thread = threading.Thread(
                    target=_run, args=(self._loop,), name="launchers-loop", daemon=True
                )
                self._thread.start()
            return self._loop

    def in_loop_thread(self) -> bool:
        """True when called from this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def spawn(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.get_loop())

    def background(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start ``coro`` on the running loop without awaiting it, keeping it alive until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (not from the loop thread)."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("run_sync() called from the launchers loop thread")
        return self.spawn(coro).result(timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` in the loop thread as soon as possible (thread-safe)."""
        loop = self.get_loop()
        if self.in_loop_thread():
            loop.call_soon(fn, *args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a short blocking file operation (a small write and its fsync) for a coroutine.

        Inline on the loop thread while such calls stay fast: on a local disk a worker-thread
        hop costs more CPU than the write itself (GIL hand-offs, wake-ups). Once one takes longer
        than ``inline_limit`` (a busy, slow or remote file system), they go to worker threads
        for ``inline_backoff`` seconds, so the loop keeps serving the other jobs meanwhile."""
        start = time.monotonic()
        if start < self.threads_until:
            return await asyncio.to_thread(fn, *args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            if time.monotonic() - start > self.inline_limit:
                self.threads_until = time.monotonic() + self.inline_backoff

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait for its thread (``Runtime.reset``); a later use starts anew."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        if threading.current_thread() is not thread:
            thread.join(timeout)


__all__ = ["INLINE_BACKOFF", "INLINE_LIMIT", "LoopThread"]
