"""``DirectLauncher``: run on a local (or SSH-reached) machine described by a ``local`` group."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from ..config.environment import EMPTY, Environment
from ..config.environment_read import coerce
from ..config.model import LocalGroup
from ..errors import ConfigurationError
from ..language.values import HostRequirement
from ..launcher import GroupLauncher


@attrs.frozen(kw_only=True)
class DirectLauncher(GroupLauncher):
    """A local group and the alternative of the requirement it was chosen for."""

    group: LocalGroup = attrs.field(
        factory=lambda: LocalGroup(implicit=True), repr=lambda g: repr(g.label)
    )
    alternative: int = 0
    requirement: HostRequirement = attrs.field(factory=HostRequirement)
    #: ``config(environment=...)``: over the group's (merged key by key)
    environment: Environment = EMPTY
    #: False for a batch pilot: its job script applies no ``environment:`` (batch/shape.py)
    use_environment: bool = True
    #: why the finder chose this, formatted when read (see ``explanation``)
    why: Iterable[str] = attrs.field(default=(), eq=False, repr=False)

    @property
    def kind(self) -> str:
        return "local"

    def sbatch_args(self) -> list[str]:
        """No scheduler options: always empty (kept so every launcher answers it)."""
        return []

    def config(self, **options: Any) -> DirectLauncher:
        """A new launcher with ``environment=`` merged over this one's (the only setting)."""
        changes: dict[str, Any] = {}
        for name, value in options.items():
            if name != "environment":
                raise ConfigurationError(
                    f"unknown setting {name!r} of a local launcher (known: environment)", key=name
                )
            changes["environment"] = self.environment.merged(
                coerce(value, where="launcher.config(environment=...)")
            )
        return attrs.evolve(self, **changes)


__all__ = ["DirectLauncher"]
