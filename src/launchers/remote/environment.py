"""The ``Environment`` block of a Compute Backend Config or of a unicore/firecrest group
(docs/design/sites.md §1.1).

``validate_environment`` checks the structure (types, names, combinations) and returns an
``Environment`` value; checks that need the project directory (a local image or a relative
``Python`` path) are done by ``check_project_paths`` when a run is planned.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from ..config.environment import Container
from ..config.environment import Environment as JobEnvironment
from ..config.model import Position
from ..config.problems import (
    Problems,
    item_pos,
    key_path,
    key_pos,
    suggest,
    type_name,
    unknown_key,
    unknown_keys,
    value_pos,
)
from ..errors import ConfigurationError

ENVIRONMENT_KEYS = (
    "Apptainer",
    "Python",
    "Modules",
    "Variables",
    "PreRunCommandOnLoginNode",
    "PreRunCommandOnComputeNode",
    "PostRunCommandOnComputeNode",
    "PostRunCommandOnLoginNode",
)
COMMAND_KEYS = ENVIRONMENT_KEYS[4:]
APPTAINER_KEYS = ("Path", "Type", "Options")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@attrs.frozen
class Snippet:
    """One shell snippet to run, with the name used in failure messages (``Key[i]``)."""

    label: str
    text: str


@attrs.frozen
class Apptainer:
    """``srun apptainer run OPTIONS IMAGE COMMAND``; ``options`` are words (POSIX-split)."""

    path: str
    type: str = "local"  # local | remote
    options: tuple[str, ...] = ()
    position: Position = attrs.field(factory=Position)

    @property
    def is_local(self) -> bool:
        return self.type == "local"

    @property
    def image_name(self) -> str:
        """The file name the image has in the run directory (local) or its path (remote)."""
        return PurePosixPath(self.path).name if self.is_local else self.path


@attrs.frozen
class Environment:
    """What runs around the command on the site; empty by default."""

    apptainer: Apptainer | None = None
    python: str | None = None
    python_position: Position = attrs.field(factory=Position)
    modules: tuple[str, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    pre_login: tuple[Snippet, ...] = ()
    pre_compute: tuple[Snippet, ...] = ()
    post_compute: tuple[Snippet, ...] = ()
    post_login: tuple[Snippet, ...] = ()
    keys: frozenset[str] = frozenset()  # the keys written, for merging

    @property
    def variable_names(self) -> frozenset[str]:
        return frozenset(n for n, _ in self.variables)

    def overridden_by(self, other: Environment) -> Environment:
        """A new value where every key written in ``other`` replaces ours (file over group)."""
        fields = {
            "Apptainer": ("apptainer",),
            "Python": ("python", "python_position"),
            "Modules": ("modules",),
            "Variables": ("variables",),
            "PreRunCommandOnLoginNode": ("pre_login",),
            "PreRunCommandOnComputeNode": ("pre_compute",),
            "PostRunCommandOnComputeNode": ("post_compute",),
            "PostRunCommandOnLoginNode": ("post_login",),
        }
        changes: dict[str, Any] = {}
        for key in other.keys:
            for f in fields[key]:
                changes[f] = getattr(other, f)
        if "Apptainer" in other.keys and "Python" not in other.keys:
            changes["python"] = None
        if "Python" in other.keys and "Apptainer" not in other.keys:
            changes["apptainer"] = None
        changes["keys"] = self.keys | other.keys
        return attrs.evolve(self, **changes)


def _commands(
    value: Any, container: Any, key: str, prefix: str, problems: Problems
) -> tuple[Snippet, ...]:
    path = key_path(prefix, key)
    if isinstance(value, str):
        if not value.strip():
            problems.add(
                value_pos(container, key),
                path,
                "an empty command; remove the key or write a command",
            )
            return ()
        return (Snippet(key, value),)
    if not isinstance(value, list):
        problems.add(
            value_pos(container, key),
            path,
            f"expected a string or a list of strings, not {type_name(value)}",
        )
        return ()
    out: list[Snippet] = []
    for i, item in enumerate(value):
        label = f"{key}[{i}]"
        if isinstance(item, str) and item.strip():
            out.append(Snippet(label, item))
        elif isinstance(item, str):
            problems.add(item_pos(value, i), key_path(path, i), "an empty command; remove the item")
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            problems.add(
                item_pos(value, i),
                key_path(path, i),
                f'a command must be a string, not {type_name(item)}; write it in quotes: "{item}" '
                f"(Mantik 0.5 converts it with str() and runs the command {str(item)!r})",
            )
        else:
            problems.add(
                item_pos(value, i),
                key_path(path, i),
                f"a command must be a string, not {type_name(item)}",
            )
    return tuple(out)


def _apptainer(value: Any, container: Any, prefix: str, problems: Problems) -> Apptainer | None:
    path = key_path(prefix, "Apptainer")
    if not isinstance(value, Mapping):
        problems.add(
            value_pos(container, "Apptainer"),
            path,
            f"expected a mapping with Path (and Type, Options), not {type_name(value)}",
        )
        return None
    ok = unknown_keys(value, APPTAINER_KEYS, path, problems)
    image = value.get("Path")
    if "Path" not in value:
        problems.add(value_pos(container, "Apptainer"), path, "Path (the image) is required")
        ok = False
    elif not isinstance(image, str) or not image.strip():
        problems.add(
            value_pos(value, "Path"),
            key_path(path, "Path"),
            f"expected the image path as a string, not {type_name(image)}",
        )
        ok = False
    kind = "local"
    if "Type" in value:
        t = value["Type"]
        if isinstance(t, str) and t.lower() in ("local", "remote"):
            kind = t.lower()
        else:
            problems.add(
                value_pos(value, "Type"),
                key_path(path, "Type"),
                f"expected local or remote, not {t!r}",
            )
            ok = False
    if ok and kind == "remote" and not str(image).startswith("/"):
        problems.add(
            value_pos(value, "Path"),
            key_path(path, "Path"),
            f"a remote image path must be absolute, not {image!r} (use Type: local for a file of the project)",
        )
        ok = False
    words: list[str] = []
    if "Options" in value:
        opts = value["Options"]
        items = [opts] if isinstance(opts, str) else opts if isinstance(opts, list) else None
        if items is None:
            problems.add(
                value_pos(value, "Options"),
                key_path(path, "Options"),
                f"expected a string or a list of strings, not {type_name(opts)}",
            )
            ok = False
        else:
            for i, item in enumerate(items):
                where = value_pos(value, "Options") if isinstance(opts, str) else item_pos(opts, i)
                kp = (
                    key_path(path, "Options")
                    if isinstance(opts, str)
                    else key_path(key_path(path, "Options"), i)
                )
                if not isinstance(item, str):
                    problems.add(where, kp, f"an option must be a string, not {type_name(item)}")
                    ok = False
                    continue
                try:
                    words.extend(shlex.split(item))
                except ValueError as e:
                    problems.add(where, kp, f"cannot split the option into words: {e}")
                    ok = False
    if not ok:
        return None
    return Apptainer(str(image), kind, tuple(words), value_pos(value, "Path") or Position())


def _python(
    value: Any, container: Any, prefix: str, problems: Problems
) -> tuple[str, Position] | None:
    path = key_path(prefix, "Python")
    pos = value_pos(container, "Python")
    if isinstance(value, Mapping):
        unknown = [k for k in value if k != "Path"]
        for k in unknown:
            problems.add(
                key_pos(value, k),
                key_path(path, str(k)),
                f"unknown key{suggest(str(k), ['Path'])}; the only key is Path",
            )
        if "Path" not in value and unknown:
            return None
        if "Path" not in value:
            problems.add(pos, path, "Path (the virtual environment) is required")
            return None
        pos = value_pos(value, "Path")
        path = key_path(path, "Path")
        value = value["Path"]
    if not isinstance(value, str) or not value.strip():
        problems.add(
            pos,
            path,
            f"expected the virtual environment's path as a string, not {type_name(value)}",
        )
        return None
    return value, pos or Position()


def _variables(
    value: Any, container: Any, prefix: str, problems: Problems
) -> tuple[tuple[str, str], ...]:
    path = key_path(prefix, "Variables")
    if not isinstance(value, Mapping):
        problems.add(
            value_pos(container, "Variables"),
            path,
            f"expected a mapping NAME: value, not {type_name(value)}",
        )
        return ()
    out: list[tuple[str, str]] = []
    for name, v in value.items():
        kp = key_path(path, str(name))
        if not isinstance(name, str) or not VARIABLE_NAME.match(name):
            problems.add(
                key_pos(value, name),
                kp,
                f"{str(name)!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
            )
            continue
        if isinstance(v, bool) or v is None:
            shown = "null" if v is None else str(v).lower()
            problems.add(
                value_pos(value, name),
                kp,
                f"YAML reads this value as {shown} ({type_name(v)}: yes, no, on, off, true, false "
                "and empty values are read that way); write the value in quotes",
            )
        elif isinstance(v, (int, float)):
            out.append((name, str(v)))
        elif isinstance(v, str):
            out.append((name, v))
        else:
            problems.add(
                value_pos(value, name), kp, f"expected a string or a number, not {type_name(v)}"
            )
    return tuple(out)


def validate_environment(
    located_value: Any,
    file: str | None,
    key_prefix: str = "Environment",
    *,
    site_kind: str | None = None,
    problems: Problems | None = None,
) -> Environment:
    """Check an ``Environment`` mapping (docs/design/sites.md §1.1) and return its value.

    ``site_kind`` (``unicore``/``firecrest``/``ssh``; inferred from a ``firecrest...`` key
    prefix) refuses login-node commands for firecREST and SSH sites. Raises one ``ConfigurationError`` listing every
    problem unless a shared ``problems`` collector is given (then the caller raises).
    """
    own = problems is None
    probs = problems if problems is not None else Problems(file)
    if site_kind is None and key_prefix.startswith("firecrest"):
        site_kind = "firecrest"
    if located_value is None:
        return Environment()
    if not isinstance(located_value, Mapping):
        probs.add(
            getattr(located_value, "position", None) or Position(file=file),
            key_prefix,
            f"expected a mapping, not {type_name(located_value)}",
        )
        if own:
            probs.raise_if_any()
        return Environment()
    env: dict[str, Any] = {"keys": frozenset(k for k in located_value if k in ENVIRONMENT_KEYS)}
    for key, value in located_value.items():
        kp = key_path(key_prefix, str(key))
        if key not in ENVIRONMENT_KEYS:
            probs.add(
                key_pos(located_value, key),
                kp,
                unknown_key(key, ENVIRONMENT_KEYS),
            )
        elif key == "Apptainer":
            env["apptainer"] = _apptainer(value, located_value, key_prefix, probs)
        elif key == "Python":
            py = _python(value, located_value, key_prefix, probs)
            if py is not None:
                env["python"], env["python_position"] = py
        elif key == "Modules":
            if not isinstance(value, list):
                probs.add(
                    value_pos(located_value, key),
                    kp,
                    f"expected a list of module names, not {type_name(value)}"
                    + (f"; write [{value}]" if isinstance(value, str) else ""),
                )
                continue
            mods = []
            for i, m in enumerate(value):
                if isinstance(m, str) and m.strip():
                    mods.append(m)
                else:
                    probs.add(
                        item_pos(value, i),
                        key_path(kp, i),
                        "an empty module name"
                        if isinstance(m, str)
                        else f"a module name must be a string, not {type_name(m)}",
                    )
            env["modules"] = tuple(mods)
        elif key == "Variables":
            env["variables"] = _variables(value, located_value, key_prefix, probs)
        else:
            field = {
                "PreRunCommandOnLoginNode": "pre_login",
                "PreRunCommandOnComputeNode": "pre_compute",
                "PostRunCommandOnComputeNode": "post_compute",
                "PostRunCommandOnLoginNode": "post_login",
            }[key]
            env[field] = _commands(value, located_value, key, key_prefix, probs)
            if site_kind == "firecrest" and key.endswith("LoginNode"):
                probs.add(
                    key_pos(located_value, key),
                    kp,
                    "firecREST runs nothing on the login node; move the command to "
                    + key.replace("LoginNode", "ComputeNode"),
                )
            elif site_kind == "ssh" and key.endswith("LoginNode"):
                probs.add(
                    key_pos(located_value, key),
                    kp,
                    "an SSH site runs nothing on the login node (Mantik 0.5 ignored this key for SSH "
                    "sites); move the command to " + key.replace("LoginNode", "ComputeNode"),
                )
    if "Apptainer" in located_value and "Python" in located_value:
        probs.add(
            key_pos(located_value, "Python"),
            key_path(key_prefix, "Python"),
            "Apptainer and Python cannot both be set: the image brings its own Python",
        )
    if own:
        probs.raise_if_any()
    return Environment(**env)


def as_block(env: Environment) -> tuple[JobEnvironment, tuple[Snippet, ...], tuple[Snippet, ...]]:
    """The Compute Backend Config ``Environment`` in the terms of ``launchers.yaml``'s
    ``environment:`` block (docs/remote-sites.md, "The same model"), and the login-node commands,
    which have no compute-node equivalent: ``Modules`` -> ``modules``, ``Python`` -> ``venv``,
    ``Apptainer`` -> ``container`` (runtime apptainer), ``Variables`` -> ``variables``,
    ``PreRunCommandOnComputeNode`` -> ``setup``, ``PostRunCommandOnComputeNode`` ->
    ``teardown``. Pure. The model only: a job whose environment is in this form keeps Mantik's
    script (``remote.script``: double-quoted Variables, ``srun apptainer run``, post-run
    commands only after a success); a job whose environment is launchers.yaml's block gets the
    one renderer's lines (``slurm.envscript``), and a job never has both (``mixed_forms``)."""
    container = None
    if env.apptainer is not None:
        container = Container(
            image=env.apptainer.image_name, runtime="apptainer", options=env.apptainer.options
        )
    block = JobEnvironment(
        modules=env.modules or None,
        venv=env.python,
        container=container,
        setup=tuple(s.text for s in env.pre_compute) or None,
        teardown=tuple(s.text for s in env.post_compute) or None,
        variables=env.variables or None,
    )
    return block, env.pre_login, env.post_login


