"""Reading an ``environment:`` block (docs/configuration.md, Environment): from ``launchers.yaml``
with the file's key table (file, line, column and key in every problem), or from Python
(``launcher.config(environment=...)``, ``command(..., environment=...)``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launchers.config.environment import EMPTY, Container, Environment
from launchers.config.model import Position
from launchers.config.problems import Loc
from launchers.config.reader import BAD, Reader, Sec
from launchers.errors import ConfigurationError


def from_section(sec: Sec, reader: Reader) -> Environment:
    """The value of a checked ``environment:`` section; adds the cross-key problems (a relative
    ``venv``, ``venv`` with ``conda``) to ``reader``."""
    values = sec.values
    venv = values.get("venv")
    if isinstance(venv, str) and not venv.startswith(("/", "~/")):
        reader.problem(
            sec.at("venv"),
            sec.at("venv").key,
            f"venv must be an absolute path (or ~/...: the job may run in another directory), "
            f"not {venv!r}",
        )
    if "venv" in values and "conda" in values:
        reader.problem(
            sec.at("conda"),
            sec.at("conda").key,
            "venv and conda cannot both be set: a job activates one Python environment",
        )
    for key in ("venv", "conda"):
        if values.get(key) == "":
            reader.problem(sec.at(key), sec.at(key).key, "an empty value; remove the key")
    container = values.get("container")
    if isinstance(container, Sec) and container.values.get("image") == "":
        reader.problem(container.at("image"), container.at("image").key, "an empty image name")
    for key in ("setup", "teardown", "modules"):
        for i, line in enumerate(values.get(key, ())):
            if not str(line).strip():
                reader.problem(sec.item_at(key, i), f"{sec.path}.{key}[{i}]", "an empty entry")
    container = values.get("container")
    box = None
    if isinstance(container, Sec) and "image" in container.values:
        box = Container(
            image=str(container.values["image"]),
            runtime=container.values.get("runtime", "apptainer"),
            options=tuple(container.values.get("options", ())),
            bind=tuple(container.values.get("bind", ())),
            env=tuple(container.values.get("env", {}).items()),
        )
    variables = values.get("variables")
    return Environment(
        modules=values.get("modules"),
        purge=values.get("purge"),
        venv=venv,
        conda=values.get("conda"),
        container=box,
        setup=values.get("setup"),
        teardown=values.get("teardown"),
        variables=None if variables is None else tuple(variables.items()),
    )


def read_environment(value: Any, path: str, file: str | None) -> Environment:
    """Check one ``environment:`` mapping with the file's key table; ``ConfigurationError``
    naming every problem (file, line, column and key path when ``value`` was located)."""
    reader = Reader(file)
    env = read_into(value, reader, path, Loc(Position(file=file, key=path), path))
    reader.raise_if_any()
    return env


def read_into(value: Any, reader: Reader, path: str, loc: Loc) -> Environment:
    """``read_environment`` adding its problems to ``reader`` (the loader's shared one)."""
    sec = reader.section(value, "environment", path, loc)
    if sec is BAD or not isinstance(sec, Sec):
        return EMPTY
    return from_section(sec, reader)


def coerce(value: Any, *, where: str, error: type[Exception] = ConfigurationError) -> Environment:
    """An ``Environment`` given from Python (a mapping, an ``Environment`` or ``None``);
    problems raise ``error`` (``TaskError`` for a task's, ``ConfigurationError`` for a launcher's)."""
    if value is None:
        return EMPTY
    if isinstance(value, Environment):
        return value
    if not isinstance(value, Mapping):
        raise error(f"{where}: expected a mapping or an Environment, not {type(value).__name__}")
    try:
        return read_environment(_plain(value), "environment", f"<{where}>")
    except ConfigurationError as e:
        if error is ConfigurationError:
            raise
        raise error(str(e)) from None


def _plain(value: Any) -> Any:
    """Tuples as lists, so that Python callers may pass either."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


__all__ = ["coerce", "from_section", "read_environment", "read_into"]
