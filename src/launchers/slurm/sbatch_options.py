"""sbatch's long options (Slurm 22.05), to check user ``sbatch_options`` with "did you mean".

The list is a fact about sbatch; options the launcher writes itself are refused, as are options
that make no sense in a job script or would break submission (``wrap``, ``wait``...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from ..errors import ScriptError

#: Options that take a value.
VALUE_OPTIONS = frozenset(
    [
        "account",
        "acctg-freq",
        "array",
        "batch",
        "bb",
        "bbf",
        "begin",
        "chdir",
        "cluster-constraint",
        "clusters",
        "comment",
        "constraint",
        "container",
        "core-spec",
        "cores-per-socket",
        "cpu-freq",
        "cpus-per-gpu",
        "cpus-per-task",
        "deadline",
        "delay-boot",
        "dependency",
        "distribution",
        "error",
        "exclude",
        "export",
        "export-file",
        "extra-node-info",
        "gid",
        "gpu-bind",
        "gpu-freq",
        "gpus",
        "gpus-per-node",
        "gpus-per-socket",
        "gpus-per-task",
        "gres",
        "gres-flags",
        "hint",
        "input",
        "job-name",
        "licenses",
        "mail-type",
        "mail-user",
        "mcs-label",
        "mem",
        "mem-bind",
        "mem-per-cpu",
        "mem-per-gpu",
        "mincpus",
        "network",
        "nodefile",
        "nodelist",
        "nodes",
        "ntasks",
        "ntasks-per-core",
        "ntasks-per-gpu",
        "ntasks-per-node",
        "ntasks-per-socket",
        "open-mode",
        "output",
        "partition",
        "power",
        "prefer",
        "priority",
        "profile",
        "qos",
        "reservation",
        "signal",
        "sockets-per-node",
        "switches",
        "thread-spec",
        "threads-per-core",
        "time",
        "time-min",
        "tmp",
        "uid",
        "wckey",
        "kill-on-invalid-dep",
        "wait-all-nodes",
    ]
)
#: Options whose value is optional (``true`` writes the bare flag).
OPTIONAL_VALUE_OPTIONS = frozenset(
    ["exclusive", "get-user-env", "nice", "no-kill", "propagate", "reboot"]
)
#: Flags that take no value.
FLAG_OPTIONS = frozenset(
    [
        "contiguous",
        "hold",
        "ignore-pbs",
        "overcommit",
        "oversubscribe",
        "spread-job",
        "use-min-nodes",
        "quiet",
        "verbose",
        "requeue",
        "no-requeue",
        "parsable",
        "test-only",
        "wait",
        "help",
        "usage",
        "version",
    ]
)
#: Every long option sbatch 22.05 knows (plus the short-form aliases people type).
SBATCH_OPTIONS = VALUE_OPTIONS | OPTIONAL_VALUE_OPTIONS | FLAG_OPTIONS | {"wrap"}

#: Written by the launcher itself (docs/design/runtime.md §3).
LAUNCHER_OWNED = frozenset(
    [
        "job-name",
        "output",
        "error",
        "open-mode",
        "chdir",
        "export",
        "array",
        "parsable",
        "requeue",
        "no-requeue",
        "signal",
    ]
)
#: Not usable inside a job script submitted by the launcher, with the reason.
NOT_ALLOWED: Mapping[str, str] = {
    "wrap": "the launcher writes the job script",
    "wait": "it would block submission until the job ends",
    "test-only": "it would not submit the job",
    "help": "it is not a job option",
    "usage": "it is not a job option",
    "version": "it is not a job option",
}

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` or an empty string."""
    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_sbatch_options(
    options: Iterable[tuple[str, object]], *, where: str = "sbatch_options"
) -> tuple[tuple[str, str | bool], ...]:
    """Validate user options ``{name: value}``; returns ``(name, value)`` pairs in order.

    ``True`` is a bare flag, ``False`` leaves the option out, numbers become text.
    Raises ``ScriptError`` naming the option on an unknown, owned or malformed one.
    """
    out: list[tuple[str, str | bool]] = []
    for raw_name, value in options:
        name = str(raw_name)
        if name.startswith("-"):
            raise ScriptError(
                f"{where}: write option names without dashes: {name.lstrip('-')!r}, not {name!r}"
            )
        key = name.replace("_", "-")
        if not _NAME_RE.match(key) or key not in SBATCH_OPTIONS:
            raise ScriptError(
                f"{where}: {name!r} is not an sbatch option{suggest(key, SBATCH_OPTIONS)}"
            )
        if key in LAUNCHER_OWNED:
            raise ScriptError(
                f"{where}: {name!r} is set by the launcher itself and cannot be given here"
            )
        if key in NOT_ALLOWED:
            raise ScriptError(f"{where}: {name!r} cannot be used: {NOT_ALLOWED[key]}")
        if value is False or value is None:
            continue
        if value is True:
            if key in VALUE_OPTIONS:
                raise ScriptError(f"{where}: {name!r} needs a value, not true")
            out.append((key, True))
            continue
        if isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, str):
            raise ScriptError(
                f"{where}: {name!r} must be a string, a number or true, not {type(value).__name__}"
            )
        if key in FLAG_OPTIONS:
            raise ScriptError(f"{where}: {name!r} is a flag; write true, not {value!r}")
        if any(c in value for c in "\n\r\0"):
            raise ScriptError(
                f"{where}: the value of {name!r} holds a newline, carriage return or NUL, which would "
                "start a directive of its own in the sbatch script"
            )
        out.append((key, value))
    return tuple(out)


__all__ = [
    "FLAG_OPTIONS",
    "LAUNCHER_OWNED",
    "NOT_ALLOWED",
    "SBATCH_OPTIONS",
    "VALUE_OPTIONS",
    "check_sbatch_options",
    "suggest",
]
