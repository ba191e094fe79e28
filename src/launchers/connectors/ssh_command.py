"""The remote command line of the SSH connector (pure): ``argv``, environment and working
directory POSIX-quoted for the remote shell, the pid marker that lets a timed-out command be
killed, and the exit status as ``subprocess`` reports it."""

from __future__ import annotations

import re
import shlex
import signal
from collections.abc import Mapping, Sequence

from launchers.errors import ScriptError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: First stderr line of every command run by the connector (removed from the result).
PID_MARKER = b"\x1elaunchers-pid="
_MARKER_PRINTF = "\\036launchers-pid="
_MARKER_RE = re.compile(re.escape(PID_MARKER) + rb"(\d+)\n")


def build_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    login_shell: bool = False,
    pid_marker: bool = False,
) -> str:
    """The remote shell command for ``argv``: ``cd DIR && env NAME=value ARGV...``, POSIX-quoted.

    ``~`` or ``~/...`` in ``cwd`` is left to the remote shell's tilde expansion; with
    ``login_shell`` the whole line runs through ``bash -lc`` (modules, profile). With
    ``pid_marker`` the shell first reports its pid on stderr (``PID_MARKER``), then ``exec``s
    the command, so that a command past its timeout can be killed.
    """
    if isinstance(argv, str) or not argv:
        raise ScriptError(f"a command must be a non-empty list of arguments, got {argv!r}")
    for arg in argv:
        if not isinstance(arg, str):
            raise ScriptError(f"command argument {arg!r} is not a string (in {list(argv)!r})")
        if "\0" in arg:
            raise ScriptError(f"command argument {arg!r} contains a NUL character")
    parts: list[str] = []
    if cwd is not None:
        if not cwd or "\0" in cwd:
            raise ScriptError(f"invalid working directory {cwd!r}")
        parts.append(f"cd {_quote_dir(cwd)} &&")
    if pid_marker:
        parts.append("exec")
    if env:
        assigns = []
        for name, value in env.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ScriptError(f"invalid environment variable name {name!r}")
            if not isinstance(value, str) or "\0" in value:
                raise ScriptError(f"invalid value {value!r} for environment variable {name}")
            assigns.append(f"{name}={shlex.quote(value)}")
        parts.append("env " + " ".join(assigns))
    parts.append(shlex.join(argv))
    line = " ".join(parts)
    if pid_marker:
        line = f"printf '{_MARKER_PRINTF}%s\\n' \"$$\" >&2; {line}"
    return "bash -lc " + shlex.quote(line) if login_shell else line


def split_pid_marker(stderr: bytes) -> tuple[int | None, bytes]:
    """The pid reported by ``build_command(pid_marker=True)`` and stderr without its line."""
    m = _MARKER_RE.search(stderr)
    if m is None:
        return None, stderr
    return int(m.group(1)), stderr[: m.start()] + stderr[m.end() :]


def _quote_dir(path: str) -> str:
    """Quote a directory for ``cd``, keeping a leading ``~`` or ``~/`` expandable."""
    if path == "~":
        return "~"
    if path.startswith("~/"):
        rest = path[2:]
        return "~/" + shlex.quote(rest) if rest else "~/"
    if path.startswith("-"):
        path = "./" + path
    return shlex.quote(path)


def _returncode(status: int | None, sig: tuple[str, bool, str, str] | None) -> int:
    """Exit status, or ``-N`` for a command killed by signal N (as ``subprocess`` does)."""
    if status is not None and status >= 0:
        return status
    if sig:
        try:
            return -int(signal.Signals["SIG" + sig[0]])
        except KeyError:
            return -1
    return 255  # like ssh(1) when no status came back (run() raises before this)


# --------------------------------------------------------------------------- host keys


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")
