"""Pure parsers of ``scontrol show nodes|partitions|config`` text into records (no I/O).

Records are separated by blank lines (or one per line with ``scontrol -o``); each holds
``Key=Value`` pairs whose values may contain spaces (``OS=Linux 6.1.0 #1 SMP ...``,
``Reason=down [root@2026-...]``). ``CLUSTER: name`` headers (``scontrol -M``) name the cluster.
Unreadable input raises :class:`ScontrolFormatError` with the line number.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

import attrs

from ..errors import ConfigurationError
from ..units import parse_slurm_time

# `Key=` at the start of the text or after whitespace; keys are CamelCase words.
_KEY_SPLIT = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
# Keys whose value is free text running to the end of its line in the multi-line form.
_FREE_TEXT = ("OS=", "Reason=", "Comment=", "Extra=")
_CLUSTER_HEADER = re.compile(r"^CLUSTER:\s*(\S+)\s*$")
_CLUSTER_ANY = re.compile(r"^[ \t]*(?:CLUSTER:[ \t]*(\S+)|ClusterName[ \t]*=[ \t]*(\S+))", re.MULTILINE)
_CONFIG_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_()/.-]*)\s*=\s?(.*)$")
_COUNT = re.compile(r"^(\d+)([KMGT]?)$", re.IGNORECASE)
_COUNT_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_NULLS = ("", "(null)", "N/A", "NONE", "none")


class ScontrolFormatError(ConfigurationError):
    """``scontrol`` text that cannot be read (names the source and the 1-based line)."""


@attrs.frozen
class Record:
    """One ``Key=Value`` record: its first line, the cluster it was listed under, its fields."""

    line: int
    fields: dict[str, str] = attrs.field(hash=False)
    cluster: str | None = None


@attrs.frozen
class GresEntry:
    """One generic resource of a ``Gres=`` value (``gpu:a100:8(S:0-1)`` -> gpu, a100, 8)."""

    name: str
    type: str | None
    count: int


@attrs.frozen
class SlurmNode:
    """A node as ``scontrol show nodes`` describes it (memory in MiB, as Slurm's RealMemory)."""

    name: str
    cpus: int | None = None
    memory_mib: int | None = None
    gpus: int = 0
    gpu_types: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    state: str = ""
    line: int = 0
    cluster: str | None = None


@attrs.frozen
class SlurmPartition:
    """A partition as ``scontrol show partitions`` describes it (times in seconds, None = unlimited)."""

    name: str
    max_time: int | None = None
    default_time: int | None = None
    state: str = "UP"
    nodes: str = ""
    default: bool = False
    hidden: bool = False
    qos: str | None = None
    allow_accounts: tuple[str, ...] = ()
    allow_qos: tuple[str, ...] = ()
    priority_tier: int = 1
    line: int = 0


def _error(message: str, source: str, line: int | None) -> ScontrolFormatError:
    return ScontrolFormatError(message, file=source, line=line)


def _split_line(line: str, lineno: int, source: str) -> Iterator[tuple[str, str]]:
    """The ``(key, value)`` pairs of one line of a record."""
    stripped = line.strip()
    for key in _FREE_TEXT:
        if stripped.startswith(key):
            yield key[:-1], stripped[len(key) :].strip()
            return
    parts = _KEY_SPLIT.split(stripped)
    if parts[0].strip():
        raise _error(
            f"cannot read {stripped[:60]!r}: expected Key=Value pairs as scontrol prints them",
            source,
            lineno,
        )
    for i in range(1, len(parts) - 1, 2):
        yield parts[i], parts[i + 1].strip()


def parse_records(text: str, first_key: str, source: str = "<scontrol>") -> list[Record]:
    """Split ``scontrol show ...`` text into records, each starting with ``first_key=``."""
    records: list[Record] = []
    current: dict[str, str] | None = None
    start = 0
    cluster: str | None = None
    lead = first_key + "="
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            current = None
            continue
        header = _CLUSTER_HEADER.match(stripped)
        if header:
            cluster = header.group(1)
            current = None
            continue
        if stripped.startswith(lead):
            current = {}
            start = lineno
            records.append(Record(start, current, cluster))
        elif current is None:
            raise _error(
                f"expected a record starting with {lead} (as `scontrol show` prints), "
                f"found {stripped[:60]!r}",
                source,
                lineno,
            )
        for key, value in _split_line(stripped, lineno, source):
            current.setdefault(key, value)
    return records


def _int(fields: dict[str, str], key: str, rec: Record, source: str) -> int | None:
    value = fields.get(key)
    if value is None or value in _NULLS:
        return None
    try:
        return int(value)
    except ValueError:
        raise _error(f"{key}={value!r} is not an integer", source, rec.line) from None


@functools.lru_cache(maxsize=4096)
def _names(value: str | None) -> tuple[str, ...]:
    """Comma-separated names, without blanks and ``(null)``; duplicates dropped, order kept."""
    if value is None or value.strip() in ("", "(null)"):
        return ()
    return tuple(dict.fromkeys(x for x in (v.strip() for v in value.split(",")) if x))


def _split_top(value: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(S:0,1),nic:1``)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out if x.strip()]


