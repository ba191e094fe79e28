"""The callable runner: ``python -m launchers.run DIR`` (docs/design/runtime.md §2, §3).

Reads ``DIR/params.json``, imports ``module:qualname``, calls it with the parameters, and
writes ``result.json`` (when the value is plain JSON, a ``Path`` as ``{"$path": ...}``) or
``result.pickle``, or ``error.json`` ``{type, message, traceback}``; every file atomically.
Exit status: 0 on success, 1 when the function raised or could not be imported.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import pickle
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any

from .fsutil import atomic_write_bytes, atomic_write_json
from .jobs.depends import INPUTS
from .jobs.record import ERROR, PARAMS, RESULT_JSON, RESULT_PICKLE
from .jobs.task import decode_value, resolve_target

_MISSING = object()


def json_form(value: Any) -> Any:
    """``value`` as JSON data when it round-trips exactly (a ``Path`` as ``{"$path": p}``),
    else ``_MISSING`` (tuples, sets, non-string keys, NaN, objects: pickled instead)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if type(value) is int else _MISSING
    if isinstance(value, float):
        return value if type(value) is float and math.isfinite(value) else _MISSING
    if isinstance(value, PurePath):
        return {"$path": str(value)} if type(value) is type(Path()) else _MISSING
    if type(value) is list:
        items = [json_form(v) for v in value]
        return _MISSING if any(i is _MISSING for i in items) else items
    if type(value) is dict:
        if not all(isinstance(k, str) for k in value):
            return _MISSING
        if len(value) == 1 and "$path" in value:
            return _MISSING
        out = {k: json_form(v) for k, v in value.items()}
        return _MISSING if any(v is _MISSING for v in out.values()) else out
    return _MISSING


def call_with_params(func: Any, params: dict[str, Any]) -> Any:
    """Call ``func`` with the recorded parameters (``*args``/``**kwargs`` spread again)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return func(**params)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, p in sig.parameters.items():
        if name not in params:
            continue
        value = params[name]
        if p.kind is p.VAR_POSITIONAL:
            args.extend(value)
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update(value)
        elif p.kind is p.POSITIONAL_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD:
            args.append(value)
        else:
            kwargs[name] = value
    return func(*args, **kwargs)


class Inputs:
    """The results of the jobs given as parameters (docs/design/runtime.md §15), from the job
    directory's ``inputs.json``: a value, a pickle, or the dependency's directory here."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._table: dict[str, Any] | None = None

    def __call__(self, task_id: str) -> Any:
        if self._table is None:
            try:
                self._table = json.loads((self.directory / INPUTS).read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise RuntimeError(f"cannot read the inputs of this job: {e}") from None
        entry = (self._table or {}).get(task_id)
        if not isinstance(entry, dict):
            raise RuntimeError(f"no result of {task_id} in {self.directory / INPUTS}")
        if "value" in entry:
            return decode_value(entry["value"])
        if "pickle" in entry:
            return pickle.loads(base64.b64decode(entry["pickle"]))
        if "dir" in entry:
            where = Path(entry["dir"])
            if (where / RESULT_JSON).exists():
                return decode_value(json.loads((where / RESULT_JSON).read_text(encoding="utf-8")))
            if (where / RESULT_PICKLE).exists():
                return pickle.loads((where / RESULT_PICKLE).read_bytes())
            raise RuntimeError(f"{task_id} left no result file in {where}")
        raise RuntimeError(str(entry.get("missing") or f"no result of {task_id}"))


def _write_error(directory: Path, exc: BaseException) -> None:
    atomic_write_json(
        directory / ERROR,
        {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}"
            if type(exc).__module__ != "builtins"
            else type(exc).__qualname__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        },
    )


def run(directory: Path) -> int:
    """Run the callable task of ``directory``; the exit status."""
    try:
        spec = json.loads((directory / PARAMS).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"launchers.run: cannot read {directory / PARAMS}: {e}", file=sys.stderr)
        return 1
    target = spec.get("target")
    if spec.get("kind") != "callable" or not isinstance(target, str):
        print(
            f"launchers.run: {directory / PARAMS} does not describe a callable task",
            file=sys.stderr,
        )
        return 1
    try:
        func = resolve_target(target)
    except BaseException as e:
        print(
            f"launchers.run: cannot import {target} with {sys.executable} "
            f"({type(e).__name__}: {e}); is its module on PYTHONPATH for the job?",
            file=sys.stderr,
        )
        _write_error(directory, e)
        return 1
    inputs = Inputs(directory)
    try:
        params = {k: decode_value(v, inputs) for k, v in (spec.get("params") or {}).items()}
        value = call_with_params(func, params)
    except BaseException as e:
        traceback.print_exc()
        _write_error(directory, e)
        if isinstance(e, KeyboardInterrupt):
            return 130
        if isinstance(e, SystemExit):
            return e.code if isinstance(e.code, int) else 1
        return 1
    form = json_form(value)
    if form is not _MISSING:
        atomic_write_json(directory / RESULT_JSON, form)
    else:
        try:
            data = pickle.dumps(value)
        except Exception as e:
            print(f"launchers.run: the return value cannot be saved: {e}", file=sys.stderr)
            _write_error(directory, e)
            return 1
        atomic_write_bytes(directory / RESULT_PICKLE, data)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m launchers.run JOB_DIRECTORY", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
