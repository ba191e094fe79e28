"""What a remote run sends (docs/design/sites.md §3.1-§3.2): ``job.sh``, UNICORE's job description and
its ``BSS file``.

Pure renderers: values in, text or JSON-ready dicts out. The script runs each step of the
environment only if the previous one succeeded, names a failing step in ``job.err`` and writes
``job.rc`` atomically on every exit. A Compute Backend Config's ``Environment`` is written as
Mantik runs it; launchers.yaml's ``environment:`` block gets the one renderer's lines
(``slurm.envscript``), as in a Slurm job script (docs/remote-sites.md, "The same model").
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import Any

import attrs

from .._version import __version__
from ..config.environment import EMPTY
from ..config.environment import Environment as Block
from ..errors import ScriptError
from ..slurm.envscript import ENV_FUNCTIONS, render_environment
from ..slurm.script import directive, sh_quote, split_arg
from .environment import Environment, Snippet
from .resources import Resources

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]")
UNICORE_EXECUTABLE = "./job.sh"


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def sh_word(value: str, *, what: str) -> str:
    """``value`` as a user writes it (``module load Stages/2024``) when no character in it means
    anything to the shell, else in single quotes."""
    return value if _PLAIN_WORD.fullmatch(value) else sh_quote(value, what=what)


def quote_variable(value: str) -> str:
    """A ``Variables`` value: double quotes, ``\\ " `` ` `` escaped and ``$(`` as ``\\$(``.

    ``$NAME`` and ``${NAME}`` still expand on the compute node; command substitution does not.
    """
    if "\0" in value:
        raise ScriptError("a variable value contains a NUL character")
    text = value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$(", "\\$(")
    return f'"{text}"'


def place_digest(job_dir: str | os.PathLike[str], length: int = 8) -> str:
    """Hex digits of the absolute job directory: the same task submitted from two experiment
    directories gets two run directories and two job names at a site, never one."""
    where = os.path.abspath(os.fspath(job_dir))
    return hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:length]


def run_id_for(task_id: str, job_dir: str | os.PathLike[str]) -> str:
    """``NAME-DIGEST-PLACE``: a remote run's id, the name of its run directory on a firecREST site."""
    return f"{task_id}-{place_digest(job_dir)}"


def job_name(text: str, limit: int = 64) -> str:
    """A UNICORE/Slurm job name: characters outside ``[A-Za-z0-9_.-]`` become ``_``, at most 64."""
    name = _NAME_BAD.sub("_", text)[:limit]
    return name or "launchers"


def attempt_job_name(base: str, attempt: int) -> str:
    """``BASE-aN``: the name of one attempt at the site, so that a crash recovery never takes an
    earlier attempt's job for this one; ``BASE`` is shortened, never the suffix (64 at most)."""
    suffix = f"-a{attempt}"
    return job_name(base, 64 - len(suffix)) + suffix


@attrs.frozen
class JobScriptSpec:
    """Everything ``job.sh`` needs; ``run_dir`` is None for UNICORE (``$UC_WORKING_DIRECTORY``)."""

    environment: Environment
    command: str
    transport: str  # "unicore" | "firecrest" | "ssh"
    run_dir: str | None = None
    job_name: str = "launchers"
    #: firecREST: sbatch options (long name, value) from Resources or the finder, account included
    sbatch: tuple[tuple[str, str | bool], ...] = ()
    #: literal exports (``--pass-env``, ``MLFLOW_*``), single-quoted
    exports: tuple[tuple[str, str], ...] = ()
    cpus_per_node: int | None = None
    run_id: str = ""
    #: project files of size 0, created by the script (firecREST never finishes an empty upload)
    empty_files: tuple[str, ...] = ()
    #: launchers.yaml's ``environment:`` block (docs/configuration.md, Environment), written by
    #: the one renderer (``slurm.envscript``) instead of ``environment`` (which must then be empty)
    block: Block = EMPTY
    #: the command as words (a command task's argv), run as they are (in the container as its
    #: arguments); empty: ``command``, shell text. Used with ``block`` only.
    argv: tuple[str, ...] = ()
    #: the working directory (relative to the run directory, or absolute), with ``block`` only
    cwd: str | None = None
    #: GPUs the job asks (``--nv`` and the like in a container), with ``block`` only
    gpus: int = 0


def sbatch_pairs(
    resources: Resources, account: str | None, gpu_option: str = "gpus-per-node"
) -> tuple[tuple[str, str | bool], ...]:
    """firecREST ``#SBATCH`` options from a Compute Backend Config's ``Resources`` (docs/design/sites.md §1.2)."""
    pairs: list[tuple[str, str | bool]] = list(resources.sbatch_options(gpu_option))
    if account:
        pairs.append(("account", account))
    return tuple(pairs)


