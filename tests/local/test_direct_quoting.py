"""Property test: argv words, environment values and names with quotes, ``$(...)``, backticks,
spaces, ``%`` and newlines reach a direct job exactly, and nothing in them is executed."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launchers.jobs.experiment import experiment
from launchers.jobs.state import JobState
from launchers.jobs.task import command
from launchers.local.launcher import DirectLauncher

TRICKY = [
    "'", '"', "$(touch PWNED)", "`touch PWNED`", "a b", "%j %%", "line1\nline2", "\\", "\\'",
    "$HOME", "${X:-y}", "; touch PWNED", "&& touch PWNED", "*", "~", "#", "-n", "\t", "é ✓",
]  # fmt: skip

word = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12),
)
PRINT = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('QV')]))"


@pytest.fixture(scope="module")
def root() -> Path:
    return Path(tempfile.mkdtemp(prefix="launchers-quoting-"))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=st.lists(word, min_size=0, max_size=4), value=word, name=word)
def test_values_reach_the_job_exactly(root: Path, args: list[str], value: str, name: str) -> None:
    workdir = Path(tempfile.mkdtemp(dir=root))
    with experiment(workdir, DirectLauncher(), progress=False):
        job = command(
            [sys.executable, "-c", PRINT, *args], env={"QV": value}, name=name or "x"
        ).submit()
    assert job.state is JobState.COMPLETED
    lines = job.stdout_path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[1]) == [args, value]
    assert not list(workdir.rglob("PWNED"))
