"""``launchers monitor`` over an experiment of 10,000 job records: first page load (server time
and the browser's load event), an update of 100 changed jobs reaching the page, and the
server's CPU while idle.

    python benchmarks/monitor.py [--jobs 10000] [--changed 100] [--idle 61] [--json out.json]

Writes the experiment in a temporary directory (10,000 ``state.json`` as launchers writes
them, 200 of them RUNNING: 100 end for the update measured with inotify, the other 100 for the
one measured with ``--no-inotify``, the stat sweep alone, as on a filesystem where inotify sees
nothing), runs ``launchers monitor`` as its own process (as a user does), and drives the page in
headless Chromium (Debian's chromium and chromium-driver, selenium: see
tests/browser/install.sh). Targets (docs/monitor.md, "Performance"): first load < 1 s for the
server, the browser's load event and the table drawn; the 100 changes on the page < 1 s after
the last is written; idle CPU < 1 % of a core. Exit status 1 when one is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))

from launchers.jobs.record import StateRecord, epoch_iso, write_record  # noqa: E402
from launchers.jobs.state import JobState  # noqa: E402
from launchers.monitor.scan import ExperimentDir  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TICKS = os.sysconf("SC_CLK_TCK")


def write_experiment(xp: Path, n: int, running: int, seed: int = 1) -> list[Path]:
    """``n`` job directories (records only, as launchers writes them); the last ``running``
    are RUNNING. Returns the running ones."""
    rnd = random.Random(seed)
    now = time.time()
    names = ["train", "eval", "preprocess", "sweep_lr"]
    live = []
    for i in range(n):
        name = names[i % len(names)]
        digest = f"{rnd.getrandbits(64):016x}"
        d = xp / "jobs" / name / digest
        d.mkdir(parents=True)
        t0 = now - 8 * 3600 + i * (7 * 3600 / n)
        sub, sta = t0 + 2, t0 + 2 + rnd.expovariate(1 / 600)
        end = min(now - 60, sta + rnd.expovariate(1 / 1800))
        is_running = i >= n - running
        state = JobState.RUNNING if is_running else JobState.COMPLETED
        history = [
            (epoch_iso(t0), "WAITING", "created"),
            (epoch_iso(sub), "SUBMITTING", ""),
            (epoch_iso(sub + 0.3), "PENDING", f"submitted as {100000 + i}"),
            (epoch_iso(sta), "RUNNING", "sacct"),
        ]
        if not is_running:
            history.append((epoch_iso(end), "COMPLETED", "job.rc"))
        rec = StateRecord(
            task_id=f"{name}-{digest}",
            state=state,
            launcher={
                "kind": "slurm",
                "group": "gpu-a100" if i % 2 else "cpu",
                "connector": "local",
                "options": ["--partition=gpu" if i % 2 else "--partition=cpu", "--time=04:00:00"],
            },
            native_id=str(100000 + i),
            job_name=f"{name}-{digest[:12]}-a1",
            submitted_at=epoch_iso(sub),
            started_at=epoch_iso(sta),
            ended_at=None if is_running else epoch_iso(end),
            exit_code=None if is_running else 0,
            history=tuple(history),
        )
        write_record(d, rec, sync=False, sync_dir=False)
        if is_running:
            live.append(d)
    return live


def complete(dirs: list[Path]) -> tuple[float, float]:
    """Record each RUNNING job of ``dirs`` as COMPLETED (as a tracker does: atomic rename);
    the times of the first and last write."""
    first = time.time()
    for d in dirs:
        data = json.loads((d / "state.json").read_text())
        rec = StateRecord.from_json(data)
        write_record(
            d,
            rec.transition(
                JobState.COMPLETED, "job.rc", exit_code=0, ended_at=epoch_iso(time.time())
            ),
        )
    return first, time.time()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """``launchers monitor`` as its own process."""

    def __init__(self, xp: Path, *extra: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(SRC))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "launchers", "monitor", str(xp), "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.banner = ""
        t0 = time.monotonic()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the monitor did not start: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            self.banner += line
            if "?token=" in line:
                self.url = line.strip()
                break
        self.ready_after = time.monotonic() - t0
        found = re.search(r"([\d,]+) jobs read in ([\d.]+) s", self.banner)
        self.scan_seconds = float(found.group(2)) if found else float("nan")
        self.base, self.token = self.url.split("/?token=")

    def stop(self) -> None:
        self.proc.send_signal(2)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1440,900"):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait(driver: Any, script: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError(script)


def first_load(server: Server, exp_id: str, driver: Any, runs: int) -> dict[str, Any]:
    """Server time of each request of a first load, then page loads in the browser."""
    client = httpx.Client(headers={"X-Launchers-Token": server.token, "Accept-Encoding": "gzip"})
    times: dict[str, list[float]] = {"page": [], "experiments": [], "jobs": []}
    size = raw = 0
    for _ in range(runs):
        for name, path in (("page", "/"), ("experiments", "/api/experiments"),
                           ("jobs", f"/api/x/{exp_id}/jobs")):  # fmt: skip
            t0 = time.perf_counter()
            r = client.get(server.base + path)
            times[name].append(time.perf_counter() - t0)
            r.raise_for_status()
            if name == "jobs":
                size = int(r.headers.get("content-length", 0))
                raw = len(r.content)
    client.close()
    load, rendered = [], []
    for _ in range(runs):
        driver.get("about:blank")
        driver.get(f"{server.url}#/x/{exp_id}")
        wait(
            driver,
            "return /10,000 jobs|\\d+ jobs/.test((document.querySelector('.status-line')||{}).textContent||'') && window.__monitorRendered",
        )
        nav = driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "return [n.loadEventEnd, window.__monitorRendered - performance.timeOrigin]"
        )
        load.append(nav[0] / 1000)
        rendered.append(nav[1] / 1000)
    return {
        "server_seconds": {k: min(v) for k, v in times.items()},
        "server_first_seconds": {k: v[0] for k, v in times.items()},
        "jobs_bytes_gzip": size,
        "jobs_bytes": raw,
        "browser_load_event_seconds": statistics.median(load),
        "browser_load_event_all": load,
        "browser_table_rendered_seconds": statistics.median(rendered),
        "browser_table_rendered_all": rendered,
    }


def update(driver: Any, dirs: list[Path], expected: int) -> dict[str, float]:
    """Write ``dirs`` COMPLETED; when the page has them all: from the first and the last write."""
    driver.execute_script("window.__monitorRendered = 0; window.__monitorCounts = {}")
    first, last = complete(dirs)
    wait(driver, f"return (window.__monitorCounts || {{}}).COMPLETED === {expected}", 60)
    shown = wait(driver, "return window.__monitorRendered") / 1000
    return {"from_first_write": shown - first, "from_last_write": shown - last,
            "writing": last - first}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--changed", type=int, default=100)
    ap.add_argument("--idle", type=float, default=61.0, help="seconds of idle CPU measured")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    results: dict[str, Any] = {"jobs": args.jobs, "changed": args.changed}
    results["load_average_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="launchers-monitor-bench-") as tmp:
        xp = Path(tmp) / "xp"
        t0 = time.perf_counter()
        live = write_experiment(xp, args.jobs, 2 * args.changed)
        print(f"wrote {args.jobs:,} records in {time.perf_counter() - t0:.1f} s")
        exp_id = ExperimentDir.of(xp).id
        driver = browser()
        try:
            server = Server(xp)
            try:
                results["startup_seconds"] = server.ready_after
                results["scan_seconds"] = server.scan_seconds
                print(f"monitor ready after {server.ready_after:.2f} s "
                      f"(reading {args.jobs:,} records: {server.scan_seconds:.2f} s)")  # fmt: skip
                load = first_load(server, exp_id, driver, args.runs)
                results["first_load"] = load
                s = load["server_seconds"]
                print(
                    f"first load, server: page {s['page'] * 1000:.1f} ms, experiments "
                    f"{s['experiments'] * 1000:.1f} ms, jobs {s['jobs'] * 1000:.1f} ms "
                    f"(very first: {load['server_first_seconds']['jobs'] * 1000:.1f} ms; "
                    f"{load['jobs_bytes'] / 1e6:.2f} MB, {load['jobs_bytes_gzip'] / 1e3:.0f} kB gzipped)"
                )
                print(
                    f"first load, browser: load event {load['browser_load_event_seconds']:.3f} s, "
                    f"table of {args.jobs:,} rows drawn {load['browser_table_rendered_seconds']:.3f} s "
                    f"after navigation start (median of {args.runs})"
                )
                time.sleep(3)
                before = cpu_seconds(server.proc.pid)
                t_idle = time.monotonic()
                time.sleep(args.idle)
                used = cpu_seconds(server.proc.pid) - before
                elapsed = time.monotonic() - t_idle
                results["idle_cpu_percent"] = 100 * used / elapsed
                results["rss_mib"] = rss_mib(server.proc.pid)
                print(
                    f"idle, page open, {2 * args.changed} jobs RUNNING: {used:.2f} s CPU in "
                    f"{elapsed:.0f} s = {results['idle_cpu_percent']:.2f} % of a core; "
                    f"RSS {results['rss_mib']:.0f} MiB"
                )
                up = update(
                    driver, live[: args.changed], args.jobs - 2 * args.changed + args.changed
                )
                results["update_inotify"] = up
                print(
                    f"update of {args.changed} jobs (inotify): on the page "
                    f"{up['from_last_write'] * 1000:.0f} ms after the last write "
                    f"({up['from_first_write'] * 1000:.0f} ms after the first; writing took "
                    f"{up['writing'] * 1000:.0f} ms)"
                )
            finally:
                server.stop()
            server = Server(xp, "--no-inotify")
            try:
                driver.get(f"{server.url}#/x/{exp_id}")
                wait(driver, "return window.__monitorRendered")
                time.sleep(1)
                expected = args.jobs
                up = update(driver, live[args.changed :], expected)
                results["update_sweep_only"] = up
                print(
                    f"update of {args.changed} jobs (stat sweep only): on the page "
                    f"{up['from_last_write'] * 1000:.0f} ms after the last write "
                    f"({up['from_first_write'] * 1000:.0f} ms after the first)"
                )
                before = cpu_seconds(server.proc.pid)
                t_idle = time.monotonic()
                time.sleep(min(args.idle, 20))
                used = cpu_seconds(server.proc.pid) - before
                results["idle_cpu_percent_sweep_only"] = 100 * used / (time.monotonic() - t_idle)
                print(
                    f"idle, stat sweep only, every job finished: "
                    f"{results['idle_cpu_percent_sweep_only']:.2f} % of a core"
                )
            finally:
                server.stop()
        finally:
            driver.quit()
    results["load_average_after"] = os.getloadavg()
    before, after = results["load_average_before"][0], results["load_average_after"][0]
    print(f"load average (1 min) of this machine: {before:.1f} before, {after:.1f} after")
    load = results["first_load"]
    checks = [
        ("first load, server (jobs request)", load["server_seconds"]["jobs"], 1.0),
        ("first load, browser load event", load["browser_load_event_seconds"], 1.0),
        ("first load, browser: the table drawn", load["browser_table_rendered_seconds"], 1.0),
        (
            "update of 100 jobs reaches the page (inotify)",
            results["update_inotify"]["from_last_write"],
            1.0,
        ),
        ("idle CPU, % of a core", results["idle_cpu_percent"], 1.0),
    ]
    failed = 0
    for name, value, target in checks:
        ok = value < target
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {value:.3f} (target < {target:g})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
