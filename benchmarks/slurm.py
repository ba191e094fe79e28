"""Slurm runtime benchmark on the real cluster: submission rate (vs a plain sbatch loop and vs
submitit 1.5.4), Slurm commands per poll cycle, job end -> ``Job.wait()`` latency, client RSS.

    python benchmarks/slurm.py [--jobs 200] [--repeat 15] [--submitit-jobs 50] [--track 2000] [--no-submitit]
    python benchmarks/slurm.py --pool A.json B.json ...   # the rounds of earlier --json runs, together

Uses the cluster of ``$SLURM_CONF`` (default: the sandbox in /tmp/slurm-sandbox). The first
run creates ``benchmarks/.venv-submitit`` with ``submitit==1.5.4``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-submitit"
PARTITION = "debug"


def sh(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **kw)  # type: ignore[call-overload,no-any-return]


def drain(name: str, cancel: bool = True) -> None:
    """Wait until no job of this benchmark (by name) is pending or running; ``cancel`` first
    cancels them (held jobs never start), else they run to their end as launchers' jobs do."""
    if cancel:
        subprocess.run(["scancel", f"--name={name}"], capture_output=True)
    for _ in range(300):
        out = sh(
            ["squeue", "-h", f"--name={name}", "--states=PENDING,RUNNING,COMPLETING", "-o", "%A"]
        ).stdout
        if not out.strip():
            return
        time.sleep(0.2)


def plain_loop(n: int, workdir: Path, hold: bool = False) -> float:
    """Seconds for ``n`` x ``sbatch --parsable --wrap true`` in a shell loop (``--hold``: the
    jobs stay pending, so no job start competes with the submissions)."""
    extra = " --hold" if hold else ""
    script = f"for i in $(seq {n}); do sbatch --parsable{extra} -p {PARTITION} -J bench-plain -o /dev/null --wrap true >/dev/null || exit 1; done"
    t0 = time.perf_counter()
    sh(["bash", "-c", script], cwd=workdir)
    dt = time.perf_counter() - t0
    # jobs that started meanwhile run to their end, as the launchers rounds' jobs do: both sides
    # leave slurmctld the same work (job ends, accounting records, later purges) for what follows
    drain("bench-plain", cancel=hold)
    return dt


def held_rounds(n: int, workdir: Path, rounds: int) -> dict[str, object]:
    """The same comparison with every job submitted held (``--hold``), then cancelled: the
    submission path alone, without the cluster starting 200 jobs meanwhile."""
    from launchers import ExperimentFailed, command, experiment

    launcher = _launcher().config(sbatch_options={"hold": True})  # type: ignore[attr-defined]
    plain: list[float] = []
    mine: list[float] = []
    for r in range(rounds):
        plain.append(n / plain_loop(n, workdir, hold=True))
        t0 = time.perf_counter()
        with (
            contextlib.suppress(ExperimentFailed),
            experiment(workdir / f"held{r}", launcher, progress=False) as xp,
        ):
            jobs = [command(["true", f"held-{r}-{i}"]).submit() for i in range(n)]
            while any(j.native_id is None and not j.state.is_final for j in jobs):
                time.sleep(0.005)
            mine.append(n / (time.perf_counter() - t0))
            xp.cancel()  # the experiment then ends with 200 cancelled jobs, as intended
        drain_all(workdir)
    return {
        "plain": plain,
        "launchers": mine,
        "ratio": statistics.median(mine) / statistics.median(plain),
    }


def drain_all(workdir: Path) -> None:
    """Wait until no job runs any more (the previous round's) and slurmctld has sent everything
    it queued (job launches and ends, the records for slurmdbd), so that every round starts
    alike; a job held pending elsewhere (e.g. by a dependency) costs the cluster nothing."""
    for _ in range(300):
        out = sh(["squeue", "-h", "--states=RUNNING,COMPLETING,CONFIGURING", "-o", "%A"]).stdout
        if not out.strip() and _controller_idle():
            time.sleep(0.5)
            return
        time.sleep(0.2)


