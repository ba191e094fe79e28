"""Find, read, validate and cache ``launchers.yaml`` (docs/design/matching.md §4, §7).

``load_config(config=None)`` looks for the file (argument, ``$LAUNCHERS_CONFIG``,
``~/.config/launchers/launchers.yaml``, ``~/.config/experimaestro/launchers.yaml``), reads
``connectors.yaml`` and ``tokens.yaml`` beside it, validates everything at once and returns a
``LaunchersConfig``. Results are cached by (path, mtime_ns, size) of every file read, so an
unchanged file is never read twice and an edited one is read again (on the next call:
the files are stat'ed every time; absent sidecars through their directory's mtime). ``load_config_text`` checks
a text without touching the disk. Every problem is a ``ConfigurationError`` naming file, line,
column and key path.

The work is split by job: ``config.files`` finds and caches the files, ``config.build`` turns
their text into the model (``config.matching`` the Slurm-like keys and sites); this module keeps
the public names where callers import them.
"""

from __future__ import annotations

from launchers.config.files import (
    CONFIG_NAME,
    CONNECTORS_NAME,
    ENV_VAR,
    TOKENS_NAME,
    clear_cache,
    default_search_path,
    find_config_file,
    load_config,
    load_config_text,
)
from launchers.config.model import LaunchersConfig, SlurmGroup


def summary(config: LaunchersConfig) -> str:
    """One line: groups by kind, partitions, node groups, connectors, tokens."""
    kinds: dict[str, int] = {}
    partitions = node_groups = 0
    for g in config.groups:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
        if isinstance(g, SlurmGroup):
            partitions += len(g.partitions)
            node_groups += sum(len(p.nodes) for p in g.partitions)
    by_kind = ", ".join(f"{n} {k}" for k, n in kinds.items())
    n = len(config.groups)
    text = f"{n} group{'s' if n != 1 else ''}"
    if by_kind:
        text += f" ({by_kind})"
    text += f", {partitions} partition{'s' if partitions != 1 else ''}"
    text += f", {node_groups} node group{'s' if node_groups != 1 else ''}"
    text += f", {len(config.connectors)} connector{'s' if len(config.connectors) != 1 else ''}"
    text += f", {len(config.tokens)} token{'s' if len(config.tokens) != 1 else ''}"
    return text


__all__ = [
    "CONFIG_NAME",
    "CONNECTORS_NAME",
    "ENV_VAR",
    "TOKENS_NAME",
    "clear_cache",
    "default_search_path",
    "find_config_file",
    "load_config",
    "load_config_text",
    "summary",
]
