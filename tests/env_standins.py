"""Recording stand-ins of the container runtimes and of conda (docs/testing.md, "Stand-ins"):
Apptainer, Singularity and pyxis are not packaged for Debian 12 and podman's OCI runtime is
refused ``setrlimit`` here, so each stand-in logs its argv (one JSON line) and runs the inner
command itself, with the variables and working directory the real runtime would give it: the
task's output, exit code and files are real. ``conda`` prints a shell hook whose ``conda
activate NAME`` puts ``ENVS/NAME/bin`` first on PATH. Also importable as ``env_tasks``' helper."""

from __future__ import annotations

import sys
from pathlib import Path

RUNTIME = r'''#!__PYTHON__
"""Stand-in of __NAME__ (tests/env_standins.py): log argv, run the inner command."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ.get("STANDIN_LOG", "/dev/null"), "a") as log:
    log.write(json.dumps(["__NAME__", *args]) + "\n")
env = dict(os.environ)
cwd = None
name = "__NAME__"
if name in ("apptainer", "singularity"):
    assert args[0] == "exec", args
    i = 1
    while args[i].startswith("-"):
        if args[i] in ("--bind", "-B", "--env"):
            if args[i] == "--env":
                k, _, v = args[i + 1].partition("=")
                env[k] = v
            i += 2
        else:
            i += 1
    command = args[i + 1:]  # after the image
elif name in ("podman", "docker"):
    assert args[:2] == ["run", "--rm"], args
    i = 2
    while args[i].startswith("-"):
        if args[i] in ("-v", "-e", "-w", "--device", "--gpus"):
            if args[i] == "-e":
                k, _, v = args[i + 1].partition("=")
                env[k] = v
            if args[i] == "-w":
                cwd = args[i + 1]
            i += 2
        else:
            i += 1
    command = args[i + 1:]
else:  # srun with pyxis's options
    i = 0
    while args[i].startswith("-"):
        if args[i].startswith("--container-workdir="):
            cwd = args[i].split("=", 1)[1]
        i += 1
    command = args[i:]
if cwd:
    os.chdir(cwd)
os.execvpe(command[0], command, env)
'''

CONDA = r"""#!/bin/sh
# Stand-in of conda (tests/env_standins.py): the shell hook defines conda activate.
[ -n "$STANDIN_LOG" ] && printf '["conda", "%s"]\n' "$*" >> "$STANDIN_LOG"
if [ "$1" = shell.bash ] && [ "$2" = hook ]; then
    cat <<'HOOK'
conda() {
    if [ "$1" = activate ]; then
        [ -d "__ENVS__/$2" ] || { echo "EnvironmentNameNotFound: Could not find conda environment: $2" >&2; return 1; }
        export CONDA_DEFAULT_ENV="$2" PATH="__ENVS__/$2/bin:$PATH"
    fi
}
HOOK
fi
"""


def install(bin_dir: Path, envs: Path, *, srun: bool = False) -> Path:
    """Write the stand-ins into ``bin_dir`` (``srun`` too when asked: it shadows the real one
    for the job that puts ``bin_dir`` first on PATH) and return it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    names = ["apptainer", "singularity", "podman", "docker"] + (["srun"] if srun else [])
    for name in names:
        path = bin_dir / name
        text = RUNTIME.replace("__PYTHON__", sys.executable).replace("__NAME__", name)
        path.write_text(text)
        path.chmod(0o755)
    conda = bin_dir / "conda"
    conda.write_text(CONDA.replace("__ENVS__", str(envs)))
    conda.chmod(0o755)
    return bin_dir
