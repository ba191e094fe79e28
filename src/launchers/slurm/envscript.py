"""The one renderer of an ``environment:`` block into job-script lines (docs/configuration.md, Environment). Pure.

``render_environment`` turns an ``Environment`` and what the job needs (its directory and
working directory, GPUs, whether it runs a callable) into bash lines run before the command
(modules, activation, setup), the words put in front of the command (the container) and the
lines run after it (teardown). Every value is POSIX single-quoted with ``sh_quote``; a setup or
teardown line is the user's shell text, run with ``eval`` of its quoted text. A failing step
ends the job through ``_l_fail LABEL RC`` (defined in ``ENV_FUNCTIONS``), which records the
step's label (``modules[0]``, ``venv``, ``setup[1]``...) in ``job.rc``.
"""

from __future__ import annotations

import re

import attrs

from ..config.environment import Container, Environment
from ..errors import ScriptError
from .quote import sh_quote


@attrs.frozen
class EnvironmentLines:
    """What an environment adds to a job script."""

    setup: tuple[str, ...] = ()
    wrap: tuple[str, ...] = ()
    teardown: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.setup or self.wrap or self.teardown)


#: Shell functions of a script with an environment: the failure of a step, the module
#: system of a non-interactive shell, conda's or mamba's hook.
ENV_FUNCTIONS = r"""_l_failed=
_l_fail() {
    _l_failed=$1
    _l_rc=$2
    [ "$_l_rc" = 0 ] && _l_rc=1
    printf 'launchers: environment step %s failed (exit code %s)\n' "$1" "$_l_rc" >&2
    exit "$_l_rc"
}
"""

_MODULE_INIT = r"""if ! declare -F module >/dev/null 2>&1 && ! command -v module >/dev/null 2>&1; then
    for _l_init in "${LMOD_PKG:+$LMOD_PKG/init/bash}" "${MODULESHOME:+$MODULESHOME/init/bash}" \
        /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh /usr/share/modules/init/bash \
        /usr/share/Modules/init/bash /etc/profile.d/modules.sh; do
        if [ -n "$_l_init" ] && [ -r "$_l_init" ]; then . "$_l_init"; break; fi
    done
    declare -F module >/dev/null 2>&1 || command -v module >/dev/null 2>&1 \
        || echo "launchers: no module command on $_l_host (no Lmod or Environment Modules init script found)" >&2
fi"""

_CONDA = r"""_l_conda() {
    if command -v conda >/dev/null 2>&1; then
        eval "$(conda shell.bash hook)" && conda activate "$1"
    elif command -v micromamba >/dev/null 2>&1; then
        eval "$(micromamba shell hook --shell bash)" && micromamba activate "$1"
    elif command -v mamba >/dev/null 2>&1; then
        eval "$(mamba shell hook --shell bash)" && mamba activate "$1"
    else
        echo "launchers: conda is not available on $_l_host (no conda, micromamba or mamba on PATH): cannot activate $1; load a module that provides it (environment: modules:)" >&2
        return 127
    fi
}"""

#: Run inside a container before a callable's Python: says so when the image has none.
PYTHON_IN_IMAGE = (
    'command -v "$1" >/dev/null 2>&1 || { echo "launchers: the container image $0 has no $1: '
    'a callable task needs Python (with launchers installed) inside the image" >&2; exit 127; }; '
    'exec "$@"'
)


#: the labels of the steps a failing environment line is named by (``_l_fail LABEL``)
STEP_LABEL = re.compile(r"(?:purge|venv|conda|(?:modules|setup)\[\d+\])\Z")

#: stands for the working directory in the words of a container when the script learns that
#: directory only when it runs (``here=``); a NUL, which no value may hold (``sh_quote``)
_HERE = "\0"


def is_environment_step(label: str | None) -> bool:
    """Whether ``label`` (``job.rc``'s ``step``) names a step of this renderer
    (``modules[0]``, ``venv``, ``setup[1]``...), not another script's."""
    return bool(label) and STEP_LABEL.match(label or "") is not None


def _step(label: str, command: str) -> str:
    return f"{command} || _l_fail {sh_quote(label)} $?"


def _path(value: str, what: str) -> str:
    """A quoted absolute path; ``~/x`` keeps the home directory of the job's user."""
    if value == "~":
        return '"$HOME"'
    if value.startswith("~/"):
        return '"$HOME"/' + sh_quote(value[2:], what=what)
    return sh_quote(value, what=what)