def jobs_in_controller() -> int:
    """How many jobs slurmctld holds (finished ones stay ``MinJobAge``, 300 s in the sandbox)."""
    return len(sh(["squeue", "-h", "--states=all", "-o", "%A"]).stdout.split())


def quiet_controller(limit: int, max_wait: float) -> int:
    """Wait (at most ``max_wait`` s) until slurmctld holds at most ``limit`` jobs: each of its
    scheduling passes walks every job it holds, so thousands of finished jobs of an earlier run
    slow every submission and make the rounds incomparable."""
    held = jobs_in_controller()
    if held > limit:
        print(f"slurmctld holds {held} jobs from earlier runs; waiting up to {max_wait:.0f} s for them "
              f"to age out (MinJobAge) ...", flush=True)  # fmt: skip
        deadline = time.monotonic() + max_wait
        while held > limit and time.monotonic() < deadline:
            time.sleep(5)
            held = jobs_in_controller()
    return held


def _controller_idle() -> bool:
    """``sdiag``: slurmctld's agent queue and its queue for slurmdbd are both empty."""
    proc = subprocess.run(["sdiag"], capture_output=True, text=True)
    if proc.returncode != 0:
        return True  # not allowed to ask: the running-jobs check alone
    queues = re.findall(r"^(?:DBD )?Agent queue size:\s*(\d+)", proc.stdout, re.MULTILINE)
    return all(q == "0" for q in queues)


def ensure_submitit() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "submitit==1.5.4"], check=True)
    return py


SUBMITIT = textwrap.dedent(
    """
    import sys, time, submitit
    n, folder = int(sys.argv[1]), sys.argv[2]
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(slurm_partition="PARTITION", timeout_min=5, name="bench-submitit")
    t0 = time.perf_counter()
    for i in range(n):
        ex.submit(int, i)
    print(time.perf_counter() - t0)
    """
).replace("PARTITION", PARTITION)


def submitit_loop(n: int, workdir: Path) -> float:
    py = ensure_submitit()
    script = workdir / "submitit_bench.py"
    script.write_text(SUBMITIT)
    out = sh([str(py), str(script), str(n), str(workdir / "submitit")]).stdout
    drain("bench-submitit")
    return float(out.strip().splitlines()[-1])


def _launcher() -> object:
    from launchers import SlurmLauncher
    from launchers.config.model import SlurmGroup

    return SlurmLauncher(
        group=SlurmGroup(id="bench"), options={"partition": PARTITION, "time": "00:05:00"}
    )


def ours_submit(n: int, workdir: Path) -> dict[str, float]:
    """Submit ``n`` tiny jobs through an experiment: submission rate, Slurm queries per cycle."""
    from launchers import command, experiment
    from launchers.jobs.state import JobState

    launcher = _launcher()
    ex = launcher.executor()  # type: ignore[attr-defined]
    commands_before = dict(ex.commands)
    cycles_start = ex.tracker.cycles
    t0 = time.perf_counter()
    with experiment(workdir, launcher, progress=False):
        jobs = [command(["true", f"bench-{i}"]).submit() for i in range(n)]
        while any(j.native_id is None and not j.state.is_final for j in jobs):
            time.sleep(0.005)
        submit_s = time.perf_counter() - t0
        cycles_before = ex.tracker.cycles
    failed = [j for j in jobs if j.state is not JobState.COMPLETED]
    queries = sum(ex.commands.get(c, 0) - commands_before.get(c, 0) for c in ("sacct", "squeue"))
    cycles = ex.tracker.cycles - cycles_start
    return {
        "submit_s": submit_s,
        "rate": n / submit_s,
        "failed": float(len(failed)),
        "poll_cycles": float(cycles),
        "slurm_queries": float(queries),
        "queries_per_cycle": queries / max(1, cycles),
        "cycles_while_tracking": float(ex.tracker.cycles - cycles_before),
    }


