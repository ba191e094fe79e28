"""Immutable requirement values and their algebra (``&``, ``|``, ``*``).

``HostRequirement`` is one alternative (what one host must offer); ``RequirementUnion`` is an
ordered list of alternatives, most preferred first. Combining never mutates an operand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

from ..errors import RequirementSyntaxError
from ..units import Negative, UnitError, format_duration, parse_seconds, parse_size, size_text


@attrs.frozen
class CPURequest:
    """CPU side of one alternative: memory in bytes (0 = unspecified) and cores."""

    memory: int = 0
    cores: int = 1

    def __str__(self) -> str:
        args = []
        if self.memory:
            args.append(f"mem={size_text(self.memory)}")
        if self.cores != 1:
            args.append(f"cores={self.cores}")
        return f"cpu({', '.join(args)})"


#: What kind of accelerator a request asks for (its atom's name): ``cuda`` an NVIDIA CUDA GPU,
#: ``mps`` an Apple GPU (Metal), ``gpu`` any accelerator a host declares.
GPU_KINDS = ("cuda", "mps", "gpu")
#: A request's kind as a bit the finder compares with the host GPUs' (``gpu`` = 0: any).
KIND_BITS = {"cuda": 1, "mps": 2, "gpu": 0}


@attrs.frozen
class GPURequest:
    """One GPU: memory in bytes (0 meaning any memory) and kind (one of ``GPU_KINDS``:
    ``cuda``, ``mps``, or ``gpu`` for any accelerator)."""

    memory: int = 0
    kind: str = "cuda"

    @property
    def bit(self) -> int:
        """``KIND_BITS[kind]``, what the finder compares with the host GPUs' kinds."""
        return KIND_BITS[self.kind]

    def __str__(self) -> str:
        return f"{self.kind}(mem={size_text(self.memory)})" if self.memory else f"{self.kind}()"


