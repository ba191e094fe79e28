"""``DirectLauncher``: run on a local (or SSH-reached) machine described by a ``local`` group."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ..config.model import LocalGroup
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
    #: why the finder chose this, formatted when read (see ``explanation``)
    why: Iterable[str] = attrs.field(default=(), eq=False, repr=False)

    @property
    def kind(self) -> str:
        return "local"

    def sbatch_args(self) -> list[str]:
        """No scheduler options: always empty (kept so every launcher answers it)."""
        return []


__all__ = ["DirectLauncher"]
