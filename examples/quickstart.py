"""Quick start: choose a launcher for a requirement, run two tasks there, print the results.

With no launchers.yaml anywhere, the finder uses the implicit local launcher that describes this
machine, so this runs on a laptop with no cluster. Point LAUNCHERS_CONFIG at a launchers.yaml to
run the same script on a cluster.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from launchers import command, experiment, find_launcher


def main() -> int:
    launcher = find_launcher("duration=10 minutes & cpu(cores=1, mem=256M)")
    where = (
        "this machine, no launchers.yaml found"
        if getattr(launcher.group, "implicit", False)
        else launcher.group.label
    )
    print(f"chosen launcher: {launcher.kind} ({where})")
    workdir = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="launchers-"))
    )
    with experiment(workdir, launcher=launcher):
        hello = command(
            ["python3", "-c", "import platform; print('hello from', platform.node())"], name="hello"
        )
        sums = command(["bash", "-c", 'echo "sum: $((6 * 7))"'], name="sum")
        jobs = [hello.submit(), sums.submit()]
    for job in jobs:
        print(f"{job.task_id}: {job.state.name}")
        print("   " + Path(job.stdout_path).read_text().strip().splitlines()[-1])
    print(f"job directories under {workdir}/jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