def mixed_forms(
    mantik: Environment,
    block: JobEnvironment,
    what: str,
    theirs: str = "the group's environment",
) -> str | None:
    """Why one job cannot take ``block`` (launchers.yaml's form, set at ``what``) over a
    Compute Backend Config ``Environment`` (the group's or the file's), or None when one of
    them is empty: the two forms run differently (quoting of variables, the container's
    command, post-run commands after a success only), so a job has one (docs/remote-sites.md)."""
    if not mantik.keys or block.is_empty:
        return None
    return (
        f"{what} is in launchers.yaml's form (modules, venv, container, setup, ...) but "
        f"{theirs} is a Compute Backend Config Environment "
        f"({', '.join(sorted(mantik.keys))}); a job's environment takes one form: write the "
        "group's environment: in launchers.yaml's form (docs/configuration.md, Environment)"
    )


def check_login_commands(env: Environment, site_kind: str, file: str | None) -> None:
    """Refuse login-node commands for a firecREST site (known only once the site is)."""
    if site_kind == "firecrest" and (env.pre_login or env.post_login):
        raise ConfigurationError(
            "firecREST runs nothing on the login node; move PreRunCommandOnLoginNode / "
            "PostRunCommandOnLoginNode to the ComputeNode keys",
            file=file,
            key="Environment",
        )


