"""The background asyncio loop of the current runtime (``launchers.runtime.core``): one daemon
thread per process runs every executor and tracker.

User code stays synchronous (``task.submit``, ``job.wait``); coroutines are handed to this loop.
The thread is a daemon, so leaving the process (or Ctrl-C) never waits for, nor cancels, jobs.
These functions act on ``current().loop`` (a ``LoopThread``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .core import current

T = TypeVar("T")


def get_loop() -> asyncio.AbstractEventLoop:
    """The process's background loop, started on first use (and again after a fork)."""
    return current().loop.get_loop()


def in_loop_thread() -> bool:
    """True when called from the background loop's thread."""
    return current().loop.in_loop_thread()


def spawn(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the background loop; returns a thread-safe future."""
    return current().loop.spawn(coro)


def background(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Start ``coro`` on the running loop without awaiting it, keeping it alive until it ends."""
    return current().loop.background(coro)


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and wait for its result (not from the loop thread)."""
    return current().loop.run_sync(coro, timeout)


def call_soon(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(*args)`` in the loop thread as soon as possible (thread-safe)."""
    current().loop.call_soon(fn, *args)


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a short blocking file operation for a coroutine: inline while such calls stay fast,
    in worker threads for a while after a slow one (``LoopThread.blocking``)."""
    return await current().loop.blocking(fn, *args, **kwargs)


__all__ = ["background", "blocking", "call_soon", "get_loop", "in_loop_thread", "run_sync", "spawn"]
