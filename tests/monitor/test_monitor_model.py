"""The monitor's decisions, without a server: rows, phases and summaries from records, finding
experiments, reading job directories, and the security rules (docs/monitor.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launchers.errors import LaunchersError
from launchers.jobs.record import StateRecord, epoch_iso
from launchers.jobs.state import JobState
from launchers.monitor import security
from launchers.monitor.model import (
    COLUMNS,
    experiment_summary,
    job_row,
    partition_of,
    phases,
    rows_payload,
    wait_run_summary,
)
from launchers.monitor.scan import ExperimentDir, find_experiments, job_keys, read_job
from monitor_fixtures import make_job

T0 = 1_800_000_000


def record(**kw: object) -> StateRecord:
    base: dict[str, object] = {
        "task_id": "train-abc",
        "launcher": {"kind": "slurm", "group": "g", "options": ["--partition=gpu"]},
    }
    base.update(kw)
    return StateRecord(**base)  # type: ignore[arg-type]


def test_partition_of_the_sbatch_options() -> None:
    assert partition_of(["--partition=gpu", "--time=1:00:00"]) == "gpu"
    assert partition_of(["-p", "long"]) == "long"
    assert partition_of(["-plong"]) == "long"
    assert partition_of(["--partition", "debug"]) == "debug"
    assert partition_of(["--time=1"]) is None
    assert partition_of(None) is None


def test_row_of_a_record() -> None:
    rec = record(
        state=JobState.COMPLETED,
        native_id="12_3",
        submitted_at=epoch_iso(T0 + 10),
        started_at=epoch_iso(T0 + 70),
        ended_at=epoch_iso(T0 + 190),
        exit_code=0,
        history=(
            (epoch_iso(T0), "WAITING", "created"),
            (epoch_iso(T0 + 190), "COMPLETED", ""),
        ),
    )
    row = job_row("train/abc", rec)
    assert list(row) == list(COLUMNS)
    assert row["state"] == "COMPLETED" and row["partition"] == "gpu" and row["group"] == "g"
    assert (row["waiting_since"], row["submitted"], row["started"], row["ended"]) == (
        T0,
        T0 + 10,
        T0 + 70,
        T0 + 190,
    )
    assert row["changed"] == T0 + 190 and row["after"] == [] and row["prev"] == []
    assert phases(row, now=T0 + 1000) == [
        ("waiting", T0, T0 + 10),
        ("pending", T0 + 10, T0 + 70),
        ("running", T0 + 70, T0 + 190),
    ]
    payload = rows_payload([row])
    assert payload["columns"] == list(COLUMNS) and payload["rows"][0][0] == "train/abc"


def test_phases_of_a_second_attempt_and_of_unfinished_jobs() -> None:
    first = record(
        state=JobState.FAILED,
        submitted_at=epoch_iso(T0),
        started_at=epoch_iso(T0 + 5),
        ended_at=epoch_iso(T0 + 20),
    )
    second = first.next_attempt("re-run after FAILED")
    row = job_row("train/abc", second)
    assert row["attempt"] == 2 and row["state"] == "WAITING"
    assert row["prev"] == [[1, T0, T0 + 5, T0 + 20, "FAILED"]]
    now = row["waiting_since"] + 30
    assert phases(row, now) == [
        ("pending", T0, T0 + 5),
        ("running", T0 + 5, T0 + 20),
        ("waiting", row["waiting_since"], now),
    ]
    pending = job_row(
        "x/y",
        record(state=JobState.PENDING, submitted_at=epoch_iso(T0), history=()),
    )
    assert phases(pending, T0 + 100) == [("pending", T0, T0 + 100)]
    cancelled_in_queue = job_row(
        "x/y",
        record(
            state=JobState.CANCELLED,
            submitted_at=epoch_iso(T0),
            ended_at=epoch_iso(T0 + 40),
            history=((epoch_iso(T0), "PENDING", ""),),
        ),
    )
    assert phases(cancelled_in_queue, T0 + 100) == [("pending", T0, T0 + 40)]


def _row(key: str, group: str, part: str, state: str, sub: int | None, sta: int | None,
         end: int | None) -> dict[str, object]:  # fmt: skip
    rec = record(
        state=JobState.parse(state),
        launcher={"kind": "slurm", "group": group, "options": [f"--partition={part}"]},
        submitted_at=None if sub is None else epoch_iso(sub),
        started_at=None if sta is None else epoch_iso(sta),
        ended_at=None if end is None else epoch_iso(end),
        history=(),
    )
    return job_row(key, rec)


def test_experiment_summary() -> None:
    rows = [
        _row("a/1", "g", "gpu", "COMPLETED", T0, T0 + 100, T0 + 400),
        _row("a/2", "g", "gpu", "FAILED", T0, T0 + 50, T0 + 60),
        _row("a/3", "g", "gpu", "RUNNING", T0 + 10, T0 + 20, None),
        _row("a/4", "g", "gpu", "PENDING", T0 + 500, None, None),
    ]
    s = experiment_summary(rows, now=T0 + 1000)
    assert s["total"] == 4 and s["unfinished"] == 2
    assert list(s["counts"]) == ["PENDING", "RUNNING", "COMPLETED", "FAILED"]
    assert s["first"] == T0 and s["last_activity"] is None
    assert s["elapsed"] == 1000  # unfinished jobs: up to now
    assert s["run_time"] == 300 + 10 + 980
    assert s["queue_wait"] == 100 + 50 + 10 + 500
    done = experiment_summary(rows[:2], now=T0 + 5000)
    assert done["elapsed"] == 400 and done["unfinished"] == 0


def test_wait_run_summary_answers_queue_or_code() -> None:
    rows = [
        _row("a/1", "cluster", "gpu", "COMPLETED", T0, T0 + 900, T0 + 1000),
        _row("a/2", "cluster", "gpu", "COMPLETED", T0, T0 + 700, T0 + 800),
        _row("a/3", "cluster", "gpu", "PENDING", T0, None, None),
        _row("b/1", "cluster", "cpu", "COMPLETED", T0, T0 + 10, T0 + 1010),
        _row("c/1", "laptop", "-", "COMPLETED", None, T0, T0 + 30),  # direct: no queue
    ]
    out = {(g["group"], g["partition"]): g for g in wait_run_summary(rows, now=T0 + 1000)}
    gpu = out[("cluster", "gpu")]
    assert (gpu["jobs"], gpu["attempts"], gpu["started"]) == (3, 3, 2)
    assert gpu["queue_total"] == 900 + 700 + 1000 and gpu["run_total"] == 200
    assert gpu["queue_median"] == 900 and gpu["run_median"] == 100 and gpu["queue_max"] == 1000
    assert gpu["queue_share"] == pytest.approx(2600 / 2800)
    cpu = out[("cluster", "cpu")]
    assert cpu["queue_share"] == pytest.approx(10 / 1010)
    direct = out[("laptop", "-")]
    assert direct["attempts"] == 1 and direct["queue_total"] == 0 and direct["run_total"] == 30
    assert next(iter(out)) == ("cluster", "gpu")  # the largest total first


def test_find_experiments(tmp_path: Path) -> None:
    make_job(tmp_path / "runs" / "exp1", "train", "a" * 16)
    make_job(tmp_path / "runs" / "deep" / "exp2", "eval", "b" * 16)
    make_job(tmp_path / ".hidden" / "exp3", "eval", "c" * 16)
    found = [e.path for e in find_experiments([], tmp_path)]
    assert found == [tmp_path / "runs" / "deep" / "exp2", tmp_path / "runs" / "exp1"]
    assert [e.path for e in find_experiments([tmp_path / "runs" / "exp1"], tmp_path)] == [
        tmp_path / "runs" / "exp1"
    ]
    (tmp_path / "fresh").mkdir()  # an experiment that has not started: shown empty
    assert [e.path for e in find_experiments([tmp_path / "fresh"], tmp_path)] == [
        tmp_path / "fresh"
    ]
    with pytest.raises(LaunchersError, match="nope: no such directory"):
        find_experiments([tmp_path / "nope"], tmp_path)
    with pytest.raises(LaunchersError, match="no experiment under"):
        find_experiments([], tmp_path / "fresh")
    ids = {ExperimentDir.of(tmp_path / "runs" / "exp1").id, ExperimentDir.of(tmp_path).id}
    assert len(ids) == 2 and all(len(i) == 12 for i in ids)


def test_reading_job_directories(tmp_path: Path) -> None:
    good = make_job(tmp_path, "train", "a" * 16)
    bad = tmp_path / "jobs" / "train" / ("b" * 16)
    bad.mkdir()
    (bad / "state.json").write_text("{not json")
    future = tmp_path / "jobs" / "train" / ("c" * 16)
    future.mkdir()
    (future / "state.json").write_text(json.dumps({"format": 2, "task_id": "x"}))
    (tmp_path / "jobs" / "train" / ("d" * 16)).mkdir()  # being created: no record yet
    keys = [k for k, _ in job_keys(tmp_path / "jobs")]
    assert keys == [f"train/{c * 16}" for c in "abcd"]
    assert read_job(keys[0], good).row["state"] == "COMPLETED"  # type: ignore[union-attr]
    unreadable = read_job(keys[1], bad)
    assert unreadable is not None and unreadable.row["state"] == "UNREADABLE"
    assert "not valid JSON" in unreadable.row["reason"]
    other = read_job(keys[2], future)
    assert other is not None and "unsupported record format 2" in other.row["reason"]
    assert read_job(keys[3], tmp_path / "jobs" / keys[3]) is None


# -- security ------------------------------------------------------------------------------------


def test_token_is_random_and_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = {security.new_token() for _ in range(20)}
    assert len(tokens) == 20 and all(len(t) == 48 for t in tokens)
    calls: list[tuple[bytes, bytes]] = []
    real = security.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    assert security.token_matches("abc", "abc")
    assert not security.token_matches("abd", "abc")
    assert not security.token_matches(None, "abc") and not security.token_matches("", "abc")
    assert calls == [(b"abc", b"abc"), (b"abd", b"abc")]


def test_where_the_token_may_come_from() -> None:
    query = {"token": "t"}
    assert security.token_from({}, query, method="GET") == "t"
    assert security.token_from({"authorization": "token u"}, query, method="GET") == "u"
    assert security.token_from({"x-launchers-token": "h"}, query, method="GET") == "h"
    # a POST must carry the header: a token in its URL or a form does not count
    assert security.token_from({}, query, method="POST") is None
    assert security.token_from({"authorization": "token u"}, {}, method="POST") is None
    assert security.token_from({"x-launchers-token": "h"}, query, method="POST") == "h"


def test_hosts_and_origins() -> None:
    ok = ["127.0.0.1:8780", "localhost:9000", "[::1]:8780", "localhost", "127.0.0.2"]
    for host in ok:
        assert security.host_allowed(host, bound_to_loopback=True), host
    for host in ["evil.example:8780", "10.0.0.1:8780", "", None, "localhost.evil.example"]:
        assert not security.host_allowed(host, bound_to_loopback=True), host
    assert security.host_allowed("login1.cluster:8780", bound_to_loopback=False)
    assert security.origin_allowed(None, "127.0.0.1:8780")
    assert security.origin_allowed("http://127.0.0.1:8780", "127.0.0.1:8780")
    assert not security.origin_allowed("http://evil.example", "127.0.0.1:8780")
    assert not security.origin_allowed("null", "127.0.0.1:8780")


def test_paths_never_leave_the_jobs_folder(tmp_path: Path) -> None:
    jobs = tmp_path / "xp" / "jobs"
    job = make_job(tmp_path / "xp", "train", "a" * 16, out="hello\n")
    digest = "a" * 16
    assert security.job_file(jobs, "train", digest, "job.out") == job / "job.out"
    assert security.job_file(jobs, "train", digest, "job.out", 2) == job / "attempts/2/job.out"
    for name, dig, file, attempt in [
        ("..", digest, "job.out", None),
        ("train", "..", "job.out", None),
        ("train/..", digest, "job.out", None),
        (".hidden", digest, "job.out", None),
        ("train", digest, "../../../etc/passwd", None),
        ("train", digest, "state.json/../x", None),
        ("train", digest, "job.sh", 1),  # attempts/N/ holds only the outputs
        ("train", digest, "job.out", 0),
        ("train\0", digest, "job.out", None),
    ]:
        assert security.job_file(jobs, name, dig, file, attempt) is None, (name, dig, file)
    (job / "job.err").symlink_to("/etc/passwd")  # a link out of the experiment is refused
    assert security.job_file(jobs, "train", digest, "job.err") is None
    os.symlink(tmp_path, jobs / "train" / ("e" * 16))
    assert security.job_file(jobs, "train", "e" * 16, "job.out") is None


def test_totals_kept_row_by_row_equal_a_fresh_summary() -> None:
    """A burst of changes over many jobs costs each changed row only (``Totals``): the result
    is the summary computed from scratch."""
    import random

    from launchers.monitor.model import Totals

    rnd = random.Random(4)
    states = ["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]

    def random_row(key: str) -> dict[str, object]:
        sub = T0 + rnd.randint(0, 1000)
        sta = sub + rnd.randint(0, 500) if rnd.random() < 0.8 else None
        state = rnd.choice(states[1:] if sta else states[:1] + states[3:])
        end = (sta or sub) + rnd.randint(0, 900) if state not in ("PENDING", "RUNNING") else None
        return _row(key, "g", rnd.choice(["a", "b"]), state, sub, sta, end)

    totals = Totals()
    rows: dict[str, dict[str, object]] = {}
    for step in range(400):
        key = f"j/{rnd.randint(0, 60)}"
        if rnd.random() < 0.1:
            rows.pop(key, None)
            totals.set(key, None)
        else:
            rows[key] = random_row(key)
            totals.set(key, rows[key])
        if step % 50 == 0:
            now = T0 + 3000
            got, want = totals.summary(now), experiment_summary(rows.values(), now)
            for field in ("run_time", "queue_wait", "elapsed"):
                assert got[field] == pytest.approx(want[field], abs=1e-3)
                got.pop(field), want.pop(field)
            assert got == want


def test_payload_gzip_compresses_only_what_follows_the_rows() -> None:
    """The rows of an experiment are compressed once per version; each response adds its own
    fields after them and is still one valid gzip stream."""
    import gzip
    import json

    from launchers.monitor.index import Payload

    payload = Payload(
        3, json.dumps({"columns": ["key"], "rows": [[str(i)] for i in range(999)]}).encode()
    )
    for rest in (b'"now":1.5,"exp":"x"', b'"now":2', b""):
        body = gzip.decompress(payload.gzipped(rest))
        assert body == payload.body(rest)
    assert json.loads(payload.body(b'"now":2')) == {
        "table": {"columns": ["key"], "rows": [[str(i)] for i in range(999)]},
        "now": 2,
    }
