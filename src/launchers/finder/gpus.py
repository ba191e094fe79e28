"""GPU slots and the assignment of GPU requests to them (docs/design/matching.md §3): pure, used by the
matcher of single hosts (``finder.match``) and by the compiled matchers of ``finder.hosts``."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..language.values import GPURequest

#: A host GPU's kind as a bit, compared with the requests' (``language.values.KIND_BITS``:
#: cuda 1, mps 2, gpu() 0 = any): a slot of bit B accepts a request of bit b when b is 0 or B.
SLOT_BITS = {"cuda": 1, "mps": 2, "other": 4}


@attrs.frozen
class GPUSlot:
    """One host GPU: memory in bytes (0 = unknown), the smallest request it accepts, and its
    kind (``cuda``, ``mps`` an Apple GPU sharing the host's memory, ``other``)."""

    memory: int = 0
    min_memory: int = 0
    kind: str = "cuda"


def accepts(slot: GPUSlot, request: GPURequest | int) -> bool:
    """A host GPU accepts a request of its kind (``gpu()`` asks for any kind) when
    ``min_memory <= memory asked <= memory``; 0 asks for any memory. A bare number is the
    memory of a ``gpu(...)`` request."""
    if isinstance(request, int):
        memory = request
    else:
        if request.bit and request.bit != SLOT_BITS[slot.kind]:
            return False
        memory = request.memory
    if memory == 0:
        return True
    return slot.min_memory <= memory <= slot.memory


def assign_gpus(requests: Sequence[GPURequest | int], slots: Sequence[GPUSlot]) -> bool:
    """Whether every request can go to a distinct slot that accepts it (bipartite matching).

    The answer never depends on the order of either list."""
    if len(requests) > len(slots):
        return False
    if not requests:
        return True
    if len(set(slots)) == 1:
        slot = slots[0]
        return all(accepts(slot, r) for r in requests)
    owner: list[int] = [-1] * len(slots)  # slot -> request

    def augment(r: int, seen: list[bool]) -> bool:
        for s, slot in enumerate(slots):
            if seen[s] or not accepts(slot, requests[r]):
                continue
            seen[s] = True
            if owner[s] < 0 or augment(owner[s], seen):
                owner[s] = r
                return True
        return False

    # most constrained requests first only speeds things up; the result is order independent
    return all(augment(r, [False] * len(slots)) for r in range(len(requests)))


__all__ = ["SLOT_BITS", "GPUSlot", "accepts", "assign_gpus"]
