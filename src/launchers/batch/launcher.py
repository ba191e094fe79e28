"""``BatchLauncher``: run many tasks through few pilot jobs of an inner launcher (docs/design/pilots.md §3.1).

The value is defined in ``launchers.launcher`` next to ``Launcher`` (every launcher can be
``batched()``); this module is its documented home. The pilot manager is
``launchers.batch.executor``.
"""

from __future__ import annotations

from ..launcher import BatchLauncher

__all__ = ["BatchLauncher"]
