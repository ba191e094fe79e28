"""MLproject entry points (remote-sites.md §3.4): load, take ``-P`` values, build the command.

The command is built as MLflow builds it (``{NAME}`` is the shell-quoted value, ``{{``/``}}``
are braces, given parameters without a placeholder are appended as ``--NAME VALUE``), with
checks MLflow does late or not at all done here, before anything is uploaded.
"""

from __future__ import annotations

import math
import posixpath
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..config.located import load_located
from ..errors import ConfigurationError, LaunchersError
from .checks import Problems, key_path, key_pos, suggest, type_name, value_pos

TOP_KEYS = ("name", "entry_points", "conda_env", "python_env", "docker_env")
UNUSED_KEYS = ("conda_env", "python_env", "docker_env")
ENTRY_KEYS = ("parameters", "command")
PARAM_KEYS = ("type", "default")
TYPES = ("string", "float", "path", "uri")
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
CONTINUATION = "this line continues the previous one; join them or end it with `\\`"

#: Variables passed to the job when set in the submitter's environment (others need --pass-env).
MLFLOW_PASSED = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID")


class ParameterError(LaunchersError, ValueError):
    """``-P`` values do not fit the entry point (missing, repeated, wrong type)."""


@attrs.frozen
class Parameter:
    """A declared parameter: name, type, default as text (None: required)."""

    name: str
    type: str = "string"
    default: str | None = None


@attrs.frozen
class EntryPoint:
    """An entry point: its command template and declared parameters, in file order."""

    name: str
    command: str
    parameters: tuple[Parameter, ...] = ()
    declared: bool = True  # False for a .py/.sh file run without a declaration

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(n for n in _fields(self.command) if n)

    def parameter(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)


@attrs.frozen
class MLProject:
    """A loaded MLproject; ``unused`` are keys read but not applied (reported to the user)."""

    directory: Path
    name: str | None = None
    entry_points: tuple[EntryPoint, ...] = ()
    unused: tuple[str, ...] = ()
    file: str | None = None

    def entry_point(self, entry: str = "main") -> EntryPoint:
        """The entry point ``entry``; an undeclared ``.py``/``.sh`` file runs as MLflow runs it."""
        for ep in self.entry_points:
            if ep.name == entry:
                return ep
        if entry.endswith((".py", ".sh")):
            rel = posixpath.normpath(entry)
            if rel.startswith("../") or rel.startswith("/") or not (self.directory / rel).is_file():
                raise ConfigurationError(f"entry point {entry!r} is not a file of the project {str(self.directory)!r}")
            runner = "python" if entry.endswith(".py") else "bash"
            return EntryPoint(entry, f"{runner} {_escape_braces(shlex.quote(rel))}", (), declared=False)
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
        raise ValueError(f"{e}; write {{{{ and }}}} for literal braces (a shell ${{VAR}} is ${{{{VAR}}}})")
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


def load_mlproject(project_dir: str | Path) -> MLProject:
    """Read ``PROJECT_DIR/MLproject`` (YAML); a project without one has only file entries."""
    directory = Path(project_dir)
    if not directory.is_dir():
        raise ConfigurationError(f"project directory {str(directory)!r} does not exist or is not a directory")
    path = directory / "MLproject"
    if not path.exists():
        return MLProject(directory)
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"cannot read: {e}", file=file)
    data = load_located(text, file)
    probs = Problems(file)
    if data is None:
        return MLProject(directory, file=file)
    if not isinstance(data, Mapping):
        probs.add(getattr(data, "position", None), "", f"expected a mapping with name and entry_points, not {type_name(data)}")
        probs.raise_if_any()
    unused = []
    name = None
    entries: list[EntryPoint] = []
    for key, value in data.items():
        if key not in TOP_KEYS:
            probs.add(key_pos(data, key), str(key), f"unknown key{suggest(str(key), TOP_KEYS)}; known keys: name, entry_points (conda_env, python_env, docker_env are read and not used)")
        elif key in UNUSED_KEYS:
            unused.append(str(key))
        elif key == "name":
            if isinstance(value, str):
                name = value
            else:
                probs.add(value_pos(data, key), "name", f"expected a string, not {type_name(value)}")
        elif key == "entry_points":
            if not isinstance(value, Mapping):
                probs.add(value_pos(data, key), "entry_points", f"expected a mapping of entry points, not {type_name(value)}")
                continue
            for ep_name, ep in value.items():
                parsed = _entry_point(str(ep_name), ep, value, probs)
                if parsed is not None:
                    entries.append(parsed)
    probs.raise_if_any()
    return MLProject(directory, name, tuple(entries), tuple(unused), file)


