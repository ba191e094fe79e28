"""``launchers monitor`` over HTTP: the API, the live streams and every security rule, against
the real server (uvicorn on a loopback port) over job directories written on disk."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from launchers.jobs.record import read_record, write_record
from launchers.jobs.state import JobState
from monitor_fixtures import make_job, serving
from paths import ROOT

D1, D2, D3 = "1" * 16, "2" * 16, "3" * 16


@functools.cache
def http() -> httpx.Client:
    """One client for every request: a new httpx client costs tenths of a second (its TLS
    context), which added up to most of these tests' time. The monitor sets no cookie."""
    return httpx.Client(timeout=10)


@pytest.fixture
def xp(tmp_path: Path) -> Path:
    xp = tmp_path / "xp"
    make_job(xp, "train", D1, "COMPLETED", out="==== banner ====\nepoch 1\n", err="warn\n")
    make_job(
        xp,
        "train",
        D2,
        "FAILED",
        queue=30,
        run=5,
        exit_code=3,
        reason="exit code 3",
        attempt=2,
        attempts=(
            {"attempt": 1, "native_id": "11", "state": "FAILED", "cause": "re-run after FAILED"},
        ),
    )
    (xp / "jobs" / "train" / D2 / "attempts" / "1").mkdir(parents=True)
    (xp / "jobs" / "train" / D2 / "attempts" / "1" / "job.out").write_text("first try\n")
    (xp / "jobs" / "train" / D2 / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "bad lr", "traceback": "Traceback ..."})
    )
    make_job(xp, "eval", D3, "RUNNING", run=None, native_id="77")
    (xp / "jobs" / "eval" / D3 / "result.json").write_text(json.dumps({"acc": 0.93}))
    return xp


@pytest.fixture
def monitor(xp: Path) -> Iterator[Any]:
    with serving(xp) as m:
        yield m


