"""``LocalConnector``: the ``Connector`` interface for this machine (subprocesses, local files)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from ..errors import ConnectorError
from ..fsutil import atomic_write_bytes
from .base import CommandResult, Connector


def _run_blocking(
    argv: list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    timeout: float | None,
    input: bytes | None,
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` without a shell and collect its output; past ``timeout`` the child is killed
    (and its pipes are drained for at most 5 s more: a grandchild may hold them open)."""
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    ) as proc:
        return _collect(proc, timeout, input)


def _collect(
    proc: subprocess.Popen[bytes], timeout: float | None, input: bytes | None = None
) -> tuple[int, bytes, bytes]:
    """Wait for ``proc`` and read its output (blocking); past ``timeout`` it is killed."""
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)
        raise
    return proc.returncode, out, err


async def _in_thread(
    argv: list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    timeout: float | None,
    input: bytes | None,
) -> tuple[int, bytes, bytes]:
    """``_run_blocking`` in a thread of its own: a blocking ``Popen`` per thread costs less than
    an asyncio subprocess (whose child watcher starts a thread per child in Python 3.11 anyway),
    and no pool means a long command never delays a short one."""
    future: concurrent.futures.Future[tuple[int, bytes, bytes]] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(_run_blocking(argv, env, cwd, timeout, input))
        except BaseException as e:  # delivered to the awaiting coroutine
            future.set_exception(e)

    threading.Thread(
        target=work, name=f"launchers-{os.path.basename(argv[0])}", daemon=True
    ).start()
    return await asyncio.wrap_future(future)


async def _in_loop(
    argv: list[str], env: dict[str, str] | None, cwd: str | None, timeout: float | None
) -> tuple[int, bytes, bytes]:
    """``_run_blocking`` followed by the running loop itself: the pipes and a pidfd for the exit
    are watched with ``add_reader``, so a command costs no thread and no GIL hand-off."""
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # out of descriptors, say: followed by a thread, as without pidfds
        with proc:
            return await asyncio.to_thread(_collect, proc, timeout)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    watched = {out_fd, err_fd}
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not watched and not done.done():
            done.set_result(None)

    def readable(fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if data:
            chunks[fd].append(data)
            return
        loop.remove_reader(fd)
        watched.discard(fd)
        settle()

    def exited() -> None:
        if proc.poll() is not None:
            loop.remove_reader(pidfd)
            watched.discard(pidfd)
            settle()

    for fd in (out_fd, err_fd):
        os.set_blocking(fd, False)
        loop.add_reader(fd, readable, fd)
    watched.add(pidfd)
    loop.add_reader(pidfd, exited)
    try:
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            with contextlib.suppress(asyncio.TimeoutError):  # a grandchild may hold the pipes
                await asyncio.wait_for(asyncio.shield(done), 5.0)
            raise subprocess.TimeoutExpired(argv, timeout or 0.0) from None
    finally:
        for fd in watched:
            loop.remove_reader(fd)
        if proc.returncode is None:  # cancelled, or still holding on after the kill: reap it apart
            proc.kill()
            threading.Thread(target=proc.wait, name="launchers-reap", daemon=True).start()
        os.close(pidfd)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode is not None
    return proc.returncode, b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


def _pidfd_works() -> bool:
    """``os.pidfd_open`` exists and the kernel allows it (Linux 5.3+, not blocked by seccomp)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


#: Commands are followed by the loop itself where the kernel has pidfds, else by a thread each.
_PIDFD = _pidfd_works()


class LocalConnector(Connector):
    """Runs commands as subprocesses (no shell; followed by the loop, see ``_in_loop``) and uses
    local files."""

    is_local = True

    def __init__(self, name: str = "local") -> None:
        self.name = name

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
        unset: Collection[str] = (),
    ) -> CommandResult:
        """Run ``argv``; ``env`` is added to this process's environment and the names in
        ``unset`` are left out of it. A missing program or directory, or a command past
        ``timeout`` (then killed), is a ``ConnectorError``."""
        if not argv:
            raise ConnectorError("local: empty command")
        full_env = None
        if env or unset:
            full_env = {k: v for k, v in os.environ.items() if k not in unset}
            full_env.update(env or {})
        try:
            if input is None and _PIDFD:
                done = await _in_loop(list(argv), full_env, cwd, timeout)
            else:
                done = await _in_thread(list(argv), full_env, cwd, timeout, input)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
            raise ConnectorError(f"local: cannot run {argv[0]!r}: {e.strerror or e}") from None
        except subprocess.TimeoutExpired:
            raise ConnectorError(f"local: {argv[0]} gave no answer in {timeout} s") from None
        returncode, out, err = done
        return CommandResult(
            returncode=returncode,
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
        )

    async def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        """Atomic write (parents created)."""
        atomic_write_bytes(os.path.expanduser(path), data, mode=mode)

    async def read_file(self, path: str, *, offset: int = 0, max_bytes: int | None = None) -> bytes:
        with open(os.path.expanduser(path), "rb") as f:
            if offset:
                f.seek(offset)
            return f.read() if max_bytes is None else f.read(max_bytes)

    async def exists(self, path: str) -> bool:
        return os.path.exists(os.path.expanduser(path))

    async def mkdir(self, path: str) -> None:
        Path(os.path.expanduser(path)).mkdir(parents=True, exist_ok=True)

    async def stat_size(self, path: str) -> int | None:
        try:
            return os.stat(os.path.expanduser(path)).st_size
        except FileNotFoundError:
            return None

    async def remove(self, path: str) -> bool:
        full = os.path.expanduser(path)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.remove(full)
        except FileNotFoundError:
            return False
        return True

    async def rename(self, src: str, dst: str) -> None:
        os.replace(os.path.expanduser(src), os.path.expanduser(dst))

    async def listdir(self, path: str) -> list[str]:
        return os.listdir(os.path.expanduser(path))

    async def home(self) -> str:
        return str(Path.home())
