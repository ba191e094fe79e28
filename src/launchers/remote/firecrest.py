"""``FirecrestLauncher``: a firecREST site group and the finder's full sbatch options (a value)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..slurm.launcher import SlurmLikeLauncher

if TYPE_CHECKING:
    from .resources import Resources


@attrs.frozen(kw_only=True)
class FirecrestLauncher(SlurmLikeLauncher):
    """Submits through a firecREST API (the options become ``#SBATCH`` lines)."""

    #: a standalone Compute Backend Config's ``Resources``, sent as written (remote-sites.md §2);
    #: None for a finder match, whose ``options`` are sent
    resources: Resources | None = attrs.field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "firecrest"

    @property
    def connector(self) -> str:
        """firecREST sites are reached through their API only."""
        return "firecrest"


__all__ = ["FirecrestLauncher"]
