"""What ``find_launcher`` searches: its arguments read into values (requirements, tags,
strategy, the configuration) and what it keeps per loaded configuration between searches
(groups in search order, found launchers), so that a search in a loop costs little."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..config.keys import STRATEGIES
from ..config.model import (
    Group,
    LaunchersConfig,
    SlurmGroup,
)
from ..errors import LaunchersError, RequirementSyntaxError
from ..language.values import HostRequirement, RequirementUnion
from .hosts import cached

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


def _strategy(strategy: str | None, config: LaunchersConfig) -> str:
    """The strategy asked for, else the configuration's (``order`` or ``earliest_start``)."""
    if strategy is None:
        return config.strategy
    if strategy not in STRATEGIES:
        raise LaunchersError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    return strategy