class Items(tuple):
    """An immutable sequence that also equals a list of the same items: docs/design/matching.md §2 calls
    ``.cuda_gpus`` and ``.requirements`` lists, so ``alt.cuda_gpus == []`` must hold."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple(self) == tuple(other)
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def _gpu_tuple(gpus: Iterable[GPURequest]) -> tuple[GPURequest, ...]:
    return gpus if type(gpus) is Items else Items(gpus)


@attrs.frozen
class HostRequirement:
    """One alternative: duration (seconds, 0 = unspecified), CPU request, GPU requests
    (``cuda_gpus`` holds every accelerator request, whatever its ``kind``)."""

    duration: int = 0
    cpu: CPURequest = CPURequest()
    cuda_gpus: tuple[GPURequest, ...] = attrs.field(default=(), converter=_gpu_tuple)

    @property
    def requirements(self) -> tuple[HostRequirement, ...]:
        """The alternatives, for code that treats every requirement as a union."""
        return Items((self,))

    def as_union(self) -> RequirementUnion:
        return RequirementUnion((self,))

    def __and__(self, other: object) -> Requirement:
        if isinstance(other, RequirementUnion):
            return RequirementUnion(tuple(self & alt for alt in other.requirements))  # type: ignore[misc]
        if not isinstance(other, HostRequirement):
            return NotImplemented
        return HostRequirement(
            duration=max(self.duration, other.duration),
            cpu=CPURequest(
                memory=max(self.cpu.memory, other.cpu.memory),
                cores=max(self.cpu.cores, other.cpu.cores),
            ),
            cuda_gpus=self.cuda_gpus + other.cuda_gpus,
        )

    def __or__(self, other: object) -> RequirementUnion:
        if isinstance(other, (HostRequirement, RequirementUnion)):
            return RequirementUnion(self.requirements + other.requirements)
        return NotImplemented

    def __mul__(self, count: object) -> HostRequirement:
        if isinstance(count, bool) or not isinstance(count, int):
            return NotImplemented
        _check_repeat(self, count)
        return attrs.evolve(self, cuda_gpus=self.cuda_gpus * count)

    __rmul__ = __mul__

    def __str__(self) -> str:
        parts = []
        if self.duration:
            parts.append(f"duration={format_duration(self.duration)}")
        if self.cpu != CPURequest():
            parts.append(str(self.cpu))
        # group identical consecutive GPUs as cuda(...)*N (gpu(...)*N, mps(...)*N)
        i = 0
        gpus = self.cuda_gpus
        while i < len(gpus):
            j = i
            while j < len(gpus) and gpus[j] == gpus[i]:
                j += 1
            n = j - i
            parts.append(str(gpus[i]) + (f"*{n}" if n > 1 else ""))
            i = j
        return " & ".join(parts) if parts else "cpu()"


def _alternative_tuple(alternatives: Iterable[HostRequirement]) -> tuple[HostRequirement, ...]:
    return alternatives if type(alternatives) is Items else Items(alternatives)


@attrs.frozen
class RequirementUnion:
    """Alternatives in order of preference; ``a | b | c`` is flat."""

    requirements: tuple[HostRequirement, ...] = attrs.field(converter=_alternative_tuple)

    def as_union(self) -> RequirementUnion:
        return self

    def __or__(self, other: object) -> RequirementUnion:
        if isinstance(other, (HostRequirement, RequirementUnion)):
            return RequirementUnion(self.requirements + other.requirements)
        return NotImplemented

    def __and__(self, other: object) -> RequirementUnion:
        if isinstance(other, HostRequirement):
            return RequirementUnion(tuple(alt & other for alt in self.requirements))  # type: ignore[misc]
        if isinstance(other, RequirementUnion):
            out: list[HostRequirement] = []
            for a in self.requirements:
                for b in other.requirements:
                    r = a & b
                    assert isinstance(r, HostRequirement)
                    out.append(r)
            return RequirementUnion(tuple(out))
        return NotImplemented

    def __rand__(self, other: object) -> RequirementUnion:
        if isinstance(other, HostRequirement):
            return RequirementUnion(tuple(other & alt for alt in self.requirements))  # type: ignore[misc]
        return NotImplemented

    def __mul__(self, count: object) -> RequirementUnion:
        if isinstance(count, bool) or not isinstance(count, int):
            return NotImplemented
        _check_repeat(self, count)
        return RequirementUnion(
            tuple(attrs.evolve(alt, cuda_gpus=alt.cuda_gpus * count) for alt in self.requirements)
        )

    __rmul__ = __mul__

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.requirements)

    def __len__(self) -> int:
        return len(self.requirements)

    def __str__(self) -> str:
        return " | ".join(str(r) for r in self.requirements)


Requirement = HostRequirement | RequirementUnion

#: The error of ``*N`` after something other than GPUs (the parser's, and Python's ``*``).
REPEAT_NEEDS_GPUS = (
    "'*N' repeats GPUs: it must follow cuda(...), gpu(...) or mps(...) (or a parenthesized "
    "group of such requests), not duration=... or cpu(...)"
)
_NO_CPU = CPURequest()


def gpus_only(value: Requirement) -> bool:
    """True when ``value`` asks for GPUs and nothing else (so ``*N`` means N times them)."""
    for alt in value.requirements:
        if alt.duration or alt.cpu != _NO_CPU or not alt.cuda_gpus:
            return False
    return True


def _check_repeat(value: Requirement, count: int) -> None:
    """Python's ``value * count`` follows the rules of the string ``*N`` (docs/design/matching.md §1, §2):
    ``N >= 1``, and only GPUs can be repeated (``cpu()*2`` would silently mean nothing)."""
    if count >= 1 and gpus_only(value):
        return
    text = str(value)
    if " & " in text or " | " in text or "*" in text:
        text = f"({text})"  # how the string form writes it: '*' binds tighter than '&' and '|'
    star = len(text) + 1
    text += f"*{count}"
    if count < 1:
        raise RequirementSyntaxError(
            f"*{count}: the GPU count must be at least 1", text, 1, star + 1
        )
    raise RequirementSyntaxError(REPEAT_NEEDS_GPUS, text, 1, star)


def _size_arg(value: str | int | None, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise RequirementSyntaxError(f"{what}: {value!r} is not a size", str(value), 1, 1)
    if isinstance(value, int):
        if value < 0:
            raise RequirementSyntaxError(f"{what}: a size cannot be negative", str(value), 1, 1)
        return value
    if not isinstance(value, str):
        raise RequirementSyntaxError(
            f"{what}: {value!r} is not a size; write a string such as '24G' (or an integer number of bytes)",
            str(value), 1, 1,
        )  # fmt: skip
    try:
        return parse_size(value)
    except UnitError as e:
        raise RequirementSyntaxError(f"{what}: {e}", str(value), 1, 1) from None


def cpu(mem: str | int | None = None, cores: int = 1) -> HostRequirement:
    """A CPU request: ``mem`` a size such as ``"400M"`` (or bytes), ``cores`` at least 1."""
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise RequirementSyntaxError(
            f"cpu(cores={cores!r}): cores must be an integer >= 1", f"cores={cores}", 1, 7
        )
    return HostRequirement(cpu=CPURequest(memory=_size_arg(mem, "cpu(mem=...)"), cores=cores))


def cuda_gpu(mem: str | int | None = None) -> HostRequirement:
    """One CUDA GPU with at least ``mem`` of memory (any CUDA GPU when ``None``)."""
    return HostRequirement(cuda_gpus=(GPURequest(memory=_size_arg(mem, "cuda(mem=...)")),))


def gpu(mem: str | int | None = None) -> HostRequirement:
    """One accelerator of any kind (CUDA, Apple, other) with at least ``mem`` of memory."""
    return HostRequirement(
        cuda_gpus=(GPURequest(memory=_size_arg(mem, "gpu(mem=...)"), kind="gpu"),)
    )


def mps(mem: str | int | None = None) -> HostRequirement:
    """One Apple GPU (Metal Performance Shaders) with at least ``mem`` of memory; its memory
    is the machine's, so it counts against the machine's memory too."""
    return HostRequirement(
        cuda_gpus=(GPURequest(memory=_size_arg(mem, "mps(mem=...)"), kind="mps"),)
    )


def duration(spec: str | int | float) -> HostRequirement:
    """A duration: a string such as ``"4 days"`` or a number of seconds."""
    if isinstance(spec, bool):
        raise RequirementSyntaxError("duration: not a duration", str(spec), 1, 1)
    try:
        seconds = parse_seconds(spec)
    except Negative:
        raise RequirementSyntaxError("duration: cannot be negative", str(spec), 1, 1) from None
    except UnitError as e:
        raise RequirementSyntaxError(f"duration: {e}", str(spec), 1, 1) from None
    return HostRequirement(duration=math.ceil(seconds))


def as_union(req: Requirement) -> RequirementUnion:
    """Any requirement as a union of alternatives."""
    return req.as_union()
