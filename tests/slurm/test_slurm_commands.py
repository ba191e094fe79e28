"""The Slurm command lines of ``launchers.slurm.commands`` and their readers (docs/slurm.md,
"Tracking" and "Submission"): sacct by ids or by user and start time, the lookup by name, and
the poll cycle's one shell command over a connector, run here by ``sh``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from launchers.slurm import commands as C


def test_sacct_by_ids_or_by_user_and_start_time() -> None:
    ids = C.IdList.of(["12_3", "9", None, "12_4", "10"])
    assert ids.text == "9,10,12" and not ids.too_long(7) and ids.too_long(6)
    argv = C.sacct_argv(ids, cluster="c")
    assert argv[-2:] == ["--clusters=c", "--jobs=9,10,12"]
    t = time.mktime((2026, 1, 2, 12, 0, 0, 0, 0, -1))
    local = C.sacct_argv(ids, cluster=None, window=("u", t, True))
    assert local[-2:] == ["--user=u", "--starttime=2026-01-02T11:00:00"]
    remote = C.sacct_argv(ids, cluster=None, window=("u", t, False))
    assert remote[-1] == "--starttime=2026-01-01T09:00:00"  # 27 h: the cluster's time zone


def test_named_jobs_oldest_first_ours_and_foreign() -> None:
    squeue = "30|2026-01-01T10:00:05|/exp/a\n31|2026-01-01T10:00:06|/exp/b\nbad line\n"
    sacct = "29_1|2026-01-01T10:00:04|/exp/a/\n30|2026-01-01T10:00:07|/exp/a\n28|2026-01-01T09:00:00|/exp/a\n"
    since = time.mktime((2026, 1, 1, 10, 0, 0, 0, 0, -1))
    ids, foreign = C.named_jobs(squeue, sacct, workdir="/exp/a", since=since, skew=10)
    assert ids == ["29", "30", "31"] and foreign == {"31"}  # 28 is an earlier job
    assert C.named_jobs(None, None, workdir=None, since=None, skew=0) == ([], set())


def test_the_poll_cycle_command_reads_every_job_rc_and_both_queries(tmp_path: Path) -> None:
    """The one command of a cycle through a connector, run by ``sh`` here: job.rc of each
    directory (a missing one, a name with a newline), then each query with its exit status."""
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c\nd"]
    for d in dirs:
        d.mkdir()
    (dirs[0] / "job.rc").write_text('{"rc": 0, "attempt": 1, "native_id": "5"}\n')
    (dirs[2] / "job.rc").write_text('{"rc": 3}')
    argv, stdin = C.remote_cycle([str(d) for d in dirs], ["echo", "5|5|RUNNING"], ["sh", "-c", "echo no; exit 2"])  # fmt: skip
    assert stdin.count(b"\n") == 3 and argv[-1] == str(dirs[2])
    out = subprocess.run(argv, input=stdin, capture_output=True, check=True).stdout.decode()
    read = C.read_remote_cycle(out, 3)
    assert [r.rc if r else None for r in read.rcs] == [0, None, 3]
    assert read.rcs[0] is not None and read.rcs[0].native_id == "5"
    assert read.sections["sacct"] == "5|5|RUNNING" and read.status == {"sacct": 0, "squeue": 2}
    assert read.sections["squeue"] == "no"
    without = C.remote_cycle(["/x"], None, ["true"])[0][2]
    assert "@@sacct" not in without and "@@squeue" in without
