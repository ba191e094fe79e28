"""Pure matching of one alternative against one host (docs/design/matching.md §3).

``problems`` returns why a host cannot run an alternative (empty when it can) and the number
of cores the job must ask for there (more than requested with ``cpu_per_gpu`` or when memory
is turned into cores by ``use_memory_constraint: false``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..language.values import GPURequest, HostRequirement
from .explain import Reason
from .gpus import SLOT_BITS, GPUSlot, accepts, assign_gpus
from .hosts import Host


def kind_bits(gpus: Sequence[GPURequest]) -> int:
    """The OR of the requests' kind bits: 0 when every request takes any kind (``gpu()``)."""
    need = 0
    for g in gpus:
        need |= g.bit
    return need


def gpu_total(gpus: Sequence[GPURequest]) -> int:
    """The memory the GPU requests ask for in all, which an Apple GPU takes from its host."""
    total = 0
    for g in gpus:
        total += g.memory
    return total


def _gpu_reasons(requests: Sequence[GPURequest], slots: Sequence[GPUSlot]) -> list[Reason]:
    out: list[Reason] = []
    if len(requests) > len(slots):
        out.append(Reason("gpu_count", (len(slots), len(requests))))
    for req in sorted(set(requests), key=lambda g: (-g.memory, g.kind)):
        if not slots or any(accepts(s, req) for s in slots):
            continue
        kinds = [s for s in slots if accepts(s, GPURequest(0, req.kind))]
        if not kinds:
            out.append(Reason("gpu_kind", (tuple(dict.fromkeys(s.kind for s in slots)), req.kind)))
            break
        r = req.memory
        biggest = max(s.memory for s in kinds)
        if r > biggest:
            out.append(Reason("gpu_memory", (biggest, r)))
        else:
            floor = min(s.min_memory for s in kinds if s.memory >= r)
            out.append(Reason("gpu_min_memory", (floor, r)))
        break
    if not out:
        out.append(Reason("gpu_assign", (len(requests), len(slots))))
    return out


def cores_needed(alt: HostRequirement, host: Host) -> tuple[int, Reason | None]:
    """Cores to ask for on ``host`` (cpu_per_gpu, memory as cores), or why it cannot be said."""
    cores = alt.cpu.cores
    ngpus = len(alt.cuda_gpus)
    if host.cpu_per_gpu and ngpus:
        cores = max(cores, host.cpu_per_gpu * ngpus)
    if host.memory_as_cores and alt.cpu.memory:
        if not host.mem_per_cpu:
            return cores, Reason("no_mem_per_cpu", (alt.cpu.memory,))
        cores = max(cores, -(-alt.cpu.memory // host.mem_per_cpu))
    return cores, None


def problems(
    alt: HostRequirement, host: Host, first_only: bool = True
) -> tuple[tuple[Reason, ...], int]:
    """Why ``host`` cannot run ``alt`` (empty if it can), and the cores to ask for there."""
    out: list[Reason] = []
    if host.max_duration and alt.duration > host.max_duration:
        if host.qos_name is not None and host.qos_duration == host.max_duration:
            out.append(Reason("qos_duration", (host.qos_name, host.max_duration, alt.duration)))
        else:
            out.append(Reason("duration", (host.max_duration, alt.duration)))
        if first_only:
            return tuple(out), 0
    ngpus = len(alt.cuda_gpus)
    if host.min_gpu and ngpus < host.min_gpu:
        out.append(Reason("min_gpu", (host.qos_name, host.min_gpu, ngpus)))
        if first_only:
            return tuple(out), 0
    cores, why = cores_needed(alt, host)
    if why is not None:
        out.append(why)
    elif host.cores and cores > host.cores:
        if (
            cores > alt.cpu.cores
            and host.memory_as_cores
            and alt.cpu.memory
            and (not host.cpu_per_gpu or cores > host.cpu_per_gpu * ngpus)
        ):
            out.append(
                Reason("cores_for_memory", (host.cores, cores, alt.cpu.memory, host.mem_per_cpu))
            )
        else:
            out.append(Reason("cores", (host.cores, cores)))
    if out and first_only:
        return tuple(out), cores
    if host.memory and alt.cpu.memory > host.memory:
        out.append(Reason("memory", (host.memory, alt.cpu.memory)))
        if first_only:
            return tuple(out), cores
    elif host.memory and host.unified and alt.cpu.memory + gpu_total(alt.cuda_gpus) > host.memory:
        out.append(
            Reason("unified_memory", (host.memory, alt.cpu.memory, gpu_total(alt.cuda_gpus)))
        )
        if first_only:
            return tuple(out), cores
    if ngpus:
        requests = alt.cuda_gpus
        if not assign_gpus(requests, host.gpus):
            out.extend(_gpu_reasons(requests, host.gpus))
    return tuple(out), cores


def fit(alt: HostRequirement, host: Host) -> int:
    """The cores to ask for on ``host``, or -1 when it cannot run ``alt`` (the fast path of
    ``problems``: same rules, no reasons built)."""
    if host.max_duration and alt.duration > host.max_duration:
        return -1
    gpus = alt.cuda_gpus
    n = len(gpus)
    if n < host.min_gpu:
        return -1
    cores = alt.cpu.cores
    if host.cpu_per_gpu and n:
        cores = max(cores, host.cpu_per_gpu * n)
    memory = alt.cpu.memory
    if host.memory_as_cores and memory:
        if not host.mem_per_cpu:
            return -1
        cores = max(cores, -(-memory // host.mem_per_cpu))
    if host.cores and cores > host.cores:
        return -1
    if host.memory and memory + (gpu_total(gpus) if host.unified else 0) > host.memory:
        return -1
    if n:
        slots = host.gpus
        if n > len(slots):
            return -1
        one = host.uniform_gpu
        if one is not None:
            if kind_bits(gpus) & ~SLOT_BITS[one.kind]:
                return -1
            low, high = one.min_memory, one.memory
            for g in gpus:
                r = g.memory
                if r and not low <= r <= high:
                    return -1
        elif not assign_gpus(gpus, slots):
            return -1
    return cores


def matches(alt: HostRequirement, host: Host) -> bool:
    """Whether ``host`` can run ``alt``."""
    return fit(alt, host) >= 0