def check_project_paths(
    env: Environment, project_dir: Path, uploaded: frozenset[str], excluded: dict[str, str]
) -> list[str]:
    """Problems with paths that point into the project (a local image, a relative ``Python``).

    ``uploaded`` holds the uploaded relative paths and their parents; ``excluded`` maps excluded
    relative paths to the pattern. Returns one message per problem (empty when fine).
    """
    problems: list[str] = []
    if env.apptainer is not None and env.apptainer.is_local:
        image = project_dir / env.apptainer.path
        where = "Environment.Apptainer.Path"
        if env.apptainer.position.line:
            where = f"{env.apptainer.position}: {where}"
        if not image.is_file():
            problems.append(
                f"{where}: the local image {env.apptainer.path!r} does not exist (looked for {image}; "
                "Mantik refuses it too)"
            )
        elif env.apptainer.image_name in uploaded and not _same_file(
            project_dir / env.apptainer.image_name, image
        ):
            problems.append(
                f"{where}: the image is uploaded as {env.apptainer.image_name!r} at the run directory's root, "
                "but the project has a file of that name; rename one of them or exclude the project file"
            )
    if env.python is not None and not env.python.startswith("/"):
        rel = PurePosixPath(env.python).as_posix().rstrip("/")
        where = (
            f"{env.python_position}: Environment.Python"
            if env.python_position.line
            else "Environment.Python"
        )
        if not (project_dir / rel).is_dir():
            problems.append(
                f"{where}: the virtual environment {env.python!r} is not a directory of the project (relative paths are inside the project; write an absolute path for one on the site)"
            )
        elif not (project_dir / rel / "bin" / "activate").is_file():
            problems.append(
                f"{where}: {env.python!r} has no bin/activate; is it a virtual environment?"
            )
        elif rel not in uploaded:
            pattern = (
                excluded.get(rel + "/")
                or excluded.get(rel)
                or next((p for e, p in excluded.items() if rel.startswith(e)), "?")
            )
            problems.append(
                f"{where}: the virtual environment {env.python!r} is excluded (pattern {pattern!r}); it must be uploaded"
            )
    return problems


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
