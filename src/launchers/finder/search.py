"""``find_launcher``: for each alternative in order, for each group by weight, the first group
that can run it gives the launcher (finder.md §5)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..config.keys import STRATEGIES
from ..config.model import (
    FirecrestGroup,
    Group,
    LaunchersConfig,
    LocalGroup,
    SlurmGroup,
    UnicoreGroup,
)
from ..errors import LauncherNotFoundError, LaunchersError, RequirementSyntaxError
from ..hooks import services
from ..language.values import HostRequirement, RequirementUnion
from ..launcher import Launcher
from ..units import mib_ceil, slurm_time
from .choose import Merge, Selection, choice, select
from .estimate import decide, estimate_all, group_label, reason, when
from .explain import Explanation
from .hosts import Candidate, GroupIndex, cached, cached_local_host, group_index
from .match import fit, problems

_MISSING: Any = object()


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> RequirementUnion:
    # lazy: the requirement grammar only for a requirement given as text
    from ..language.parser import parse

    return parse(text)


def requirements_of(requirements: Sequence[object]) -> tuple[HostRequirement, ...]:
    """The alternatives of every argument, concatenated in order (strings are parsed)."""
    if not requirements:
        return (HostRequirement(),)
    out: list[HostRequirement] = []
    for req in requirements:
        if isinstance(req, str):
            out.extend(_parse_text(req).requirements)
        elif isinstance(req, (HostRequirement, RequirementUnion)):
            out.extend(req.requirements)
        else:
            raise RequirementSyntaxError(
                f"a requirement must be a string or a requirement value, not {type(req).__name__}",
                repr(req),
            )
    return tuple(out)


def _tags_of(tags: Iterable[str] | str | None) -> frozenset[str]:
    if tags is None:
        return frozenset()
    if isinstance(tags, str):
        return frozenset(t.strip() for t in tags.split(",") if t.strip())
    try:
        return frozenset(str(t) for t in tags)
    except TypeError:
        raise LaunchersError(
            f"tags must be a list of names or a comma-separated string, not {type(tags).__name__}"
        ) from None


def config_of(config: LaunchersConfig | str | os.PathLike[str] | None) -> LaunchersConfig:
    """The configuration to search: a loaded one, a path, or the default search path."""
    if isinstance(config, LaunchersConfig):
        return config
    global _LOAD_CONFIG
    load = _LOAD_CONFIG
    if load is None:
        # lazy: the configuration loader (~80 ms to import) on the first search
        from ..config.loader import load_config as load

        _LOAD_CONFIG = load
    if config is not None and config.__class__ is not str and isinstance(config, os.PathLike):
        text = os.fspath(config)
        if text.__class__ is str:
            config = text  # a str argument takes load_config's fastest path
    return load(config)  # checks the type, and caches by the argument


_LOAD_CONFIG: Any = None


def _ordered_groups(config: LaunchersConfig) -> tuple[Group, ...]:
    if config.is_empty:
        # lazy: the implicit local group only without a configuration file (import time of find_launcher)
        from ..config.implicit import implicit_local_group

        return (implicit_local_group(),)
    return tuple(sorted(config.groups, key=lambda g: -g.weight))  # stable: file order


@attrs.frozen(eq=False)
class _ConfigState:
    """What the finder keeps per loaded configuration: ordered groups and found launchers."""

    groups: tuple[Group, ...]
    live: bool  # a group queries Slurm at search time: results cannot be remembered
    found: dict[Any, Any] = attrs.field(factory=dict)
    #: id(group) -> (group index, single partition, launcher class), or False for groups
    #: searched the plain way (local, query_slurm); filled as groups are first tried
    plans: dict[int, Any] = attrs.field(factory=dict)


def _state(config: LaunchersConfig) -> _ConfigState:
    groups = _ordered_groups(config)
    live = any(isinstance(g, SlurmGroup) and g.query_slurm for g in groups)
    return _ConfigState(groups=groups, live=live)


#: the last configuration searched and its state: scripts search one configuration in loops
_LAST: list[Any] = [None, None]


def config_state(config: LaunchersConfig) -> _ConfigState:
    """The cached ``_ConfigState`` of a configuration."""
    last = _LAST
    if last[0] is config:
        return last[1]
    state = cached(config, "state", _state)
    last[0], last[1] = config, state
    return state


def ordered_groups(config: LaunchersConfig) -> tuple[Group, ...]:
    """Groups by decreasing weight, file order among equals (cached per configuration)."""
    return config_state(config).groups


def _describe(group: Group) -> str:
    return f"{group.kind} group {group.label}"


def slurm_options(group: SlurmGroup, alt: HostRequirement, sel: Selection) -> Any:
    """The sbatch options of a selection (finder.md §5 "Output options")."""
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
    """Wrap in a ``BatchLauncher`` when the group has a ``batch:`` mapping (batching.md §3.1)."""
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


@attrs.define
class SearchResult:
    """The launcher found (or ``None``) and, when asked, the explanation of the search."""

    launcher: Launcher | None
    explanation: Explanation


def _refresh(group: SlurmGroup) -> SlurmGroup:
    return services().refresh_group(group)


def _try_group(
    group: Group, index: int, alt: HostRequirement, explain: Explanation | None
) -> Launcher | None:
    if isinstance(group, LocalGroup):
        if group.disabled:
            if explain is not None:
                explain.add(f"{_describe(group)}: group is disabled", 1)
            return None
        host = cached_local_host(group)
        if fit(alt, host) < 0:
            if explain is not None:
                reasons, _ = problems(alt, host, first_only=False)
                explain.add(f"{_describe(group)}: " + "; ".join(str(r) for r in reasons), 1)
            return None
        # lazy: launcher classes of the kinds a configuration uses, on first use (import time of find_launcher)
        from ..local.launcher import DirectLauncher

        line = f"{_describe(group)}: chosen for alternative {index} ({alt})"
        if explain is not None:
            explain.add(line, 1)
        return DirectLauncher(group=group, alternative=index, requirement=alt, why=(line,))
    if group.query_slurm:
        group = _refresh(group)
    gindex = group_index(group)
    single = isinstance(group, UnicoreGroup)
    if explain is None:
        chosen = choice(gindex, alt, single)
        if chosen is None:
            return None
        return _slurm_launcher(_launcher_class(group), group, gindex, index, alt, chosen)
    local = Explanation()
    explain.add(f"{_describe(group)}:", 1)
    sel = select(gindex, alt, local, single)
    if sel is None:
        explain.lines.extend(local.lines)
        explain.add("no partition matches", 2)
        return None
    for line in selection_lines(index, alt, sel):
        explain.add(line, 2)
    for line in unmerged_lines(sel):
        explain.add(line, 2)
    explain.lines.extend(local.lines)  # the other candidates, for --explain
    return _slurm_launcher(
        _launcher_class(group), group, gindex, index, alt, (sel.best, sel.cores, sel.merge)
    )


def search(
    alternatives: Sequence[HostRequirement],
    config: LaunchersConfig,
    tags: frozenset[str] = frozenset(),
    explain: bool = False,
) -> SearchResult:
    """The search itself; ``explain=True`` records why every group was or was not chosen."""
    ex = Explanation() if explain else None
    groups = ordered_groups(config)
    if tags:
        eligible = []
        for g in groups:
            if tags & set(g.tags):
                eligible.append(g)
            elif ex is not None:
                ex.add(
                    f"{_describe(g)}: skipped, its tags {sorted(g.tags)} include none of {sorted(tags)}"
                )
        groups = tuple(eligible)
    if ex is not None and not groups:
        ex.add("no group to search" + (f" with tags {sorted(tags)}" if tags else ""))
    for i, alt in enumerate(alternatives):
        if ex is not None:
            ex.add(f"alternative {i}: {alt}")
        for gi, group in enumerate(groups):
            launcher = _try_group(group, i, alt, ex)
            if launcher is not None:
                if ex is not None:
                    for later in groups[gi + 1 :]:
                        ex.add(f"{_describe(later)}: not tried, {group.label} comes first", 1)
                    if i + 1 < len(alternatives):
                        ex.add(
                            f"alternatives {i + 1}..{len(alternatives) - 1}: not tried, alternative {i} fits"
                        )
                return SearchResult(_batched(group, launcher), ex or Explanation())
    return SearchResult(None, ex or Explanation())


class LauncherNotFound(LauncherNotFoundError):
    """``LauncherNotFoundError`` whose explanation is built when first read: code that catches
    it to try something else does not pay for explaining every rejected candidate."""

    def __init__(
        self, alternatives: Sequence[HostRequirement], config: LaunchersConfig, tags: frozenset[str]
    ) -> None:
        self.alternatives = tuple(alternatives)
        self.config = config
        self.tags = tags
        self._text: str | None = None
        super().__init__()

    def __str__(self) -> str:
        if self._text is None:
            head = "no launcher can run " + " | ".join(str(a) for a in self.alternatives)
            explained = search(self.alternatives, self.config, self.tags, explain=True)
            self._text = f"{head}\n{explained.explanation.text()}"
        return self._text

    @property
    def args(self) -> tuple[str]:
        """``(message,)`` as for any exception, the message built on first read."""
        return (str(self),)

    @args.setter
    def args(self, value: tuple[object, ...]) -> None:
        """Ignored: the message is always the explanation."""

    def __repr__(self) -> str:
        return f"LauncherNotFoundError({str(self)!r})"


_FOUND_SIZE = 4096
_VALUE_TYPES = (HostRequirement, RequirementUnion)
_NO_TAGS: frozenset[str] = frozenset()


def _canonical(alt: HostRequirement) -> Any:
    """A cheap memo key equal for equal alternatives (hashing attrs values costs more)."""
    if alt.__class__ is not HostRequirement:
        return alt
    cpu = alt.cpu
    gpus = alt.cuda_gpus
    # memory and kind bit (< 4) of each GPU request in one integer
    return (
        alt.duration,
        cpu.memory,
        cpu.cores,
        tuple([(g.memory << 2) | g.bit for g in gpus]) if gpus else (),
    )


def _search_quietly(
    alternatives: Sequence[HostRequirement], state: _ConfigState, tags: frozenset[str]
) -> Launcher | None:
    """``search`` without explanation, as ``find_launcher`` runs it (same order, same answer)."""
    groups = state.groups
    if tags:
        groups = tuple(g for g in groups if tags & set(g.tags))
    plans = state.plans
    for i, alt in enumerate(alternatives):
        for group in groups:
            plan = plans.get(id(group))  # state.groups keeps every group alive: ids are stable
            if plan is None:
                plan = plans[id(group)] = _plan(group)
            if plan is False:
                launcher = _try_group(group, i, alt, None)
                if launcher is None:
                    continue
            else:
                gindex, single, cls = plan
                chosen = choice(gindex, alt, single)
                if chosen is None:
                    continue
                launcher = _slurm_launcher(cls, group, gindex, i, alt, chosen)  # type: ignore[arg-type]  # a plan is only made for Slurm-like groups
            return _batched(group, launcher) if group.batch is not None else launcher
    return None


def search_earliest(
    alternatives: Sequence[HostRequirement],
    config: LaunchersConfig,
    tags: frozenset[str] = frozenset(),
    explain: bool = False,
) -> SearchResult:
    """``find_launcher``'s search with the ``earliest_start`` strategy (a ``SearchResult``)."""
    ex = Explanation() if explain else None
    groups = ordered_groups(config)
    if tags:
        groups = tuple(g for g in groups if tags & set(g.tags))
    if ex is not None:
        ex.add(
            "strategy earliest_start: the group where the job is expected to start first "
            "(sbatch --test-only), ties and unknowns in today's order"
        )
        if not groups:
            ex.add("no group to search" + (f" with tags {sorted(tags)}" if tags else ""))
    for i, alt in enumerate(alternatives):
        if ex is not None:
            ex.add(f"alternative {i}: {alt}")
        found: list[tuple[Group, Launcher]] = []
        for group in groups:
            launcher = _try_group(group, i, alt, ex)
            if launcher is not None:
                found.append((group, launcher))
        if not found:
            continue
        if len(found) == 1:
            group, launcher = found[0]
            if ex is not None:
                ex.add(
                    f"{group_label(group)} is the only group that can run it: no estimate asked", 1
                )
            return SearchResult(_batched(group, launcher), ex or Explanation())
        now = time.time()
        estimates = estimate_all(found, config, now)
        labels = [group_label(g) for g, _ in found]
        index = decide(estimates, now)
        group, launcher = found[index]
        if ex is not None:
            ex.add("expected starts:", 1)
            for label, e in zip(labels, estimates, strict=True):
                where = f", partition {e.partition} on {e.nodes}" if e.partition else ""
                ago = round(now - e.asked)
                reused = f", asked {ago} s ago" if ago >= 1 else ""
                ex.add(f"{label}: {when(e, now)} ({e.how}{where}{reused})", 2)
            ex.add(f"chosen: {labels[index]}: {reason(estimates, labels, now)}", 1)
            if i + 1 < len(alternatives):
                ex.add(
                    f"alternatives {i + 1}..{len(alternatives) - 1}: not tried, alternative {i} fits"
                )
        return SearchResult(_batched(group, launcher), ex or Explanation())
    return SearchResult(None, ex or Explanation())