def finder_pairs(
    sbatch_args: Sequence[str], account: str | None = None
) -> tuple[tuple[str, str | bool], ...]:
    """``#SBATCH`` options from a finder match (``launcher.sbatch_args()``), ``--account`` added
    when the finder did not choose one."""
    pairs = [split_arg(a) for a in sbatch_args]
    if account and not any(n == "account" for n, _ in pairs):
        pairs.append(("account", account))
    return tuple(pairs)


def apptainer_prefix(env: Environment) -> str:
    """``srun apptainer run OPTIONS IMAGE`` (options and image written like Variables values)."""
    assert env.apptainer is not None
    words = ["srun", "apptainer", "run"]
    words += [quote_variable(w) for w in env.apptainer.options]
    image = env.apptainer.image_name
    words.append(image if _PLAIN_WORD.fullmatch(image) else quote_variable(image))
    return " ".join(words)


def command_line(env: Environment, command: str) -> str:
    """The line that runs the command (step 5): through ``eval``, or after the Apptainer prefix
    (a one-line command word by word, a multi-line one as ``bash -c 'TEXT'``)."""
    text = command.strip("\n")
    if env.apptainer is None:
        return f"eval {sh_quote(text, what='the command')}"
    if "\n" in text:
        return f"{apptainer_prefix(env)} bash -c {sh_quote(text, what='the command')}"
    return f"{apptainer_prefix(env)} {text}"


def _step(label: str, line: str) -> list[str]:
    return [
        'if [ "$launchers_rc" -eq 0 ]; then',
        f"    launchers_step={sh_quote(label)}",
        f"    {line} || launchers_failed {sh_quote(label)} $?",
        "fi",
    ]


def _snippet(s: Snippet) -> list[str]:
    return _step(s.label, f"eval {sh_quote(s.text, what=s.label)}")


_FINISH = r"""launchers_rc=0
launchers_step=
launchers_failed_step=
launchers_signal=null
launchers_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
launchers_failed() {
    launchers_rc=$2
    launchers_failed_step=$1
    echo "launchers: $1 failed with exit code $2" >&2
}
launchers_finish() {
    local code=$?
    if [ -n "$launchers_step" ] && [ "$launchers_rc" -eq 0 ]; then
        launchers_rc=$code
        launchers_failed_step=$launchers_step
        if [ "$launchers_rc" -eq 0 ]; then
            launchers_rc=1
            echo "launchers: $launchers_step ended the script with exit code 0 before its end; counted as a failure" >&2
        else
            echo "launchers: $launchers_step failed with exit code $code (it ended the script)" >&2
        fi
    fi
__WRITE_RC__    exit "$launchers_rc"
}
trap launchers_finish EXIT
trap 'launchers_signal=15; launchers_rc=143; exit 143' TERM
trap 'launchers_signal=2; launchers_rc=130; exit 130' INT"""


_WRITE_RC = r"""    local host native tmp
    host=$(hostname 2>/dev/null || echo unknown)
    native=${SLURM_JOB_ID:+\"$SLURM_JOB_ID\"}
    tmp="$LAUNCHERS_WORKDIR/.job.rc.$$"
    printf '{"rc": %d, "signal": %s, "attempt": 1, "native_id": %s, "job_name": "%s", "host": "%s", "start": "%s", "end": "%s", "step": "%s"}\n' \
        "$launchers_rc" "$launchers_signal" "${native:-null}" "${SLURM_JOB_NAME:-}" "$host" "$launchers_start" \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$launchers_failed_step" > "$tmp" \
        && { sync "$tmp" 2>/dev/null; mv -f "$tmp" "$LAUNCHERS_WORKDIR/job.rc"; }
"""


#: the end of a script whose environment is launchers.yaml's block: the teardown lines run on
#: every exit once the command started (a failure, a cancel), then ``job.rc`` names the failed
#: environment step (``_l_failed``), and the exit code is the command's
_FINISH_BLOCK = r"""launchers_rc=0
launchers_signal=null
launchers_started=0
launchers_start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
launchers_finish() {
    local code=$?
    trap '' TERM INT
    [ "$launchers_rc" -eq 0 ] && launchers_rc=$code
    if [ "$launchers_started" = 1 ]; then
        launchers_started=0
__TEARDOWN__    fi
__WRITE_RC__    exit "$launchers_rc"
}
trap launchers_finish EXIT
trap 'launchers_signal=15; launchers_rc=143; exit 143' TERM
trap 'launchers_signal=2; launchers_rc=130; exit 130' INT"""


