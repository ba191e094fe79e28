"""A poll cycle over SSH stays one remote command of bounded size whatever the number of jobs
(docs/design/runtime.md §5): the job directories go on the command's stdin, not in its argument
(one argument is limited to 128 KiB on Linux), and sacct's id list gives way to
``--user=U --starttime=T`` above ``MAX_ID_LIST``. Run against the sandbox's real sshd and Slurm."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import subprocess
import time
import types
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from test_slurm_over_ssh import launcher, reset, write_config

import launchers.slurm.executor as sx
from launchers import ExperimentFailed, JobState, command, experiment
from launchers.connectors.base import CommandResult
from launchers.connectors.ssh import SSHConnector
from launchers.jobs.proc import ProcessId
from launchers.jobs.state import JobState as State
from launchers.local.executor import RemoteDirectExecutor
from launchers.slurm.settings import SlurmTuning

pytestmark = [pytest.mark.slurm, pytest.mark.ssh]

#: Above what made every cycle fail before (about 1000 jobs with 90-character directories).
MANY = 1500
#: Linux MAX_ARG_STRLEN: the limit of one argument (the remote shell gets one command string).
ARG_LIMIT = 128 * 1024


@pytest.fixture
def clean(slurm_cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    reset()
    yield slurm_cluster
    reset()


class FakeJob(types.SimpleNamespace):
    """Just what the executors' poll reads of a job (as /tmp/audit/runtime/p16.py builds them)."""

    __hash__ = object.__hash__
    __eq__ = object.__eq__


def iso(seconds_ago: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).isoformat()


def fake_job(
    native_id: str, remote_dir: str, local_dir: Path, *, submitted: float = 3600.0, **extra: Any
) -> FakeJob:
    rec = types.SimpleNamespace(
        extra={"remote_dir": remote_dir, **extra},
        submitted_at=iso(submitted),
        attempt=1,
        state=None,
        ended_at=None,
    )
    return FakeJob(runtime={}, native_id=native_id, record=rec, directory=local_dir, task=None, launcher=None,
                   cancel_requested=False, attempt=1, state=State.PENDING, task_id=f"fake-{native_id}")  # fmt: skip


def rc_json(native_id: str, rc: int) -> str:
    return json.dumps({"rc": rc, "signal": None, "attempt": 1, "native_id": native_id, "host": "h",
                       "start": "2026-01-01T00:00:00", "end": "2026-01-01T00:00:01"})  # fmt: skip


