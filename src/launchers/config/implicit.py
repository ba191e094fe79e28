"""The implicit local launcher: this machine's cores, memory and GPUs, used when no
``launchers.yaml`` exists (docs/design/matching.md §4). Reading the machine is I/O; parsing is pure.

Linux: ``/proc/meminfo`` and ``nvidia-smi``. macOS: ``sysctl hw.memsize``, and on Apple
silicon one Apple GPU (``kind: mps``) whose memory is the machine's (unified memory).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache

from launchers.config.model import CPUConfig, LocalGPU, LocalGroup
from launchers.units import MIB


def parse_meminfo(text: str) -> int | None:
    """Bytes of ``MemTotal`` in a ``/proc/meminfo`` text, ``None`` when absent."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                factor = {"kb": 1024, "mb": 1024**2, "gb": 1024**3}.get(unit, 1)
                return int(parts[1]) * factor
    return None


def parse_nvidia_smi(text: str) -> tuple[LocalGPU, ...]:
    """GPUs from ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``
    (memory in MiB); identical cards are merged into one entry with a count."""
    counts: dict[tuple[str, int], int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, mem = line.rpartition(",")
        name, mem = name.strip(), mem.strip()
        if not name or not mem.isdigit():
            continue
        key = (name, int(mem) * MIB)
        counts[key] = counts.get(key, 0) + 1
    return tuple(LocalGPU(model=n, count=c, memory=m) for (n, m), c in counts.items())


def parse_sysctl_int(text: str) -> int | None:
    """The integer ``sysctl -n NAME`` printed (``hw.memsize``: bytes), ``None`` if unreadable."""
    value = text.strip()
    return int(value) if value.isdigit() else None


def apple_gpus(machine: str, memory: int | None, brand: str = "") -> tuple[LocalGPU, ...]:
    """The GPU of a Mac: on Apple silicon (``arm64``), one Apple GPU (``kind: mps``) sharing
    the machine's ``memory``; none on Intel Macs (their GPUs are not MPS with unified memory)."""
    if machine != "arm64" or not memory:
        return ()
    name = brand.strip() or "Apple silicon"
    return (LocalGPU(model=f"{name} GPU (MPS)", count=1, memory=memory, kind="mps"),)


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            return parse_meminfo(f.read())
    except OSError:
        return None


def _gpus() -> tuple[LocalGPU, ...]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else ()


@lru_cache(maxsize=1)
def implicit_local_group() -> LocalGroup:
    """A local group describing this machine (read once per process), ``implicit=True``."""
    if sys.platform == "darwin":
        memory = parse_sysctl_int(_sysctl("hw.memsize"))
        return LocalGroup(
            cpu=CPUConfig(cores=_cores(), memory=memory),
            gpus=apple_gpus(platform.machine(), memory, _sysctl("machdep.cpu.brand_string")),
            implicit=True,
        )
    return LocalGroup(
        cpu=CPUConfig(cores=_cores(), memory=_memory()),
        gpus=_gpus(),
        implicit=True,
    )


__all__ = [
    "apple_gpus",
    "implicit_local_group",
    "parse_meminfo",
    "parse_nvidia_smi",
    "parse_sysctl_int",
]