def container_words(
    box: Container,
    *,
    job_dir: str,
    cwd: str,
    gpus: int,
    callable_task: bool,
    slurm: bool,
    here: str | None = None,
) -> list[str]:
    """The quoted words that run a command in ``box`` (each runtime's documented syntax).

    ``here``: a shell expression (``"$_l_cwd"``) standing for ``cwd`` and ``job_dir``, for a
    script that learns its directory only when it runs (a UNICORE job's)."""
    if here is None:
        q = sh_quote
    else:
        for value in (box.image, *box.options, *box.bind, *(f"{n}={v}" for n, v in box.env)):
            sh_quote(value, what="a container value")  # a NUL: the ScriptError of every value
        cwd = job_dir = _HERE

        def q(value: str, *, what: str = "value") -> str:
            parts = value.split(_HERE)
            if len(parts) == 1:
                return sh_quote(value, what=what)
            return here.join(sh_quote(p, what=what) if p else "" for p in parts)

    image = q(box.image, what="container.image")
    mounts = list(box.bind)
    env = list(box.env)
    extra = [q(o, what="container.options") for o in box.options]
    if box.runtime in ("apptainer", "singularity"):
        if callable_task:
            mounts.append(job_dir)
        words = [box.runtime, "exec"]
        if gpus:
            words.append("--nv")
        for m in mounts:
            words += ["--bind", q(m, what="container.bind")]
        for name, value in env:
            words += ["--env", q(f"{name}={value}", what=f"container.env.{name}")]
        return words + extra + [image]
    if box.runtime in ("podman", "docker"):
        mounts.append(cwd)
        if callable_task and job_dir != cwd:
            mounts.append(job_dir)
        words = [box.runtime, "run", "--rm"]
        if gpus:
            words += (
                ["--gpus", "all"] if box.runtime == "docker" else ["--device", "nvidia.com/gpu=all"]
            )
        for m in mounts:
            m = m if ":" in m else f"{m}:{m}"
            words += ["-v", q(m, what="container.bind")]
        for name, value in env:
            words += ["-e", q(f"{name}={value}", what=f"container.env.{name}")]
        words += ["-w", q(cwd, what="the working directory")]
        return words + extra + [image]
    if box.runtime == "pyxis":
        if not slurm:
            raise ScriptError(
                "container.runtime pyxis runs through srun (a Slurm plugin): use it in a slurm group"
            )
        mounts.append(cwd)
        if callable_task and job_dir != cwd:
            mounts.append(job_dir)
        for m in mounts:
            if "," in m:
                raise ScriptError(
                    f"container.bind {m!r}: pyxis separates mounts with commas; a path cannot hold one"
                )
        words = []
        if env:
            words += ["env"] + [q(f"{n}={v}", what=f"container.env.{n}") for n, v in env]
        words += [
            "srun",
            q(f"--container-image={box.image}", what="container.image"),
            q(f"--container-mounts={','.join(mounts)}", what="container.bind"),
            q(f"--container-workdir={cwd}", what="the working directory"),
        ]
        if env:
            words.append(q(f"--container-env={','.join(n for n, _ in env)}"))
        return words + extra
    raise ScriptError(f"container.runtime {box.runtime!r} is not a known runtime")


def check_environment(env: Environment, *, slurm: bool) -> None:
    """Refuse at submission what no script of this launcher kind can run (``ScriptError``):
    pyxis outside Slurm, a pyxis mount holding a comma, a NUL in any value."""
    render_environment(env, job_dir="/", cwd="/", slurm=slurm)


def render_environment(
    env: Environment,
    *,
    job_dir: str,
    cwd: str,
    gpus: int = 0,
    callable_task: bool = False,
    slurm: bool = True,
    here: str | None = None,
) -> EnvironmentLines:
    """The lines and words ``env`` adds to a job script (empty for an empty environment).
    ``here`` (see ``container_words``): the working directory as a shell expression."""
    if env.is_empty:
        return EnvironmentLines()
    setup: list[str] = []
    for name, value in env.variables or ():
        setup.append(f"export {name}={sh_quote(value, what=f'variables.{name}')}")
    if env.purge or env.modules:
        setup.append(_MODULE_INIT)
    if env.purge:
        setup.append(_step("purge", "module purge"))
    for i, module in enumerate(env.modules or ()):
        setup.append(_step(f"modules[{i}]", f"module load {sh_quote(module, what='a module')}"))
    if env.venv:
        activate = _path(env.venv.rstrip("/") + "/bin/activate", "venv")
        setup.append(
            _step(
                "venv",
                f'{{ [ -r {activate} ] || {{ echo "launchers: no virtual environment: "{activate}" '
                f'does not exist" >&2; false; }}; }} && . {activate}',
            )
        )
    if env.conda:
        setup.append(_CONDA)
        setup.append(_step("conda", f"_l_conda {_path(env.conda, 'conda')}"))
    for i, line in enumerate(env.setup or ()):
        setup.append(_step(f"setup[{i}]", f"eval {sh_quote(line, what=f'setup[{i}]')}"))
    wrap: list[str] = []
    if env.container is not None:
        wrap = container_words(
            env.container,
            job_dir=job_dir,
            cwd=cwd,
            gpus=gpus,
            callable_task=callable_task,
            slurm=slurm,
            here=here,
        )
        if callable_task:
            wrap += ["sh", "-c", sh_quote(PYTHON_IN_IMAGE), sh_quote(env.container.image)]
    teardown = [
        f"eval {sh_quote(line, what=f'teardown[{i}]')} || printf 'launchers: environment step "
        f"%s failed (exit code %s); the job keeps the exit code of its command\\n' "
        f"'teardown[{i}]' \"$?\" >&2"
        for i, line in enumerate(env.teardown or ())
    ]
    return EnvironmentLines(tuple(setup), tuple(wrap), tuple(teardown))


def render_wrapper(
    env: Environment, *, job_dir: str, cwd: str, gpus: int = 0, callable_task: bool = False
) -> str:
    """A ``bash -c`` script running its arguments (``"$@"``) in ``env``: what a batch pilot
    runs for each task (docs/design/pilots.md), since the pilot's runner itself runs outside
    the task's environment. Its exit code is the command's; a failing step exits with its own."""
    lines = render_environment(
        env, job_dir=job_dir, cwd=cwd, gpus=gpus, callable_task=callable_task, slurm=True
    )
    command = " ".join([*lines.wrap, '"$@"'])
    return "\n".join(
        [
            "_l_host=$(uname -n 2>/dev/null)",
            "_l_rc=0",
            ENV_FUNCTIONS.rstrip("\n"),
            *lines.setup,
            f"{command} < /dev/null",
            "_l_rc=$?",
            *lines.teardown,
            'exit "$_l_rc"',
        ]
    )


__all__ = [
    "ENV_FUNCTIONS",
    "PYTHON_IN_IMAGE",
    "STEP_LABEL",
    "EnvironmentLines",
    "check_environment",
    "container_words",
    "is_environment_step",
    "render_environment",
    "render_wrapper",
]
