"""MLproject entry points (docs/design/sites.md §3.4): load, take ``-P`` values, build the command.

The file is read as MLflow reads it: found whatever the case of its name, any parameter type
word, keys MLflow does not use ignored with a warning, a key written twice keeping its last
value; a malformed entry point is refused only when selected.
The command is built as MLflow builds it (``{NAME}`` is the shell-quoted value, ``{{``/``}}``
are braces, given parameters without a placeholder are appended as ``--NAME VALUE``), with
checks MLflow does late (when the command runs) done here, before anything is uploaded.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..config.located import DuplicateKey, load_located
from ..config.problems import Problems, key_path, key_pos, suggest, type_name, value_pos
from ..errors import ConfigurationError, LaunchersError

#: the file's name, in any case (MLflow compares ``name.lower()``)
FILE_NAME = "mlproject"
#: top-level keys MLflow reads; the environment ones are read and not used here
TOP_KEYS = ("name", "entry_points", "conda_env", "python_env", "docker_env", "databricks_spark_job")
UNUSED_KEYS = ("conda_env", "python_env", "docker_env", "databricks_spark_job")
ENV_KEYS = ("conda_env", "python_env", "docker_env")
ENTRY_KEYS = ("parameters", "command")
PARAM_KEYS = ("type", "default")
#: the types whose values MLflow changes; any other word (``int``, ``bool``...) is a string
TYPES = ("string", "float", "path", "uri")
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
CONTINUATION = "this line continues the previous one; join them or end it with `\\`"

#: Variables passed to the job when set in the submitter's environment (others need --pass-env).
MLFLOW_PASSED = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_RUN_ID",
)


class ParameterError(LaunchersError, ValueError):
    """``-P`` values do not fit the entry point (missing, repeated, wrong type)."""


@attrs.frozen
class Parameter:
    """A declared parameter: name, type (any word; only ``path`` and ``uri`` change the
    value), default as text (None: required)."""

    name: str
    type: str = "string"
    default: str | None = None


@attrs.frozen
class EntryPoint:
    """An entry point: its command template and declared parameters, in file order.

    ``problems`` (``FILE:LINE:COLUMN: KEY: message`` lines) make it unusable: they are raised
    when it is selected, so that a malformed entry point never stops another one from running.
    ``warnings`` are reported when it runs.
    """

    name: str
    command: str
    parameters: tuple[Parameter, ...] = ()
    declared: bool = True  # False for a .py/.sh file run without a declaration
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(n for n in _fields(self.command) if n)

    def parameter(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)


@attrs.frozen
class MLProject:
    """A loaded MLproject; ``unused`` are keys read but not applied, ``warnings`` the lines
    about the file as a whole (reported to the user, never fatal)."""

    directory: Path
    name: str | None = None
    entry_points: tuple[EntryPoint, ...] = ()
    unused: tuple[str, ...] = ()
    file: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def problems(self) -> tuple[str, ...]:
        """Every entry point's problems, in file order (``launchers validate``)."""
        return tuple(line for ep in self.entry_points for line in ep.problems)

    def entry_point(self, entry: str = "main") -> EntryPoint:
        """The entry point ``entry``; an undeclared ``.py``/``.sh`` file runs as MLflow runs it.

        A malformed declared entry point raises its problems here."""
        for ep in self.entry_points:
            if ep.name == entry:
                if ep.problems:
                    raise ConfigurationError(
                        ep.problems[0], file=self.file, problems=list(ep.problems)
                    )
                return ep
        if entry.endswith((".py", ".sh")):
            rel = posixpath.normpath(entry)
            if rel.startswith("../") or rel.startswith("/") or not (self.directory / rel).is_file():
                raise ConfigurationError(
                    f"entry point {entry!r} is not a file of the project {str(self.directory)!r}"
                )
            runner = "python" if entry.endswith(".py") else "bash"
            return EntryPoint(
                entry, f"{runner} {_escape_braces(shlex.quote(rel))}", (), declared=False
            )
        declared = ", ".join(ep.name for ep in self.entry_points) or "none"
        where = f" in {self.file}" if self.file else ""
        raise ConfigurationError(
            f"unknown entry point {entry!r}{where}; declared: {declared} "
            "(or give a .py or .sh file of the project)"
        )


def _escape_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _fields(command: str) -> list[str]:
    """Placeholder names of a command template; raises ValueError for a malformed one."""
    out = []
    try:
        parsed = list(string.Formatter().parse(command))
    except ValueError as e:
        raise ValueError(
            f"{e}; write {{{{ and }}}} for literal braces (a shell ${{VAR}} is ${{{{VAR}}}})"
        )
    for _literal, field, spec, conv in parsed:
        if field is None:
            continue
        if spec or conv or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", field):
            raise ValueError(
                f"placeholder {{{field}{'!' + conv if conv else ''}{':' + spec if spec else ''}}} is not a "
                "parameter name; write {{ and }} for literal braces (a shell ${VAR} is ${{VAR}})"
            )
        out.append(field)
    return out


