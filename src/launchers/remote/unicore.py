"""``UnicoreLauncher``: a UNICORE site group and the options for its one ``Queue`` (a value).

A UNICORE job names one queue, so the finder keeps only the best candidate's partition, with
that partition's matching constraint clauses (remote-sites.md §2). Transport lives elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..slurm.launcher import SlurmLikeLauncher

if TYPE_CHECKING:
    from .resources import Resources


@attrs.frozen(kw_only=True)
class UnicoreLauncher(SlurmLikeLauncher):
    """Submits through a UNICORE REST core API."""

    #: a standalone Compute Backend Config's ``Resources``, sent as written (remote-sites.md §2);
    #: None for a finder match, whose ``options`` are sent
    resources: Resources | None = attrs.field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "unicore"

    @property
    def connector(self) -> str:
        """UNICORE sites are reached through their API only."""
        return "unicore"


__all__ = ["UnicoreLauncher"]
