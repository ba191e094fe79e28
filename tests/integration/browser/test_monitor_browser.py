"""The monitor's page in a real headless Chromium (selenium): real Slurm jobs appear and change
state on the page without a reload, a job's output is shown as it is written, the cancel button
cancels a running job in Slurm, --track keeps the page true once the experiment script is gone;
filters, sorting, escaping; screenshots of each page are saved in tests/artifacts/monitor/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from launchers.jobs.record import read_record, write_record
from launchers.jobs.state import JobState
from monitor_fixtures import browser, demo_experiment, make_job, screenshot, serving  # noqa: F401
from paths import ROOT

SRC = ROOT / "src"

# two Chromiums at once on two cores slow both: the page tests run on one worker
pytestmark = [pytest.mark.xdist_group("monitor-browser")]


def wait_for(what: Callable[[], Any], timeout: float, message: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, f"{message} (after {timeout} s)"
        time.sleep(every)


def rows(driver: Any) -> list[list[str]]:
    """``[key, state, text]`` of every row the jobs table shows."""
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll('tr.row')]"
            ".map(r => [r.dataset.key, r.dataset.state, r.innerText])"
        )
    )


def state_of(driver: Any, name: str) -> str | None:
    found = [s for k, s, _ in rows(driver) if k.startswith(name + "/")]
    return found[0] if found else None


def text(driver: Any, css: str) -> str:
    """The text of the first element ``css`` selects ("" while there is none)."""
    found = driver.find_elements("css selector", css)
    return str(found[0].text) if found else ""


def click(driver: Any, css: str) -> None:
    driver.execute_script("document.querySelector(arguments[0]).click()", css)


EXPERIMENT = textwrap.dedent(
    """
    import json, sys, time
    from launchers import SlurmLauncher, command, experiment
    from launchers.config.model import SlurmGroup

    launcher = SlurmLauncher(
        group=SlurmGroup(id="sandbox"), options={"partition": "debug", "time": "00:05:00"}
    )
    xp = experiment(sys.argv[1], launcher, progress=False)
    xp.__enter__()
    jobs = [
        command(["sh", "-c", "echo hello from slurm; sleep 8; echo done"], name="greet").submit(),
        command(["sleep", "300"], name="long").submit(),
        command(["sh", "-c", "sleep 20; echo tracked"], name="tail").submit(),
    ]
    while not all(j.native_id for j in jobs):
        time.sleep(0.05)
    print(json.dumps({j.name: j.native_id for j in jobs}), flush=True)
    while True:  # the owner of the jobs, following them, until it is killed
        time.sleep(1)
    """
)


@pytest.mark.slurm
@pytest.mark.slow
def test_live_page_over_real_slurm_jobs(
    browser: Any,  # noqa: F811
    slurm_cluster: dict[str, str],
    tmp_path: Path,
    fresh_runtime: Any,
    leaves_nothing: Any,
) -> None:
    xp = tmp_path / "xp"
    xp.mkdir()
    script = tmp_path / "experiment.py"
    script.write_text(EXPERIMENT)
    env = dict(os.environ, PYTHONPATH=str(SRC), **slurm_cluster)
    owner = None
    with serving(xp, track=True) as monitor:
        try:
            browser.get(monitor.url)
            wait_for(lambda: browser.find_elements("css selector", "table.jobs"), 30, "no table")
            browser.execute_script("window.__sameDocument = 'yes'")
            owner = subprocess.Popen(
                [sys.executable, str(script), str(xp)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=tmp_path,
            )
            assert owner.stdout is not None
            ids = json.loads(owner.stdout.readline() or "{}")
            assert set(ids) == {"greet", "long", "tail"}, (
                owner.stderr.read() if owner.stderr else ""
            )

            # the job appears, then RUNNING, then COMPLETED: seen on the page, never reloaded
            seen: list[str] = []

            def greet_completed() -> bool:
                state = state_of(browser, "greet")
                if state and (not seen or seen[-1] != state):
                    seen.append(state)
                return state == "COMPLETED"

            wait_for(greet_completed, 60, f"greet never COMPLETED on the page: {seen}", 0.05)
            assert "RUNNING" in seen and seen.index("RUNNING") < seen.index("COMPLETED"), seen
            assert browser.execute_script("return window.__sameDocument") == "yes"
            screenshot(browser, "jobs-live")

            # its output, as the job wrote it
            key = next(k for k, _, _ in rows(browser) if k.startswith("greet/"))
            click(browser, f'tr.row[data-key="{key}"] td.name a')
            log = wait_for(
                lambda: "done" in (t := text(browser, "#log")) and t,
                30,
                "the output never showed",
            )
            assert "hello from slurm" in log and "==== launchers: attempt 1" in log
            screenshot(browser, "job")

            # the experiment script goes away: --track keeps following its jobs
            owner.send_signal(signal.SIGKILL)
            owner.wait(10)
            browser.back()
            wait_for(lambda: state_of(browser, "long") == "RUNNING", 30, "long not RUNNING")

            # cancel a running job with its button: Slurm cancels it
            key = next(k for k, _, _ in rows(browser) if k.startswith("long/"))
            click(browser, f'tr.row[data-key="{key}"] td.name a')
            wait_for(
                lambda: browser.find_elements("css selector", "#cancel-job:not([disabled])"),
                30,
                "no cancel button",
            )
            click(browser, "#cancel-job")
            wait_for(lambda: browser.find_element("id", "confirm").is_displayed(), 10, "no dialog")
            click(browser, "#confirm-yes")
            wait_for(
                lambda: browser.find_elements("css selector", ".job-head .chip.CANCELLED"),
                60,
                "the page never showed CANCELLED",
            )
            sacct = wait_for(
                lambda: "CANCELLED" in (out := _sacct(ids["long"], env)) and out,
                30,
                "Slurm did not cancel the job",
            )
            assert "CANCELLED" in sacct
            rec = read_record(xp / "jobs" / key)
            assert rec is not None and rec.reason == "cancelled on request"

            # the third job ends after its owner died: the monitor's tracker records it
            browser.back()
            wait_for(lambda: state_of(browser, "tail") == "COMPLETED", 90, "tail not COMPLETED")
            assert browser.execute_script("return window.__sameDocument") == "yes"
            screenshot(browser, "jobs")
            browser.get(monitor.url.replace("/?", "/?") + "#/")
            wait_for(lambda: browser.find_elements("css selector", ".exp"), 30, "no experiment")
            screenshot(browser, "experiments")
            click(browser, ".exp .links a:nth-child(2)")
            wait_for(lambda: browser.find_elements("css selector", "#wait-run"), 30, "no summary")
            screenshot(browser, "timeline")
        finally:
            if owner is not None and owner.poll() is None:
                owner.kill()
                owner.wait(10)


def _sacct(native_id: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", native_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    return done.stdout


EVIL = "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>"


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Any]:
    xp = tmp_path / "runs" / "lr-sweep"
    demo_experiment(xp)
    demo_experiment(tmp_path / "runs" / "ablation", 24, seed=3, start=30 * 3600, span=4 * 3600)
    demo_experiment(tmp_path / "runs" / "pretrain", 10, seed=5, start=3000, span=2400)
    with serving(tmp_path / "runs") as m:
        yield m, xp


def test_filters_sorting_escaping_and_live_updates(browser: Any, demo: Any) -> None:  # noqa: F811
    monitor, xp = demo

    # the screenshots of docs/monitor.md (before the hostile job below joins the experiment)
    browser.set_window_size(1440, 900)
    browser.get(monitor.url + "#/")
    wait_for(lambda: len(browser.find_elements("css selector", ".exp")) == 3, 20, "no experiment")
    screenshot(browser, "demo-experiments")
    exp = _exp_id(browser)
    browser.get(monitor.url + f"#/x/{exp}")
    wait_for(lambda: len(rows(browser)) > 10, 20, "no rows")
    screenshot(browser, "demo-jobs")
    train = next(
        d
        for d in sorted((xp / "jobs" / "train").iterdir())
        if (rec := read_record(d)) is not None and rec.state is JobState.RUNNING
    )
    browser.get(monitor.url + f"#/x/{exp}/job/train/{train.name}")
    wait_for(lambda: "epoch" in text(browser, "#log"), 20, "no output")
    time.sleep(0.3)
    screenshot(browser, "demo-job")
    browser.get(monitor.url + f"#/x/{exp}/timeline")
    wait_for(lambda: browser.find_elements("css selector", "#wait-run"), 20, "no summary")
    time.sleep(0.3)
    screenshot(browser, "demo-timeline")

    browser.get(monitor.url + f"#/x/{exp}")
    wait_for(lambda: len(rows(browser)) >= 20, 30, "no rows")
    browser.execute_script("window.__sameDocument = 'yes'")
    total = len(list((xp / "jobs").glob("*/*/state.json")))
    assert f"{total} jobs" in browser.find_element("css selector", ".status-line").text

    # a new job with a hostile name, reason and output appears, shown as text, never markup
    make_job(
        xp,
        "x",
        "e" * 16,
        "FAILED",
        task_id=EVIL,
        reason=EVIL,
        out=EVIL + "\n\x1b[31mred\x1b[0m progress 10%\rprogress 100%\n",
    )
    evil_key = f"x/{'e' * 16}"
    evil_row = wait_for(
        lambda: [r for r in rows(browser) if r[0] == evil_key], 10, "the new job never showed"
    )
    assert "<script>window.__xss=1</script>" in evil_row[0][2]
    assert browser.execute_script("return window.__xss") is None

    # filter by state (a click on its chip), then by name; sort by a column
    click(browser, '.filter[data-state="FAILED"]')
    states = {s for _, s, _ in rows(browser)}
    assert states == {"FAILED"}
    click(browser, '.filter[data-state="FAILED"]')  # again: all states
    search = browser.find_element("css selector", "input[type=search]")
    search.send_keys("eval")
    wait_for(lambda: all(k.startswith("eval/") for k, _, _ in rows(browser)), 10, "name filter")
    assert "q=eval" in browser.current_url
    browser.execute_script(
        "const s = document.querySelector('input[type=search]'); s.value = '';"
        "s.dispatchEvent(new Event('input'))"
    )
    click(browser, 'th[data-col="native_id"]')  # descending numbers first...
    click(browser, 'th[data-col="native_id"]')  # ...then ascending
    ids = [r[2].split("\t")[5] for r in rows(browser) if r[0] != evil_key]
    numbers = [int(i) for i in ids if i.isdigit()]
    assert numbers == sorted(numbers) and len(numbers) > 10

    # a record changed on disk reaches the page without a reload (the job filtered by its
    # name: the table draws only the rows in view)
    search.send_keys(train.name)
    wait_for(lambda: len(rows(browser)) == 1, 10, "name filter")
    rec = read_record(train)
    assert rec is not None
    write_record(train, rec.transition(JobState.FAILED, reason="exit code 9", exit_code=9))
    key = f"train/{train.name}"
    wait_for(
        lambda: [s for k, s, _ in rows(browser) if k == key] == ["FAILED"],
        10,
        "the change never reached the page",
    )
    assert browser.execute_script("return window.__sameDocument") == "yes"

    # the job view of the hostile record: its name and output shown as text
    browser.get(monitor.url + f"#/x/{exp}/job/x/{'e' * 16}")
    log = wait_for(lambda: "progress 100%" in (t := text(browser, "#log")) and t, 20, "no output")
    assert "<script>window.__xss=1</script>" in log
    assert "progress 10%" not in log and "\x1b" not in log  # \r redraws and colours cleaned
    head = text(browser, ".job-head h1")
    assert head.startswith("<script>")
    assert browser.execute_script("return window.__xss") is None


def _exp_id(driver: Any, name: str = "lr-sweep") -> str:
    return str(
        driver.execute_script(
            "return fetch('api/experiments', {headers: {'X-Launchers-Token':"
            " document.querySelector('meta[name=launchers-token]').content}})"
            ".then(r => r.json()).then(d => d.experiments.find(e => e.name === arguments[0]).id)",
            name,
        )
    )