def render_job_script(spec: JobScriptSpec) -> str:
    """``job.sh`` for a UNICORE or firecREST run: steps (1) to (7) of docs/design/sites.md §3.1.

    ``transport="ssh"``: the script an SSH site's Slurm job script runs (``bash -l``): no
    ``#SBATCH`` lines and no ``job.rc`` (the Slurm job script has both). With ``block`` (the
    ``environment:`` of launchers.yaml), the environment lines are the one renderer's
    (``slurm.envscript``), as in a Slurm job script; else the Compute Backend Config's
    ``Environment`` is written as Mantik runs it."""
    env = spec.environment
    if not spec.block.is_empty and env != Environment():
        raise ScriptError(
            "a job has one environment: launchers.yaml's environment: block or a Compute Backend "
            "Config's Environment, not both"
        )
    lines = ["#!/bin/bash -l"]
    if spec.transport == "firecrest":
        if not spec.run_dir:
            raise ScriptError("a firecREST job script needs its run directory")
        lines.append(directive("job-name", job_name(spec.job_name)))
        lines.append(directive("output", f"{spec.run_dir}/job.out"))
        lines.append(directive("error", f"{spec.run_dir}/job.err"))
        owned = {"job-name", "output", "error"}
        for name, value in spec.sbatch:
            if name in owned:
                raise ScriptError(f"--{name} is set by launchers; remove it from the options")
            lines.append(directive(name, value))
    elif spec.transport == "ssh":
        if not spec.run_dir:
            raise ScriptError("an SSH site's script needs its run directory")
    elif spec.transport != "unicore":
        raise ScriptError(f"unknown transport {spec.transport!r} (unicore, firecrest or ssh)")
    lines.append(
        f"# generated by launchers {__version__}"
        + (f" for run {spec.run_id}" if spec.run_id else "")
    )
    # (2) the run directory
    target = (
        '"$UC_WORKING_DIRECTORY"' if spec.transport == "unicore" else sh_quote(spec.run_dir or "")
    )
    lines.append(
        f'cd {target} || {{ echo "launchers: cannot enter the run directory" >&2; exit 1; }}'
    )
    lines.append('export LAUNCHERS_WORKDIR="$PWD"')
    lines.append('export MANTIK_WORKING_DIRECTORY="$LAUNCHERS_WORKDIR"')
    if not spec.block.is_empty:
        return "\n".join(lines + _block_body(spec)) + "\n"
    lines.append(_FINISH.replace("__WRITE_RC__", "" if spec.transport == "ssh" else _WRITE_RC))
    if spec.empty_files:
        lines += _step("empty project files", empty_files_line(spec.empty_files))
    # (3) variables
    for name, value in env.variables:
        lines.append(f"export {name}={quote_variable(value)}")
    if spec.cpus_per_node is not None and "SRUN_CPUS_PER_TASK" not in env.variable_names:
        lines.append(f'export SRUN_CPUS_PER_TASK="{spec.cpus_per_node}"')
    for name, value in spec.exports:
        lines.append(f"export {name}={sh_quote(value, what=name)}")
    # (4) modules, pre-run commands, the virtual environment
    for i, module in enumerate(env.modules):
        lines += _step(f"Modules[{i}]", f"module load {sh_word(module, what='a module name')}")
    for s in env.pre_compute:
        lines += _snippet(s)
    if env.python is not None:
        activate = env.python.rstrip("/") + "/bin/activate"
        lines += _step("Python", f"source {sh_word(activate, what='Python')}")
    # (5) the command, (6) post-run commands
    lines += _step("the command", command_line(env, spec.command))
    for s in env.post_compute:
        lines += _snippet(s)
    # (7) job.rc and the exit code (by the EXIT trap)
    lines.append("launchers_step=")
    lines.append('exit "$launchers_rc"')
    return "\n".join(lines) + "\n"