def _strategy(strategy: str | None, config: LaunchersConfig) -> str:
    """The strategy asked for, else the configuration's (``order`` or ``earliest_start``)."""
    if strategy is None:
        return config.strategy
    if strategy not in STRATEGIES:
        raise LaunchersError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    return strategy


def find_launcher(
    *requirements: str | HostRequirement | RequirementUnion,
    tags: Iterable[str] | str | None = (),
    config: LaunchersConfig | str | os.PathLike[str] | None = None,
    default: Any = _MISSING,
    strategy: str | None = None,
) -> Any:
    """The launcher for the first alternative some group can run (groups by weight; with
    ``strategy="earliest_start"``, the group where it is expected to start first).

    Raises ``LauncherNotFoundError`` explaining every rejection, or returns ``default``."""
    if len(requirements) == 1 and requirements[0].__class__ in _VALUE_TYPES:
        alternatives = requirements[0].requirements
    else:
        alternatives = requirements_of(requirements)
    cfg = config if config.__class__ is LaunchersConfig else config_of(config)
    tagset = _NO_TAGS if tags is None or (tags.__class__ is tuple and not tags) else _tags_of(tags)
    if (strategy or cfg.strategy) != "order" and _strategy(strategy, cfg) == "earliest_start":
        launcher = search_earliest(alternatives, cfg, tagset).launcher
        if launcher is not None:
            return launcher
        if default is not _MISSING:
            return default
        raise LauncherNotFound(alternatives, cfg, tagset)
    state = config_state(cfg)
    key = (tuple([_canonical(a) for a in alternatives]), tagset)
    launcher = state.found.get(key, _MISSING)
    if launcher is _MISSING:
        launcher = _search_quietly(alternatives, state, tagset)
        if not state.live:  # immutable configuration and requirement: the answer is too
            if len(state.found) >= _FOUND_SIZE:
                state.found.clear()
            state.found[key] = launcher
    if launcher is not None:
        return launcher
    if default is not _MISSING:
        return default
    raise LauncherNotFound(alternatives, cfg, tagset)


def explain_search(
    *requirements: str | HostRequirement | RequirementUnion,
    tags: Iterable[str] | str | None = (),
    config: LaunchersConfig | str | os.PathLike[str] | None = None,
    strategy: str | None = None,
) -> SearchResult:
    """The search with its explanation (``launchers find --explain``)."""
    cfg = config_of(config)
    if _strategy(strategy, cfg) == "earliest_start":
        result: SearchResult = search_earliest(
            requirements_of(requirements), cfg, _tags_of(tags), explain=True
        )
        return result
    return search(requirements_of(requirements), cfg, _tags_of(tags), explain=True)


__all__ = ["LauncherNotFound", "LaunchersError", "explain_search", "find_launcher", "search"]
