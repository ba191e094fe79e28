"""``SiteLauncher``: what the UNICORE and firecREST launchers share (a value): a Slurm-like
group reached through the site's API only, and a standalone Compute Backend Config's
``Resources`` (docs/remote-sites.md, "`unicore` and `firecrest` groups")."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import attrs

from ..slurm.launcher import SlurmLikeLauncher

if TYPE_CHECKING:
    from .resources import Resources


@attrs.frozen(kw_only=True)
class SiteLauncher(SlurmLikeLauncher):
    """Submits through a site's API; ``site_kind`` names the kind (and the connector: the site
    is reached through its API only)."""

    #: a standalone Compute Backend Config's ``Resources``, sent as written; None for a finder
    #: match, whose ``options`` are sent
    resources: Resources | None = attrs.field(default=None, repr=False)
    site_kind: ClassVar[str] = ""

    @property
    def kind(self) -> str:
        return self.site_kind

    @property
    def connector(self) -> str:
        """Sites of this kind are reached through their API only."""
        return self.site_kind


__all__ = ["SiteLauncher"]
