"""Pure parsers of ``scontrol show nodes|partitions|config`` text into records (no I/O).

Records are separated by blank lines (or one per line with ``scontrol -o``); each holds
``Key=Value`` pairs, read wherever they stand on the record's lines. A few node keys hold free
text with spaces (``OS=Linux 6.1.0 #1 SMP ...``, ``Reason=down [root@2026-...]``, ``Comment=``,
``Extra=``); :data:`NODE_FREE_TEXT` says where each one ends. ``CLUSTER: name`` headers
(``scontrol -M``) name the cluster. Unreadable input raises :class:`ScontrolFormatError` with
the line number.
"""

from __future__ import annotations

import re

from .hostlist import MAX_HOSTLIST, expand_hostlist
from .scontrol_nodes import SlurmNode, cpu_spec_count, parse_nodes
from .scontrol_partitions import (
    Access,
    SlurmPartition,
    Usability,
    parse_partitions,
    partition_usability,
    with_partitions,
)
from .scontrol_records import (
    _NULLS,
    NODE_FREE_TEXT,
    OLDER_SKIPPED,
    OLDER_UNREAD,
    GresEntry,
    Record,
    ScontrolFormatError,
    parse_gres,
    parse_records,
    split_pairs,
)

__all__ = [
    "MAX_HOSTLIST",
    "NODE_FREE_TEXT",
    "OLDER_SKIPPED",
    "OLDER_UNREAD",
    "Access",
    "GresEntry",
    "Record",
    "ScontrolFormatError",
    "SlurmNode",
    "SlurmPartition",
    "Usability",
    "cluster_name",
    "cpu_spec_count",
    "expand_hostlist",
    "max_array_size",
    "parse_config",
    "parse_gres",
    "parse_nodes",
    "parse_partitions",
    "parse_records",
    "partition_usability",
    "split_pairs",
    "with_partitions",
]

_CLUSTER_ANY = re.compile(
    r"^[ \t]*(?:CLUSTER:[ \t]*(\S+)|ClusterName[ \t]*=[ \t]*(\S+))", re.MULTILINE
)
_CONFIG_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_()/.-]*)\s*=\s?(.*)$")


def parse_config(text: str) -> dict[str, str]:
    """``Key = value`` pairs of ``scontrol show config`` (other lines are section titles)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG_LINE.match(line.strip())
        if m:
            out.setdefault(m.group(1), m.group(2).strip())
    return out


def max_array_size(text: str) -> int:
    """``MaxArraySize`` from ``scontrol show config`` text (job array indexes are < this)."""
    value = parse_config(text).get("MaxArraySize")
    if value is None:
        raise ScontrolFormatError(
            "no MaxArraySize in the text; expected `scontrol show config` output",
            file="<scontrol show config>",
        )
    try:
        return int(value)
    except ValueError:
        raise ScontrolFormatError(
            f"MaxArraySize = {value!r} is not an integer", file="<scontrol show config>"
        ) from None


def cluster_name(text: str) -> str | None:
    """The cluster named in the text: a ``CLUSTER: name`` header, ``ClusterName=`` or
    ``ClusterName = name`` (``scontrol show config``); None when absent."""
    if "CLUSTER:" not in text and "ClusterName" not in text:
        return None
    for m in _CLUSTER_ANY.finditer(text):
        name = m.group(1) or m.group(2)
        if name not in _NULLS:
            return name
    return None
