"""``find_launcher``: for each alternative in order, for each group by weight, the first group
that can run it gives the launcher (docs/design/matching.md §5)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..config.model import (
    Group,
    LaunchersConfig,
    LocalGroup,
    SlurmGroup,
    UnicoreGroup,
)
from ..errors import LauncherNotFoundError, LaunchersError
from ..hooks import services
from ..language.values import HostRequirement, RequirementUnion
from ..launcher import Launcher
from .build import (
    _batched,
    _describe,
    _launcher_class,
    _plan,
    _slurm_launcher,
    selection_lines,
    unmerged_lines,
)
from .build import slurm_options as slurm_options  # re-exported: its former home
from .choose import choice, select
from .estimate import decide, estimate_all, group_label, reason, when
from .explain import Explanation
from .hosts import cached_local_host, group_index
from .inputs import (
    _MISSING,
    _ConfigState,
    _strategy,
    _tags_of,
    config_of,
    config_state,
    ordered_groups,
    requirements_of,
)
from .match import fit, problems


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


def _eligible(
    config: LaunchersConfig, tags: frozenset[str], ex: Explanation | None
) -> tuple[Group, ...]:
    """The groups to search in order: those having one of ``tags`` (all without tags); the
    explanation says why each other group was skipped, or that none is left."""
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
    return groups


def search(
    alternatives: Sequence[HostRequirement],
    config: LaunchersConfig,
    tags: frozenset[str] = frozenset(),
    explain: bool = False,
) -> SearchResult:
    """The search itself; ``explain=True`` records why every group was or was not chosen."""
    ex = Explanation() if explain else None
    groups = _eligible(config, tags, ex)
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
    if ex is not None:
        ex.add(
            "strategy earliest_start: the group where the job is expected to start first "
            "(sbatch --test-only), ties and unknowns in today's order"
        )
    groups = _eligible(config, tags, ex)
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
