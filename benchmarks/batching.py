"""Benchmark of n:1 batching (docs/design/pilots.md §5): makespan of N tiny tasks, one Slurm job each vs
batched through one pilot, vs a shell loop of ``sbatch --wrap``, on the project's real Slurm.

One command (starts and stops its own cluster instance with a Prolog sleeping L seconds)::

    python benchmarks/batching.py                 # N=100, L=3, S=8, J=4, t=0.2 and t=1, 3 runs
    python benchmarks/batching.py --reuse-cluster # an instance already started in --cluster-dir

Reported per series: median of ``--runs`` runs after one warm-up, the ratio
makespan(one job each) / makespan(batched), per-task overhead, the pilot's idle tail, Slurm
jobs submitted, and PASS/FAIL against the targets of docs/design/pilots.md §5.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "tests" / "cluster" / "start.sh"
STOP = ROOT / "tests" / "cluster" / "stop.sh"
PORTS = {
    "CLUSTER_SLURMCTLD_PORT": "9817",
    "CLUSTER_SLURMDBD_PORT": "9819",
    "CLUSTER_SLURMD_PORT_BASE": "9820",
    "CLUSTER_MYSQL_PORT": "4507",
}


def start_cluster(directory: str, latency: float) -> dict[str, str]:
    env = dict(
        os.environ,
        CLUSTER_DIR=directory,
        CLUSTER_PROLOG_SLEEP=f"{latency:g}",
        CLUSTER_SSH="0",
        **PORTS,
    )
    out = subprocess.run(["bash", str(START)], env=env, check=True, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=900).stdout  # fmt: skip
    info = dict(
        line[len("export ") :].split("=", 1)
        for line in out.splitlines()
        if line.startswith("export ")
    )
    return {k: v.strip("'\"") for k, v in info.items()}


def read_env(directory: str) -> dict[str, str]:
    info = {}
    for line in Path(directory, "env.sh").read_text().splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export ") :].partition("=")
            info[k] = v.strip("'\"")
    return info


def stop_cluster(directory: str) -> None:
    env = dict(os.environ, CLUSTER_DIR=directory, **PORTS)
    subprocess.run(["bash", str(STOP)], env=env, stdin=subprocess.DEVNULL, timeout=300, check=False)


def inner_launcher() -> Any:
    from launchers import SlurmLauncher
    from launchers.config.model import SlurmGroup

    return SlurmLauncher(
        group=SlurmGroup(id="bench"),
        options={
            "partition": "debug",
            "qos": "bench",
            "cpus_per_task": 1,
            "mem": "256M",
            "time": "00:05:00",
        },
    )


def fresh_executors() -> None:
    from launchers.runtime.core import current

    current().forget_executors("slurm")


def run_one_each(n: int, t: float, work: Path) -> dict[str, Any]:
    from launchers import JobState, command, experiment

    fresh_executors()
    launcher = inner_launcher()
    t0 = time.monotonic()
    with experiment(work, launcher) as xp:
        for i in range(n):
            command(["sleep", f"{t:g}"], name=f"one{i}").submit()
    makespan = time.monotonic() - t0
    ok = all(j.state is JobState.COMPLETED for j in xp.jobs)
    sbatch = launcher.executor().commands.get("sbatch", 0)  # type: ignore[attr-defined]
    return {"makespan": makespan, "jobs": sbatch, "ok": ok}


def run_batched(n: int, t: float, work: Path, slots: int, linger: float) -> dict[str, Any]:
    from launchers import JobState, command, experiment
    from launchers.batch import queue as Q

    fresh_executors()
    batch = inner_launcher().batched(slots=slots, linger=linger, walltime="10m", drain_margin="1m")
    ex = batch.executor()
    before = ex.pilots_submitted  # type: ignore[attr-defined]
    t0 = time.monotonic()
    with experiment(work, batch) as xp:
        for i in range(n):
            command(["sleep", f"{t:g}"], name=f"b{i}").submit()
    makespan = time.monotonic() - t0
    ok = all(j.state is JobState.COMPLETED for j in xp.jobs)
    queue = Path(xp.jobs[0].record.extra["batch"]["queue"])
    done = [Q.read_done(queue, j.task_id) or {} for j in xp.jobs]
    once = len(os.listdir(queue / "done")) == n and all(d.get("attempt") == 1 for d in done)
    for j in xp.jobs:
        banners = [
            x
            for x in j.stdout_path.read_text().splitlines()
            if x.startswith("==== launchers: attempt")
        ]
        once = once and len(banners) == 1
    # idle tail: from the last task's end until the runner exits (its final heartbeat)
    deadline = time.monotonic() + linger + 30
    idle = math.nan
    while time.monotonic() < deadline:
        beats = Q.read_runners(queue)
        pilots = [p for s in ex.shapes.values() if s.queue == queue for p in s.pilots]  # type: ignore[attr-defined]
        if pilots and all(p.state.is_final for p in pilots) and beats:
            last_end = max(float(d.get("end_time") or 0) for d in done)
            idle = max(float(b["time"]) for b in beats) - last_end
            break
        time.sleep(0.5)
    pilots = ex.pilots_submitted - before  # type: ignore[attr-defined]
    return {"makespan": makespan, "jobs": pilots, "ok": ok, "once": once, "idle_tail": idle}


def run_wrap_loop(n: int, t: float, work: Path) -> dict[str, Any]:
    script = (
        f"for i in $(seq {n}); do sbatch --parsable -p debug --qos=bench -c 1 --mem=256M -t 5 "
        f'-o /dev/null --wrap "sleep {t:g}" || exit 1; done'
    )
    t0 = time.monotonic()
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, cwd=work
    ).stdout
    ids = {line.split(";")[0] for line in out.split()}
    while True:
        q = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%A|%T"], capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
        states = dict(line.split("|", 1) for line in q.split())
        if all(states.get(i) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for i in ids):
            break
        time.sleep(0.25)
    makespan = time.monotonic() - t0
    return {
        "makespan": makespan,
        "jobs": len(ids),
        "ok": all(states.get(i) == "COMPLETED" for i in ids),
    }


def median_of(
    fn: Callable[[Path], dict[str, Any]], runs: int, base: Path, label: str
) -> dict[str, Any]:
    results = []
    for r in range(runs + 1):
        work = Path(tempfile.mkdtemp(prefix=f"{label}-{r}-", dir=base))
        res = fn(work)
        tag = "warm-up" if r == 0 else f"run {r}"
        print(
            f"  {label:10s} {tag:8s} makespan {res['makespan']:7.2f} s  jobs {res['jobs']}",
            flush=True,
        )
        if r > 0:
            results.append(res)
    out = dict(results[0])
    out["makespan"] = statistics.median(r["makespan"] for r in results)
    out["runs"] = [round(r["makespan"], 2) for r in results]
    out["ok"] = all(r["ok"] for r in results)
    if "once" in out:
        out["once"] = all(r["once"] for r in results)
        out["idle_tail"] = statistics.median(r["idle_tail"] for r in results)
        out["jobs"] = max(r["jobs"] for r in results)
    return out


def series(args: argparse.Namespace, t: float, base: Path) -> dict[str, Any]:
    n, slots, latency = args.n, args.slots, args.latency
    print(f"series: N={n} tasks of sleep {t:g}, L={latency:g} s, S={slots}, J={args.j}", flush=True)
    one = median_of(lambda w: run_one_each(n, t, w), args.runs, base, "one-each")
    bat = median_of(lambda w: run_batched(n, t, w, slots, args.linger), args.runs, base, "batched")
    loop = median_of(lambda w: run_wrap_loop(n, t, w), args.runs, base, "sbatch-loop")
    ideal = math.ceil(n / slots) * t
    target = latency + ideal + n * 0.05 + 2.0
    checks = {
        "batched makespan <= L + ceil(N/S)*t + N*50ms + 2s": bat["makespan"] <= target,
        "every task exactly once (attempt 1, N done entries)": bool(bat["once"]) and bat["ok"],
        "idle tail <= linger + 2s": bat["idle_tail"] <= args.linger + 2.0,
        "one pilot submitted": bat["jobs"] == 1,
    }
    if t <= 0.2 + 1e-9:
        checks["ratio one-each/batched > 10"] = one["makespan"] / bat["makespan"] > 10
    return {
        "t": t,
        "one_each": one,
        "batched": bat,
        "sbatch_loop": loop,
        "ratio": one["makespan"] / bat["makespan"],
        "ratio_loop": loop["makespan"] / bat["makespan"],
        "overhead_batched_ms": 1000 * (bat["makespan"] - ideal) / n,
        "overhead_one_each_ms": 1000 * (one["makespan"] - ideal) / n,
        "target_batched": target,
        "checks": checks,
    }


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    ok = True
    print()
    print(
        f"| t | one job each | sbatch --wrap loop | batched (S={args.slots}) | ratio | per-task overhead batched | idle tail | pilots | Slurm jobs one-each |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['t']:g} s | {r['one_each']['makespan']:.1f} s | {r['sbatch_loop']['makespan']:.1f} s | "
            f"{r['batched']['makespan']:.1f} s | {r['ratio']:.1f} | {r['overhead_batched_ms']:.0f} ms | "
            f"{r['batched']['idle_tail']:.1f} s | {r['batched']['jobs']} | {r['one_each']['jobs']} |"
        )
    print()
    for r in results:
        for name, passed in r["checks"].items():
            ok &= passed
            print(f"{'PASS' if passed else 'FAIL'}  t={r['t']:g}: {name}")
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--latency", type=float, default=3.0, help="Prolog sleep L (s)")
    p.add_argument("--slots", type=int, default=8)
    p.add_argument(
        "--j", type=int, default=4, help="MaxJobsPerUser of QoS bench (set by the cluster script)"
    )
    p.add_argument("--sleeps", type=float, nargs="+", default=[0.2, 1.0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--linger", type=float, default=5.0)
    p.add_argument("--cluster-dir", default="/tmp/slurm-bench")
    p.add_argument(
        "--reuse-cluster", action="store_true", help="use a running instance, do not stop it"
    )
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args()
    if args.reuse_cluster:
        info = read_env(args.cluster_dir)
    else:
        info = start_cluster(args.cluster_dir, args.latency)
    os.environ.update(info)
    base = Path(tempfile.mkdtemp(prefix="launchers-bench-", dir=info.get("CLUSTER_JOBS_DIR")))
    try:
        results = [series(args, t, base) for t in args.sleeps]
        ok = report(results, args)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if not args.reuse_cluster:
            stop_cluster(args.cluster_dir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