@functools.lru_cache(maxsize=4096)
def parse_gres(value: str) -> tuple[GresEntry, ...]:
    """Entries of a ``Gres=`` value: ``gpu:2``, ``gpu:a6000:2(S:0-1)``, ``gpu:tesla:4,gpu:k80:2``.

    Raises ``ValueError`` for a count that is not a number."""
    if value.strip() in _NULLS:
        return ()
    entries = []
    for item in _split_top(value):
        base = item.split("(", 1)[0].strip()
        parts = base.split(":")
        name = parts[0]
        rest = parts[1:]
        count = 1
        if rest:
            m = _COUNT.match(rest[-1])
            if m:
                count = int(m.group(1)) * _COUNT_SUFFIX[m.group(2).lower()]
                rest = rest[:-1]
            elif len(rest) > 1:
                raise ValueError(f"bad count {rest[-1]!r} in Gres entry {item!r}")
        entries.append(GresEntry(name, ":".join(rest) or None, count))
    return tuple(entries)


_VALUE = re.compile(r"\S*")
_NODE_START = "NodeName="


def _find(chunk: str, key: str) -> str | None:
    """The value of ``key=`` in one record: the first occurrence after whitespace, up to the
    next whitespace (enough for names, numbers, lists and states; fast on 10,000 nodes)."""
    pat = key + "="
    pos = chunk.find(pat)
    while pos != -1:
        if pos == 0 or chunk[pos - 1] in " \t\r\n":
            # skip `Key=` inside the free text of an OS=/Reason=... line
            head = chunk[chunk.rfind("\n", 0, pos) + 1 : pos].lstrip(" \t")
            if not head.startswith(_FREE_TEXT):
                m = _VALUE.match(chunk, pos + len(pat))
                return m.group() if m else ""
        pos = chunk.find(pat, pos + 1)
    return None


def _to_int(value: str | None, key: str, name: str, line: int, source: str) -> int | None:
    if value is None or value in _NULLS:
        return None
    try:
        return int(value)
    except ValueError:
        raise _error(f"node {name}: {key}={value!r} is not an integer", source, line) from None


def _node(chunk: str, line: int, cluster: str | None, source: str) -> SlurmNode:
    name = _find(chunk, "NodeName") or ""
    if not name:
        raise _error("NodeName= is empty", source, line)
    features = _find(chunk, "AvailableFeatures")
    if features is None:
        features = _find(chunk, "Features")
        if features is None:
            features = _find(chunk, "ActiveFeatures")
    try:
        gres = parse_gres(_find(chunk, "Gres") or "")
    except ValueError as e:
        raise _error(f"node {name}: {e}", source, line) from None
    gpus = [g for g in gres if g.name == "gpu"]
    return SlurmNode(
        name=name,
        cpus=_to_int(_find(chunk, "CPUTot"), "CPUTot", name, line, source),
        memory_mib=_to_int(_find(chunk, "RealMemory"), "RealMemory", name, line, source),
        gpus=sum(g.count for g in gpus),
        gpu_types=tuple(dict.fromkeys(g.type for g in gpus if g.type)),
        features=_names(features),
        partitions=_names(_find(chunk, "Partitions")),
        state=_find(chunk, "State") or "",
        line=line,
        cluster=cluster,
    )


