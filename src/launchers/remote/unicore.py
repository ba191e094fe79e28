"""``UnicoreLauncher``: a UNICORE site group and the options for its one ``Queue`` (a value).

A UNICORE job names one queue, so the finder keeps only the best candidate's partition, with
that partition's matching constraint clauses (docs/remote-sites.md). Transport lives elsewhere.
"""

from __future__ import annotations

import attrs

from .site_launcher import SiteLauncher


@attrs.frozen(kw_only=True)
class UnicoreLauncher(SiteLauncher):
    """Submits through a UNICORE REST core API."""

    site_kind = "unicore"


__all__ = ["UnicoreLauncher"]
