"""Atomic file writes: a reader never sees half a file (docs/design/runtime.md §2).

The data goes to a temporary name in the target's directory, is flushed and fsynced, renamed
over the target, and the directory is fsynced so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory so that renames and creations in it are durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """fsync a file already in place (the durability step of a ``sync=False`` write)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int | None = None,
    sync_dir: bool = True,
    sync: bool = True,
) -> None:
    """Write ``data`` to ``path`` atomically (temporary name in the same directory, fsync, rename);
    ``sync_dir=False`` leaves the directory fsync to a later write in the same directory, and
    ``sync=False`` both fsyncs: the caller makes the file durable later (``fsync_file``)."""
    target = Path(path)
    tmp = target.parent / f".{target.name}.tmp.{os.getpid()}.{id(data):x}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(tmp, flags, 0o666 if mode is None else mode)
    except FileNotFoundError:  # the directory first (one syscall less when it exists)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, 0o666 if mode is None else mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, target)
    if sync and sync_dir:
        fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(
    path: str | os.PathLike[str], value: Any, *, sync_dir: bool = True, sync: bool = True
) -> None:
    """Write ``value`` as indented JSON to ``path`` atomically."""
    data = (json.dumps(value, indent=2, sort_keys=False) + "\n").encode("utf-8")
    atomic_write_bytes(path, data, sync_dir=sync_dir, sync=sync)


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in ``path``, or None when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def directory_lock(path: Path) -> Iterator[None]:
    """Hold ``flock`` on ``path`` (the job directory's ``.lock``) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
