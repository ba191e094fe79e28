"""Tasks (docs/design/runtime.md §1): a command line or a call of a module-level ``@task`` function.

A task is an immutable description; its identity (name + 16-hex digest of the canonical JSON of
``{kind, target, params, env, cwd}``) decides its job directory, so the same task submitted again
re-attaches to the same job. Code is never pickled: functions are imported by ``module:qualname``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, overload

import attrs

from ..config.environment import EMPTY, Environment
from ..config.environment_read import coerce
from ..errors import TaskError
from ..hooks import services
from .depends import JOB_KEY, is_job

if TYPE_CHECKING:
    from .job import Job

KIND_COMMAND = "command"
KIND_CALLABLE = "callable"

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sanitize_name(name: str) -> str:
    """Characters outside ``[A-Za-z0-9_.-]`` become ``_`` (and ``.``/``..``/empty become ``_``)."""
    clean = _NAME_BAD.sub("_", name)
    if clean in ("", ".", ".."):
        clean = clean.replace(".", "_") or "_"
    return clean


def encode_value(value: Any, where: str, jobs: list[Any] | None = None) -> Any:
    """A parameter as canonical JSON data (``Path`` -> ``{"$path": ...}``), else ``TaskError``.

    With ``jobs`` given, a submitted ``Job`` becomes ``{"$job": "NAME-DIGEST"}`` (its task id is
    part of the identity) and is appended to ``jobs`` (docs/design/runtime.md §15)."""
    if jobs is not None and is_job(value):
        jobs.append(value)
        return {JOB_KEY: value.task_id}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TaskError(
                f"parameter {where}: {value!r} is not a JSON number (NaN and infinities are refused)"
            )
        return value
    if isinstance(value, PurePath):
        return {"$path": str(value)}
    if isinstance(value, (list, tuple)):
        return [encode_value(v, f"{where}[{i}]", jobs) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TaskError(
                    f"parameter {where}: key {k!r} is not a string (JSON objects have string keys)"
                )
            if k in ("$path", JOB_KEY) and len(value) == 1:
                raise TaskError(
                    f"parameter {where}: a mapping with the single key {k!r} is reserved "
                    f"for {'paths' if k == '$path' else 'jobs'}"
                )
            out[k] = encode_value(v, f"{where}[{k!r}]", jobs)
        return out
    if is_job(value):
        raise TaskError(f"parameter {where}: a Job cannot be given here")
    if type(value).__name__ == "Finished":
        raise TaskError(
            f"parameter {where}: finished(job) belongs in submit(after=[...]); "
            "a parameter takes the job itself (and receives its result)"
        )
    raise TaskError(
        f"parameter {where}: a value of type {type(value).__name__} is not a JSON value or pathlib.Path"
    )


def decode_value(value: Any, job_value: Callable[[str], Any] | None = None) -> Any:
    """The inverse of ``encode_value`` (``{"$path": p}`` -> ``pathlib.Path(p)``); with
    ``job_value``, ``{"$job": id}`` -> ``job_value(id)`` (the dependency's result)."""
    if isinstance(value, list):
        return [decode_value(v, job_value) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and "$path" in value and isinstance(value["$path"], str):
            return Path(value["$path"])
        if (
            job_value is not None
            and len(value) == 1
            and JOB_KEY in value
            and isinstance(value[JOB_KEY], str)
        ):
            return job_value(value[JOB_KEY])
        return {k: decode_value(v, job_value) for k, v in value.items()}
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, non-ASCII as ``\\uXXXX`` (``json.dumps``'s default, so anyone can
    recompute a digest; a lone surrogate from a non-UTF-8 argv hashes too): the hashed form."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


@attrs.frozen
class Task:
    """One unit of work: ``kind`` "command" (``target`` = argv) or "callable"
    (``target`` = ``"module:qualname"``, ``params`` = encoded keyword arguments)."""

    kind: str
    target: Any  # tuple[str, ...] for a command, "module:qualname" for a callable
    params: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    env: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    cwd: str | None = None
    name: str = ""
    resumable: bool = False
    #: ``environment:`` of this task (over the launcher's; docs/configuration.md, Environment);
    #: not in the digest, like the launcher's settings
    environment: Environment = EMPTY
    #: the submitted ``Job``s used as parameters (implicit dependencies, docs/design/runtime.md §15)
    inputs: tuple[Any, ...] = attrs.field(default=(), eq=False, hash=False, repr=False)

    def identity(self) -> dict[str, Any]:
        """``{kind, target, params, env, cwd}``: what the digest covers (and params.json holds)."""
        target = list(self.target) if self.kind == KIND_COMMAND else self.target
        return {
            "kind": self.kind,
            "target": target,
            "params": dict(self.params),
            "env": dict(self.env),
            "cwd": self.cwd,
        }

    @functools.cached_property
    def digest(self) -> str:
        """First 16 hex digits of SHA-256 of the canonical JSON of ``identity()``."""
        return hashlib.sha256(canonical_json(self.identity()).encode("utf-8")).hexdigest()[:16]

    @property
    def task_id(self) -> str:
        """``NAME-DIGEST``: unique per task, used in records, token holders and the CLI."""
        return f"{self.name}-{self.digest}"

    @property
    def argv(self) -> tuple[str, ...] | None:
        """The command line of a command task (None for a callable)."""
        return tuple(self.target) if self.kind == KIND_COMMAND else None

    def params_json(self) -> dict[str, Any]:
        """The content of ``params.json``: exactly ``{kind, target, params, env, cwd}`` (docs/design/runtime.md §2), what
        the digest covers (the name is the directory's parent; resumable lives in the script)."""
        return self.identity()

    def submit(
        self, launcher: Any = None, *, force: bool = False, after: Sequence[Any] | None = None
    ) -> Job:
        """Record the job and queue its submission (does not wait for the scheduler).

        Uses ``launcher``, else the current experiment's. A task already submitted in this
        process returns the same ``Job``; a finished directory is re-attached (docs/design/runtime.md §2).
        ``after``: jobs (or ``finished(job)``) that must end first (docs/design/runtime.md §15)."""
        return services().submit_task(self, launcher, force=force, after=after)


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (env or {}).items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise TaskError(f"env: {k!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if is_job(v):
            raise TaskError(
                f"env: value of {k} is a Job: pass its .directory or an output path instead "
                "(and after=[job] to wait for it)"
            )
        if not isinstance(v, (str, PurePath)) or isinstance(v, bool):
            raise TaskError(f"env: value of {k} must be a string, not {type(v).__name__}")
        text = str(v)
        if "\0" in text:
            raise TaskError(f"env: value of {k} contains a NUL character")
        out[k] = text
    return out


def _check_cwd(cwd: str | os.PathLike[str] | None) -> str | None:
    if cwd is None:
        return None
    if not isinstance(cwd, (str, os.PathLike)):
        raise TaskError(f"cwd: must be a path, not {type(cwd).__name__}")
    text = os.fspath(cwd)
    if not text or "\0" in text:
        raise TaskError(f"cwd: {text!r} is not a usable directory")
    if not text.startswith("/"):
        # relative to what? the job runs elsewhere (another directory, node or host)
        raise TaskError(
            f"cwd: {text!r} is relative; give an absolute path (the job does not run where "
            "the experiment was started), or leave it out to run in the job directory"
        )
    return text


def command(
    argv: Sequence[str | os.PathLike[str]],
    *,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    resumable: bool = False,
    environment: Mapping[str, Any] | Environment | None = None,
) -> Task:
    """A command-line task; ``cwd`` defaults to the job directory; ``environment`` the
    modules, venv, conda, container and setup lines it runs in (``TaskError`` when wrong)."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
        raise TaskError("command: argv must be a non-empty list of strings (not a single string)")
    if not argv:
        raise TaskError("command: argv must be a non-empty list of strings")
    words = []
    for i, w in enumerate(argv):
        if isinstance(w, PurePath):
            w = str(w)
        if is_job(w):
            raise TaskError(
                f"command: argv[{i}] is a Job: a command line cannot receive a job's result; "
                "pass its .directory or an output path instead (and after=[job] to wait for it)"
            )
        if not isinstance(w, str):
            raise TaskError(f"command: argv[{i}] is a {type(w).__name__}, not a string")
        if "\0" in w:
            raise TaskError(f"command: argv[{i}] contains a NUL character")
        words.append(w)
    if name is None:
        name = os.path.basename(words[0]) or words[0]
    return Task(
        kind=KIND_COMMAND,
        target=tuple(words),
        params={},
        env=_check_env(env),
        cwd=_check_cwd(cwd),
        name=sanitize_name(str(name)),
        resumable=bool(resumable),
        environment=coerce(environment, where="command(environment=...)", error=TaskError),
    )


def _refuse_unimportable(func: Callable[..., Any]) -> tuple[str, str]:
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    label = getattr(func, "__name__", repr(func))
    if not module or not qualname:
        raise TaskError(
            f"@task: {label!r} has no module or qualified name; decorate a module-level function"
        )
    if qualname == "<lambda>" or label == "<lambda>":
        raise TaskError(
            "@task: lambdas cannot be tasks (the job imports the function by name); define a module-level function"
        )
    if "<locals>" in qualname:
        raise TaskError(
            f"@task: {qualname} is defined inside a function (a closure); the job imports "
            "functions by module:qualname, so define it at module level"
        )
    if module == "__main__":
        raise TaskError(
            f"@task: {qualname} is defined in __main__, which the job's interpreter cannot import; "
            "move it to an importable module"
        )
    return module, qualname


class TaskFunction:
    """A ``@task``-decorated function: calling it returns a ``Task`` instead of running."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None,
        resumable: bool,
        environment: Mapping[str, Any] | Environment | None = None,
    ) -> None:
        self.environment = coerce(environment, where="@task(environment=...)", error=TaskError)
        if not callable(func) or not inspect.isfunction(inspect.unwrap(func)):
            raise TaskError(f"@task: {func!r} is not a function")
        self.module, self.qualname = _refuse_unimportable(func)
        self.func = func
        self.name = name
        self.resumable = resumable
        self.signature = inspect.signature(func)
        functools.update_wrapper(self, func)

    @property
    def target(self) -> str:
        """``module:qualname``."""
        return f"{self.module}:{self.qualname}"

    def _check_importable(self) -> None:
        try:
            obj: Any = importlib.import_module(self.module)
            for part in self.qualname.split("."):
                obj = getattr(obj, part)
        except Exception as e:
            raise TaskError(
                f"@task: {self.target} cannot be imported back ({type(e).__name__}: {e})"
            ) from None
        if obj is not self and inspect.unwrap(obj) is not inspect.unwrap(self.func):
            raise TaskError(
                f"@task: {self.target} names another object than the decorated function"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Task:
        self._check_importable()
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TaskError(f"{self.qualname}: {e}") from None
        bound.apply_defaults()
        jobs: list[Any] = []
        params = {k: encode_value(v, k, jobs) for k, v in bound.arguments.items()}
        return Task(
            kind=KIND_CALLABLE,
            target=self.target,
            params=params,
            env={},
            cwd=None,
            name=sanitize_name(self.name or self.qualname),
            resumable=self.resumable,
            environment=self.environment,
            inputs=tuple(jobs),
        )

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, here and now."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self.target}>"


@overload
def task(func: Callable[..., Any], /) -> TaskFunction: ...
@overload
def task(
    *,
    name: str | None = None,
    resumable: bool = False,
    environment: Mapping[str, Any] | Environment | None = None,
) -> Callable[[Callable[..., Any]], TaskFunction]: ...


def task(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    resumable: bool = False,
    environment: Mapping[str, Any] | Environment | None = None,
) -> TaskFunction | Callable[[Callable[..., Any]], TaskFunction]:
    """Decorate a module-level function: ``@task`` or ``@task(name=None, resumable=False,
    environment=None)``."""
    if func is not None:
        return TaskFunction(func, name=name, resumable=resumable, environment=environment)

    def wrap(f: Callable[..., Any]) -> TaskFunction:
        return TaskFunction(f, name=name, resumable=resumable, environment=environment)

    return wrap


def resolve_target(target: str) -> Callable[..., Any]:
    """Import ``module:qualname`` and return the plain function (unwrapping ``@task``)."""
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, TaskFunction):
        return obj.func
    return obj


__all__ = [
    "KIND_CALLABLE",
    "KIND_COMMAND",
    "Task",
    "TaskFunction",
    "command",
    "resolve_target",
    "task",
]
