"""``FirecrestLauncher``: a firecREST site group and the finder's full sbatch options (a value)."""

from __future__ import annotations

import attrs

from ..slurm.launcher import SlurmLikeLauncher


@attrs.frozen(kw_only=True)
class FirecrestLauncher(SlurmLikeLauncher):
    """Submits through a firecREST API (the options become ``#SBATCH`` lines)."""

    @property
    def kind(self) -> str:
        return "firecrest"

    @property
    def connector(self) -> str:
        """firecREST sites are reached through their API only."""
        return "firecrest"


__all__ = ["FirecrestLauncher"]