def _sections(text: str) -> list[tuple[str | None, str, int]]:
    """``(cluster, text, first line)`` parts of the text, split at ``CLUSTER: name`` headers."""
    if "CLUSTER:" not in text:
        return [(None, text, 1)]
    out: list[tuple[str | None, str, int]] = []
    pieces = re.split(r"^[ \t]*CLUSTER:[ \t]*(\S+)[ \t]*$", text, flags=re.MULTILINE)
    line = 1
    cluster: str | None = None
    for i, piece in enumerate(pieces):
        if i % 2:
            cluster = piece
            continue
        out.append((cluster, piece, line))
        line += piece.count("\n")
    return out


def _node_chunks(text: str, first_line: int, source: str) -> list[tuple[str, int]]:
    """Records of one section: each starts with ``NodeName=`` at the start of a line."""
    pieces = text.split(_NODE_START)
    head = pieces[0]
    chunks: list[tuple[str, int]] = []
    line = first_line + head.count("\n")
    if head.strip():
        for offset, raw in enumerate(head.splitlines()):
            if raw.strip():
                raise _error(
                    f"expected a record starting with {_NODE_START} (as `scontrol show nodes` "
                    f"prints), found {raw.strip()[:60]!r}",
                    source,
                    first_line + offset,
                )
    for i in range(1, len(pieces)):
        piece = pieces[i]
        prev = pieces[i - 1].rstrip(" \t")
        if chunks and not prev.endswith("\n"):
            # `NodeName=` inside a value: glue it back to the record it belongs to
            last, last_line = chunks[-1]
            chunks[-1] = (last + _NODE_START + piece, last_line)
        else:
            chunks.append((_NODE_START + piece, line))
        line += piece.count("\n")
    return chunks


def parse_nodes(text: str, source: str = "<scontrol show nodes>") -> list[SlurmNode]:
    """Nodes of ``scontrol [--future] [-o] [-M ...] show nodes`` text, in input order.

    A node listed twice with the same description is kept once; differently is an error."""
    nodes: dict[str, SlurmNode] = {}
    for cluster, section, first_line in _sections(text):
        for chunk, line in _node_chunks(section, first_line, source):
            node = _node(chunk, line, cluster, source)
            seen = nodes.get(node.name)
            if seen is None:
                nodes[node.name] = node
            elif attrs.evolve(seen, line=node.line, state=node.state) != node:
                raise _error(
                    f"node {node.name} is listed twice with different descriptions "
                    f"(lines {seen.line} and {node.line})",
                    source,
                    node.line,
                )
    return list(nodes.values())


def _bool(value: str | None) -> bool:
    return (value or "").strip().upper() == "YES"


def _time(value: str | None, key: str, rec: Record, source: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_slurm_time(value)
    except ValueError:
        raise _error(f"{key}={value!r} is not a Slurm time", source, rec.line) from None


def parse_partitions(text: str, source: str = "<scontrol show partitions>") -> list[SlurmPartition]:
    """Partitions of ``scontrol show partitions`` text, in input order."""
    out = []
    for rec in parse_records(text, "PartitionName", source):
        f = rec.fields
        name = f.get("PartitionName", "")
        if not name:
            raise _error("PartitionName= is empty", source, rec.line)
        qos = f.get("QoS")
        allow_accounts = _names(f.get("AllowAccounts"))
        allow_qos = _names(f.get("AllowQos"))
        out.append(
            SlurmPartition(
                name=name,
                max_time=_time(f.get("MaxTime"), "MaxTime", rec, source),
                default_time=_time(f.get("DefaultTime"), "DefaultTime", rec, source),
                state=f.get("State", "UP"),
                nodes=f.get("Nodes", "") if f.get("Nodes") not in _NULLS else "",
                default=_bool(f.get("Default")),
                hidden=_bool(f.get("Hidden")),
                qos=None if qos is None or qos in _NULLS else qos,
                allow_accounts=() if allow_accounts == ("ALL",) else allow_accounts,
                allow_qos=() if allow_qos == ("ALL",) else allow_qos,
                priority_tier=_int(f, "PriorityTier", rec, source) or 1,
                line=rec.line,
            )
        )
    return out


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
