"""Property test: every value of an ``environment:`` block (module names, venv path, conda
name, container image, options, binds, container variables, variables, setup and teardown
text) reaches bash exactly as written through the one renderer, and nothing in it is executed
(docs/configuration.md, Environment)."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from launchers.config.environment import Container, Environment
from launchers.slurm.envscript import ENV_FUNCTIONS, render_environment

TRICKY = [
    "'", '"', "$(touch PWNED)", "`touch PWNED`", "a b", "%j %%", "line1\nline2", "\\", "\\'",
    "$HOME", "${X:-y}", "; touch PWNED", "&& touch PWNED", "*", "~", "#", "-n", "\t", "é ✓",
]  # fmt: skip

word = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=10),
)
name = st.sampled_from(["A", "B_2", "_x"])

#: stand-ins recording each argument on its own NUL-terminated record
STUBS = r"""
_l_host=test
module() { printf '%s\0' module "$@" >> "$LOG"; }
conda() { if [ "$1" = shell.bash ]; then echo :; else printf '%s\0' conda "$@" >> "$LOG"; fi; }
RUNTIME() { printf '%s\0' RUNTIME "$@" >> "$LOG"; }
"""


@settings(max_examples=30, deadline=None)
@given(
    module=word,
    venv=word.filter(lambda w: "/" not in w and w not in ("", ".", "..")),
    conda_name=word.filter(lambda w: w != "" and not w.startswith("~")),  # ~ is the home directory
    image=word,
    option=word,
    bind=word,
    inner=word,
    variable=word,
    runtime=st.sampled_from(["apptainer", "singularity", "podman", "docker"]),
    var=name,
)
def test_values_reach_bash_exactly(
    module: str,
    venv: str,
    conda_name: str,
    image: str,
    option: str,
    bind: str,
    inner: str,
    variable: str,
    runtime: str,
    var: str,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        activate = root / venv / "bin" / "activate"
        activate.parent.mkdir(parents=True)
        activate.write_text('printf "%s\\0" activated >> "$LOG"\n')
        common = {
            "modules": (module,),
            "setup": (f"printf %s {shlex.quote(variable)} > setup.txt",),
            "teardown": (f"printf %s {shlex.quote(variable)} > teardown.txt",),
            "variables": ((var, variable),),
        }
        envs = [
            Environment(
                venv=str(root / venv),
                container=Container(image, runtime, (option,), (bind,), ((var, inner),)),
                **common,  # type: ignore[arg-type]
            ),
            Environment(conda=conda_name, **common),  # type: ignore[arg-type]
        ]
        for env in envs:
            lines = render_environment(env, job_dir=str(root), cwd=str(root))
            script = "\n".join(
                [
                    STUBS.replace("RUNTIME", runtime),
                    ENV_FUNCTIONS,
                    *lines.setup,
                    " ".join([*lines.wrap, "true"]),
                    *lines.teardown,
                    f'printf "%s\\0" "${var}" >> "$LOG"',
                ]
            )
            log = root / "log"
            log.unlink(missing_ok=True)
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=root,
                env={"PATH": os.environ["PATH"], "LOG": str(log), "HOME": str(root)},
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            records = log.read_bytes().decode("utf-8").split("\0")[:-1]
            assert records[:3] == ["module", "load", module]
            if env.container is not None:
                assert records[3] == "activated"
                args = records[records.index(runtime) + 1 : -1]
                assert image in args and option in args and args[-1] == "true"
                assert any(bind in a for a in args) and f"{var}={inner}" in args
            else:
                assert records[3:6] == ["conda", "activate", conda_name]
            assert records[-1] == variable
            assert (root / "setup.txt").read_bytes().decode() == variable
            assert (root / "teardown.txt").read_bytes().decode() == variable
            assert not list(root.rglob("PWNED"))


@settings(max_examples=25, deadline=None)
@given(
    binds=st.lists(word, max_size=2),
    env=st.lists(st.tuples(name, word), max_size=2),
    image=word,
    runtime=st.sampled_from(["podman", "docker", "pyxis"]),
)
def test_a_sites_container_words_name_the_run_directory_at_run_time(
    binds: list[str], env: list[tuple[str, str]], image: str, runtime: str
) -> None:
    """A site's script (``here=``): the working directory is expanded when the job runs (even
    one with quotes and spaces), every value still arrives as written, nothing runs."""
    box = Container(image=image, runtime=runtime, bind=tuple(b for b in binds if "," not in b))
    box = attrs.evolve(box, env=tuple(env))
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp) / "it's a dir"
        here.mkdir()
        plain = render_environment(
            Environment(container=box), job_dir=str(here), cwd=str(here)
        ).wrap
        words = render_environment(
            Environment(container=box), job_dir="/", cwd="/", here='"$_l_cwd"'
        ).wrap
        log = Path(tmp) / "log"
        program = f"_l_cwd={shlex.quote(str(here))}\nprintf '%s\\0' {' '.join(words)} > \"$LOG\"\n"
        expected = f"printf '%s\\0' {' '.join(plain)} > \"$LOG\"\n"
        for text, out in ((program, log), (expected, Path(tmp) / "want")):
            subprocess.run(
                ["bash", "-c", text], env={**os.environ, "LOG": str(out)}, cwd=tmp, check=True
            )
        assert log.read_bytes() == (Path(tmp) / "want").read_bytes()
        assert not (Path(tmp) / "PWNED").exists()