def wait_latency(workdir: Path) -> dict[str, float]:
    """Job end -> ``wait()`` returning: tasks print their end time as their last act."""
    from launchers import command, experiment

    launcher = _launcher()
    code = "import random,time;time.sleep(random.uniform(1,4));print(repr(time.time()),flush=True)"
    with experiment(workdir / "lat", launcher, progress=False):
        lat_jobs = [command([sys.executable, "-c", code, str(i)]).submit() for i in range(12)]
        returned: dict[int, float] = {}

        def waiter(i: int) -> None:
            lat_jobs[i].wait()
            returned[i] = time.time()

        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(len(lat_jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lat = []
    for i, j in enumerate(lat_jobs):
        lines = [ln for ln in j.stdout_path.read_text().splitlines() if not ln.startswith("====")]
        lat.append(returned[i] - float(lines[-1]))
    return {"wait_latency_median_s": statistics.median(lat), "wait_latency_max_s": max(lat)}


RSS = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path

    def hwm():  # this process's own peak (ru_maxrss keeps the parent's peak across fork and exec)
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0

    from launchers import SlurmLauncher, command, experiment
    from launchers.config.model import SlurmGroup
    from launchers.jobs.record import StateRecord, job_directory, now_iso, write_record
    from launchers.jobs.state import JobState
    n, root = int(sys.argv[1]), Path(sys.argv[2])
    base = hwm()
    L = SlurmLauncher(group=SlurmGroup(id="rss"), options={"partition": "debug"})
    tasks = [command(["rss-bench", str(i)]) for i in range(n)]
    for i, t in enumerate(tasks):   # jobs Slurm accepted (recorded ids), as a re-attaching client sees them
        d = job_directory(root, t.name, t.digest); d.mkdir(parents=True)
        (d / "params.json").write_text(json.dumps(t.params_json()))
        write_record(d, StateRecord(task_id=t.task_id, state=JobState.PENDING, native_id=str(900000 + i),
                                    submitted_at=now_iso(), job_name=t.task_id))
    with experiment(root, L, progress=False) as xp:
        jobs = [t.submit() for t in tasks]
        ex = L.executor()
        t0 = time.time()
        while ex.tracker.cycles < 3 and time.time() - t0 < 60:
            time.sleep(0.2)
        peak = hwm()
        print(json.dumps({"peak_rss_mib": peak / 1024, "baseline_rss_mib": base / 1024,
                          "cycles": ex.tracker.cycles, "commands": ex.commands}))
        xp.cancel()
        import os; os._exit(0)
    """
)


def rss(n: int, workdir: Path) -> dict[str, object]:
    script = workdir / "rss.py"
    script.write_text(RSS)
    out = sh([sys.executable, str(script), str(n), str(workdir / "rss")], timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def ratio_stats(mine: list[float], plain: list[float], resamples: int = 4000) -> dict[str, float]:
    """Launchers against the plain loop over paired rounds (same index, run back to back): the
    ratio of the medians, the geometric mean of the per-round ratios and the ratio of total
    times, each with a 90 % bootstrap interval (rounds resampled in pairs, fixed seed): one
    round moves by 2x on this machine, so a single figure without its spread says little."""
    pairs = list(zip(mine, plain, strict=True))

    def stats(sample: list[tuple[float, float]]) -> tuple[float, float, float]:
        a = [m for m, _ in sample]
        b = [p for _, p in sample]
        geo = math.exp(statistics.fmean(math.log(m / p) for m, p in sample))
        total = sum(1 / p for p in b) / sum(1 / m for m in a)  # same jobs per round on both sides
        return statistics.median(a) / statistics.median(b), geo, total

    rng = random.Random(20261126)
    boot = [stats([rng.choice(pairs) for _ in pairs]) for _ in range(resamples)]
    out: dict[str, float] = {}
    for k, (name, value) in enumerate(
        zip(("medians", "geomean", "total"), stats(pairs), strict=True)
    ):
        ranked = sorted(b[k] for b in boot)
        out[name] = value
        out[f"{name}_lo"] = ranked[int(0.05 * resamples)]
        out[f"{name}_hi"] = ranked[int(0.95 * resamples) - 1]
    out["rounds"] = float(len(pairs))
    return out


def describe(st: dict[str, float]) -> str:
    return (f"ratio of medians {st['medians']:.2f} [{st['medians_lo']:.2f}-{st['medians_hi']:.2f}], "
            f"geometric mean of paired rounds {st['geomean']:.2f} [{st['geomean_lo']:.2f}-{st['geomean_hi']:.2f}], "
            f"total time {st['total']:.2f} [{st['total_lo']:.2f}-{st['total_hi']:.2f}] "
            f"({st['rounds']:.0f} rounds; [90 % bootstrap interval])")  # fmt: skip


def pool(paths: list[str]) -> int:
    """The unheld and held rounds of earlier ``--json`` runs, together."""
    mine: list[float] = []
    plain: list[float] = []
    held_mine: list[float] = []
    held_plain: list[float] = []
    for path in paths:
        res = json.loads(Path(path).read_text())
        mine += res["launchers_rates"]
        plain += res["plain_loop_rates"]
        held_mine += res["held"]["launchers"]
        held_plain += res["held"]["plain"]
    print(
        f"pooled {len(paths)} runs, jobs starting meanwhile: {describe(ratio_stats(mine, plain))}"
    )
    print(f"pooled {len(paths)} runs, held: {describe(ratio_stats(held_mine, held_plain))}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument(
        "--submitit-jobs", type=int, default=50, help="submitit is slow (0.2 s throttle)"
    )
    ap.add_argument("--track", type=int, default=2000)
    ap.add_argument("--no-submitit", action="store_true")
    ap.add_argument(
        "--repeat",
        type=int,
        default=15,
        help="alternating rounds of the plain loop and launchers (one round moves by 2x; "
        "pool several runs with --pool for a tighter interval)",
    )
    ap.add_argument("--json", help="write the numbers to this file")
    ap.add_argument(
        "--settle",
        type=float,
        default=330,
        help="wait at most this long (s) for slurmctld to forget earlier runs' jobs (330)",
    )
    ap.add_argument(
        "--pool", nargs="+", metavar="JSON", help="print the pooled rounds of earlier --json runs"
    )
    args = ap.parse_args()
    if args.pool:
        return pool(args.pool)
    os.environ.setdefault("SLURM_CONF", "/tmp/slurm-sandbox/etc/slurm.conf")
    start_jobs = quiet_controller(500, args.settle)
    with tempfile.TemporaryDirectory(
        prefix="bench-slurm-", dir=os.environ.get("CLUSTER_JOBS_DIR")
    ) as tmp:
        work = Path(tmp)
        os.chmod(work, 0o777)
        res: dict[str, object] = {
            "jobs": args.jobs,
            "repeat": args.repeat,
            "controller_jobs_at_start": start_jobs,
        }
        # The two loops alternate, and each rate is the median of its repeats: the cluster's
        # own load (jobs of the previous round still finishing, slurmctld's bookkeeping) moves
        # a single measurement of either by a factor of two on this machine.
        plain_rates: list[float] = []
        runs: list[dict[str, float]] = []
        # Each round starts on an idle controller, and the order alternates, so that neither side
        # always inherits the other's finishing jobs.
        for r in range(args.repeat):
            # slurmctld keeps finished jobs MinJobAge (300 s) and refuses every submission at
            # MaxJobCount (10,000 by default): never let a round run into that
            quiet_controller(9000 - 2 * args.jobs, args.settle)
            drain_all(work)
            if r % 2:
                runs.append(ours_submit(args.jobs, work / f"xp{r}"))
                drain_all(work)
                plain_rates.append(args.jobs / plain_loop(args.jobs, work))
            else:
                plain_rates.append(args.jobs / plain_loop(args.jobs, work))
                drain_all(work)
                runs.append(ours_submit(args.jobs, work / f"xp{r}"))
        mine = min(runs, key=lambda m: abs(m["rate"] - statistics.median(x["rate"] for x in runs)))
        res["plain_loop_rates"] = plain_rates
        res["launchers_rates"] = [m["rate"] for m in runs]
        res["plain_loop_rate"] = statistics.median(plain_rates)
        res.update({f"launchers_{k}": v for k, v in mine.items()})
        res["launchers_rate"] = statistics.median(m["rate"] for m in runs)
        res["rate_vs_plain"] = res["launchers_rate"] / res["plain_loop_rate"]  # type: ignore[operator]
        res["rate_vs_plain_per_round"] = [
            m["rate"] / p for m, p in zip(runs, plain_rates, strict=True)
        ]
        # the same jobs per round on both sides: the ratio of total times is the ratio of rates
        res["aggregate_rate_vs_plain"] = sum(args.jobs / r for r in plain_rates) / sum(
            m["submit_s"] for m in runs
        )
        res["unheld_stats"] = ratio_stats(res["launchers_rates"], plain_rates)  # type: ignore[arg-type]
        quiet_controller(9000 - 10 * args.jobs, args.settle)
        res["held"] = held_rounds(args.jobs, work, min(args.repeat, 5))  # stable: 5 suffice
        held_res = res["held"]
        assert isinstance(held_res, dict)
        held_res["stats"] = ratio_stats(held_res["launchers"], held_res["plain"])
        res.update({f"launchers_{k}": v for k, v in wait_latency(work).items()})
        if not args.no_submitit:
            st = submitit_loop(args.submitit_jobs, work)
            res["submitit_rate"] = args.submitit_jobs / st
            res["rate_vs_submitit"] = mine["rate"] / res["submitit_rate"]  # type: ignore[operator]
        res["tracking"] = rss(args.track, work)
    print(f"submission, {args.jobs} jobs, median of {args.repeat} alternating rounds: launchers {res['launchers_rate']:.1f} jobs/s, "
          f"plain sbatch loop {res['plain_loop_rate']:.1f} jobs/s -> ratio {res['rate_vs_plain']:.2f} (target >= 0.80)")  # fmt: skip
    print(f"  {describe(res['unheld_stats'])}; slurmctld held {start_jobs} jobs at the start")  # type: ignore[arg-type]
    held = res["held"]
    assert isinstance(held, dict)
    print(
        f"  held jobs (--hold, no job starts meanwhile): launchers {statistics.median(held['launchers']):.1f} jobs/s, "
        f"plain loop {statistics.median(held['plain']):.1f} jobs/s -> {describe(held['stats'])}; rounds "
        + ", ".join(
            f"{a:.0f}/{b:.0f}" for a, b in zip(held["launchers"], held["plain"], strict=True)
        )
    )
    print("  rounds (launchers / plain): " + ", ".join(
        f"{a:.0f}/{b:.0f}" for a, b in zip(res["launchers_rates"], res["plain_loop_rates"], strict=True)))  # type: ignore[call-overload]  # fmt: skip
    if "submitit_rate" in res:
        print(f"submission: submitit 1.5.4 {res['submitit_rate']:.1f} jobs/s -> launchers/submitit "
              f"{res['rate_vs_submitit']:.1f}x (target >= 3)")  # fmt: skip
    print(f"tracking {args.jobs} jobs: {res['launchers_slurm_queries']:.0f} Slurm queries in "
          f"{res['launchers_poll_cycles']:.0f} poll cycles -> {res['launchers_queries_per_cycle']:.2f} per cycle (target 1)")  # fmt: skip
    print(f"job end -> Job.wait() returns: median {res['launchers_wait_latency_median_s']:.2f} s, "
          f"max {res['launchers_wait_latency_max_s']:.2f} s (target median < 1 s)")  # fmt: skip
    tr = res["tracking"]
    assert isinstance(tr, dict)
    print(f"client tracking {args.track} jobs: peak RSS {tr['peak_rss_mib']:.0f} MiB "
          f"(interpreter + launchers before: {tr['baseline_rss_mib']:.0f} MiB), {tr['commands']} in {tr['cycles']} cycles")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
