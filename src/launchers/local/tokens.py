"""Counter tokens (docs/design/runtime.md §11): at most N units of a named resource held at once by
the jobs of every process of this user, on this machine.

State lives in ``$LAUNCHERS_STATE_DIR/tokens/NAME/`` (default
``${XDG_STATE_HOME:-~/.local/state}/launchers``): ``lock`` (``flock``) and
``holders/<task id>.json`` ``{count, pid, pid_start, boot_id, host, job_dir}``. Acquire, under
the locks of every requested token (taken in name order): drop dead holders; if every token has
room, start the job, write its holder files, unlock. All or none; a dead holder never keeps units.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import LaunchersError
from ..fsutil import atomic_write_json
from ..jobs.proc import ProcessId

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def state_root() -> Path:
    """``$LAUNCHERS_STATE_DIR``, else ``${XDG_STATE_HOME:-~/.local/state}/launchers``."""
    env = os.environ.get("LAUNCHERS_STATE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg).expanduser() / "launchers"


def token_dir(name: str) -> Path:
    """``<state root>/tokens/NAME``."""
    if not _NAME_RE.match(name) or name in (".", ".."):
        raise LaunchersError(f"token name {name!r} is not usable (letters, digits, _ . - only)")
    return state_root() / "tokens" / name


def holder_path(name: str, task_id: str) -> Path:
    """``holders/<task id>.json`` of token ``name``."""
    return token_dir(name) / "holders" / f"{task_id}.json"


def check_requests(requests: Mapping[str, int], totals: Mapping[str, int]) -> None:
    """At submission: every token declared and n <= N, else ``LaunchersError``."""
    for name, n in sorted(requests.items()):
        if name not in totals:
            raise LaunchersError(
                f"token {name!r} is not declared (tokens: or tokens.yaml countertoken:)"
            )
        if n > totals[name]:
            raise LaunchersError(
                f"a job needs {n} units of token {name!r}, which has only {totals[name]}: it could never run"
            )
        if n < 0:
            raise LaunchersError(f"token {name!r}: a job cannot hold {n} units")


@contextlib.contextmanager
def _locked(names: list[str]) -> Iterator[None]:
    fds: list[int] = []
    try:
        for name in sorted(names):
            d = token_dir(name)
            (d / "holders").mkdir(parents=True, exist_ok=True)
            fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _holder_alive(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    proc = ProcessId.from_json(data)
    if proc is None:
        return False
    if proc.host and proc.host != socket.gethostname():
        return True
    return proc.is_alive()


def held(name: str, *, clean: bool = True) -> tuple[int, list[dict[str, Any]]]:
    """Units of ``name`` held by live holders (dead holder files removed when ``clean``)."""
    holders_dir = token_dir(name) / "holders"
    total = 0
    live = []
    try:
        entries = list(holders_dir.iterdir())
    except FileNotFoundError:
        return 0, []
    for path in entries:
        if not path.name.endswith(".json") or path.name.startswith("."):
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            data = None
        if not _holder_alive(data):
            if clean:
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
            continue
        assert isinstance(data, dict)
        try:
            total += int(data.get("count", 0))
        except (TypeError, ValueError):
            continue
        live.append(data)
    return total, live


def acquire_and_start(
    requests: Mapping[str, int],
    totals: Mapping[str, int],
    task_id: str,
    job_dir: str,
    start: Callable[[], ProcessId],
) -> ProcessId | str:
    """Take every requested token or none: under the locks, if each has room, call ``start()``
    and record the started process as holder. Returns its ``ProcessId``, or the waiting reason
    ``"waiting for token NAME, k of N free"`` for the first token without room."""
    if not requests:
        return start()
    names = sorted(requests)
    with _locked(names):
        for name in names:
            if name not in totals:
                raise LaunchersError(f"token {name!r} is not declared any more")
            n, total = requests[name], totals[name]
            used, _ = held(name)
            free = max(0, total - used)
            if free < n:
                return f"waiting for token {name}, {free} of {total} free"
        proc = start()
        for name in names:
            atomic_write_json(
                holder_path(name, task_id),
                {
                    "count": requests[name],
                    "pid": proc.pid,
                    "pid_start": proc.start,
                    "boot_id": proc.boot_id,
                    "host": proc.host or socket.gethostname(),
                    "job_dir": job_dir,
                },
            )
        return proc


def release(names: list[str] | tuple[str, ...], task_id: str) -> None:
    """Remove this task's holder files (normally done by the job's exit handler)."""
    for name in names:
        try:
            holder_path(name, task_id).unlink()
        except FileNotFoundError:
            pass


def load_totals(config_file: str | os.PathLike[str] | None) -> dict[str, int]:
    """Token totals N from the configuration (re-read when the file changed)."""
    # lazy: the configuration loader (~80 ms to import) only when a group names tokens
    from ..config.loader import load_config

    return dict(load_config(config_file).tokens)


__all__ = [
    "acquire_and_start",
    "check_requests",
    "held",
    "holder_path",
    "load_totals",
    "release",
    "state_root",
    "token_dir",
]
