"""The ``environment:`` block: what a job loads, activates and wraps its command in (docs/configuration.md, Environment).

One frozen ``Environment`` value for every launcher kind, read from a group, a partition, a node
group, a launcher (``launcher.config(environment=...)``) or a task (``command(...,
environment=...)``, ``@task(environment=...)``). ``merged`` layers them: the more specific
level wins key by key; lists (``modules``, ``setup``, ``teardown``) are replaced, never appended;
``variables`` are merged name by name; a ``container`` is replaced whole; setting ``venv``
drops an inherited ``conda`` and the reverse. ``None`` in a field means "not set at this
level". Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs


@attrs.frozen
class Container:
    """``container: {image, runtime, options, bind, env}``: the command runs inside ``image``."""

    image: str
    runtime: str = "apptainer"
    options: tuple[str, ...] = ()
    bind: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Environment:
    """Modules, an activated Python environment, a container and shell lines around a job's
    command. Every field ``None`` when not set at this level (``EMPTY``)."""

    modules: tuple[str, ...] | None = None
    purge: bool | None = None
    venv: str | None = None
    conda: str | None = None
    container: Container | None = None
    setup: tuple[str, ...] | None = None
    teardown: tuple[str, ...] | None = None
    variables: tuple[tuple[str, str], ...] | None = None

    @property
    def is_empty(self) -> bool:
        """Nothing is set: the job script is the one without an environment."""
        return self == EMPTY

    def merged(self, more_specific: Environment | None) -> Environment:
        """This level with ``more_specific`` over it, key by key (see the module's docstring)."""
        if more_specific is None or more_specific.is_empty:
            return self
        if self.is_empty:
            return more_specific
        changes: dict[str, Any] = {}
        for f in attrs.fields(Environment):
            value = getattr(more_specific, f.name)
            if value is not None:
                changes[f.name] = value
        if more_specific.venv is not None and more_specific.conda is None:
            changes["conda"] = None
        if more_specific.conda is not None and more_specific.venv is None:
            changes["venv"] = None
        if more_specific.variables is not None and self.variables is not None:
            changes["variables"] = tuple(
                {**dict(self.variables), **dict(more_specific.variables)}.items()
            )
        return attrs.evolve(self, **changes)

    def without_variables(self) -> Environment:
        """The same block with its variables left to the job's ``env`` (they are exported with it)."""
        return attrs.evolve(self, variables=None) if self.variables is not None else self


EMPTY = Environment()


def merge_all(*levels: Environment | None) -> Environment:
    """``levels`` from the least to the most specific, merged (``EMPTY`` when none is set)."""
    out = EMPTY
    for level in levels:
        out = out.merged(level)
    return out


def for_job(
    base_env: Mapping[str, str] | Iterable[tuple[str, str]],
    task_env: Mapping[str, str] | Iterable[tuple[str, str]],
    *levels: Environment | None,
) -> tuple[Environment, tuple[tuple[str, str], ...]]:
    """The environment block of one job and the variables its script exports: ``levels``
    merged (least specific first), their ``variables`` between the launcher's ``env``
    (``base_env``) and the task's ``env`` (``task_env``), which win in that order."""
    merged = merge_all(*levels)
    variables = {**dict(base_env), **dict(merged.variables or ()), **dict(task_env)}
    return merged.without_variables(), tuple(variables.items())


def requested_gpus(launcher: Any) -> int:
    """How many GPUs the job of ``launcher`` asks (its requirement's), for ``--nv`` and the like."""
    requirement = getattr(launcher, "requirement", None)
    return len(getattr(requirement, "cuda_gpus", ()) or ())


def callable_python(env: Environment, configured: str | None, default: str) -> str:
    """The interpreter of a callable task: the configured one, else ``python3`` from ``PATH``
    when the job activates a venv or conda environment or runs in a container (the
    submitting process's interpreter is not there), else ``default``."""
    if configured:
        return configured
    if env.venv or env.conda or env.container is not None:
        return "python3"
    return default


__all__ = [
    "EMPTY",
    "Container",
    "Environment",
    "callable_python",
    "for_job",
    "merge_all",
    "requested_gpus",
]
