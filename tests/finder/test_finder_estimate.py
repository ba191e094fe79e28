"""The ``earliest_start`` strategy without a cluster: the reading of ``sbatch --test-only``'s
answers of every Slurm version, the decision, and the plumbing (concurrency, timeout, cache)
with a stand-in ``sbatch`` that prints what the real one prints (docs/finder.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchers import find_launcher
from launchers.config.loader import load_config_text
from launchers.errors import LaunchersError
from launchers.finder import estimate
from launchers.finder.estimate import Estimate, decide, reason, when
from launchers.finder.search import explain_search
from launchers.slurm.testonly import read_answer, start_time

# ---------------------------------------------------------------------- sbatch's answers


@pytest.mark.parametrize(
    "stderr",
    [
        # 20.02 to 24.11
        "sbatch: Job 237 to start at 1795739885 using 2 processors on nodes cpu01 in partition debug\n",
        # 25.05 and later (its message says "a using")
        "sbatch: Job 237 to start at 1795739885 on cluster alpha a using 2 processors on nodes cpu01 in partition debug\n",
        # before 19.05: no partition
        "sbatch: Job 237 to start at 1795739885 using 2 processors on cpu01\n",
        # a job_submit plugin's message first
        "sbatch: please use --time\nsbatch: Job 237 to start at 1795739885 using 2 processors on nodes cpu01 in partition debug\n",
    ],
)
def test_answers_of_every_version(stderr: str) -> None:
    answer = read_answer(0, "", stderr, asked=1795739800.0)
    assert answer.start == 1795739885.0 and answer.error is None
    assert answer.nodes == "cpu01"
    assert answer.partition in ("debug", None)


def test_refusals_and_odd_answers() -> None:
    refused = read_answer(
        1, "", "allocation failure: Requested node configuration is not available\n", 10.0
    )
    assert refused.start is None
    assert refused.error == (
        "sbatch --test-only: Requested node configuration is not available (exit 1)"
    )
    down = read_answer(
        1,
        "",
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
        10.0,
    )
    assert "Unable to contact slurm controller" in (down.error or "")
    unknown = read_answer(
        0, "", "sbatch: Job 3 to start at Unknown using 1 processors on nodes n in partition p", 1.0
    )
    assert unknown.start is None and "no start time" in (unknown.error or "")
    assert start_time("2026-05-01T10:00:00") == pytest.approx(
        time.mktime(time.strptime("2026-05-01 10:00:00", "%Y-%m-%d %H:%M:%S"))
    )


def test_decide_earliest_ties_and_unknowns() -> None:
    now = 1000.0
    e = lambda start: Estimate(start, now)  # noqa: E731
    failed = Estimate(None, now, error="no answer within 5 s")
    labels = ["a", "b", "c"]
    assert decide([e(now + 3600), e(now), e(now + 10)], now) == 1
    tie = [e(now + 30), e(now), failed]
    assert decide(tie, now) == 0
    why = reason(tie, labels, now)
    assert "tied with it (less than 1m apart) but later in today's order: b" in why
    assert why.endswith("unknown: c")
    assert decide([failed, e(now + 7200), e(now + 60)], now) == 2
    assert decide([failed, failed], now) == 0
    assert reason([failed, failed], labels[:2], now).startswith("no start estimate is known")
    assert decide([e(now - 500), e(now)], now) == 0  # the past is now
    assert when(e(now + 7260), now) == "in 2h1m" and when(e(now), now) == "now"
    assert when(failed, now).startswith("unknown (no answer")


# ---------------------------------------------------------------- a stand-in sbatch

SBATCH = """\
#!/bin/sh
echo "$@" >> {calls}
sleep {sleep}
{answer}
"""


def fake_sbatch(directory: Path, *, delay: int | None = 0, sleep: float = 0.0) -> Path:
    """``directory/sbatch`` answering "start in ``delay`` seconds" (None: a refusal), as
    sbatch prints it with ``SLURM_TIME_FORMAT=%s``; each call's arguments go to ``calls``."""
    directory.mkdir(parents=True, exist_ok=True)
    calls = directory / "calls"
    calls.write_text("")
    if delay is None:
        answer = 'echo "allocation failure: Invalid qos specification" >&2; exit 1'
    else:
        answer = (
            'echo "sbatch: Job 7 to start at $(( $(date +%s) + '
            f'{delay} )) using 1 processors on nodes n1 in partition p" >&2'
        )
    script = directory / "sbatch"
    script.write_text(SBATCH.format(calls=calls, sleep=sleep, answer=answer))
    script.chmod(0o755)
    return calls


def config(tmp_path: Path, *groups: str, extra: str = "") -> str:
    """A configuration of Slurm groups ``name@path[:weight]`` and ``local`` groups."""
    lines = [extra, "slurm:"] if extra else ["slurm:"]
    local = []
    for spec in groups:
        if spec.startswith("local"):
            local.append(spec)
            continue
        name, _, weight = spec.partition(":")
        lines += [
            f"  - id: {name}",
            f"    path: {tmp_path / name}",
            f"    weight: {weight or 0}",
            "    partitions:",
            "      p: {nodes: [{hosts: [n1], configuration: {cpu: {cores: 8}}}]}",
        ]
    if local:
        lines.append("local:")
        lines += [f"  - id: {name}\n    cpu: {{cores: 8}}" for name in local]
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def fresh_estimates() -> None:
    estimate.clear_cache()