def _block_body(spec: JobScriptSpec) -> list[str]:
    """After ``cd`` to the run directory, for launchers.yaml's ``environment:`` block: the
    variables (single-quoted, as everywhere with this block), the renderer's setup lines, the
    command (in the container), the teardown lines on every exit after the command started."""
    block = spec.block
    here = '"$_l_cwd"'
    env = render_environment(
        block.without_variables(), job_dir="/", cwd="/", gpus=spec.gpus, slurm=True, here=here
    )
    teardown = "".join(f"        {line}\n" for line in env.teardown)
    write_rc = (
        ""
        if spec.transport == "ssh"
        else _WRITE_RC.replace('"$launchers_failed_step"', '"$_l_failed"')
    )
    lines = [_FINISH_BLOCK.replace("__TEARDOWN__", teardown).replace("__WRITE_RC__", write_rc)]
    if spec.empty_files:
        lines.append(
            f'{empty_files_line(spec.empty_files)} || {{ echo "launchers: cannot create the '
            f'empty project files" >&2; exit 1; }}'
        )
    variables = block.variables or ()
    for name, value in variables:
        lines.append(f"export {name}={sh_quote(value, what=f'variables.{name}')}")
    if spec.cpus_per_node is not None and "SRUN_CPUS_PER_TASK" not in dict(variables):
        lines.append(f'export SRUN_CPUS_PER_TASK="{spec.cpus_per_node}"')
    for name, value in spec.exports:
        lines.append(f"export {name}={sh_quote(value, what=name)}")
    if spec.cwd:
        cwd = sh_quote(spec.cwd, what="cwd")
        lines.append(
            f'cd -- {cwd} || {{ echo "launchers: cannot change to the working directory "{cwd} '
            ">&2; exit 1; }"
        )
    lines.append("_l_cwd=$PWD")
    lines.append("_l_host=$(uname -n 2>/dev/null)")
    lines.append("_l_rc=0")
    lines.extend(ENV_FUNCTIONS.rstrip("\n").split("\n"))
    lines.extend(env.setup)
    if spec.argv:
        command = " ".join(sh_quote(a, what="an argument of the command") for a in spec.argv)
    elif env.wrap:
        command = f"bash -c {sh_quote(spec.command.strip(chr(10)), what='the command')}"
    else:
        command = f"eval {sh_quote(spec.command.strip(chr(10)), what='the command')}"
    lines.append("launchers_started=1")
    lines.append(" ".join([*env.wrap, command]))
    lines.append('exit "$?"')
    return lines


def empty_files_line(paths: Sequence[str]) -> str:
    """One shell line creating the empty files ``paths`` (relative, POSIX) and their directories."""
    dirs = sorted({d for d in (p.rsplit("/", 1)[0] for p in paths if "/" in p)})
    words = (
        [f"mkdir -p -- {' '.join(sh_quote(d, what='a directory') for d in dirs)}"] if dirs else []
    )
    words += [f": > {sh_quote(p, what='a file name')}" for p in paths]
    return " && ".join(words)


def login_chain(snippets: Sequence[Snippet]) -> str:
    """Login-node commands as one shell text, each run only if the previous succeeded."""
    if len(snippets) == 1:
        return snippets[0].text
    return " && ".join(f"eval {sh_quote(s.text, what=s.label)}" for s in snippets)


#: UNICORE's ``BSS file`` of a run: our own ``#SBATCH`` lines, submitted as they are
UNICORE_BSS_FILE = "job.sbatch"


def unicore_bss_file(name: str, sbatch: Sequence[tuple[str, str | bool]]) -> str:
    """The ``BSS file`` of a UNICORE job of type ``raw`` (docs/remote-sites.md, "UNICORE: server
    behaviours we rely on and work around"): ``#SBATCH`` lines as for firecREST, with the job name
    and ``job.out``/``job.err`` relative to the working directory (sbatch runs there). The TSI
    appends the call of its own job script, which keeps UNICORE's exit-code handling."""
    lines = [
        "#!/bin/bash",
        directive("job-name", job_name(name)),
        directive("output", "job.out"),
        directive("error", "job.err"),
    ]
    owned = {"job-name", "output", "error", "chdir"}
    for option, value in sbatch:
        if option in owned:
            raise ScriptError(f"--{option} is set by launchers; remove it from the options")
        lines.append(directive(option, value))
    return "\n".join(lines) + "\n"


def unicore_description(
    *,
    name: str,
    environment: Environment,
    task_id: str | None = None,
) -> dict[str, Any]:
    """UNICORE's job description (docs/design/sites.md §3.2): a ``raw`` job whose resources are the ``#SBATCH``
    lines of :data:`UNICORE_BSS_FILE` (a stock site maps ``Resources`` wrongly, see
    docs/design/sites.md), with only the keys that are set."""
    desc: dict[str, Any] = {
        "Name": job_name(name),
        "Executable": UNICORE_EXECUTABLE,
        "Arguments": [],
        "Stdout": "job.out",
        "Stderr": "job.err",
        "haveClientStageIn": "true",
        "Job type": "raw",
        "BSS file": UNICORE_BSS_FILE,
    }
    desc["Tags"] = ["launchers", task_id] if task_id else ["launchers"]
    if environment.pre_login:
        desc["User precommand"] = login_chain(environment.pre_login)
        desc["RunUserPrecommandOnLoginNode"] = "true"
    if environment.post_login:
        desc["User postcommand"] = login_chain(environment.post_login)
        desc["RunUserPostcommandOnLoginNode"] = "true"
    return desc
