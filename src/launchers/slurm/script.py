"""The job script (docs/design/runtime.md §3, §8, §9): sbatch directives and a bash body. Pure.

The same script runs under Slurm (``sbatch job.sh``) and directly (``setsid bash job.sh``):
its ``#SBATCH`` lines are comments for bash. Directive values follow sbatch's own parser
(bare charset, else double quotes); body values are POSIX single-quoted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

from .._version import __version__
from ..config.environment import EMPTY, Environment
from ..errors import ScriptError
from ..units import parse_slurm_time
from .envscript import ENV_FUNCTIONS, render_environment
from .quote import sh_quote
from .sbatch_options import check_sbatch_options

_BARE_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIGNAL_RE = re.compile(r"^(SIG)?([A-Z][A-Z0-9]*|\d+)$")
_STRIPPED_PREFIXES = ("SBATCH_", "SALLOC_", "SRUN_")

#: Signal numbers (Linux) for the signals a user may name as ``resume_signal``.
SIGNAL_NUMBERS: Mapping[str, int] = {
    "HUP": 1, "INT": 2, "QUIT": 3, "USR1": 10, "USR2": 12, "ALRM": 14, "TERM": 15,
    "CONT": 18, "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28,
}  # fmt: skip


# --- quoting ----------------------------------------------------------------------------------


def directive_value(option: str, value: str, *, literal_percent: bool = True) -> str:
    """A value as sbatch reads it on a ``#SBATCH`` line (docs/design/runtime.md §3, "Directive values").

    ``literal_percent`` doubles ``%`` in ``--output``/``--error`` (sbatch expands ``%j`` there).
    """
    for bad, label in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL character")):
        if bad in value:
            raise ScriptError(
                f"--{option}: the value {value!r} contains {label}, which cannot be written "
                "in an #SBATCH line (it would start a directive of its own)"
            )
    if option in ("output", "error") and "\\" in value:
        raise ScriptError(
            f"--{option}: the path {value!r} contains a backslash, which Slurm removes from "
            "output file names (it switches off % replacement); use a directory without one"
        )
    if literal_percent and option in ("output", "error"):
        value = value.replace("%", "%%")
    if _BARE_RE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def directive(option: str, value: str | bool = True, *, literal_percent: bool = True) -> str:
    """One ``#SBATCH --option[=value]`` line."""
    if value is True:
        return f"#SBATCH --{option}"
    if value is False:
        raise ScriptError(f"--{option}: false is not a value")
    return f"#SBATCH --{option}={directive_value(option, value, literal_percent=literal_percent)}"


def split_arg(arg: str) -> tuple[str, str | bool]:
    """``--name=value`` -> (name, value); ``--flag`` -> (flag, True)."""
    if not arg.startswith("--"):
        raise ScriptError(f"sbatch option {arg!r} must be a long option (--name=value)")
    name, sep, value = arg[2:].partition("=")
    return name, (value if sep else True)


# --- environment ------------------------------------------------------------------------------