def _entry_point(name: str, ep: Any, container: Any, probs: Problems) -> EntryPoint | None:
    kp = key_path("entry_points", name)
    if not isinstance(ep, Mapping):
        probs.add(value_pos(container, name), kp, f"expected a mapping with command (and parameters), not {type_name(ep)}")
        return None
    ok = True
    for key in ep:
        if key not in ENTRY_KEYS:
            probs.add(key_pos(ep, key), key_path(kp, str(key)), f"unknown key{suggest(str(key), ENTRY_KEYS)}; known keys: parameters, command")
            ok = False
    params: list[Parameter] = []
    declared = ep.get("parameters")
    if declared is not None and not isinstance(declared, Mapping):
        probs.add(value_pos(ep, "parameters"), key_path(kp, "parameters"), f"expected a mapping NAME: TYPE, not {type_name(declared)}")
        ok = False
    elif declared is not None:
        for pname, decl in declared.items():
            p = _parameter(str(pname), decl, declared, key_path(kp, "parameters"), probs)
            if p is None:
                ok = False
            else:
                params.append(p)
    command = ep.get("command")
    if "command" not in ep:
        probs.add(getattr(ep, "position", None) or value_pos(container, name), key_path(kp, "command"), "command is required")
        return None
    cpos = value_pos(ep, "command")
    if not isinstance(command, str) or not command.strip():
        probs.add(cpos, key_path(kp, "command"), f"expected the command as a non-empty string, not {type_name(command)}")
        return None
    try:
        fields = _fields(command)
    except ValueError as e:
        probs.add(cpos, key_path(kp, "command"), str(e))
        return None
    names = {p.name for p in params}
    for f in dict.fromkeys(fields):
        if f not in names:
            probs.add(cpos, key_path(kp, "command"), f"placeholder {{{f}}} names no declared parameter"
                      + (f"; declared: {', '.join(sorted(names))}" if names else "; declare it under parameters"))
            ok = False
    bad = command_lines_problem(command)
    if bad is not None:
        line_no, message = bad
        shown = command.split("\n")[line_no].strip()
        probs.add(cpos, key_path(kp, "command"), f"line {line_no + 1} ({shown!r}): {message}")
        ok = False
    return EntryPoint(name, command, tuple(params)) if ok else None


def _parameter(name: str, decl: Any, container: Any, prefix: str, probs: Problems) -> Parameter | None:
    kp = key_path(prefix, name)
    if isinstance(decl, str):
        if decl not in TYPES:
            probs.add(value_pos(container, name), kp, f"unknown type {decl!r}{suggest(decl, TYPES)}; types: {', '.join(TYPES)}")
            return None
        return Parameter(name, decl)
    if not isinstance(decl, Mapping):
        probs.add(value_pos(container, name), kp, f"expected a type ({', '.join(TYPES)}) or {{type: TYPE, default: VALUE}}, not {type_name(decl)}")
        return None
    ok = True
    for key in decl:
        if key not in PARAM_KEYS:
            probs.add(key_pos(decl, key), key_path(kp, str(key)), f"unknown key{suggest(str(key), PARAM_KEYS)}; known keys: type, default")
            ok = False
    ptype = decl.get("type", "string")
    if not isinstance(ptype, str) or ptype not in TYPES:
        probs.add(value_pos(decl, "type"), key_path(kp, "type"), f"unknown type {ptype!r}; types: {', '.join(TYPES)}")
        ok = False
    default = decl.get("default")
    text: str | None = None
    if isinstance(default, bool):
        probs.add(value_pos(decl, "default"), key_path(kp, "default"), f"YAML reads this default as {str(default).lower()} (a boolean); write it in quotes")
        ok = False
    elif isinstance(default, (str, int, float)):
        text = str(default)
        if ok and ptype == "float" and not _is_number(text):
            probs.add(value_pos(decl, "default"), key_path(kp, "default"), f"{text!r} is not a number (type float)")
            ok = False
        if ok and ptype == "uri" and not URI.match(text):
            probs.add(value_pos(decl, "default"), key_path(kp, "default"), f"{text!r} is not a URI (scheme:...)")
            ok = False
    elif default is not None:
        probs.add(value_pos(decl, "default"), key_path(kp, "default"), f"expected a string or a number, not {type_name(default)}")
        ok = False
    return Parameter(name, ptype, text) if ok else None


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
            raise ParameterError(f"-P {name}: given twice ({out[name]!r} and {value!r}); give it once")
        out[name] = value
    return out


def resolve_values(entry: EntryPoint, given: Mapping[str, str], uploaded: frozenset[str] | None = None) -> dict[str, str]:
    """Final text of each declared parameter (given, else default), type-checked.

    ``uploaded`` holds the uploaded relative paths (and parents) that a relative ``path``
    parameter must name; ``None`` skips that check.
    """
    missing = [p.name for p in entry.parameters if p.name not in given and p.default is None]
    if missing:
        raise ParameterError(
            f"entry point {entry.name!r}: no value for parameter{'s' if len(missing) > 1 else ''} "
            + ", ".join(missing) + "; give " + " ".join(f"-P {m}=VALUE" for m in missing)
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
    """Check ``value`` against the parameter's type; a relative path becomes run-relative."""
    if param.type == "float":
        if not _is_number(value):
            raise ParameterError(f"parameter {param.name}: {value!r} is not a number (type float)")
        return value
    if param.type == "uri":
        if not URI.match(value):
            raise ParameterError(f"parameter {param.name}: {value!r} is not a URI; it must start with a scheme such as https: or s3:")
        return value
    if param.type == "path":
        if value.startswith("/"):
            return value  # a path on the site, passed unchanged
        rel = posixpath.normpath(value)
        if rel == ".." or rel.startswith("../"):
            raise ParameterError(f"parameter {param.name}: {value!r} is outside the project; a relative path names an uploaded project path (write an absolute path for one on the site)")
        if uploaded is not None and rel != "." and rel not in uploaded:
            raise ParameterError(f"parameter {param.name}: {value!r} is not an uploaded project path (missing or excluded); a relative path names an uploaded project path (write an absolute path for one on the site)")
        return rel
    return value


def build_command(entry: EntryPoint, given: Mapping[str, str], uploaded: frozenset[str] | None = None) -> str:
    """The shell command of ``entry`` for the ``-P`` values ``given`` (MLflow's rules, §3.4)."""
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
    "load_mlproject",
    "parse_param_args",
    "passed_environment",
]
