"""The remote ``job.sh`` (docs/design/sites.md §3.1), RUN with bash and shims for ``module``/``srun``,
and UNICORE's job description (docs/design/sites.md §3.2)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launchers.errors import ScriptError
from launchers.remote.environment import validate_environment
from launchers.remote.resources import Resources
from launchers.remote.script import (
    JobScriptSpec,
    job_name,
    quote_variable,
    render_job_script,
    sbatch_pairs,
    unicore_bss_file,
    unicore_description,
)

SHIM = """#!/bin/sh
echo "$(basename "$0") $*" >> "$LOG"
[ "$2" = fail ] && exit 2
if [ "$(basename "$0")" = srun ]; then shift 2; printf '%s\\n' "$@" > "$LOG.words"; fi
exit 0
"""


def shims(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("module", "srun"):
        p = bin_dir / name
        p.write_text(SHIM)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LOG": str(tmp_path / "log"),
        "HOME": "/home/someone",
    }


def run(
    tmp_path: Path,
    environment: dict[str, Any],
    command: str = 'echo command >> "$LOG"',
    transport: str = "unicore",
    **spec: Any,
) -> tuple[int, str, str, Path]:
    """Render and run job.sh in a fresh run directory; returns (exit code, log, job.err, run dir)."""
    env = validate_environment(environment, "backend.yaml")
    run_dir = tmp_path / "run dir"
    run_dir.mkdir()
    text = render_job_script(
        JobScriptSpec(
            env,
            command,
            transport,
            run_dir=str(run_dir) if transport == "firecrest" else None,
            **spec,
        )
    )
    (run_dir / "job.sh").write_text(text)
    variables = {**shims(tmp_path), "UC_WORKING_DIRECTORY": str(run_dir)}
    with open(run_dir / "job.err", "w") as err:
        proc = subprocess.run(
            ["bash", str(run_dir / "job.sh")],
            cwd=tmp_path,
            env=variables,
            stdout=subprocess.DEVNULL,
            stderr=err,
            timeout=30,
        )
    log = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    return proc.returncode, log, (run_dir / "job.err").read_text(), run_dir


def job_rc(run_dir: Path) -> dict[str, Any]:
    assert [
        p.name for p in run_dir.iterdir() if p.name.startswith(".job.rc")
    ] == []  # no temporary left
    return json.loads((run_dir / "job.rc").read_text())  # type: ignore[no-any-return]


FULL = {
    "Modules": ["Stages/2024", "CUDA"],
    "PreRunCommandOnComputeNode": [
        'echo pre0 >> "$LOG"',
        'echo pre1 >> "$LOG"\necho pre1b >> "$LOG"',
    ],
    "PostRunCommandOnComputeNode": 'echo post >> "$LOG"',
    "Python": "venv",
}


def make_venv(tmp_path: Path) -> None:
    (tmp_path / "run dir" / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "run dir" / "venv" / "bin" / "activate").write_text('echo activate >> "$LOG"\n')


def test_steps_in_order(tmp_path: Path) -> None:
    env = validate_environment(FULL, "b.yaml")
    run_dir = tmp_path / "run dir"
    make_venv(tmp_path)
    text = render_job_script(
        JobScriptSpec(
            env, 'echo "command $LAUNCHERS_WORKDIR $MANTIK_WORKING_DIRECTORY" >> "$LOG"', "unicore"
        )
    )
    (run_dir / "job.sh").write_text(text)
    variables = {**shims(tmp_path), "UC_WORKING_DIRECTORY": str(run_dir)}
    proc = subprocess.run(
        ["bash", str(run_dir / "job.sh")], env=variables, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "log").read_text().splitlines() == [
        "module load Stages/2024",
        "module load CUDA",
        "pre0",
        "pre1",
        "pre1b",
        "activate",
        f"command {run_dir} {run_dir}",
        "post",
    ]
    assert text.startswith("#!/bin/bash -l\n")
    rc = job_rc(run_dir)
    assert rc["rc"] == 0 and rc["signal"] is None


@pytest.mark.parametrize(
    ("environment", "command", "code", "failed", "log"),
    [
        (
            {
                "Modules": ["A", "fail", "C"],
                **{k: v for k, v in FULL.items() if k != "Modules" and k != "Python"},
            },
            'echo command >> "$LOG"',
            2,
            "Modules[1]",
            ["module load A", "module load fail"],
        ),
        (
            {
                "PreRunCommandOnComputeNode": [
                    'echo pre0 >> "$LOG"',
                    "(exit 2)",
                    'echo pre2 >> "$LOG"',
                ],
                "PostRunCommandOnComputeNode": 'echo post >> "$LOG"',
            },
            'echo command >> "$LOG"',
            2,
            "PreRunCommandOnComputeNode[1]",
            ["pre0"],
        ),
        (
            {"PostRunCommandOnComputeNode": ['echo post >> "$LOG"']},
            "(exit 3)",
            3,
            "the command",
            [],
        ),
        (
            {"PostRunCommandOnComputeNode": ["(exit 4)", 'echo post1 >> "$LOG"']},
            'echo command >> "$LOG"',
            4,
            "PostRunCommandOnComputeNode[0]",
            ["command"],
        ),
        (
            {"PreRunCommandOnComputeNode": "if then"},
            'echo command >> "$LOG"',
            2,
            "PreRunCommandOnComputeNode",
            [],
        ),
    ],
)
def test_failures_chain(
    tmp_path: Path,
    environment: dict[str, Any],
    command: str,
    code: int,
    failed: str,
    log: list[str],
) -> None:
    rc, got, err, run_dir = run(tmp_path, environment, command)
    assert rc == code
    assert got.splitlines() == log
    assert f"launchers: {failed} failed with exit code {code}" in err
    record = job_rc(run_dir)
    assert record["rc"] == code and record["step"] == failed


def test_exit_inside_a_snippet_still_writes_job_rc(tmp_path: Path) -> None:
    rc, log, err, run_dir = run(
        tmp_path,
        {
            "PreRunCommandOnComputeNode": ["exit 5"],
            "PostRunCommandOnComputeNode": 'echo post >> "$LOG"',
        },
    )
    assert rc == 5 and log == ""
    assert "launchers: PreRunCommandOnComputeNode[0] failed with exit code 5" in err
    assert job_rc(run_dir)["rc"] == 5


@pytest.mark.parametrize("transport", ["unicore", "firecrest"])  # Mantik: unquoted for firecREST
def test_variables_quoting(tmp_path: Path, transport: str) -> None:
    value = 'a "b" \\ `id` $(id) $HOME ${HOME}'
    rc, log, err, _run_dir = run(
        tmp_path,
        {"Variables": {"X": value, "N": 3}},
        'printf "%s|%s|%s|%s\\n" "$X" "$N" "$SRUN_CPUS_PER_TASK" "$P" >> "$LOG"',
        transport,
        exports=(("P", "$HOME 'q' $(id)"),),
        cpus_per_node=8,
    )
    assert rc == 0, err
    assert log == "a \"b\" \\ `id` $(id) /home/someone /home/someone|3|8|$HOME 'q' $(id)\n"


def test_srun_cpus_per_task_not_overridden(tmp_path: Path) -> None:
    rc, log, _, _ = run(
        tmp_path,
        {"Variables": {"SRUN_CPUS_PER_TASK": 2}},
        'echo "$SRUN_CPUS_PER_TASK" >> "$LOG"',
        cpus_per_node=8,
    )
    assert rc == 0 and log == "2\n"


def test_quote_variable() -> None:
    assert quote_variable('a"b\\c`d$(e)$f') == '"a\\"b\\\\c\\`d\\$(e)$f"'


def test_apptainer_one_line_word_by_word(tmp_path: Path) -> None:
    app = {"Apptainer": {"Path": "images/img.sif", "Options": ["-B $HOME/data:/data", "--nv"]}}
    rc, _log, err, _ = run(tmp_path, app, "python train.py --lr '0.1 0.2'")
    assert rc == 0, err
    words = (tmp_path / "log.words").read_text().splitlines()
    assert words == [
        "-B",
        "/home/someone/data:/data",
        "--nv",
        "img.sif",
        "python",
        "train.py",
        "--lr",
        "0.1 0.2",
    ]


def test_apptainer_multi_line_as_bash_c(tmp_path: Path) -> None:
    rc, _, err, _ = run(
        tmp_path, {"Apptainer": {"Path": "/p/img.sif", "Type": "remote"}}, "echo a\necho b\n"
    )
    assert rc == 0, err
    assert (tmp_path / "log.words").read_text() == "/p/img.sif\nbash\n-c\necho a\necho b\n"


def test_firecrest_header(tmp_path: Path) -> None:
    env = validate_environment({}, "b.yaml")
    text = render_job_script(
        JobScriptSpec(
            env,
            "true",
            "firecrest",
            run_dir="/scratch/u/launchers/r 1%j",
            job_name="train x",
            sbatch=(("partition", "normal"), ("account", "proj")),
        )
    )
    lines = text.splitlines()
    assert lines[:6] == [
        "#!/bin/bash -l",
        "#SBATCH --job-name=train_x",
        '#SBATCH --output="/scratch/u/launchers/r 1%%j/job.out"',
        '#SBATCH --error="/scratch/u/launchers/r 1%%j/job.err"',
        "#SBATCH --partition=normal",
        "#SBATCH --account=proj",
    ]
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(not line.startswith("#SBATCH") for line in lines[first_command:])
    assert "cd '/scratch/u/launchers/r 1%j' ||" in text
    with pytest.raises(ScriptError, match="--constraint"):
        render_job_script(
            JobScriptSpec(env, "true", "firecrest", run_dir="/r", sbatch=(("constraint", "a\nb"),))
        )


def test_firecrest_runs_in_its_directory(tmp_path: Path) -> None:
    rc, log, err, run_dir = run(tmp_path, {}, 'pwd >> "$LOG"', transport="firecrest")
    assert rc == 0, err
    assert log == f"{run_dir}\n"


def test_unicore_description() -> None:
    """A raw job (docs/remote-sites.md, "UNICORE: server behaviours we rely on and work around"): the
    resources travel as #SBATCH lines of the BSS file, never as UNICORE Resources."""
    env = validate_environment(
        {
            "PreRunCommandOnLoginNode": ["echo a", "false", "echo c"],
            "PostRunCommandOnLoginNode": "echo post",
        },
        "b.yaml",
    )
    desc = unicore_description(name="train-3f2a", environment=env, task_id="train-3f2a0011")
    assert desc == {
        "Name": "train-3f2a",
        "Executable": "./job.sh",
        "Arguments": [],
        "Stdout": "job.out",
        "Stderr": "job.err",
        "haveClientStageIn": "true",
        "Job type": "raw",
        "BSS file": "job.sbatch",
        "Tags": ["launchers", "train-3f2a0011"],
        "User precommand": "eval 'echo a' && eval 'false' && eval 'echo c'",
        "RunUserPrecommandOnLoginNode": "true",
        "User postcommand": "echo post",
        "RunUserPostcommandOnLoginNode": "true",
    }
    proc = subprocess.run(
        ["bash", "-c", desc["User precommand"]], capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 1 and proc.stdout == "a\n"  # chained: c never runs


def test_unicore_bss_file() -> None:
    res = Resources(
        queue="batch",
        runtime=3599,
        nodes=1,
        cpus_per_node=2,
        gpus_per_node=1,
        memory_per_node=8 * 1024**3,
    )
    text = unicore_bss_file("train 3f2a", sbatch_pairs(res, "myproject"))
    assert text == (
        "#!/bin/bash\n#SBATCH --job-name=train_3f2a\n#SBATCH --output=job.out\n#SBATCH --error=job.err\n"
        "#SBATCH --partition=batch\n#SBATCH --time=0-01:00:00\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n"
        "#SBATCH --cpus-per-task=2\n#SBATCH --gpus-per-node=1\n#SBATCH --mem=8192M\n#SBATCH --account=myproject\n"
    )
    with pytest.raises(ScriptError, match="--chdir is set by launchers"):
        unicore_bss_file("x", (("chdir", "/tmp"),))


def test_job_name() -> None:
    assert job_name("a b/c:d") == "a_b_c_d"
    assert len(job_name("x" * 100)) == 64


def test_cancel_signal_still_writes_job_rc(tmp_path: Path) -> None:
    import signal
    import time

    env = validate_environment({"PostRunCommandOnComputeNode": 'echo post >> "$LOG"'}, "b.yaml")
    run_dir = tmp_path / "run dir"
    run_dir.mkdir()
    (run_dir / "job.sh").write_text(
        render_job_script(JobScriptSpec(env, 'echo started >> "$LOG"; sleep 30', "unicore"))
    )
    variables = {**shims(tmp_path), "UC_WORKING_DIRECTORY": str(run_dir)}
    proc = subprocess.Popen(
        ["bash", str(run_dir / "job.sh")],
        env=variables,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not (tmp_path / "log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # as Slurm does on scancel
    assert proc.wait(timeout=10) == 143
    record = job_rc(run_dir)
    assert (record["rc"], record["signal"]) == (143, 15)
    assert (tmp_path / "log").read_text() == "started\n"


_value = st.text(
    alphabet=st.characters(blacklist_characters="\0$", blacklist_categories=("Cs",)), max_size=12
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(_value, min_size=1, max_size=10),
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
            max_size=12,
        ),
        max_size=5,
    ),
)
def test_values_arrive_unchanged(values: list[str], literal: list[str]) -> None:
    """Variables without ``$`` and --pass-env values of any text reach the job unchanged."""
    import tempfile

    variables = {f"V{i}": v for i, v in enumerate(values)}
    exports = tuple((f"P{i}", v) for i, v in enumerate(literal))
    names = [*variables, *(n for n, _ in exports)]
    env = validate_environment({"Variables": variables}, "b.yaml")
    command = (
        "printf '%s\\0' " + " ".join(f'"${n}"' for n in names) + ' > "$LAUNCHERS_WORKDIR/values"'
    )
    with tempfile.TemporaryDirectory() as d:
        text = render_job_script(
            JobScriptSpec(env, command, "firecrest", run_dir=d, exports=exports)
        )
        proc = subprocess.run(
            ["bash", "-c", text], env={"PATH": os.environ["PATH"]}, capture_output=True, timeout=30
        )
        assert proc.returncode == 0, proc.stderr
        got = (Path(d) / "values").read_bytes().decode().split("\0")[:-1]
    assert got == [*values, *literal]


def test_run_ids_and_names_keep_their_place_and_suffix(tmp_path: Path) -> None:
    """A run id names the job directory's place; a site name of 64 characters keeps ``-aN``."""
    from launchers.remote.decide import oldest_in
    from launchers.remote.script import place_digest, run_id_for

    a, b = tmp_path / "a" / "jobs" / "t" / "d", tmp_path / "b" / "jobs" / "t" / "d"
    assert run_id_for("t-d", a) == run_id_for("t-d", str(a)) != run_id_for("t-d", b)
    assert run_id_for("t-d", a) == f"t-d-{place_digest(a)}" and len(place_digest(a)) == 8
    rows = [
        {"jobId": "12", "name": "n", "workingDirectory": "/s/a"},
        {"jobId": "9", "name": "n", "workingDirectory": "/s/b/"},
        {"jobId": "3", "name": "other", "workingDirectory": "/s/b"},
    ]
    assert oldest_in(rows, "n", "/s/a", id_key="jobId", dir_key="workingDirectory") == "12"
    assert oldest_in(rows, "n", "/s/b", id_key="jobId", dir_key="workingDirectory") == "9"
    assert oldest_in(rows, "n", "/s/c", id_key="jobId", dir_key="workingDirectory") is None
    assert oldest_in(rows, "n", None, id_key="jobId", dir_key="workingDirectory") == "9"
    bare = [{"jobid": "12", "name": "n"}, {"jobid": "9", "name": "n"}]  # v1: no working directory
    assert oldest_in(bare, "n", "/s/c", id_key="jobid", dir_key="workingDirectory") == "9"


def test_long_task_names_keep_the_attempt_suffix(tmp_path: Path) -> None:
    from launchers.remote.payload import remote_job_name

    class FakeJob:
        name = "x" * 80
        directory = tmp_path / "0123456789abcdef"
        attempt = 3

    name = remote_job_name(FakeJob())  # type: ignore[arg-type]
    assert len(name) == 64 and name.endswith("-0123456789ab-a3")


def test_retries_leave_the_global_random_generator_alone() -> None:
    """Retry jitter draws from the library's own generator: a user's seeded ``random`` (a
    reproducible experiment) sees the same sequence whether or not launchers retried meanwhile."""
    import random

    from launchers.remote.retry import backoff

    random.seed(1234)
    expected = [random.random() for _ in range(3)]
    random.seed(1234)
    for attempt in range(5):
        backoff(attempt)
    assert [random.random() for _ in range(3)] == expected


def test_unicore_reconcile_leaves_older_runs_of_the_task_alone() -> None:
    """Crash recovery adopts the oldest started job of the task created since our SUBMITTING
    record (less the clock slack), destroys the READY ones, and leaves older jobs alone."""
    from launchers.jobs.record import iso_epoch
    from launchers.remote.decide import RECONCILE_CLOCK_SLACK, tagged_choice

    t = iso_epoch("2026-11-26T10:00:00+0100")
    assert t == iso_epoch("2026-11-26T09:00:00+00:00") == iso_epoch("2026-11-26T10:00:00+01:00")
    rows = [
        (
            "u/old",
            {"status": "SUCCESSFUL", "submissionTime": "2026-11-20T10:00:00+0100"},
        ),  # another run's
        ("u/old-ready", {"status": "READY", "submissionTime": "2026-11-20T10:00:01+0100"}),
        ("u/b", {"status": "QUEUED", "submissionTime": "2026-11-26T10:00:05+0100"}),
        ("u/a", {"status": "RUNNING", "submissionTime": "2026-11-26T10:00:02+0100"}),
        ("u/ready", {"status": "READY", "submissionTime": "2026-11-26T10:00:09+0100"}),
    ]
    assert t is not None
    assert tagged_choice(rows, t - RECONCILE_CLOCK_SLACK) == ("u/a", ["u/ready"])
    assert tagged_choice(rows, None) == ("u/old", ["u/old-ready", "u/ready"])  # no record time: all
    assert tagged_choice([("u/x", {"status": "QUEUED", "submissionTime": "?"})], t) == ("u/x", [])