def test_the_earliest_group_wins_and_explain_says_why(tmp_path: Path) -> None:
    fake_sbatch(tmp_path / "busy", delay=7200)
    fake_sbatch(tmp_path / "idle", delay=0)
    cfg = load_config_text(config(tmp_path, "busy:1", "idle"))
    assert find_launcher("cpu(cores=2)", config=cfg).group.id == "busy"  # today's order
    found = find_launcher("cpu(cores=2)", config=cfg, strategy="earliest_start")
    assert found.group.id == "idle"
    text = explain_search("cpu(cores=2)", config=cfg, strategy="earliest_start").explanation.text()
    assert "slurm group busy: in 2h (sbatch --test-only, partition p on n1" in text
    assert "slurm group idle: now (sbatch --test-only" in text
    assert "chosen: slurm group idle: it starts first (now); later: slurm group busy in 2h" in text


def test_the_file_chooses_the_strategy(tmp_path: Path) -> None:
    fake_sbatch(tmp_path / "busy", delay=7200)
    fake_sbatch(tmp_path / "idle", delay=0)
    text = config(tmp_path, "busy:1", "idle", extra="strategy: earliest_start")
    cfg = load_config_text(text)
    assert find_launcher("cpu()", config=cfg).group.id == "idle"
    assert find_launcher("cpu()", config=cfg, strategy="order").group.id == "busy"
    with pytest.raises(
        LaunchersError, match=r"unknown strategy 'fastest' \(known: order, earliest_start\)"
    ):
        find_launcher("cpu()", config=cfg, strategy="fastest")


def test_ties_and_failures_fall_back_to_todays_order(tmp_path: Path) -> None:
    fake_sbatch(tmp_path / "a", delay=20)
    fake_sbatch(tmp_path / "b", delay=0)
    fake_sbatch(tmp_path / "refused", delay=None)
    cfg = load_config_text(config(tmp_path, "refused:2", "a:1", "b"))
    # a and b start less than a minute apart: a comes first in today's order; refused is unknown
    assert find_launcher("cpu()", config=cfg, strategy="earliest_start").group.id == "a"
    text = explain_search("cpu()", config=cfg, strategy="earliest_start").explanation.text()
    assert (
        "slurm group refused: unknown (sbatch --test-only: Invalid qos specification (exit 1))"
        in text
    )


def test_a_local_group_starts_now(tmp_path: Path) -> None:
    fake_sbatch(tmp_path / "busy", delay=600)
    cfg = load_config_text(config(tmp_path, "busy:1", "localbox"))
    found = find_launcher("cpu()", config=cfg, strategy="earliest_start")
    assert found.kind == "local"


def test_one_group_that_fits_is_not_asked(tmp_path: Path) -> None:
    calls = fake_sbatch(tmp_path / "only", delay=600)
    cfg = load_config_text(config(tmp_path, "only"))
    assert find_launcher("cpu()", config=cfg, strategy="earliest_start").group.id == "only"
    assert calls.read_text() == ""


@pytest.mark.timing
def test_estimates_are_asked_at_once_within_the_timeout_and_kept(tmp_path: Path) -> None:
    slow = fake_sbatch(tmp_path / "slow", delay=0, sleep=5)
    fast = fake_sbatch(tmp_path / "fast", delay=3600, sleep=0.8)
    fast2 = fake_sbatch(tmp_path / "fast2", delay=7200, sleep=0.8)
    cfg = load_config_text(
        config(tmp_path, "slow:2", "fast:1", "fast2", extra="estimate: {timeout: 2s, cache: 1m}")
    )
    start = time.monotonic()
    found = find_launcher("cpu()", config=cfg, strategy="earliest_start")
    first = time.monotonic() - start
    assert found.group.id == "fast"  # slow gave no answer within 2 s: unknown, ranked last
    assert first < 4.5, first  # the three were asked at once, the slow one given up at 2 s
    start = time.monotonic()
    for _ in range(200):
        assert find_launcher("cpu()", config=cfg, strategy="earliest_start").group.id == "fast"
    assert time.monotonic() - start < 2.0  # answers (and the failure) are kept
    assert [len(c.read_text().splitlines()) for c in (slow, fast, fast2)] == [1, 1, 1]
    # the arguments are the launcher's sbatch options
    assert fast.read_text().split() == [
        "--test-only",
        "--partition=p",
        "--cpus-per-task=1",
        "--wrap",
        "true",
    ]


def test_the_cli_flag(tmp_path: Path) -> None:
    fake_sbatch(tmp_path / "busy", delay=7200)
    fake_sbatch(tmp_path / "idle", delay=0)
    (tmp_path / "launchers.yaml").write_text(config(tmp_path, "busy:1", "idle"))
    run = subprocess.run(
        [sys.executable, "-m", "launchers", "find", "cpu()", "--config", str(tmp_path),
         "--strategy", "earliest_start", "--explain"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("slurm idle (alternative 0): --partition=p")
    assert "chosen: slurm group idle: it starts first" in run.stdout
