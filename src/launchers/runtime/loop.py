"""The background asyncio loop: one daemon thread per process runs every executor and tracker.

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

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _run(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def get_loop() -> asyncio.AbstractEventLoop:
    """The process's background loop, started on first use (and again after a fork)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            _loop = asyncio.new_event_loop()
            # Blocking calls (local commands' waits, remote sites' HTTP with retries, fsyncs) go
            # to the default pool; asyncio's default is cpu_count + 4 threads (6 on 2 cores),
            # which an unreachable site's retrying calls alone could fill, stalling every other
            # executor's submissions. Threads are only started when needed.
            _loop.set_default_executor(
                concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="launchers-io")
            )
            _thread = threading.Thread(
                target=_run, args=(_loop,), name="launchers-loop", daemon=True
            )
            _thread.start()
        return _loop


def in_loop_thread() -> bool:
    """True when called from the background loop's thread."""
    return _thread is not None and threading.current_thread() is _thread


def spawn(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the background loop; returns a thread-safe future."""
    return asyncio.run_coroutine_threadsafe(coro, get_loop())


#: Tasks started with ``background``: the loop keeps only weak references to tasks, so one
#: nobody awaits could be garbage-collected before it ends.
_background: set[asyncio.Task[Any]] = set()


def background(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Start ``coro`` on the running loop without awaiting it, keeping it alive until it ends."""
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and wait for its result (not from the loop thread)."""
    if in_loop_thread():
        coro.close()
        raise RuntimeError("run_sync() called from the launchers loop thread")
    return spawn(coro).result(timeout)


def call_soon(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(*args)`` in the loop thread as soon as possible (thread-safe)."""
    loop = get_loop()
    if in_loop_thread():
        loop.call_soon(fn, *args)
    else:
        loop.call_soon_threadsafe(fn, *args)


#: A blocking file operation slower than this (seconds) sends the next ones to worker threads:
#: a small fsynced write takes about 0.2 ms on an idle local disk, and 2-5 ms on the same disk
#: while jobs start, when several writes in flight at once (threads) beat one after another.
INLINE_LIMIT = 0.002
#: ... for this long (seconds); then inline calls are tried again.
INLINE_BACKOFF = 10.0
_threads_until = 0.0


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a short blocking file operation (a small write and its fsync) for a coroutine.

    Inline on the loop thread while such calls stay fast: on a local disk a worker-thread hop
    costs more CPU than the write itself (GIL hand-offs, wake-ups). Once one takes longer than
    ``INLINE_LIMIT`` (a busy, slow or remote file system), they go to worker threads for
    ``INLINE_BACKOFF`` seconds, so the loop keeps serving the other jobs meanwhile."""
    global _threads_until
    start = time.monotonic()
    if start < _threads_until:
        return await asyncio.to_thread(fn, *args, **kwargs)
    try:
        return fn(*args, **kwargs)
    finally:
        if time.monotonic() - start > INLINE_LIMIT:
            _threads_until = time.monotonic() + INLINE_BACKOFF
