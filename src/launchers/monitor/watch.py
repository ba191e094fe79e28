"""Change detection for the monitor: Linux inotify (through ``ctypes``, no dependency) for what
changes on this machine, and the stat sweep of ``index`` for what inotify cannot see.

inotify reports a change the moment it happens and costs nothing while nothing changes: one
watch on each experiment, its ``jobs/`` folder, each ``jobs/NAME/`` and each job directory
(``state.json`` is renamed into place, ``job.out``/``job.err`` are appended to). It sees only
changes made through this machine's kernel: on NFS, Lustre or GPFS a job writing from a compute
node, or an experiment script on another login node, changes files without an event, which is
what the sweep is for. When inotify is missing or its watch limit is reached
(``fs.inotify.max_user_watches``), the sweep alone keeps the page true, only later.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Callable
from typing import Any

log = logging.getLogger("launchers.monitor")

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

#: On a folder that holds folders (the experiment, ``jobs/``, ``jobs/NAME/``): entries added,
#: removed or renamed.
FOLDER_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ONLYDIR
#: On a job directory: records renamed into place, outputs written, attempts archived.
JOB_MASK = (
    IN_MOVED_TO
    | IN_MOVED_FROM
    | IN_CREATE
    | IN_CLOSE_WRITE
    | IN_MODIFY
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)

_EVENT = struct.Struct("iIII")
OUTPUT_FILES = frozenset({"job.out", "job.err"})

#: ``notify(experiment id, key or None, what)``; what is ``record`` (its ``state.json`` was
#: replaced, or the job directory appeared), ``output`` (job.out/job.err grew), ``gone`` (the job directory went
#: away) or ``rescan`` (re-list the experiment: a new folder, an overflow).
Notify = Callable[[str, "str | None", str], None]


class Inotify:
    """A non-blocking inotify instance: ``add`` watches, ``read`` pending events."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: int = fd

    def add(self, path: str, mask: int) -> int:
        """Watch ``path``; its watch descriptor, or ``OSError`` (ENOSPC: the watch limit)."""
        wd = self._add(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(wd)

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)

    def read(self) -> list[tuple[int, int, str]]:
        """Every pending event as ``(wd, mask, name)``; [] when there is none."""
        out: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return out
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                pos += _EVENT.size
                name = data[pos : pos + length].split(b"\0", 1)[0]
                pos += length
                out.append((wd, mask, os.fsdecode(name)))

    def close(self) -> None:
        os.close(self.fd)


class Watches:
    """The inotify watches of the monitor's experiments, and what their events mean.

    ``watch_*`` add watches (a failure is remembered and logged once: the sweep covers that
    folder); ``handle`` turns the pending events into ``notify`` calls. Not thread-safe: used
    from the server's event loop only."""

    def __init__(self, notify: Notify) -> None:
        self.notify = notify
        self.inotify: Inotify | None
        self.problem: str | None = None
        try:
            self.inotify = Inotify()
        except (OSError, AttributeError) as e:
            self.inotify = None
            self.problem = f"inotify unavailable ({e}); changes are found by the stat sweep only"
        #: wd -> (experiment id, level, key): level is "exp", "jobs", "name" or "job"
        self.targets: dict[int, tuple[str, str, str | None]] = {}
        self.by_path: dict[str, int] = {}
        self.failed = 0

    @property
    def active(self) -> bool:
        return self.inotify is not None

    @property
    def fd(self) -> int | None:
        return None if self.inotify is None else self.inotify.fd

    def _add(self, path: str, mask: int, target: tuple[str, str, str | None]) -> bool:
        if self.inotify is None:
            return False
        if path in self.by_path:
            return True
        try:
            wd = self.inotify.add(path, mask)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return False
            self.failed += 1
            if self.problem is None:
                self.problem = (
                    f"inotify: cannot watch {path} ({e.strerror}); changes there are found by "
                    "the stat sweep (raise fs.inotify.max_user_watches for instant updates)"
                )
                log.warning("%s", self.problem)
            return False
        old = self.targets.get(wd)
        if old is not None:  # the same folder under another name: keep one entry per wd
            self.by_path = {p: w for p, w in self.by_path.items() if w != wd}
        self.targets[wd] = target
        self.by_path[path] = wd
        return True

    def watch_experiment(self, exp_id: str, path: str) -> None:
        self._add(path, FOLDER_MASK, (exp_id, "exp", None))
        self._add(os.path.join(path, "jobs"), FOLDER_MASK, (exp_id, "jobs", None))

    def watch_name(self, exp_id: str, jobs: str, name: str) -> None:
        self._add(os.path.join(jobs, name), FOLDER_MASK, (exp_id, "name", name))

    def watch_job(self, exp_id: str, jobs: str, key: str) -> None:
        self._add(os.path.join(jobs, key), JOB_MASK, (exp_id, "job", key))

    def forget(self, path: str) -> None:
        wd = self.by_path.pop(path, None)
        if wd is not None:
            self.targets.pop(wd, None)
            if self.inotify is not None:
                self.inotify.remove(wd)

    def handle(self) -> None:
        """Read the pending events and tell ``notify`` what they mean."""
        if self.inotify is None:
            return
        for wd, mask, name in self.inotify.read():
            if mask & IN_Q_OVERFLOW:
                for exp_id in {t[0] for t in self.targets.values()}:
                    self.notify(exp_id, None, "rescan")
                continue
            target = self.targets.get(wd)
            if target is None:
                continue
            exp_id, level, key = target
            if mask & IN_IGNORED:
                self.targets.pop(wd, None)
                self.by_path = {p: w for p, w in self.by_path.items() if w != wd}
                if level == "job":
                    self.notify(exp_id, key, "gone")
                elif level != "exp":
                    self.notify(exp_id, None, "rescan")
                continue
            if level == "job":
                assert key is not None
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                    self.notify(exp_id, key, "gone")
                elif name == "state.json":
                    self.notify(exp_id, key, "record")
                elif name in OUTPUT_FILES:
                    self.notify(exp_id, key, "output")
            elif level == "name":
                if mask & IN_ISDIR and not name.startswith("."):
                    self.notify(exp_id, f"{key}/{name}", "record")
            elif mask & IN_ISDIR and (level == "jobs" or name == "jobs"):
                self.notify(exp_id, None, "rescan")

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None


def describe(watches: Watches | Any) -> str:
    """How changes are found, for the start banner and the page."""
    if not getattr(watches, "active", False):
        return "stat sweep only"
    failed = getattr(watches, "failed", 0)
    return "inotify + stat sweep" + (f" ({failed} folders without a watch)" if failed else "")


__all__ = ["Inotify", "Notify", "Watches", "describe"]