def command_lines_problem(command: str) -> tuple[int, str] | None:
    """(0-based line, message) when a line starting with ``-`` follows a line not ended by ``\\``."""
    lines = command.split("\n")
    for i in range(1, len(lines)):
        if lines[i].lstrip().startswith("-") and not lines[i - 1].rstrip().endswith("\\"):
            return i, CONTINUATION
    return None


def find_mlproject(directory: Path) -> Path | None:
    """The project's MLproject file, its name in any case (``MLProject``, ``mlproject``), as
    MLflow finds it; None without one. Two such files are an error (MLflow would read whichever
    the directory lists first)."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.lower() == FILE_NAME)
    except OSError as e:
        raise ConfigurationError(
            f"cannot list the project directory {str(directory)!r}: {e.strerror or e}"
        )
    found = [n for n in names if (directory / n).is_file()]
    if len(found) > 1:
        raise ConfigurationError(
            f"several MLproject files in {str(directory)!r}: {', '.join(found)}; MLflow would read "
            "whichever the directory lists first; keep one"
        )
    return directory / found[0] if found else None


def load_mlproject(project_dir: str | Path) -> MLProject:
    """Read the project's MLproject file (YAML) as MLflow reads it; a project without one has
    only file entries.

    Fatal here: what MLflow cannot load at all (bad YAML, a top level or ``entry_points`` that
    is not a mapping). Each entry point keeps its own problems; keys MLflow ignores and keys
    written twice (the last one wins, as in MLflow) are warnings.
    """
    directory = Path(project_dir)
    if not directory.is_dir():
        raise ConfigurationError(
            f"project directory {str(directory)!r} does not exist or is not a directory"
        )
    path = find_mlproject(directory)
    if path is None:
        return MLProject(directory)
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"cannot read: {e}", file=file)
    duplicates: list[DuplicateKey] = []
    data = load_located(text, file, duplicates=duplicates)
    warn = Problems(file)
    for d in sorted(duplicates, key=lambda d: (d.last.line or 0, d.last.column or 0)):
        warn.add(
            d.last,
            d.key,
            f"written twice (lines {d.first.line} and {d.last.line}); "
            f"the value of line {d.last.line} is used, as MLflow's YAML reader does",
        )
    if data is None:
        return MLProject(directory, file=file, warnings=tuple(warn.lines))
    probs = Problems(file)
    if not isinstance(data, Mapping):
        probs.add(
            getattr(data, "position", None),
            "",
            f"expected a mapping with name and entry_points, not "
            f"{type_name(data)}; MLflow cannot load it either",
        )
        probs.raise_if_any()
    unused = []
    name = None
    entries: list[EntryPoint] = []
    for key, value in data.items():
        if key not in TOP_KEYS:
            warn.add(
                key_pos(data, key),
                str(key),
                f"not a key MLflow reads; ignored, as MLflow does{suggest(str(key), TOP_KEYS)}",
            )
        elif key in UNUSED_KEYS:
            unused.append(str(key))
        elif key == "name":
            if isinstance(value, str):
                name = value
            elif value is not None:
                warn.add(
                    value_pos(data, key), "name", f"{type_name(value)}, not a string; not used"
                )
        elif key == "entry_points":
            if value is None:
                continue
            if not isinstance(value, Mapping):
                probs.add(
                    value_pos(data, key),
                    "entry_points",
                    f"expected a mapping of entry points, not "
                    f"{type_name(value)}; MLflow cannot load the project either",
                )
                continue
            for ep_name, ep in value.items():
                entries.append(_entry_point(str(ep_name), ep, value, file))
    envs = [k for k in ENV_KEYS if k in data]
    if len(envs) > 1:
        warn.add(
            key_pos(data, envs[1]),
            envs[1],
            f"several environments ({', '.join(envs)}): MLflow refuses "
            "such a project; launchers uses none of them",
        )
    probs.raise_if_any()
    return MLProject(directory, name, tuple(entries), tuple(unused), file, tuple(warn.lines))


def _entry_point(name: str, ep: Any, container: Any, file: str) -> EntryPoint:
    """One entry point, with its own problems and warnings (positioned lines)."""
    kp = key_path("entry_points", name)
    probs = Problems(file)
    warn = Problems(file)

    def done(command: str = "", params: tuple[Parameter, ...] = ()) -> EntryPoint:
        return EntryPoint(
            name, command, params, problems=tuple(probs.lines), warnings=tuple(warn.lines)
        )

    if not isinstance(ep, Mapping):
        probs.add(
            value_pos(container, name),
            kp,
            f"expected a mapping with command (and parameters), not "
            f"{type_name(ep)}; MLflow cannot load the project with it",
        )
        return done()
    for key in ep:
        if key not in ENTRY_KEYS:
            warn.add(
                key_pos(ep, key),
                key_path(kp, str(key)),
                f"not a key MLflow reads; ignored, as MLflow does{suggest(str(key), ENTRY_KEYS)}",
            )
    params: list[Parameter] = []
    declared = ep.get("parameters")
    names: set[str] = set()
    if declared is not None and not isinstance(declared, Mapping):
        probs.add(
            value_pos(ep, "parameters"),
            key_path(kp, "parameters"),
            f"expected a mapping NAME: TYPE, not {type_name(declared)}; MLflow fails on it too",
        )
    elif declared is not None:
        names = {str(n) for n in declared}
        for pname, decl in declared.items():
            p = _parameter(str(pname), decl, declared, key_path(kp, "parameters"), probs, warn)
            if p is not None:
                params.append(p)
    command = ep.get("command")
    cpos = value_pos(ep, "command")
    if command is None:
        probs.add(
            cpos
            if "command" in ep
            else (getattr(ep, "position", None) or value_pos(container, name)),
            key_path(kp, "command"),
            "command is required; MLflow fails when it runs this entry point",
        )
        return done()
    if not isinstance(command, str) or not command.strip():
        probs.add(
            cpos,
            key_path(kp, "command"),
            f"expected the command as a non-empty string, not "
            f"{'an empty string' if isinstance(command, str) else type_name(command)}"
            + ("" if isinstance(command, str) else "; MLflow fails when it runs this entry point"),
        )
        return done()
    try:
        fields = _fields(command)
    except ValueError as e:
        probs.add(
            cpos, key_path(kp, "command"), f"{e} (MLflow fails on it when it runs this entry point)"
        )
        return done()
    for f in dict.fromkeys(fields):
        if f not in names:
            probs.add(
                cpos,
                key_path(kp, "command"),
                f"placeholder {{{f}}} names no declared parameter"
                + (
                    f"; declared: {', '.join(sorted(names))}"
                    if names
                    else "; declare it under parameters"
                )
                + f" (MLflow fails with KeyError: '{f}' when it runs this entry point)",
            )
    bad = command_lines_problem(command)
    if bad is not None:
        line_no, message = bad
        shown = command.split("\n")[line_no].strip()
        probs.add(
            cpos,
            key_path(kp, "command"),
            f"line {line_no + 1} ({shown!r}): {message} (MLflow would run it "
            "as a command of its own, which fails; Mantik 0.5 joined the lines)",
        )
    return done(command, tuple(params))


def _parameter(
    name: str, decl: Any, container: Any, prefix: str, probs: Problems, warn: Problems
) -> Parameter | None:
    """A parameter as MLflow reads it: ``NAME: TYPE`` or ``NAME: {type, default}``."""
    kp = key_path(prefix, name)
    if isinstance(decl, str):
        return Parameter(name, decl)
    if not isinstance(decl, Mapping):
        probs.add(
            value_pos(container, name),
            kp,
            f"expected a type (string, float, path, uri, int...) or "
            f"{{type: TYPE, default: VALUE}}, not {type_name(decl)}; MLflow fails on it too",
        )
        return None
    for key in decl:
        if key not in PARAM_KEYS:
            warn.add(
                key_pos(decl, key),
                key_path(kp, str(key)),
                f"not a key MLflow reads; ignored, as MLflow does{suggest(str(key), PARAM_KEYS)}",
            )
    ptype = decl.get("type", "string")
    if not isinstance(ptype, str):
        warn.add(
            value_pos(decl, "type"),
            key_path(kp, "type"),
            f"{type_name(ptype)}, not a type name; the value "
            "is passed unchanged, as MLflow does for a type other than path and uri",
        )
        ptype = str(ptype)
    default = decl.get("default")
    if default is None:
        return Parameter(name, ptype)
    text = str(default)
    if isinstance(default, bool):
        warn.add(
            value_pos(decl, "default"),
            key_path(kp, "default"),
            f"YAML reads this default as a boolean; "
            f"it is passed as {text}, as MLflow does (write it in quotes to keep the text)",
        )
    elif isinstance(default, (Mapping, list)):
        warn.add(
            value_pos(decl, "default"),
            key_path(kp, "default"),
            f"{type_name(default)}; it is passed as the text {text!r}, as MLflow does",
        )
    if ptype == "float" and not _is_number(text):
        warn.add(
            value_pos(decl, "default"),
            key_path(kp, "default"),
            f"{text!r} is not a number (type float); passed unchanged, as MLflow does",
        )
    return Parameter(name, ptype, text)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def parse_param_args(args: Sequence[str]) -> dict[str, str]:
    """``-P NAME=VALUE`` values, split at the first ``=``; a repeated name is an error."""
    out: dict[str, str] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        if not sep or not name:
            raise ParameterError(f"-P {arg!r}: expected NAME=VALUE")
        if name in out:
            raise ParameterError(
                f"-P {name}: given twice ({out[name]!r} and {value!r}); give it once"
            )
        out[name] = value
    return out


def resolve_values(
    entry: EntryPoint, given: Mapping[str, str], uploaded: frozenset[str] | None = None
) -> dict[str, str]:
    """Final text of each declared parameter (given, else default), type-checked.

    ``uploaded`` holds the uploaded relative paths (and parents) that a relative ``path``
    parameter must name; ``None`` skips that check.
    """
    missing = [p.name for p in entry.parameters if p.name not in given and p.default is None]
    if missing:
        raise ParameterError(
            f"entry point {entry.name!r}: no value for parameter{'s' if len(missing) > 1 else ''} "
            + ", ".join(missing)
            + "; give "
            + " ".join(f"-P {m}=VALUE" for m in missing)
        )
    values: dict[str, str] = {}
    errors: list[str] = []
    for p in entry.parameters:
        value = given.get(p.name, p.default)
        assert value is not None
        try:
            values[p.name] = convert(p, value, uploaded)
        except ParameterError as e:
            errors.append(str(e))
    if errors:
        raise ParameterError("\n".join(errors))
    return values


def convert(param: Parameter, value: str, uploaded: frozenset[str] | None) -> str:
    """Check ``value`` against the parameter's type; a relative path becomes run-relative.

    Only ``path`` and ``uri`` are checked and changed, as MLflow does; ``float`` and any other
    type word pass the text unchanged (``value_notes`` warns about a float that is no number).
    """
    if param.type == "uri":
        if not URI.match(value):
            raise ParameterError(
                f"parameter {param.name}: {value!r} is not a URI; it must start with a scheme "
                "such as https: or s3: (MLflow refuses it too)"
            )
        return value
    if param.type == "path":
        if value.startswith("/"):
            return value  # a path on the site, passed unchanged
        rel = posixpath.normpath(value)
        if rel == ".." or rel.startswith("../"):
            raise ParameterError(
                f"parameter {param.name}: {value!r} is outside the project; a relative path names an uploaded project path (write an absolute path for one on the site)"
            )
        if uploaded is not None and rel != "." and rel not in uploaded:
            raise ParameterError(
                f"parameter {param.name}: {value!r} is not an uploaded project path (missing or excluded); a relative path names an uploaded project path (write an absolute path for one on the site)"
            )
        return rel
    return value


def value_notes(entry: EntryPoint, given: Mapping[str, str]) -> list[str]:
    """Warnings about the ``-P`` values of a run: a ``float`` parameter given no number (MLflow
    passes it unchanged, and so does launchers; a default is warned about with the entry point)."""
    notes = []
    for p in entry.parameters:
        value = given.get(p.name)
        if p.type == "float" and value is not None and not _is_number(value):
            notes.append(
                f"parameter {p.name}: {value!r} is not a number (type float); passed unchanged, as MLflow does"
            )
    return notes


def build_command(
    entry: EntryPoint, given: Mapping[str, str], uploaded: frozenset[str] | None = None
) -> str:
    """The shell command of ``entry`` for the ``-P`` values ``given`` (MLflow's rules, docs/design/sites.md §3.4)."""
    values = resolve_values(entry, given, uploaded)
    quoted = {k: shlex.quote(v) for k, v in values.items()}
    command = entry.command.format(**quoted)
    used = set(entry.placeholders)
    extras = [n for n in given if n not in used]
    for n in extras:
        value = values.get(n, given[n])
        command += f" --{n} {shlex.quote(value)}"
    return command


def passed_environment(
    environ: Mapping[str, str], pass_env: Sequence[str], variables: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """Variables copied from the submitter: the non-secret ``MLFLOW_*`` ones when set, and
    each ``--pass-env NAME`` (unset or set in ``Variables`` too: an error)."""
    out: list[tuple[str, str]] = []
    for name in pass_env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ParameterError(f"--pass-env {name!r}: not a variable name")
        if name not in environ:
            raise ParameterError(f"--pass-env {name}: the variable is not set here")
        if name in variables:
            raise ParameterError(f"--pass-env {name}: Environment.Variables sets it too; keep one")
    for name in MLFLOW_PASSED:
        if name in environ and name not in variables and name not in pass_env:
            out.append((name, environ[name]))
    for name in dict.fromkeys(pass_env):
        out.append((name, environ[name]))
    return out


__all__ = [
    "MLFLOW_PASSED",
    "EntryPoint",
    "MLProject",
    "Parameter",
    "ParameterError",
    "build_command",
    "command_lines_problem",
    "find_mlproject",
    "load_mlproject",
    "parse_param_args",
    "passed_environment",
    "value_notes",
]
