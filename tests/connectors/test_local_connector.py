"""The local connector's commands (followed by the loop through a pidfd, or by a thread each) and
``runtime.loop.blocking`` (short file operations inline while the disk is fast)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import unavailable
from file_store_checks import check_file_store
from launchers.connectors import local
from launchers.connectors.local import LocalConnector
from launchers.errors import ConnectorError
from launchers.runtime import loop
from launchers.runtime.loopthread import LoopThread


@pytest.fixture(params=["pidfd", "thread"])
def connector(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalConnector]:
    """Both ways of following a command give the same results."""
    if request.param == "pidfd" and not local._PIDFD:
        unavailable("this kernel gives no pidfds")
    monkeypatch.setattr(local, "_PIDFD", request.param == "pidfd")
    yield LocalConnector()


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}/stat").exists()
        and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    )


def test_output_exit_code_env_unset_and_cwd(
    connector: LocalConnector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHERS_T_DROP", "1")
    res = run(
        connector.run(
            ["sh", "-c", 'echo "$A|${LAUNCHERS_T_DROP-unset}|$(pwd)"; echo e >&2; exit 3'],
            env={"A": "x y"},
            unset={"LAUNCHERS_T_DROP"},
            cwd=str(tmp_path),
        )
    )
    assert res.returncode == 3  # type: ignore[attr-defined]
    assert res.stdout == f"x y|unset|{tmp_path}\n"  # type: ignore[attr-defined]
    assert res.stderr == "e\n"  # type: ignore[attr-defined]


def test_large_output_on_both_pipes(connector: LocalConnector) -> None:
    res = run(
        connector.run(["sh", "-c", "head -c 3000000 /dev/zero; head -c 200000 /dev/zero >&2"])
    )
    assert len(res.stdout) == 3_000_000 and len(res.stderr) == 200_000  # type: ignore[attr-defined]


def test_missing_program_is_a_connector_error(connector: LocalConnector) -> None:
    with pytest.raises(ConnectorError, match="cannot run '/no/such/program'"):
        run(connector.run(["/no/such/program"]))


@pytest.mark.timing
def test_timeout_kills_the_command(connector: LocalConnector, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(ConnectorError, match=r"gave no answer in 0\.5 s"):
        run(connector.run(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"], timeout=0.5))
    assert time.monotonic() - t0 < 5
    assert not alive(int(pidfile.read_text()))


@pytest.mark.timing
def test_a_grandchild_holding_the_pipes_delays_at_most_five_seconds(
    connector: LocalConnector,
) -> None:
    t0 = time.monotonic()
    with pytest.raises(ConnectorError, match="gave no answer"):
        run(connector.run(["sh", "-c", "sleep 20 & echo started"], timeout=0.5))
    assert time.monotonic() - t0 < 8


@pytest.mark.timing
def test_a_background_child_with_its_own_output_does_not_delay(connector: LocalConnector) -> None:
    t0 = time.monotonic()
    res = run(connector.run(["sh", "-c", "sleep 5 >/dev/null 2>&1 & echo bg"]))
    assert res.stdout == "bg\n" and time.monotonic() - t0 < 4  # type: ignore[attr-defined]


def test_stdin_input(connector: LocalConnector) -> None:
    res = run(connector.run(["cat"], input=b"through stdin"))
    assert res.stdout == "through stdin"  # type: ignore[attr-defined]


def test_cancelled_command_is_killed_and_reaped(tmp_path: Path) -> None:
    if not local._PIDFD:
        unavailable("this kernel gives no pidfds")
    pidfile = tmp_path / "pid"

    async def cancel_it() -> None:
        task = asyncio.ensure_future(
            LocalConnector().run(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"])
        )
        for _ in range(100):
            await asyncio.sleep(0.02)
            if pidfile.exists() and pidfile.read_text().strip():
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_it())
    pid = int(pidfile.read_text())
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.05)
    assert not alive(pid)


def test_many_concurrent_commands(connector: LocalConnector) -> None:
    async def many() -> list[str]:
        results = await asyncio.gather(*(connector.run(["echo", str(i)]) for i in range(100)))
        return [r.stdout for r in results]

    assert run(many()) == [f"{i}\n" for i in range(100)]


# -- blocking(): inline while fast, worker threads for a while after a slow call ----------------------


def test_blocking_runs_inline_then_in_threads_after_a_slow_call() -> None:
    lt = LoopThread()
    lt.inline_limit = 0.05  # a busy test machine cannot make a no-op slow
    seen: list[bool] = []

    def where(delay: float = 0.0) -> None:
        seen.append(threading.current_thread() is threading.main_thread())
        time.sleep(delay)

    async def calls() -> None:
        await lt.blocking(where)
        await lt.blocking(where, lt.inline_limit * 2)  # slow: the next ones go to threads
        await lt.blocking(where)

    asyncio.run(calls())
    assert seen == [True, True, False]
    lt.threads_until = time.monotonic() - 1  # the back-off is over
    seen.clear()
    asyncio.run(calls())
    assert seen[0] is True


def test_blocking_passes_results_and_errors() -> None:
    def fail() -> None:
        raise OSError("disk full")

    async def calls() -> int:
        with pytest.raises(OSError, match="disk full"):
            await loop.blocking(fail)
        return await loop.blocking(int, "42")

    assert asyncio.run(calls()) == 42


def test_no_pidfd_for_one_command_falls_back_to_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    if not local._PIDFD:
        unavailable("this kernel gives no pidfds")

    def refuse(pid: int, flags: int = 0) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "pidfd_open", refuse)
    res = run(LocalConnector().run(["sh", "-c", "echo fine; exit 4"]))
    assert (res.returncode, res.stdout) == (4, "fine\n")  # type: ignore[attr-defined]
    with pytest.raises(ConnectorError, match="gave no answer"):
        run(LocalConnector().run(["sleep", "20"], timeout=0.3))


def test_the_local_connector_is_a_file_store(tmp_path: Path) -> None:
    run(check_file_store(LocalConnector(), str(tmp_path)))
