"""Process identity on Linux: a pid plus its start time (``/proc/PID/stat`` field 22) and the
boot id, so that a reused pid or a reboot is never taken for the process we started."""

from __future__ import annotations

import os
import socket
from functools import lru_cache

import attrs


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This machine's boot id (``/proc/sys/kernel/random/boot_id``), "" when unavailable."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces or ')'.
    end = text.rfind(")")
    if end < 0:
        return None
    return [
        text[: text.find("(")].strip(),
        text[text.find("(") + 1 : end],
        *text[end + 2 :].split(),
    ]


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks since boot), None if gone."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 22:
        return None
    try:
        return int(fields[21])
    except ValueError:
        return None


def is_zombie(pid: int) -> bool:
    """True when ``pid`` has exited but was not reaped yet (state Z or X)."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 2 and fields[2] in ("Z", "X")


_CURRENT: dict[int, ProcessId] = {}


@attrs.frozen
class ProcessId:
    """A process that cannot be confused with a later one reusing its pid."""

    pid: int
    start: int | None
    boot_id: str
    host: str = ""

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        """The identity of the running process ``pid``."""
        return cls(pid=pid, start=start_time(pid), boot_id=boot_id(), host=socket.gethostname())

    @classmethod
    def current(cls) -> ProcessId:
        """This process (read from /proc once per process: a forked child gets its own)."""
        pid = os.getpid()
        cached = _CURRENT.get(pid)
        if cached is None:
            cached = _CURRENT[pid] = cls.of(pid)
        return cached

    def is_alive(self) -> bool:
        """True when the same process (pid, start time, boot id) still runs on this host."""
        if self.host and self.host != socket.gethostname():
            return True  # another machine: we cannot tell, assume alive
        if self.boot_id and self.boot_id != boot_id():
            return False
        st = start_time(self.pid)
        if st is None or (self.start is not None and st != self.start):
            return False
        return not is_zombie(self.pid)

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "pid_start": self.start,
            "boot_id": self.boot_id,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, data: object) -> ProcessId | None:
        """Read the form written by ``to_json``; None when malformed."""
        if not isinstance(data, dict):
            return None
        try:
            pid = int(data["pid"])
        except (KeyError, TypeError, ValueError):
            return None
        start = data.get("pid_start")
        return cls(
            pid=pid,
            start=int(start) if isinstance(start, int) else None,
            boot_id=str(data.get("boot_id") or ""),
            host=str(data.get("host") or ""),
        )