def submission_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment to run sbatch with: ``SBATCH_*``, ``SALLOC_*``, ``SRUN_*`` and
    ``SLURM_*`` (except ``SLURM_CONF``) removed, since sbatch reads them as options."""
    return {k: v for k, v in environ.items() if submission_variable(k)}


def submission_variable(name: str) -> bool:
    """Whether sbatch may see ``name`` in its environment (see ``submission_environ``)."""
    return not (
        name.startswith(_STRIPPED_PREFIXES) or (name.startswith("SLURM_") and name != "SLURM_CONF")
    )


def normalize_export(export: str) -> str:
    """``ALL`` or ``NONE`` (any case); anything else is a ``ScriptError``."""
    e = str(export).strip().upper()
    if e not in ("ALL", "NONE"):
        raise ScriptError(f"export: {export!r} is not a policy; use ALL or NONE")
    return e


def check_env(env: Sequence[tuple[str, str]] | Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Validate ``env:`` names and values; returns (name, value) pairs in order."""
    items = list(env.items()) if isinstance(env, Mapping) else list(env)
    out = []
    for name, value in items:
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            raise ScriptError(
                f"env: {name!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
        if not isinstance(value, str):
            value = str(value)
        if "\0" in value:
            raise ScriptError(f"env: {name}: the value contains a NUL character")
        out.append((name, value))
    return tuple(out)


def signal_name(sig: str | int) -> str:
    """``USR1`` for ``"SIGUSR1"``, ``"usr1"`` or ``10``; ``ScriptError`` otherwise."""
    text = str(sig).strip().upper()
    m = _SIGNAL_RE.match(text)
    if m:
        name = m.group(2)
        if name.isdigit():
            for k, v in SIGNAL_NUMBERS.items():
                if v == int(name):
                    return k
        elif name in SIGNAL_NUMBERS:
            return name
    raise ScriptError(f"resume_signal: {sig!r} is not a usable signal (e.g. USR1, USR2, TERM)")


def check_launcher_values(
    directives: Sequence[str],
    sbatch_options: Sequence[tuple[str, str | bool]],
    env: Sequence[tuple[str, str]],
    export: str,
    resume_signal: str,
) -> None:
    """The launcher's part of a script, checked when a task is submitted: a value no script can
    carry (a newline in an option value, a bad variable name or signal) is a ``ScriptError``
    raised by ``submit()``, before anything is recorded, not a job that fails later."""
    for arg in directives:
        directive(*split_arg(arg))
    for name, value in check_sbatch_options(sbatch_options):
        directive(name, value)
    check_env(env)
    normalize_export(export)
    signal_name(resume_signal)


def job_name(name: str, digest: str, attempt: int) -> str:
    """``NAME-DIGEST12-aN``: unique per task and attempt, used to find a job again by name."""
    return f"{name}-{digest[:12]}-a{attempt}"


# --- the script -------------------------------------------------------------------------------


@attrs.frozen
class ScriptSpec:
    """Everything a job script depends on (paths are paths on the host that runs the job).

    ``argv`` is the command (for a callable: ``[python, "-m", "launchers.run", job_dir]`` and
    ``python`` set so that a failure to import ``launchers`` is explained in ``job.err``).
    ``directives`` are the finder's ``--name=value`` options; ``sbatch_options`` the user's.
    ``slurm=False`` renders a script for the direct launcher (native id ``$LAUNCHERS_NATIVE_ID``
    or the shell's pid, no requeue). ``cleanup`` files are removed by the exit handler.
    ``environment`` (modules, venv, conda, container, setup and teardown lines) is rendered
    around the command by ``envscript.render_environment``; ``gpus`` the GPUs the job asks
    (a container then sees them).
    """

    job_dir: str
    task_id: str
    job_name: str
    argv: tuple[str, ...]
    attempt: int = 1
    cwd: str | None = None
    export: str = "ALL"
    env: tuple[tuple[str, str], ...] = ()
    directives: tuple[str, ...] = ()
    sbatch_options: tuple[tuple[str, str | bool], ...] = ()
    resumable: bool = False
    max_requeues: int = 3
    resume_signal: str = "USR1"
    resume_grace: int = 120
    python: str | None = None
    cleanup: tuple[str, ...] = ()
    slurm: bool = True
    version: str = __version__
    environment: Environment = EMPTY
    gpus: int = 0


def time_limit(directives: Sequence[str], options: Sequence[tuple[str, str | bool]]) -> int | None:
    """The job's ``--time`` in seconds (the last one given wins, as in sbatch), or None."""
    value: str | None = None
    for arg in directives:
        name, v = split_arg(arg)
        if name == "time" and isinstance(v, str):
            value = v
    for name, v in options:
        if name == "time" and isinstance(v, str):
            value = v
    if value is None:
        return None
    try:
        return parse_slurm_time(value)
    except ValueError:
        return None


def resume_grace(spec: ScriptSpec, options: Sequence[tuple[str, str | bool]]) -> int:
    """Seconds of warning before the limit: ``resume_grace``, at most a quarter of ``--time``
    for a task that will be requeued; as asked for one that will not (``max_requeues`` 0: a
    batch pilot's ``drain_margin``, docs/design/pilots.md §3.5)."""
    grace = max(1, int(spec.resume_grace))
    limit = time_limit(spec.directives, options)
    if limit and spec.max_requeues > 0:
        grace = min(grace, max(1, limit // 4))
    return min(grace, 65535)


def _header(
    spec: ScriptSpec,
    *,
    output_line: str,
    error: str | None,
    chdir: str,
    extra_owned: Sequence[str] = (),
) -> tuple[list[str], str]:
    export = normalize_export(spec.export)
    options = check_sbatch_options(spec.sbatch_options)
    lines = ["#!/bin/bash -l" if export == "NONE" else "#!/bin/bash"]
    lines.append(directive("job-name", spec.job_name))
    lines.append(output_line)
    if error is not None:
        lines.append(directive("error", error))
    lines.append(directive("open-mode", "append"))
    lines.append(directive("chdir", chdir))
    lines.append(directive("export", export))
    lines.extend(extra_owned)
    signame = signal_name(spec.resume_signal)
    # a resumable task with no extra attempt left to give (max_requeues 0, e.g. a batch pilot)
    # keeps its warning signal but is never requeued by Slurm either
    lines.append(directive("requeue" if spec.resumable and spec.max_requeues > 0 else "no-requeue"))
    if spec.resumable:
        lines.append(directive("signal", f"B:{signame}@{resume_grace(spec, options)}"))
    for arg in spec.directives:
        name, value = split_arg(arg)
        lines.append(directive(name, value))
    for name, value in options:
        lines.append(directive(name, value))
    return lines, export


_BODY = r"""_l_dir=__JOB_DIR__
_l_id=__NATIVE_ID__
# The wrapper forks as little as it can: on a busy node every fork delays the task and Slurm.
_l_now() {
    if [ "${BASH_VERSINFO[0]}" -gt 4 ] || { [ "${BASH_VERSINFO[0]}" = 4 ] && [ "${BASH_VERSINFO[1]}" -ge 3 ]; }; then
        local TZ=UTC0
        printf -v "$1" '%(%Y-%m-%dT%H:%M:%SZ)T' -1
    else
        printf -v "$1" '%s' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    fi
}
_l_host=
read -r _l_host < /proc/sys/kernel/hostname 2>/dev/null || _l_host=$(hostname 2>/dev/null || uname -n 2>/dev/null)
_l_host=${_l_host//[^A-Za-z0-9._-]/_}
_l_now _l_start
_l_pid=
_l_sig=
_l_rc=
_l_norc=0
_l_resume=0
_l_trapped=0
_l_pgid=
read -r _ _ _ _ _l_pgid _ < /proc/$$/stat 2>/dev/null
_l_banner="==== launchers: attempt $LAUNCHERS_ATTEMPT, job $_l_id, $_l_host, $_l_start ===="
printf '%s\n' "$_l_banner"
printf '%s\n' "$_l_banner" >&2
_l_write_rc() {
    [ "$_l_norc" = 1 ] && return 0
    _l_norc=1
    local sig=null end tmp
    [ -n "$_l_sig" ] && sig=$_l_sig
    _l_now end
    tmp="$_l_dir/.job.rc.$$.tmp"
    printf '{"rc": %d, "signal": %s, "attempt": %d, "native_id": "%s", "host": "%s", "start": "%s", "end": "%s"__STEP_FORMAT__}\n' \
        "$1" "$sig" "$LAUNCHERS_ATTEMPT" "$_l_id" "$_l_host" "$_l_start" "$end"__STEP_ARG__ > "$tmp" \
        && { sync "$tmp" 2>/dev/null; mv -f "$tmp" "$_l_dir/job.rc"; }
__CLEANUP__}
trap '_l_write_rc "${_l_rc:-$?}"' EXIT
_l_forward() {
    [ -n "$_l_pid" ] || return 0
    if [ "$_l_pgid" = "$$" ]; then
        kill -s "$1" -- "-$$" 2>/dev/null
    else
        kill -s "$1" "$_l_pid" 2>/dev/null
    fi
}
_l_on_signal() {
    _l_trapped=1
    trap '' TERM INT
    _l_sig=$1
    [ -n "$_l_pid" ] || { _l_rc=$((128 + $1)); exit "$_l_rc"; }
    # A TERM sent to our process group (scancel, a time limit, the direct launcher's cancel)
    # reached the task too; otherwise, and for INT (ignored by background commands), pass TERM on.
    if [ "$1" != 15 ] || [ "$_l_pgid" != "$$" ]; then
        kill -s TERM "$_l_pid" 2>/dev/null
    fi
}
trap '_l_on_signal 15' TERM
trap '_l_on_signal 2' INT
__RESUME_TRAP__cd -- __CWD__ || { echo "launchers: cannot change to the working directory "__CWD__ >&2; _l_rc=1; exit 1; }
__ENV_SETUP____COMMAND__ < /dev/null &
_l_pid=$!
while :; do
    _l_trapped=0
    wait "$_l_pid"
    _l_rc=$?
    [ "$_l_trapped" = 1 ] || break
    kill -0 "$_l_pid" 2>/dev/null && continue
    wait "$_l_pid" 2>/dev/null
    _l_r2=$?
    if [ "$_l_r2" -ge 0 ] && [ "$_l_r2" -le 255 ] && [ "$_l_r2" != 127 ]; then _l_rc=$_l_r2; fi
    break
done
if [ -z "$_l_sig" ] && [ "$_l_rc" -gt 128 ] && [ "$_l_rc" -lt 193 ]; then
    _l_sig=$((_l_rc - 128))
fi
__ENV_TEARDOWN____PYTHON_CHECK____REQUEUE__exit "$_l_rc"
"""

_RESUME_TRAP = r"""_l_on_resume() {
    _l_trapped=1
    [ "$_l_resume" = 1 ] && return 0
    _l_resume=1
    _l_forward __SIG__
}
trap '_l_on_resume' __SIG__
"""

_REQUEUE = r"""if [ "$_l_resume" = 1 ] && [ -z "$_l_sig" -o "$_l_sig" = __SIGNUM__ ] && [ -n "${SLURM_JOB_ID:-}" ] \
    && [ "$(( LAUNCHERS_ATTEMPT - 1 ))" -lt __MAX__ ]; then
    _l_norc=1
    echo "==== launchers: requeue after __SIG__ (restart $LAUNCHERS_ATTEMPT of __MAX__) ====" >&2
    if scontrol requeue "$_l_id"; then
        exit 0
    fi
    echo "launchers: scontrol requeue $_l_id failed; the job ends here" >&2
    _l_norc=0
fi
"""

_PYTHON_CHECK = r"""if [ "$_l_rc" != 0 ] && ! __PY__ -c 'import launchers.run' >/dev/null 2>&1; then
    echo "launchers: the job's Python "__PY__" cannot import launchers; install launchers there or set the python: option" >&2
fi
"""


def _native_id_expr(slurm: bool) -> str:
    if not slurm:
        return '"${LAUNCHERS_NATIVE_ID:-$$}"'
    return (
        '"${SLURM_JOB_ID:-${LAUNCHERS_NATIVE_ID:-$$}}"\n'
        'if [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then\n'
        '    _l_id="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"\n'
        "fi"
    )


def render_body(spec: ScriptSpec) -> list[str]:
    """The lines after the header: exports, banner, exit handler, traps, task, exit."""
    if not spec.argv:
        raise ScriptError("the task's command is empty")
    if spec.attempt < 1:
        raise ScriptError(f"attempt must be at least 1, not {spec.attempt}")
    export = normalize_export(spec.export)
    lines = [f"export LAUNCHERS_JOB_DIR={sh_quote(spec.job_dir, what='the job directory')}"]
    lines.append(f"export LAUNCHERS_TASK_ID={sh_quote(spec.task_id, what='the task id')}")
    if spec.slurm:
        lines.append(
            f"export LAUNCHERS_ATTEMPT=$(( {int(spec.attempt)} + ${{SLURM_RESTART_COUNT:-0}} ))"
        )
    else:
        lines.append(f"export LAUNCHERS_ATTEMPT={int(spec.attempt)}")
    if export == "NONE":
        lines.append("export SLURM_EXPORT_ENV=ALL")
    for name, value in check_env(spec.env):
        lines.append(f"export {name}={sh_quote(value, what=f'env {name}')}")
    command = " ".join(sh_quote(a, what="an argument of the command") for a in spec.argv)
    cwd = spec.cwd or spec.job_dir
    env = render_environment(
        spec.environment,
        job_dir=spec.job_dir,
        cwd=cwd,
        gpus=spec.gpus,
        callable_task=spec.python is not None,
        slurm=spec.slurm,
    )
    setup = teardown = ""
    if not env.is_empty:
        setup = ENV_FUNCTIONS + "".join(line + "\n" for line in env.setup)
        teardown = "".join(line + "\n" for line in env.teardown)
        if env.wrap:
            command = " ".join(env.wrap) + " " + command
    cleanup = "".join(f"    rm -f -- {sh_quote(p, what='a cleanup path')}\n" for p in spec.cleanup)
    signame = signal_name(spec.resume_signal)
    resumable = spec.resumable and spec.slurm
    body = (
        _BODY.replace("__JOB_DIR__", sh_quote(spec.job_dir))
        .replace("__NATIVE_ID__", _native_id_expr(spec.slurm))
        .replace("__CLEANUP__", cleanup)
        .replace("__RESUME_TRAP__", _RESUME_TRAP.replace("__SIG__", signame) if resumable else "")
        .replace("__CWD__", sh_quote(cwd, what="the working directory"))
        .replace(
            "__PYTHON_CHECK__",
            _PYTHON_CHECK.replace("__PY__", sh_quote(spec.python)) if spec.python else "",
        )
        .replace(
            "__REQUEUE__",
            _REQUEUE.replace("__SIG__", signame)
            .replace("__SIGNUM__", str(SIGNAL_NUMBERS[signame]))
            .replace("__MAX__", str(int(spec.max_requeues)))
            if resumable
            else "",
        )
        .replace("__STEP_FORMAT__", "%s" if setup else "")
        .replace("__STEP_ARG__", ' "${_l_failed:+, \\"step\\": \\"$_l_failed\\"}"' if setup else "")
        .replace("__ENV_SETUP__", setup)
        .replace("__ENV_TEARDOWN__", teardown)
        .replace("__COMMAND__", command)
    )
    lines.extend(body.rstrip("\n").split("\n"))
    return lines


def render_script(spec: ScriptSpec) -> str:
    """The complete ``job.sh`` for one task and attempt (docs/design/runtime.md §3)."""
    out = f"{spec.job_dir.rstrip('/')}/job.out"
    err = f"{spec.job_dir.rstrip('/')}/job.err"
    lines, _ = _header(
        spec, output_line=directive("output", out), error=err, chdir=spec.cwd or spec.job_dir
    )
    lines.append(
        f"# generated by launchers {spec.version} for task {_comment(spec.task_id)}, attempt {spec.attempt}"
    )
    lines.extend(render_body(spec))
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    return text.replace("\n", " ").replace("\r", " ").replace("\0", " ")


@attrs.frozen
class ArraySpec:
    """One array chunk: ``index_file`` lists one task directory per line, element i = line i+1.

    ``template`` gives the shared options (export, directives, sbatch_options, resumable...);
    its job_dir/argv are not used.
    """

    array_dir: str
    index_file: str
    count: int
    job_name: str
    template: ScriptSpec
    max_parallel: int | None = None


def array_range(count: int, max_parallel: int | None = None) -> str:
    """``0-N`` (``0`` for one element), with ``%k`` when ``max_parallel`` is set."""
    if count < 1:
        raise ScriptError("an array needs at least one task")
    text = "0" if count == 1 else f"0-{count - 1}"
    if max_parallel is not None:
        if max_parallel < 1:
            raise ScriptError(f"max_parallel must be at least 1, not {max_parallel}")
        text += f"%{max_parallel}"
    return text


def render_array_script(spec: ArraySpec) -> str:
    """The script of one array chunk: maps ``SLURM_ARRAY_TASK_ID`` to a task directory (docs/design/runtime.md §8)
    and runs that task's own ``job.sh`` with its output appended to the task's files."""
    t = attrs.evolve(spec.template, job_name=spec.job_name)
    header, _ = _header(
        t,
        output_line="#SBATCH --output=" + _array_output(spec.array_dir),
        error=None,
        chdir=spec.array_dir,
        extra_owned=[directive("array", array_range(spec.count, spec.max_parallel))],
    )
    header.append(
        f"# generated by launchers {t.version} for array {_comment(spec.job_name)} ({spec.count} tasks)"
    )
    idx = sh_quote(spec.index_file, what="the array index file")
    header.extend(
        [
            f'_l_dir=$(sed -n "$(( ${{SLURM_ARRAY_TASK_ID:-0}} + 1 ))p" {idx})',
            'if [ -z "$_l_dir" ]; then',
            f'    echo "launchers: no task for array index ${{SLURM_ARRAY_TASK_ID:-?}} in "{idx} >&2',
            "    exit 1",
            "fi",
            'exec bash "$_l_dir/job.sh" >> "$_l_dir/job.out" 2>> "$_l_dir/job.err"',
        ]
    )
    return "\n".join(header) + "\n"


def _array_output(array_dir: str) -> str:
    base = array_dir.rstrip("/") + "/"
    directive_value("output", base)  # refuses newlines
    raw = base.replace("%", "%%") + "%a.out"
    if _BARE_RE.match(raw):
        return raw
    return '"' + raw.replace("\\", "\\\\").replace('"', '\\"') + '"'


def index_text(directories: Sequence[str]) -> str:
    """The array index file: one task directory per line (newlines in a path are refused)."""
    for d in directories:
        if "\n" in d or "\r" in d or "\0" in d:
            raise ScriptError(f"the task directory {d!r} cannot be listed in an array index")
    return "".join(f"{d}\n" for d in directories)


__all__ = [
    "ArraySpec",
    "ScriptSpec",
    "array_range",
    "check_env",
    "directive",
    "directive_value",
    "index_text",
    "job_name",
    "normalize_export",
    "render_array_script",
    "render_body",
    "render_script",
    "sh_quote",
    "signal_name",
    "split_arg",
    "submission_environ",
    "submission_variable",
]
