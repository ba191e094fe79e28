"""Turning a group's choice into a launcher value (pure): the sbatch options of a selection,
the launcher class of each kind, a ``batch:`` wrapper, and the explanation lines of a choice,
formatted only when read."""

from __future__ import annotations

from typing import Any

import attrs

from ..config.model import (
    FirecrestGroup,
    Group,
    LocalGroup,
    SlurmGroup,
    UnicoreGroup,
)
from ..errors import LaunchersError
from ..language.values import HostRequirement
from ..launcher import Launcher
from ..units import mib_ceil, slurm_time
from .choose import Merge, Selection
from .hosts import Candidate, GroupIndex, group_index
from .match import problems


def _describe(group: Group) -> str:
    return f"{group.kind} group {group.label}"


def slurm_options(group: SlurmGroup, alt: HostRequirement, sel: Selection) -> Any:
    """The sbatch options of a selection (docs/design/matching.md §5 "Output options")."""
    return _options(group, alt, sel.best, sel.cores, sel.merge)


def _options(
    group: SlurmGroup, alt: HostRequirement, best: Candidate, cores: int, merged: Merge
) -> Any:
    options_class = _OPTIONS_CLASS
    if options_class is None:
        options_class = _options_class()
    ngpus = len(alt.cuda_gpus)
    gres = gpus = None
    if ngpus:
        if group.gpu_option == "gres":
            gres = f"gpu:{ngpus}"
        else:
            gpus = ngpus
    mem = None
    memory = alt.cpu.memory
    if memory and group.use_memory_constraint:
        mem = f"{mib_ceil(memory)}M"
    exclude = merged.exclude
    duration = alt.duration
    return options_class(
        partition=",".join(merged.partitions),
        constraint=merged.constraint,
        gpus_per_node=gpus,
        gres=gres,
        cpus_per_task=cores,
        mem=mem,
        time=slurm_time(duration) if duration else None,
        qos=best.qos_name,
        account=best.account,
        exclude=",".join(exclude) if exclude else None,
    )


_OPTIONS_CLASS: Any = None


def _options_class() -> Any:
    """``SlurmOptions``, imported on first use (the finder does not need Slurm otherwise)."""
    global _OPTIONS_CLASS
    # lazy: SlurmOptions on first use, kept in a global (import time of find_launcher)
    from ..slurm.options import SlurmOptions

    _OPTIONS_CLASS = SlurmOptions
    return SlurmOptions


def selection_lines(index: int, alt: HostRequirement, sel: Selection) -> list[str]:
    """Why a selection was made: the best candidate, the merged ones, soundness notes."""
    head = [
        f"chosen for alternative {index} ({alt}): {sel.best.label()} (priority {sel.best.host.priority})"
    ]
    merged = [c.label() for c in sel.chosen if c is not sel.best]
    if merged:
        head.append("merged (same QoS and account): " + "; ".join(merged))
    head.extend(sel.notes)
    return head


def unmerged_lines(sel: Selection) -> list[str]:
    """Partitions that match but are not listed (another QoS or account, or more cores)."""
    listed = set(sel.partitions)
    dropped = {
        sel.index.group.partitions[e[1]].name for e in sel.merge.events if e[0] == "drop_partition"
    }
    out = []
    best = sel.best
    seen: set[str] = set()
    for c in sel.index.candidates:
        name = c.partition.name
        if name in listed or name in dropped or name in seen:
            continue
        reasons, needed = problems(sel.alt, c.host)
        if reasons:
            continue
        seen.add(name)
        if (c.qos_name, c.account) != (best.qos_name, best.account):
            out.append(
                f"partition {name} matches ({c.label()}) but is not merged: the best candidate uses "
                f"QoS {best.qos_name} and account {best.account}"
            )
        else:
            out.append(
                f"partition {name} matches but is not merged: it needs or fits a different --cpus-per-task ({needed} vs {sel.cores})"
            )
    return out


class _LazyLines:
    """The explanation of a choice, formatted only when read (finding stays fast)."""

    __slots__ = ("alt", "chosen", "gindex", "group", "index")

    def __init__(
        self,
        group: Group,
        index: int,
        alt: HostRequirement,
        gindex: GroupIndex,
        chosen: tuple[Candidate, int, Merge],
    ) -> None:
        self.group, self.index, self.alt, self.gindex, self.chosen = (
            group,
            index,
            alt,
            gindex,
            chosen,
        )

    def __iter__(self) -> Any:
        best, cores, merged = self.chosen
        sel = Selection(index=self.gindex, alt=self.alt, best=best, cores=cores, merge=merged)
        lines = selection_lines(self.index, self.alt, sel)
        lines[0] = f"{_describe(self.group)}: {lines[0]}"
        return iter(lines)


def _slurm_launcher(
    cls: Any,
    group: SlurmGroup,
    gindex: GroupIndex,
    index: int,
    alt: HostRequirement,
    chosen: tuple[Candidate, int, Merge],
) -> Launcher:
    best, cores, merged = chosen
    # the options depend on the alternative only through these (the group is the merge's)
    key = (best, cores, len(alt.cuda_gpus), alt.cpu.memory, alt.duration)
    memo = merged.options
    options = memo.get(key)
    if options is None:
        options = _options(group, alt, best, cores, merged)
        if len(memo) >= _OPTIONS_SIZE:
            memo.clear()
        memo[key] = options
    return cls(
        group=group, options=options, alternative=index,
        requirement=alt, hosts=merged.hosts, why=_LazyLines(group, index, alt, gindex, chosen),
    )  # fmt: skip


_OPTIONS_SIZE = 256


def _plan(group: Group) -> Any:
    """How ``find_launcher`` tries a group: (index, single partition, launcher class) for a
    Slurm-like group with a fixed description, ``False`` for the others."""
    if isinstance(group, LocalGroup) or group.query_slurm:
        return False
    return (group_index(group), isinstance(group, UnicoreGroup), _launcher_class(group))


def _launcher_class(group: SlurmGroup) -> Any:
    cls: Any
    if isinstance(group, UnicoreGroup):
        # lazy: launcher classes of the kinds a configuration uses, on first use (import time of find_launcher)
        from ..remote.unicore import UnicoreLauncher as cls
    elif isinstance(group, FirecrestGroup):
        # lazy: launcher classes of the kinds a configuration uses, on first use (import time of find_launcher)
        from ..remote.firecrest import FirecrestLauncher as cls
    else:
        # lazy: launcher classes of the kinds a configuration uses, on first use (import time of find_launcher)
        from ..slurm.launcher import SlurmLauncher as cls
    return cls


def _batched(group: Group, launcher: Launcher) -> Launcher:
    """Wrap in a ``BatchLauncher`` when the group has a ``batch:`` mapping (docs/design/pilots.md §3.1)."""
    if group.batch is None:
        return launcher
    options = attrs.asdict(group.batch)
    if options.get("slots") is None:
        options["slots"] = "auto"
    try:
        return launcher.batched(**options)
    except ImportError as e:
        raise LaunchersError(
            f"{_describe(group)} has a batch: mapping but batching is not available ({e})"
        ) from None
