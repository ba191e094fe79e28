"""Helpers of the monitor tests: job directories written by hand (as another tool or an older
run would leave them), a monitor served on a free loopback port, and a real headless Chromium
(Debian's chromium and chromium-driver, installed by tests/browser/install.sh)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import unavailable
from launchers.jobs.record import StateRecord, epoch_iso, write_record
from launchers.jobs.state import JobState

INSTALL = Path(__file__).parent / "browser" / "install.sh"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Screenshots of the page tests, kept as test artifacts (tests/artifacts is not committed).
ARTIFACTS = Path(__file__).parent / "artifacts" / "monitor"


def make_job(
    xp: Path,
    name: str,
    digest: str,
    state: str = "COMPLETED",
    *,
    t0: float | None = None,
    wait: float = 5.0,
    queue: float | None = 60.0,
    run: float | None = 120.0,
    out: str | None = None,
    err: str | None = None,
    **fields: Any,
) -> Path:
    """A job directory with a ``state.json`` as launchers writes it: created at ``t0``,
    (default: an hour ago), submitted ``wait`` s later, started after ``queue`` s in the queue (None: not started),
    ended after ``run`` s (None: not ended); ``fields`` override record fields."""
    t0 = time.time() - 3600 if t0 is None else t0
    directory = xp / "jobs" / name / digest
    directory.mkdir(parents=True, exist_ok=True)
    js = JobState.parse(state)
    sub = t0 + wait
    sta = None if queue is None else sub + queue
    end = None if (sta is None or run is None) else sta + run
    history = [(epoch_iso(t0), "WAITING", "created"), (epoch_iso(sub), "PENDING", "")]
    if sta is not None:
        history.append((epoch_iso(sta), "RUNNING", ""))
    if js.is_final:
        history.append((epoch_iso(end or sta or sub), js.value, ""))
    values: dict[str, Any] = {
        "task_id": f"{name}-{digest}",
        "state": js,
        "launcher": {
            "kind": "slurm",
            "group": "gpu-a100",
            "connector": "local",
            "options": ["--partition=gpu", "--time=01:00:00"],
        },
        "native_id": "4242",
        "submitted_at": epoch_iso(sub),
        "started_at": None if sta is None else epoch_iso(sta),
        "ended_at": None if end is None or not js.is_final else epoch_iso(end),
        "history": tuple(history),
    }
    values.update(fields)
    write_record(directory, StateRecord(**values), sync=False, sync_dir=False)
    (directory / "params.json").write_text(
        json.dumps({"kind": "command", "target": ["echo", name], "params": {}, "env": {}})
    )
    (directory / "job.sh").write_text(f"#!/bin/bash\necho {name}\n")
    if out is not None:
        (directory / "job.out").write_text(out)
    if err is not None:
        (directory / "job.err").write_text(err)
    return directory


@contextlib.contextmanager
def serving(*workdirs: Path, **options: Any) -> Iterator[Any]:
    """A monitor over ``workdirs`` on a free loopback port, stopped afterwards."""
    from launchers.monitor.scan import find_experiments
    from launchers.monitor.server import Monitor

    monitor = Monitor(find_experiments(list(workdirs), Path.cwd()), port=0, **options).start()
    try:
        yield monitor
    finally:
        monitor.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium driven by selenium (1440x900); under CI a browser that cannot start
    fails the test."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            unavailable(f"chromium and chromium-driver are not installed: {done.stderr[-1000:]}")
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        unavailable(f"selenium is not installed ({e}): pip install -e '.[test]'")
        raise
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,900",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except (WebDriverException, OSError) as e:  # OSError: a driver that cannot be run
        unavailable(f"cannot start headless Chromium: {getattr(e, 'msg', None) or e}")
        raise
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    """Save the page as ``tests/artifacts/monitor/NAME.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def demo_experiment(
    xp: Path, n: int = 48, *, seed: int = 7, start: float = 6 * 3600, span: float = 5.2 * 3600
) -> list[Path]:
    """A plausible experiment of ``n`` jobs created over ``span`` seconds from ``start``
    seconds ago (by default over the last six hours; fixed seed), the last eighth in a burst
    over the last ten minutes: training runs on a GPU partition that queues long, evaluations
    on a CPU one that does not, a few failures, jobs still pending and running. For the page
    tests and the screenshots of docs/monitor.md."""
    import random

    rnd = random.Random(seed)
    now = time.time()
    kinds = [
        ("train", "gpu-a100", "gpu", 1500.0, 2400.0),
        ("eval", "cpu", "debug", 60.0, 400.0),
        ("preprocess", "cpu", "long", 200.0, 900.0),
        ("sweep_lr", "gpu-a100", "gpu", 1800.0, 1500.0),
    ]
    made = []
    for i in range(n):
        name, group, part, mean_wait, mean_run = kinds[i % len(kinds)]
        digest = f"{rnd.getrandbits(64):016x}"
        t0 = now - start + i * (span / n)
        if i >= n - n // 8:  # the last eighth: a burst submitted in the last ten minutes
            t0 = now - 600 + (i - (n - n // 8)) * (540 / max(1, n // 8))
        queue = rnd.expovariate(1 / mean_wait)
        run: float | None = rnd.expovariate(1 / mean_run) + 30
        state = rnd.choices(["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"], [88, 6, 3, 3])[0]
        q: float | None = queue
        if t0 + 5 + queue > now:
            state, q, run = "PENDING", None, None
        elif t0 + 5 + queue + (run or 0) > now:
            state, run = "RUNNING", None
        reason = {
            "FAILED": "exit code 1",
            "TIMEOUT": "time limit reached",
            "CANCELLED": "cancelled on request",
            "PENDING": "Priority" if part == "gpu" else "Resources",
        }.get(state)
        epochs = 40 if state != "PENDING" else 0
        out = f"==== launchers: attempt 1, job {5000 + i}, gpu0{1 + i % 2}, start ====\n" + "".join(
            f"epoch {e:3d}  loss {2.3 / (e + 1) ** 0.7:.4f}  val_acc {1 - 0.9 / (e + 2):.4f}\n"
            for e in range(epochs)
        )
        err = "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n"
        made.append(
            make_job(
                xp,
                name,
                digest,
                state,
                t0=t0,
                wait=rnd.uniform(1, 40),
                queue=q,
                run=run,
                out=out,
                err=err if state == "FAILED" else "",
                native_id=str(5000 + i),
                reason=reason,
                exit_code={"COMPLETED": 0, "FAILED": 1}.get(state),
                launcher={
                    "kind": "slurm",
                    "group": group,
                    "connector": "local",
                    "options": [f"--partition={part}", "--time=04:00:00", "--cpus-per-task=4"]
                    + (["--gpus-per-node=1"] if part == "gpu" else []),
                },
            )
        )
        # a script and parameters like those of a real run, for the screenshots
        directory = made[-1]
        argv = ["python", f"{name}.py", "--seed", str(i)]
        (directory / "params.json").write_text(
            json.dumps({"kind": "command", "target": argv, "params": {}, "env": {}})
        )
        options = json.loads((directory / "state.json").read_text())["launcher"]["options"]
        script = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}-{digest[:12]}-a1",
            f"#SBATCH --output={directory}/job.out",
            f"#SBATCH --error={directory}/job.err",
            "#SBATCH --open-mode=append",
            *(f"#SBATCH {o}" for o in options),
            f"# generated by launchers for task {name}-{digest}, attempt 1",
            f"cd {directory}",
            " ".join(argv),
        ]
        (directory / "job.sh").write_text("\n".join(script) + "\n")
    return made
