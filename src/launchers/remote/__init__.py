"""Remote sites: UNICORE and firecREST (docs/design/sites.md), and the Compute Backend Config."""

from __future__ import annotations

import os
from typing import Any


def from_backend_config(path: str | os.PathLike[str], account: str | None = None) -> Any:
    """A ``UnicoreLauncher`` or ``FirecrestLauncher`` for a standalone Compute Backend Config."""
    # lazy: keeps import launchers.remote light
    from .backend_config import from_backend_config as load

    return load(path, account=account)


__all__ = ["from_backend_config"]
