"""Human explanations of the search: why each group, partition and candidate was or was not
chosen (the message of ``LauncherNotFoundError`` and the output of ``launchers find --explain``)."""

from __future__ import annotations

from typing import Any

import attrs

from ..units import format_duration, format_size


@attrs.frozen
class Reason:
    """One cause of rejection (of a host by ``finder.match``): a code and its numbers, formatted
    by ``reason_text``."""

    code: str
    values: tuple[object, ...] = ()

    def __str__(self) -> str:
        return reason_text(self)


def _size(value: Any) -> str:
    return format_size(int(value))


def _durs(limit: Any, asked: Any) -> tuple[str, str]:
    """Both sides of a duration comparison in one unit when whole hours (``20h < 96h``)."""
    a, b = int(limit), int(asked)
    if a % 3600 == 0 and b % 3600 == 0:
        return f"{a // 3600}h", f"{b // 3600}h"
    return format_duration(a), format_duration(b)


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def reason_text(reason: Reason) -> str:
    """The message for one rejection reason."""
    v = reason.values
    code = reason.code
    if code == "cores":
        return f"{_plural(v[0], 'core')} < {v[1]} requested"
    if code == "cores_for_memory":
        return (
            f"{_plural(v[0], 'core')} < {v[1]} needed for memory {_size(v[2])} "
            f"at {_size(v[3])} per core (use_memory_constraint: false)"
        )
    if code == "no_mem_per_cpu":
        return (
            f"memory {_size(v[0])} requested but use_memory_constraint is false and no "
            "cpu.mem_per_cpu is configured here"
        )
    if code == "memory":
        return f"memory {_size(v[0])} < {_size(v[1])} requested"
    if code == "gpu_count":
        return f"{_plural(v[0], 'GPU')} < {v[1]} requested"
    if code == "gpu_memory":
        if not v[0]:
            return f"GPU memory not declared, {_size(v[1])} requested (declare gpu.memory)"
        return f"GPU memory {_size(v[0])} < {_size(v[1])} requested"
    if code == "gpu_min_memory":
        return f"GPU min_memory {_size(v[0])} > {_size(v[1])} requested"
    if code == "gpu_kind":
        names = {"cuda": "CUDA", "mps": "Apple (mps)", "other": "other"}
        kinds: tuple[str, ...] = v[0]  # type: ignore[assignment]
        have = " and ".join(names.get(k, k) for k in kinds)
        return f"{have} GPUs here, {v[1]}() requested"
    if code == "unified_memory":
        cpu, gpus = int(v[1]), int(v[2])  # type: ignore[call-overload]
        return (
            f"memory {_size(v[0])} < {_size(cpu + gpus)} requested: {_size(cpu)} for the CPU "
            f"and {_size(gpus)} for the Apple GPU, which shares the machine's memory"
        )
    if code == "gpu_assign":
        return f"the {v[0]} GPU requests cannot be assigned to distinct GPUs among {v[1]}"
    if code == "duration":
        limit, asked = _durs(v[0], v[1])
        return f"partition allows {limit} < {asked} requested"
    if code == "qos_duration":
        limit, asked = _durs(v[1], v[2])
        return f"QoS {v[0]} allows {limit} < {asked}"
    if code == "min_gpu":
        return f"QoS {v[0]} requires at least {_plural(v[1], 'GPU')}, {v[2]} requested"
    if code == "disabled":
        return "group is disabled"
    if code == "partition_disabled":
        return f"partition {v[0]} is disabled"
    if code == "no_partition":
        return "no enabled partition"
    return f"{code} {v}"  # pragma: no cover - every code above


@attrs.define
class Explanation:
    """Lines of explanation, built while searching only when asked for (or on failure)."""

    lines: list[str] = attrs.Factory(list)

    def add(self, line: str, depth: int = 0) -> None:
        self.lines.append("  " * depth + line)

    def text(self) -> str:
        return "\n".join(self.lines)
