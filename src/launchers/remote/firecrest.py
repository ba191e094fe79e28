"""``FirecrestLauncher``: a firecREST site group and the finder's full sbatch options (a value)."""

from __future__ import annotations

import attrs

from .site_launcher import SiteLauncher


@attrs.frozen(kw_only=True)
class FirecrestLauncher(SiteLauncher):
    """Submits through a firecREST API (the options become ``#SBATCH`` lines)."""

    site_kind = "firecrest"


__all__ = ["FirecrestLauncher"]
