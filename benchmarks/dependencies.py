"""Dependencies benchmark on the real Slurm (docs/design/runtime.md §15): the same graph of
preprocess jobs -> trainings after each -> one evaluation per preprocess -> one summary, run
by two clients in the same run:

* **native**: every job submitted at once, each dependent with ``--dependency`` (``after=``),
  stage by stage as a script without waits is written (all preprocess jobs, then all
  trainings, ...); ``--order interleaved`` adds a native run that submits each preprocess job
  and then its trainings before the next preprocess job;
* **staged**: what a client without dependencies does (submitit's ``job.wait()``): submit a
  stage, wait for all of it, submit the next.

Two scenarios, both in each run:

* **empty**: ``--pre`` x ``--width`` (10 -> 1,000 -> 10 -> 1: 1,021 ``sleep 0`` jobs): the
  submission path alone;
* **varied**: ``--varied-pre`` x ``--varied-width`` (10 -> 100 -> 10 -> 1) with durations:
  preprocess job ``p`` sleeps ``p + 1`` s (1..10 s), each training 1..6 s (seeded), each
  evaluation 1 s, the summary 0 s, on the sandbox's 24-CPU ``debug`` partition: the slowest job
  of a stage holds back the whole next stage of the staged client.

Reports each run's makespan (first submission to the end of the experiment block), the ratio
staged / native, sbatch calls and their wall time per call (with and without ``--dependency``),
the client's CPU per job, and the Slurm status queries per poll cycle (sacct and squeue
commands / tracker cycles). A first probe times ``--probe`` serial sbatch calls with and
without ``--dependency`` (held jobs, cancelled after).

    python benchmarks/dependencies.py [--scenario both|empty|varied] [--order stages|interleaved|both]
        [--pre 10] [--width 100] [--varied-pre 10] [--varied-width 10] [--probe 100] [--json out.json]
    python benchmarks/dependencies.py --fan-in 1000    # the client alone: one dependent of 1,000 jobs

Uses the cluster of ``$SLURM_CONF`` (default: the sandbox in /tmp/slurm-sandbox).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from slurm import PARTITION, _launcher, drain_all, quiet_controller, sh  # noqa: E402

#: (stage, preprocess index, training index) -> seconds the job sleeps
Durations = Callable[[str, int, int], int]


def empty(stage: str, p: int, i: int) -> int:
    return 0


def varied(seed: int = 18) -> Durations:
    """Preprocess ``p``: ``p + 1`` s; trainings 1..6 s (seeded, the same in both modes);
    evaluations 1 s; the summary 0 s."""
    rng = random.Random(seed)
    trains: dict[tuple[int, int], int] = {}

    def seconds(stage: str, p: int, i: int) -> int:
        if stage == "prep":
            return p + 1
        if stage == "train":
            return trains.setdefault((p, i), rng.randint(1, 6))
        return 1 if stage == "eval" else 0

    return seconds


def _job(stage: str, tag: str, seconds: int) -> Any:
    from launchers import command

    return command(["sleep", str(seconds)], name=stage, env={"BENCH_STEP": tag})


def _timed(ex: Any, calls: list[tuple[str, bool, float, float]]) -> Callable[[], None]:
    """Time every Slurm command of executor ``ex`` (name, ``--dependency`` in the script, wall
    seconds, when it returned); returns the function that undoes it."""
    cluster = ex.slurm
    orig = cluster.run

    async def run(argv: Sequence[str], **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await orig(argv, **kw)
        finally:
            dt = time.perf_counter() - t0
            dep = False
            if argv[0] == "sbatch":
                try:
                    dep = "--dependency" in (Path(kw.get("cwd") or ".") / argv[-1]).read_text()
                except OSError:
                    pass
            calls.append((str(argv[0]), dep, dt, t0 + dt))

    cluster.run = run
    return lambda: setattr(cluster, "run", orig)


def run(
    mode: str, pre: int, width: int, seconds: Durations, workdir: Path, tag: str
) -> dict[str, Any]:
    """One graph (``native``, ``native-interleaved`` or ``staged``): makespan, sbatch time per
    call, client CPU, Slurm queries per cycle."""
    from launchers import JobState, experiment
    from launchers.jobs.record import iso_epoch

    launcher = _launcher()
    ex = launcher.executor()  # type: ignore[attr-defined]
    before = dict(ex.commands)
    cycles0 = ex.tracker.cycles
    calls: list[tuple[str, bool, float, float]] = []
    undo = _timed(ex, calls)

    def job(stage: str, p: int = 0, i: int = 0) -> Any:
        return _job(stage, f"{stage}-{tag}{mode}-{p}-{i}", seconds(stage, p, i))

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    wall0 = time.time()
    try:
        with experiment(workdir / mode, launcher, progress=False) as xp:
            if mode == "native":  # stage by stage, as a script without waits is written
                preps = [job("prep", p).submit() for p in range(pre)]
                trains = [
                    [job("train", p, i).submit(after=[preps[p]]) for i in range(width)]
                    for p in range(pre)
                ]
                evals = [job("eval", p).submit(after=trains[p]) for p in range(pre)]
                job("summary").submit(after=evals)
            elif mode == "native-interleaved":  # each preprocess job, then its trainings
                evals = []
                for p in range(pre):
                    prep = job("prep", p).submit()
                    ts = [job("train", p, i).submit(after=[prep]) for i in range(width)]
                    evals.append(job("eval", p).submit(after=ts))
                job("summary").submit(after=evals)
            else:
                preps = [job("prep", p).submit() for p in range(pre)]
                for j in preps:
                    j.wait()
                flat = [job("train", p, i).submit() for p in range(pre) for i in range(width)]
                for j in flat:
                    j.wait()
                evals = [job("eval", p).submit() for p in range(pre)]
                for j in evals:
                    j.wait()
                job("summary").submit().wait()
    finally:
        undo()
    makespan = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    jobs = xp.jobs
    stages: dict[str, float] = {}
    for j in jobs:  # when each stage's last job ended, from the records (seconds after t0)
        end = iso_epoch(j.record.ended_at)
        if end is not None:
            stages[j.name] = max(stages.get(j.name, 0.0), end - wall0)
    last_submit = max(end for name, _d, _dt, end in calls if name == "sbatch") - t0
    queries = sum(ex.commands.get(c, 0) - before.get(c, 0) for c in ("sacct", "squeue"))
    cycles = ex.tracker.cycles - cycles0
    with_dep = [dt for name, dep, dt, _end in calls if name == "sbatch" and dep]
    without = [dt for name, dep, dt, _end in calls if name == "sbatch" and not dep]
    return {
        "mode": mode,
        "jobs": len(jobs),
        "failed": sum(j.state is not JobState.COMPLETED for j in jobs),
        "makespan_s": makespan,
        "sbatch": ex.commands.get("sbatch", 0) - before.get("sbatch", 0),
        "sbatch_with_dependency": len(with_dep),
        "sbatch_ms_with_dependency": _median_ms(with_dep),
        "sbatch_ms_without": _median_ms(without),
        "client_cpu_s": cpu,
        "client_cpu_ms_per_job": 1000 * cpu / max(1, len(jobs)),
        "poll_cycles": cycles,
        "slurm_queries": queries,
        "queries_per_cycle": queries / max(1, cycles),
        "last_submission_s": last_submit,
        "stage_ends_s": stages,
    }


def _median_ms(values: list[float]) -> float | None:
    return 1000 * statistics.median(values) if values else None


def sbatch_probe(n: int, workdir: Path) -> dict[str, float]:
    """``n`` serial sbatch calls held (``--hold``) and ``n`` with ``--dependency=afterok:`` on a
    held job and ``--kill-on-invalid-dep=yes``, alternating in blocks of 10: median wall ms of
    each (Slurm's own cost of a dependency), all cancelled after."""
    name = "bench-deps-probe"
    base = ["sbatch", "--parsable", "-p", PARTITION, "-J", name, "-o", "/dev/null"]

    def sbatch(*extra: str) -> tuple[str, float]:
        t0 = time.perf_counter()
        out = sh([*base, *extra, "--wrap", "true"], cwd=workdir).stdout.strip()
        return out.split(";")[0], time.perf_counter() - t0

    anchor, _ = sbatch("--hold")
    held: list[float] = []
    dep: list[float] = []
    try:
        while len(held) < n:
            held += [sbatch("--hold")[1] for _ in range(10)]
            dep += [
                sbatch(f"--dependency=afterok:{anchor}", "--kill-on-invalid-dep=yes")[1]
                for _ in range(10)
            ]
    finally:
        subprocess.run(["scancel", f"--name={name}"], capture_output=True)
    return {
        "n": len(held),
        "held_ms": 1000 * statistics.median(held),
        "dependency_ms": 1000 * statistics.median(dep),
    }


def fan_in(n: int) -> float:
    """Client CPU seconds (no Slurm) of one dependent held on ``n`` jobs while each of them goes
    SUBMITTING -> PENDING -> RUNNING -> COMPLETED (all but the last): the graph's cost per
    change, records included."""
    from launchers.jobs.depends import Edge
    from launchers.jobs.graph import Graph
    from launchers.jobs.job import Job
    from launchers.jobs.record import StateRecord, write_record
    from launchers.jobs.state import JobState
    from launchers.jobs.update import StateUpdate

    with tempfile.TemporaryDirectory(prefix="bench-fanin-") as tmp:

        def job(name: str, state: JobState) -> Job:
            d = Path(tmp) / name
            d.mkdir()
            record = StateRecord(task_id=f"{name}-0123456789abcdef", state=state)
            write_record(d, record, sync=False)
            return Job(None, d, record)

        deps = [job(f"train{i}", JobState.SUBMITTING) for i in range(n)]
        dependent = job("summary", JobState.WAITING)
        graph = Graph()
        graph.hold(dependent, [(Edge(d.task_id, str(d.directory)), d) for d in deps])
        t0 = time.process_time()
        for state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED):
            for d in deps[:-1]:
                d.apply(StateUpdate(state=state), sync=False)
        cpu = time.process_time() - t0
        graph.cancel(dependent)
    return cpu