class Recorder:
    """Wraps ``SSHConnector.run``: every command, its stdin and its result."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[list[str], bytes | None, CommandResult]] = []
        original = SSHConnector.run

        async def run(conn: SSHConnector, argv: Any, **kw: Any) -> CommandResult:
            res = await original(conn, argv, **kw)
            self.calls.append((list(argv), kw.get("input"), res))
            return res

        monkeypatch.setattr(SSHConnector, "run", run)

    def cycles(self) -> list[tuple[list[str], bytes | None, CommandResult]]:
        return [c for c in self.calls if any("@@squeue" in a for a in c[0])]


def slurm_executor(tmp_path: Path, info: dict[str, str]) -> sx.SlurmExecutor:
    conf = write_config(tmp_path, info, int(info["CLUSTER_SSH_PORT"]), info["CLUSTER_SSH_KNOWN_HOSTS"],
                        workdir=str(tmp_path / "remote"))  # fmt: skip
    ex = launcher(conf).executor()
    assert isinstance(ex, sx.SlurmExecutor) and not ex.is_local
    return ex


def many_jobs(root: Path, count: int, first_id: int) -> list[FakeJob]:
    """``count`` jobs with directories of about 90 characters under ``root`` (nothing on disk)."""
    base = root / "remote" / "xp-0123456789ab" / "jobs" / "some_task_name"
    return [
        fake_job(str(first_id + i), f"{base}/{i:016x}", root / "local" / str(i))
        for i in range(count)
    ]


def sections(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("@@") and not line.startswith("@@status"):
            current = line[2:]
            out[current] = []
        else:
            out.setdefault(current, []).append(line)
    return out


def test_slurm_poll_of_1500_jobs_is_one_small_command(clean: dict[str, str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    ex = slurm_executor(tmp_path, clean)
    jobs = many_jobs(tmp_path, MANY, 9_000_000)
    # a few directories that exist, with a job.rc: awkward names, one with a newline in it
    special = {
        10: ("ok", 0),
        700: ("with space and 'quote' ", 0),
        1200: ("new\nline", 0),
        1499: ("failed", 3),
    }
    for i, (name, rc) in special.items():
        rdir = tmp_path / "remote" / "odd" / name
        rdir.mkdir(parents=True)
        (rdir / "job.rc").write_text(rc_json(jobs[i].native_id, rc) + "\n")
        (rdir / "job.out").write_text(f"out {i}\n")
        jobs[i].record.extra["remote_dir"] = str(rdir)
        jobs[i].directory.mkdir(parents=True)

    async def go() -> dict[Any, Any]:
        await ex.user()  # read once, before counting
        rec = Recorder(monkeypatch)
        out = await ex.poll(jobs)  # type: ignore[arg-type]
        # one command asks Slurm and reads every job.rc; the outputs of the 4 ended jobs are
        # fetched by SFTP, or through the shell when SFTP is slow to answer (a loaded machine)
        others = [c[0][:3] for c in rec.calls if c not in rec.cycles()]
        assert len(rec.cycles()) == 1, others
        assert not any("sacct" in " ".join(a) or "squeue" in " ".join(a) for a in others), others
        ((argv, stdin, res),) = rec.cycles()
        # no job directory in the argument: only the newline one, passed apart
        assert sum(len(a) + 1 for a in argv) < ARG_LIMIT // 2
        assert not any(str(tmp_path / "remote" / "xp-") in a for a in argv)
        assert argv[4:] == [str(tmp_path / "remote" / "odd" / "new\nline")]
        assert stdin is not None and stdin.count(b"\n") == MANY
        assert f"--jobs={jobs[0].native_id},".encode() in " ".join(argv).encode()  # under the limit
        assert res.returncode == 0
        found = sections(res.stdout)
        assert all(f"rc {i}" in found for i in range(MANY))
        for i, (_, rc) in special.items():
            assert json.loads(found[f"rc {i}"][0])["rc"] == rc
        assert found[f"rc {MANY - 2}"] == [""]  # no job.rc: empty section
        return out

    out = asyncio.run(go())
    assert ex.commands.get("remote-cycle") == 1
    # decided from job.rc: rc 0 completes; rc 3 (no Slurm record, old submission) fails
    assert {i for i, j in enumerate(jobs) if j in out} >= set(special)
    for i, (_, rc) in special.items():
        upd = out[jobs[i]]
        assert (
            upd.state is (JobState.COMPLETED if rc == 0 else JobState.FAILED)
            and upd.exit_code == rc
        )
        assert (jobs[i].directory / "job.out").read_text() == f"out {i}\n"  # fetched back
    others = [out.get(j) for i, j in enumerate(jobs) if i not in special]
    assert all(
        u is None or u.state is None or not u.state.is_final for u in others
    )  # first miss: not LOST yet


def test_slurm_poll_switches_to_user_query_above_the_id_limit(clean: dict[str, str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # a real finished job among thousands of synthetic ones: found although its id is not listed
    res = subprocess.run(["sbatch", "--parsable", "--partition=debug", "--time=00:01:00",
                          f"--output={tmp_path}/real.out", "--wrap=exit 3"],
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    real_id = res.stdout.strip().split(";")[0]
    # wait until a time-window query lists it (slurmdbd shows it there a second or so after --jobs)
    since = (datetime.now() - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
    deadline = time.monotonic() + 60
    while True:
        listed = subprocess.run(["sacct", "--noheader", "--parsable2", "--allocations", "--format=JobIDRaw,State",
                                 f"--user={getpass.getuser()}", f"--starttime={since}"],
                                capture_output=True, text=True, timeout=60).stdout.splitlines()  # fmt: skip
        if f"{real_id}|FAILED" in listed:
            break
        assert time.monotonic() < deadline, [ln for ln in listed if ln.startswith(f"{real_id}|")]
        time.sleep(0.5)

    ex = slurm_executor(tmp_path, clean)
    count = 5000  # 8-byte ids: about 40 KB of id list, over MAX_ID_LIST (32 KiB)
    jobs = many_jobs(tmp_path, count, 9_000_000)
    real = fake_job(
        real_id, str(tmp_path / "remote" / "real"), tmp_path / "local" / "real", submitted=60
    )
    real.directory.mkdir(parents=True)
    jobs.append(real)
    assert len(",".join(j.native_id for j in jobs)) > SlurmTuning().max_id_list

    async def go() -> dict[Any, Any]:
        await ex.user()
        rec = Recorder(monkeypatch)
        out = await ex.poll(jobs)  # type: ignore[arg-type]
        # the poll of all 1,500 jobs is one command (fetching the ended jobs' outputs goes
        # through SFTP, or through the shell where SFTP is slow to answer on a loaded machine)
        polls = [c for c in rec.calls if c[0][:2] == ["sh", "-c"] and "@@rc" in c[0][2]]
        assert len(polls) == 1, [c[0][:3] for c in rec.calls]
        ((argv, stdin, res),) = polls
        script = argv[2]
        assert "--jobs=" not in script
        assert (
            f"--user={ex.slurm.user_info[0] if ex.slurm.user_info else ''}" in script
            and "--starttime=" in script
        )
        assert sum(len(a) + 1 for a in argv) < 4096  # independent of the number of jobs
        assert stdin is not None and stdin.count(b"\n") == len(jobs)
        assert res.returncode == 0
        found = sections(res.stdout)
        assert found["sacct"] and not any("error" in line.lower() for line in found["sacct"])
        assert "@@status 0" in res.stdout.split("@@squeue")[0]  # sacct succeeded
        return out

    out = asyncio.run(go())
    assert ex.slurm.accounting is not False
    upd = out[real]  # its sacct row was matched: FAILED with sacct's exit code
    assert (upd.state, upd.exit_code, upd.detail) == (JobState.FAILED, 3, "sacct")
    assert all(
        u is None or u.state is None or not u.state.is_final for u in map(out.get, jobs[:-1])
    )


@pytest.mark.slow
def test_slurm_over_ssh_end_to_end_with_the_user_query(clean: dict[str, str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, slurm_tuning: Any) -> None:  # fmt: skip
    """A real run over SSH with the id list always "too long": states still come from sacct."""
    slurm_tuning(max_id_list=1)
    rec = Recorder(monkeypatch)
    conf = write_config(tmp_path, clean, int(clean["CLUSTER_SSH_PORT"]), clean["CLUSTER_SSH_KNOWN_HOSTS"],
                        workdir=str(tmp_path / "remote"))  # fmt: skip
    L = launcher(conf)
    with pytest.raises(ExperimentFailed), experiment(tmp_path / "exp", L):
        ok = command(["sh", "-c", "echo done"]).submit()
        bad = command(["sh", "-c", "exit 4"]).submit()
        long = command(["sleep", "120"]).submit()
        deadline = time.monotonic() + 30
        while long.state is not JobState.RUNNING:  # only sacct's row can say RUNNING this early
            assert time.monotonic() < deadline, long.state
            time.sleep(0.1)
        long.cancel()
    assert ok.state is JobState.COMPLETED and "done" in ok.stdout_path.read_text()
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 4)
    assert long.state is JobState.CANCELLED
    cycles = rec.cycles()
    assert cycles and all("--jobs=" not in c[0][2] and "--user=" in c[0][2] for c in cycles)
    assert all(c[2].returncode == 0 for c in cycles)


@pytest.mark.slow
def test_direct_remote_poll_of_1500_jobs_is_one_small_command(clean: dict[str, str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    info = clean
    conf = tmp_path / "launchers.yaml"
    conf.write_text("\n".join([
        "connectors:", "  ssh:", "    box:", "      hostname: 127.0.0.1", f"      port: {info['CLUSTER_SSH_PORT']}",
        "      username: root", f"      identity_file: {info['CLUSTER_SSH_KEY']}",
        f"      known_hosts: {info['CLUSTER_SSH_KNOWN_HOSTS']}", "      ssh_config: false",
        f"      workdir: {tmp_path / 'remote'}",
    ]) + "\n")  # fmt: skip
    me = ProcessId.of(os.getpid())  # alive on the far side too (sshd runs on this machine)
    jobs = many_jobs(tmp_path, MANY, 1)
    for j in jobs:
        j.record.extra["process"] = me.to_json()
    # ended jobs: a job.rc in their directory (one with a newline in its name)
    ended = {3: "ended", 900: "new\nline", 1400: "with space and 'quote' "}
    for i, name in ended.items():
        rdir = tmp_path / "remote" / "odd" / name
        rdir.mkdir(parents=True)
        (rdir / "job.rc").write_text(rc_json(jobs[i].native_id, 0) + "\n")
        jobs[i].record.extra["remote_dir"] = str(rdir)
        jobs[i].directory.mkdir(parents=True)

    async def go() -> dict[Any, Any]:
        ex = RemoteDirectExecutor(("direct-remote", "box"), "box", str(conf))
        rec = Recorder(monkeypatch)
        out = await ex.poll(jobs)  # type: ignore[arg-type]
        # the poll of all 1,500 jobs is one command (fetching the ended jobs' outputs goes
        # through SFTP, or through the shell where SFTP is slow to answer on a loaded machine)
        polls = [c for c in rec.calls if c[0][:2] == ["sh", "-c"] and "BOOT" in c[0][2]]
        assert len(polls) == 1, [c[0][:3] for c in rec.calls]
        ((argv, stdin, res),) = polls
        assert res.returncode == 0, res.stderr
        assert sum(len(a) + 1 for a in argv) < 4096
        assert argv[4:] == [str(tmp_path / "remote" / "odd" / "new\nline")]
        assert stdin is not None and stdin.count(b"\n") == 2 * MANY
        lines = res.stdout.splitlines()
        assert lines[0].startswith("BOOT ") and len(lines) == MANY + 1
        return out

    out = asyncio.run(go())
    for i, j in enumerate(jobs):
        assert out[j].state is (JobState.COMPLETED if i in ended else JobState.RUNNING), i
