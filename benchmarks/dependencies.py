"""Dependencies benchmark on the real Slurm (docs/design/runtime.md §15): a graph of
``--pre`` preprocess jobs -> ``--width`` trainings each -> one evaluation per preprocess -> one
summary (10 -> 1,000 -> 10 -> 1: 1,021 ``sleep 0`` jobs by default), run twice in the same run:

* **native**: every job submitted at once, each dependent with ``--dependency`` (``after=``);
* **staged**: what a client without dependencies does (submitit's ``job.wait()``): submit a
  stage, wait for all of it, submit the next.

Reports each one's makespan (first submission to the last job's end), their ratio, and the
Slurm status queries per poll cycle (sacct and squeue commands / tracker cycles).

    python benchmarks/dependencies.py [--pre 10] [--width 100] [--json out.json]

Uses the cluster of ``$SLURM_CONF`` (default: the sandbox in /tmp/slurm-sandbox).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from slurm import _launcher, drain_all, quiet_controller  # noqa: E402


def _sleep(tag: str) -> Any:
    from launchers import command

    return command(["sleep", "0"], name=tag.split("-")[0], env={"BENCH_STEP": tag})


def run(mode: str, pre: int, width: int, workdir: Path, round_tag: str) -> dict[str, Any]:
    """One graph, ``native`` or ``staged``: makespan and Slurm queries per cycle."""
    from launchers import JobState, experiment
    from launchers.jobs.record import iso_epoch

    launcher = _launcher()
    ex = launcher.executor()  # type: ignore[attr-defined]
    before = dict(ex.commands)
    cycles0 = ex.tracker.cycles
    t0 = time.perf_counter()
    wall0 = time.time()
    tag = f"{round_tag}{mode}"
    with experiment(workdir / mode, launcher, progress=False) as xp:
        if mode == "native":
            evals = []
            for p in range(pre):
                prep = _sleep(f"prep-{tag}-{p}").submit()
                trains = [_sleep(f"train-{tag}-{p}-{i}").submit(after=[prep]) for i in range(width)]
                evals.append(_sleep(f"eval-{tag}-{p}").submit(after=trains))
            _sleep(f"summary-{tag}").submit(after=evals)
        else:
            preps = [_sleep(f"prep-{tag}-{p}").submit() for p in range(pre)]
            for j in preps:
                j.wait()
            trains = [
                _sleep(f"train-{tag}-{p}-{i}").submit() for p in range(pre) for i in range(width)
            ]
            for j in trains:
                j.wait()
            evals = [_sleep(f"eval-{tag}-{p}").submit() for p in range(pre)]
            for j in evals:
                j.wait()
            _sleep(f"summary-{tag}").submit().wait()
    makespan = time.perf_counter() - t0
    jobs = xp.jobs
    stages: dict[str, float] = {}
    for j in jobs:  # when each stage's last job ended, from the records (seconds after t0)
        end = iso_epoch(j.record.ended_at)
        stage = j.name
        if end is not None:
            stages[stage] = max(stages.get(stage, 0.0), end - wall0)
    submitted = [iso_epoch(j.record.submitted_at) for j in jobs]
    last_submit = max(s for s in submitted if s is not None) - wall0
    queries = sum(ex.commands.get(c, 0) - before.get(c, 0) for c in ("sacct", "squeue"))
    cycles = ex.tracker.cycles - cycles0
    return {
        "mode": mode,
        "jobs": len(jobs),
        "failed": sum(j.state is not JobState.COMPLETED for j in jobs),
        "makespan_s": makespan,
        "sbatch": ex.commands.get("sbatch", 0) - before.get("sbatch", 0),
        "poll_cycles": cycles,
        "slurm_queries": queries,
        "queries_per_cycle": queries / max(1, cycles),
        "last_submission_s": last_submit,
        "stage_ends_s": stages,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pre", type=int, default=10, help="preprocess jobs (default 10)")
    ap.add_argument("--width", type=int, default=100, help="trainings per preprocess (100)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args()
    os.environ.setdefault("SLURM_CONF", "/tmp/slurm-sandbox/etc/slurm.conf")
    quiet_controller(2000, 300)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-deps-") as tmp:
        workdir = Path(tmp)
        round_tag = f"{int(time.time())}"
        for mode in ("native", "staged"):
            drain_all(workdir)
            r = run(mode, args.pre, args.width, workdir, round_tag)
            results.append(r)
            print(
                f"{mode:>7}: {r['jobs']} jobs ({r['failed']} failed), makespan {r['makespan_s']:.1f} s, "
                f"{r['sbatch']} sbatch, {r['slurm_queries']} Slurm queries in {r['poll_cycles']} "
                f"cycles ({r['queries_per_cycle']:.2f} per cycle); last sbatch at "
                f"{r['last_submission_s']:.0f} s; stages ended at "
                + ", ".join(f"{k} {v:.0f} s" for k, v in r["stage_ends_s"].items()),
                flush=True,
            )
    native, staged = results
    ratio = staged["makespan_s"] / native["makespan_s"]
    print(f"makespan staged / native: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
