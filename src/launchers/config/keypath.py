"""Key paths, the ``slurm[0].partitions.gpu`` that every configuration message names.

One function for every reader: ``launchers.yaml`` (``config.reader``, and the duplicate-key
search of ``config.located``) and the remote files (Compute Backend Config, MLproject), which
show keys as written (``quote=False``). Pure, imports nothing of the package.
"""

from __future__ import annotations

import re
from typing import Any

_SPACE = re.compile(r"\s")


def join(path: str, key: Any, *, quote: bool = True) -> str:
    """The key path of ``key`` below ``path``: ``path.key``, ``key`` alone at the top, and
    ``path[i]`` for a list index (an ``int``). With ``quote``, a name that could not be read
    back (empty, with a space or an unprintable character) is written ``path['a b']``."""
    if key.__class__ is str:
        name = key
    elif isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    else:
        name = str(key)
    if (
        quote
        and not name.isidentifier()
        and (not name.isprintable() or _SPACE.search(name) or not name)
    ):
        return f"{path}[{name!r}]"
    return f"{path}.{name}" if path else name


__all__ = ["join"]