def get(m: Any, path: str, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", {})
    headers.setdefault("X-Launchers-Token", m.token)
    return http().get(m.base + path, headers=headers, timeout=10, **kw)


def exp_id(m: Any) -> str:
    return str(get(m, "/api/experiments").json()["experiments"][0]["id"])


# -- the API ------------------------------------------------------------------------------------


def test_page_and_api(monitor: Any, xp: Path) -> None:
    page = http().get(monitor.url, timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f'content="{monitor.token}"' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    for asset in ("app.js", "style.css", "favicon.svg"):
        r = http().get(f"{monitor.base}/static/{asset}?token={monitor.token}", timeout=10)
        assert r.status_code == 200 and r.content, asset
    exps = get(monitor, "/api/experiments").json()
    assert exps["watch"].startswith("inotify") and exps["track"] is False
    (e,) = exps["experiments"]
    assert e["path"] == str(xp) and e["summary"]["total"] == 3
    assert e["summary"]["counts"] == {"RUNNING": 1, "COMPLETED": 1, "FAILED": 1}
    response = get(monitor, f"/api/x/{e['id']}/jobs")
    assert response.headers["content-encoding"] == "gzip"  # httpx asks for it
    jobs = response.json()
    plain = get(monitor, f"/api/x/{e['id']}/jobs", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.json()["table"] == jobs["table"]
    rows = [dict(zip(jobs["table"]["columns"], r, strict=True)) for r in jobs["table"]["rows"]]
    assert [r["key"] for r in rows] == [f"eval/{D3}", f"train/{D1}", f"train/{D2}"]
    assert rows[2]["partition"] == "gpu" and rows[2]["attempt"] == 2
    tl = get(monitor, f"/api/x/{e['id']}/timeline").json()
    (group,) = tl["groups"]
    assert (group["group"], group["partition"], group["jobs"]) == ("gpu-a100", "gpu", 3)
    assert group["queue_total"] == 60 + 30 + 60 and group["run_total"] > 125


def test_job_detail_and_files(monitor: Any) -> None:
    e = exp_id(monitor)
    d = get(monitor, f"/api/x/{e}/job/train/{D2}").json()
    assert d["record"]["state"] == "FAILED" and d["record"]["exit_code"] == 3
    assert d["error"]["type"] == "ValueError" and d["options"][0] == "--partition=gpu"
    assert d["script"]["text"].startswith("#!/bin/bash") and d["params"]["kind"] == "command"
    assert [h[1] for h in d["record"]["history"]] == ["WAITING", "PENDING", "RUNNING", "FAILED"]
    assert d["attempts"][0]["files"]["job.out"] == len("first try\n")
    assert d["edges"] == {"after": [], "before": []}
    assert [p[0] for p in d["phases"]] == ["waiting", "pending", "running"]
    r = get(monitor, f"/api/x/{e}/job/train/{D2}/file", params={"name": "job.out", "attempt": 1})
    assert r.text == "first try\n" and r.headers["content-type"].startswith("text/plain")
    assert r.headers["x-content-type-options"] == "nosniff"
    ok = get(monitor, f"/api/x/{e}/job/eval/{D3}").json()
    assert ok["result"] == {"kind": "json", "value": {"acc": 0.93}}
    assert get(monitor, f"/api/x/{e}/job/train/{'9' * 16}").status_code == 404
    assert get(monitor, "/api/x/nope/jobs").status_code == 404


class Events:
    """The events of a server-sent event stream, read as they come."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.headers["content-type"].startswith("text/event-stream")
        self.lines = response.iter_lines()

    def next(self, count: int, timeout: float = 10) -> list[tuple[str, Any]]:
        """The next ``count`` events (the client's read timeout bounds each wait)."""
        events: list[tuple[str, Any]] = []
        name = None
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                events.append((name, json.loads(line[6:])))
                name = None
                if len(events) >= count:
                    break
            assert time.monotonic() < deadline, f"only {events} after {timeout} s"
        return events


@pytest.mark.timing  # inotify is told from the 2 s sweep by the time the row took
def test_live_rows_and_followed_output(monitor: Any, xp: Path) -> None:
    e = exp_id(monitor)
    job = xp / "jobs" / "eval" / D3
    headers = {"X-Launchers-Token": monitor.token}
    with http().stream("GET", f"{monitor.base}/api/events", headers=headers, timeout=10) as r:
        events = Events(r)
        ((name, hello),) = events.next(1)
        assert name == "hello" and e in hello["versions"]
        rec = read_record(job)
        assert rec is not None
        t0 = time.monotonic()
        write_record(job, rec.transition(JobState.COMPLETED, ended_at=rec.started_at))
        ((name, data),) = events.next(1)
        took = time.monotonic() - t0
    assert name == "rows" and data["exp"] == e and data["removed"] == []
    row = dict(zip(data["rows"]["columns"], data["rows"]["rows"][0], strict=True))
    assert row["key"] == f"eval/{D3}" and row["state"] == "COMPLETED"
    assert data["summary"]["counts"]["COMPLETED"] == 2
    assert took < 1.0  # inotify: no waiting for a sweep
    url = f"{monitor.base}/api/x/{e}/job/train/{D1}/follow"
    with http().stream("GET", url, headers=headers, timeout=10) as r:
        events = Events(r)
        first = events.next(2)
        assert sorted(d["file"] for _, d in first) == ["job.err", "job.out"]
        out = next(d for _, d in first if d["file"] == "job.out")
        assert out["reset"] and out["text"] == "==== banner ====\nepoch 1\n"
        with open(xp / "jobs" / "train" / D1 / "job.out", "a") as f:
            f.write("epoch 2 \xe9\n")
        ((_, more),) = events.next(1)
    assert more == {
        "file": "job.out",
        "reset": False,
        "text": "epoch 2 \xe9\n",
        "offset": out["offset"] + len("epoch 2 \xe9\n".encode()),
        "skipped": 0,
    }


def test_new_and_removed_jobs_and_the_stat_sweep(xp: Path) -> None:
    """Without inotify (NFS, Lustre) the sweep finds new jobs and changed records."""
    with serving(xp, use_inotify=False) as m:
        assert get(m, "/api/experiments").json()["watch"] == "stat sweep only"
        e = exp_id(m)
        headers = {"X-Launchers-Token": m.token}
        with http().stream("GET", f"{m.base}/api/events", headers=headers, timeout=10) as r:
            events = Events(r)
            events.next(1)
            make_job(xp, "sweep", "4" * 16, "PENDING", queue=None, run=None)
            ((_, data),) = events.next(1)
            assert data["rows"]["rows"][0][0] == f"sweep/{'4' * 16}"
            job = xp / "jobs" / "eval" / D3
            rec = read_record(job)
            assert rec is not None
            write_record(job, rec.transition(JobState.FAILED, reason="exit code 1"))
            ((_, data),) = events.next(1)
            assert data["rows"]["rows"][0][3] == "FAILED"
        jobs = get(m, f"/api/x/{e}/jobs").json()
        assert len(jobs["table"]["rows"]) == 4


def test_a_request_about_a_job_not_yet_seen_reads_it(xp: Path) -> None:
    """A request may outrun the watcher (a script submits, then calls the API at once): the job
    named is read on demand, not answered 404 until the next sweep."""
    with serving(xp, use_inotify=False) as m:
        e = exp_id(m)
        make_job(xp, "fresh", "5" * 16, "RUNNING", queue=None, run=None)
        r = get(m, f"/api/x/{e}/job/fresh/{'5' * 16}")
        assert r.status_code == 200, r.text
        assert get(m, f"/api/x/{e}/job/fresh/{'6' * 16}").status_code == 404


# -- security ---------------------------------------------------------------------------------


def test_every_request_needs_the_token(monitor: Any) -> None:
    e = exp_id(monitor)
    paths = ["/", "/static/app.js", "/api/experiments", f"/api/x/{e}/jobs", "/api/events",
             f"/api/x/{e}/job/train/{D1}/file?name=job.out", "/nope"]  # fmt: skip
    for path in paths:
        for headers in ({}, {"X-Launchers-Token": "0" * 48}, {"X-Launchers-Token": ""}):
            r = http().get(monitor.base + path, headers=headers, timeout=10)
            assert r.status_code == 403, (path, headers)
            assert "epoch" not in r.text and "train" not in r.text
    r = http().get(monitor.base + "/", timeout=10)
    assert "needs the token" in r.text
    wrong = http().get(f"{monitor.base}/api/experiments?token={monitor.token[:-1]}x", timeout=10)
    assert wrong.status_code == 403
    assert http().get(f"{monitor.base}/api/experiments?token={monitor.token}").status_code == 200
    auth = {"Authorization": f"token {monitor.token}"}
    assert http().get(f"{monitor.base}/api/experiments", headers=auth).status_code == 200


def test_only_loopback_host_names(monitor: Any) -> None:
    for host in ("evil.example", f"evil.example:{monitor.port}", "192.168.1.5"):
        r = get(monitor, "/api/experiments", headers={"Host": host})
        assert r.status_code == 403 and "host not allowed" in r.text
    r = get(monitor, "/api/experiments", headers={"Host": f"localhost:{monitor.port}"})
    assert r.status_code == 200


def test_state_changes_only_by_post_with_the_token_header(monitor: Any, xp: Path) -> None:
    e = exp_id(monitor)
    url = f"{monitor.base}/api/x/{e}/job/eval/{D3}/cancel"
    token = monitor.token
    assert get(monitor, f"/api/x/{e}/job/eval/{D3}/cancel").status_code == 405
    # what a cross-site form can send: the token in the URL or in the body, no custom header
    assert http().post(f"{url}?token={token}").status_code == 403
    assert http().post(url, data={"token": token}).status_code == 403
    assert http().post(url, headers={"Authorization": f"token {token}"}).status_code == 403
    # the right header from another origin
    r = http().post(url, headers={"X-Launchers-Token": token, "Origin": "http://evil.example"})
    assert r.status_code == 403
    assert http().post(f"{monitor.base}/api/x/{e}/cancel?token={token}").status_code == 403
    rec = read_record(xp / "jobs" / "eval" / D3)
    assert rec is not None and "cancel_requested" not in rec.extra  # nothing happened
    # a WebSocket handshake is refused before anything
    ws = http().get(
        monitor.base + "/api/events",
        headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "X-Launchers-Token": token},
    )  # fmt: skip
    assert ws.status_code != 101


def test_paths_in_requests_stay_in_the_experiment(monitor: Any, xp: Path) -> None:
    e = exp_id(monitor)
    secret = xp.parent / "secret.txt"
    secret.write_text("TOP SECRET")
    (xp / "jobs" / "train" / D1 / "job.rc").symlink_to(secret)
    base = f"/api/x/{e}/job"
    attempts = [
        f"{base}/train/{D1}/file?name=../../../../secret.txt",
        f"{base}/train/{D1}/file?name=job.rc",  # a link to outside
        f"{base}/train/{D1}/file?name=%2e%2e/%2e%2e/secret.txt",
        f"{base}/train/{D1}/file?name=job.out&attempt=..%2F..",
        f"{base}/train/{D1}/file?name=job.out&attempt=-1",
        f"{base}/..%2F..%2F..%2F/{D1}/file?name=job.out",
        f"{base}/../../secret.txt/file?name=job.out",
        f"{base}/train/..%2F..%2F..%2Fsecret.txt/file?name=job.out",
        f"{base}/train/%2e%2e/file?name=job.out",
        "/static/..%2F..%2F..%2Fpyproject.toml",
        "/static/../app.py",
        f"/api/x/..%2F{e}/jobs",
    ]
    for path in attempts:
        r = http().get(monitor.base + path, headers={"X-Launchers-Token": monitor.token})
        assert r.status_code in (400, 404, 405), path
        assert "TOP SECRET" not in r.text and "[project]" not in r.text, path
    # raw, not normalised by the client: `..` segments sent as they are
    raw = subprocess.run(
        ["curl", "-s", "--path-as-is", "-H", f"X-Launchers-Token: {monitor.token}",
         f"{monitor.base}/api/x/{e}/job/train/../../../../../secret.txt/file?name=job.out"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert "TOP SECRET" not in raw.stdout


def test_names_reasons_and_logs_are_data_not_markup(monitor: Any, xp: Path) -> None:
    """The API sends JSON and text/plain only; the page (tests/integration/browser/test_monitor_browser.py) puts
    them in the DOM as text."""
    e = exp_id(monitor)
    evil = "<script>window.__xss=1</script><img src=x onerror=alert(1)>"
    make_job(xp, "x", "5" * 16, "FAILED", reason=evil, out=evil + "\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        jobs = get(monitor, f"/api/x/{e}/jobs").json()
        if len(jobs["table"]["rows"]) == 4:
            break
        time.sleep(0.05)
    r = get(monitor, f"/api/x/{e}/job/x/{'5' * 16}/file", params={"name": "job.out"})
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in r.headers["content-security-policy"]
    d = get(monitor, f"/api/x/{e}/job/x/{'5' * 16}")
    assert d.headers["content-type"] == "application/json" and d.json()["row"]["reason"] == evil


# -- the command ----------------------------------------------------------------------------


def test_the_command_prints_the_url_and_stops_on_ctrl_c(xp: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "launchers", "monitor", str(xp), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        lines = []
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "?token=" in line:
                url = line.strip()
        assert url is not None, lines
        assert lines[0].startswith("launchers monitor: 1 experiment, 3 jobs read in")
        assert url.startswith("http://127.0.0.1:")
        assert http().get(url, timeout=10).status_code == 200
        proc.send_signal(2)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_command_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from launchers.cli.main import main

    assert main(["monitor", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("nope: no such directory") and "Traceback" not in err
    assert main(["monitor", "--port", "99999"]) == 2
    assert "--port 99999: not a port number" in capsys.readouterr().err


# -- actions ------------------------------------------------------------------------------------


def test_cancel_one_job_then_every_unfinished_job(
    tmp_path: Path, leaves_nothing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel buttons' requests, on real local jobs: one job, then the rest of the
    experiment; each ends CANCELLED as with ``launchers cancel``."""
    from launchers import DirectLauncher, ExperimentFailed, command, experiment

    monkeypatch.setenv("LAUNCHERS_CONFIG", str(tmp_path / "none.yaml"))
    where = tmp_path / "xp"
    with (
        pytest.raises(ExperimentFailed),
        experiment(where, DirectLauncher(), progress=False),
        serving(where) as m,
    ):
        jobs = [command(["sleep", "60"], name=f"nap{i}").submit() for i in range(2)]
        deadline = time.monotonic() + 30
        while not all(j.state is JobState.RUNNING for j in jobs):
            assert time.monotonic() < deadline, [j.state for j in jobs]
            time.sleep(0.05)
        e = exp_id(m)
        post = {"X-Launchers-Token": m.token, "Origin": m.base}
        name, digest = jobs[0].directory.parts[-2:]
        r = http().post(f"{m.base}/api/x/{e}/job/{name}/{digest}/cancel", headers=post)
        assert r.status_code == 200 and r.json()["jobs"][0]["requested"] is True
        assert jobs[0].wait(30) is JobState.CANCELLED
        assert jobs[1].state is JobState.RUNNING
        r = http().post(f"{m.base}/api/x/{e}/cancel", headers=post)
        assert r.status_code == 200, r.text
        assert jobs[1].task_id in {d["task_id"] for d in r.json()["jobs"] if d["requested"]}
        for job in jobs:
            assert job.wait(30) is JobState.CANCELLED
        rec = read_record(jobs[1].directory)
        assert rec is not None and rec.reason == "cancelled on request"