def _line(r: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f} ms"

    return (
        f"{r['mode']:>18}: {r['jobs']} jobs ({r['failed']} failed), makespan {r['makespan_s']:.1f} s; "
        f"{r['sbatch']} sbatch ({r['sbatch_with_dependency']} with --dependency, median "
        f"{ms(r['sbatch_ms_with_dependency'])}; without {ms(r['sbatch_ms_without'])}), last answered "
        f"at {r['last_submission_s']:.1f} s; client CPU {r['client_cpu_s']:.1f} s "
        f"({r['client_cpu_ms_per_job']:.1f} ms per job); {r['slurm_queries']} Slurm queries in "
        f"{r['poll_cycles']} cycles ({r['queries_per_cycle']:.2f} per cycle); stages ended at "
        + ", ".join(f"{k} {v:.0f} s" for k, v in r["stage_ends_s"].items())
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=("both", "empty", "varied"), default="both")
    ap.add_argument(
        "--order",
        choices=("stages", "interleaved", "both"),
        default="stages",
        help="native submission order (both: two native runs; default stages)",
    )
    ap.add_argument("--pre", type=int, default=10, help="empty: preprocess jobs (10)")
    ap.add_argument("--width", type=int, default=100, help="empty: trainings per preprocess (100)")
    ap.add_argument("--varied-pre", type=int, default=10, help="varied: preprocess jobs (10)")
    ap.add_argument("--varied-width", type=int, default=10, help="varied: trainings each (10)")
    ap.add_argument("--probe", type=int, default=100, help="serial sbatch calls per kind (100)")
    ap.add_argument(
        "--fan-in",
        type=int,
        metavar="N",
        help="only the client's CPU for one dependent of N jobs through their changes (no Slurm)",
    )
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args()
    if args.fan_in:
        print(
            f"one dependent of {args.fan_in} jobs, {3 * (args.fan_in - 1)} changes of them: "
            f"{fan_in(args.fan_in):.2f} s of client CPU"
        )
        return 0
    os.environ.setdefault("SLURM_CONF", "/tmp/slurm-sandbox/etc/slurm.conf")
    quiet_controller(2000, 300)
    natives = {"stages": ["native"], "interleaved": ["native-interleaved"]}.get(
        args.order, ["native", "native-interleaved"]
    )
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-deps-") as tmp:
        workdir = Path(tmp)
        if args.probe:
            drain_all(workdir)
            probe = sbatch_probe(args.probe, workdir)
            out["sbatch_probe"] = probe
            print(
                f"serial sbatch, {probe['n']:.0f} each: held {probe['held_ms']:.1f} ms, with "
                f"--dependency {probe['dependency_ms']:.1f} ms (median per call)",
                flush=True,
            )
        tag = f"{int(time.time())}"
        scenarios: list[tuple[str, int, int, Durations]] = []
        if args.scenario in ("both", "empty"):
            scenarios.append(("empty", args.pre, args.width, empty))
        if args.scenario in ("both", "varied"):
            scenarios.append(("varied", args.varied_pre, args.varied_width, varied()))
        for scenario, pre, width, seconds in scenarios:
            print(f"{scenario}: {pre} -> {pre * width} -> {pre} -> 1", flush=True)
            results = []
            for mode in [*natives, "staged"]:
                drain_all(workdir)
                r = run(mode, pre, width, seconds, workdir / scenario, f"{tag}{scenario[0]}")
                results.append(r)
                print(_line(r), flush=True)
            staged = results[-1]
            ratios = {r["mode"]: staged["makespan_s"] / r["makespan_s"] for r in results[:-1]}
            for mode, ratio in ratios.items():
                print(f"{scenario}: makespan staged / {mode}: {ratio:.2f}x", flush=True)
            out[scenario] = {"results": results, "ratios": ratios}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
