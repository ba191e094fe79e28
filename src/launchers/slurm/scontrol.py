"""Pure parsers of ``scontrol show nodes|partitions|config`` text into records (no I/O).

Records are separated by blank lines (or one per line with ``scontrol -o``); each holds
``Key=Value`` pairs, read wherever they stand on the record's lines. A few node keys hold free
text with spaces (``OS=Linux 6.1.0 #1 SMP ...``, ``Reason=down [root@2026-...]``, ``Comment=``,
``Extra=``); :data:`NODE_FREE_TEXT` says where each one ends. ``CLUSTER: name`` headers
(``scontrol -M``) name the cluster. Unreadable input raises :class:`ScontrolFormatError` with
the line number.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Sequence

import attrs

from ..errors import ConfigurationError
from ..units import parse_slurm_time

# `Key=` at the start of the text or after whitespace; keys are CamelCase words.
_KEY_SPLIT = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
# A line that starts with `Key=` (after its indentation).
_KEY_LINE = re.compile(r"[ \t]*[A-Za-z][A-Za-z0-9_]*=")

#: The node keys whose value is free text (spaces allowed), each with the keys that Slurm's
#: ``scontrol show node`` (src/api/node_info.c, 15.08 to 25.05) may print after it on the same
#: line. A free-text value runs to the first of those keys, else to the end of its line, plus
#: the continuation lines of a multi-line reason. Only the one-line form (``-o``) and Slurm
#: <= 17.02's ``OS=Linux RealMemory=...`` line put another key after a free-text value.
NODE_FREE_TEXT: dict[str, tuple[str, ...]] = {
    "OS": ("RealMemory",),
    "Reason": ("Comment", "Extra", "InstanceId", "InstanceType", "ReservationName",
               "TLSCertTokenSet", "TLSCertLastRenewal", "Topology"),
    "Comment": ("Extra", "InstanceId", "InstanceType", "ReservationName", "TLSCertTokenSet",
                "TLSCertLastRenewal", "Topology"),
    "Extra": ("InstanceId", "InstanceType", "ReservationName", "TLSCertTokenSet",
              "TLSCertLastRenewal", "Topology"),
}  # fmt: skip
# Reason's continuation lines: scontrol indents them by its 3 spaces plus 7 (under the value).
_CONTINUATION_INDENT = " " * 10
_CLUSTER_HEADER = re.compile(r"^CLUSTER:\s*(\S+)\s*$")
_CLUSTER_ANY = re.compile(
    r"^[ \t]*(?:CLUSTER:[ \t]*(\S+)|ClusterName[ \t]*=[ \t]*(\S+))", re.MULTILINE
)
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
    """A node as ``scontrol show nodes`` describes it (memory in MiB, as Slurm's RealMemory).

    ``cpus`` and ``memory_mib`` are what jobs can get: ``CPUEfctv`` (Slurm >= 22.05), else
    ``CPUTot`` less the CPUs of ``CoreSpecCount`` / ``CPUSpecList``; ``RealMemory`` less
    ``MemSpecLimit``. ``cpu_tot`` and ``real_memory_mib`` are the totals as printed. ``None``
    means the record does not say (the caller reports it). ``partitions`` is ``None`` when the
    record has no ``Partitions=`` key (Slurm < 17.02 never prints it)."""

    name: str
    cpus: int | None = None
    memory_mib: int | None = None
    gpus: int = 0
    gpu_types: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] | None = ()
    state: str = ""
    line: int = 0
    cluster: str | None = None
    cpu_tot: int | None = None
    real_memory_mib: int | None = None

    @property
    def reserved_cpus(self) -> int:
        """CPUs Slurm keeps for the system (core specialization)."""
        if self.cpus is None or self.cpu_tot is None:
            return 0
        return self.cpu_tot - self.cpus

    @property
    def reserved_memory_mib(self) -> int:
        """Memory (MiB) Slurm keeps for the system (``MemSpecLimit``)."""
        if self.memory_mib is None or self.real_memory_mib is None:
            return 0
        return self.real_memory_mib - self.memory_mib


@attrs.frozen
class SlurmPartition:
    """A partition as ``scontrol show partitions`` describes it (times in seconds, None = unlimited).

    ``allow_*`` are empty for ``ALL``; ``deny_accounts`` lists ``DenyAccounts`` (Slurm prints
    it instead of ``AllowAccounts`` when only a deny list is set)."""

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
    allow_groups: tuple[str, ...] = ()
    deny_accounts: tuple[str, ...] = ()
    root_only: bool = False
    deny_qos: tuple[str, ...] = ()
    #: ``DefMemPerCPU``, ``MaxMemPerCPU`` and ``MaxMemPerNode`` in MiB (None = not set, or UNLIMITED)
    def_mem_per_cpu: int | None = None
    max_mem_per_cpu: int | None = None
    max_mem_per_node: int | None = None


#: What experimaestro 1.5.7's ``launchers slurm convert`` (and its ``query_slurm``) did, for
#: refusals: it matched only ``NodeName=``, ``AvailableFeatures=`` and ``Partitions=`` lines
#: with regular expressions, skipped every other line and never failed.
OLDER_SKIPPED = "experimaestro 1.5.7's slurm convert skipped the lines it did not know"
OLDER_UNREAD = (
    "experimaestro 1.5.7's slurm convert never read {key}: it wrote no cores, memory or GPUs"
)


def _error(message: str, source: str, line: int | None, older: str = "") -> ScontrolFormatError:
    """A refusal naming the source and line, with what the older converter did (``older``)."""
    return ScontrolFormatError(f"{message} ({older})" if older else message, file=source, line=line)


def split_pairs(
    line: str, free_text: dict[str, tuple[str, ...]] | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """``(text before the first key, [(key, value), ...])`` of one line: every ``Key=`` that
    starts the line or follows whitespace begins a pair; a free-text key's value runs to the
    first of its follower keys (``free_text``), else to the end of the line."""
    parts = _KEY_SPLIT.split(line)
    pairs: list[tuple[str, str]] = []
    i = 1
    n = len(parts)
    while i < n - 1:
        key, value = parts[i], parts[i + 1]
        i += 2
        followers = free_text.get(key) if free_text else None
        if followers is not None:
            while i < n - 1 and parts[i] not in followers:
                value += parts[i] + "=" + parts[i + 1]
                i += 2
        pairs.append((key, value.strip()))
    return parts[0], pairs


def parse_records(
    text: str,
    first_key: str,
    source: str = "<scontrol>",
    free_text: dict[str, tuple[str, ...]] | None = None,
) -> list[Record]:
    """Split ``scontrol show ...`` text into records, each starting with ``first_key=``; every
    ``Key=Value`` of a record is read wherever it stands (the first of a repeated key wins).

    A line that does not start with a key continues the free-text value before it (a
    multi-line reason), else it is an error naming the line."""
    records: list[Record] = []
    current: dict[str, str] | None = None
    cluster: str | None = None
    lead = first_key + "="
    last_free: str | None = None  # the free-text key that ended the previous line, if any
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
            records.append(Record(lineno, current, cluster))
        elif current is None:
            raise _error(
                f"expected a record starting with {lead} (as `scontrol show` prints), "
                f"found {stripped[:60]!r}",
                source,
                lineno,
                OLDER_SKIPPED if first_key == "NodeName" else "",
            )
        elif last_free is not None and (
            line.startswith(_CONTINUATION_INDENT) or not _KEY_LINE.match(line)
        ):
            current[last_free] = f"{current.get(last_free, '')} {stripped}".strip()
            continue
        head, pairs = split_pairs(stripped, free_text)
        if head.strip():
            raise _error(
                f"cannot read {stripped[:60]!r}: expected Key=Value pairs as scontrol prints them",
                source,
                lineno,
            )
        for key, value in pairs:
            current.setdefault(key, value)
        last_free = pairs[-1][0] if pairs and free_text and pairs[-1][0] in free_text else None
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

    Raises ``ValueError`` for a GPU count that is not a number (other resources, which are
    not read, keep whatever their last field is: ``tmpdisk:local:200GB``)."""
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
            elif len(rest) > 1 and name == "gpu":
                raise ValueError(f"bad count {rest[-1]!r} in Gres entry {item!r}")
        entries.append(GresEntry(name, ":".join(rest) or None, count))
    return tuple(entries)


_VALUE = re.compile(r"\S*")
_NODE_START = "NodeName="
_FREE_KEYS = tuple((key + "=", key) for key in NODE_FREE_TEXT)


def _free_text_end(chunk: str, key: str, start: int) -> int:
    """Where the free-text value of ``key`` that starts at ``start`` ends (see NODE_FREE_TEXT)."""
    eol = chunk.find("\n", start)
    if eol < 0:
        eol = len(chunk)
    end = eol
    for follower in NODE_FREE_TEXT[key]:
        i = chunk.find(" " + follower + "=", start, end)
        if i >= 0:
            end = i
    if end < eol:
        return end
    size = len(chunk)
    while eol < size:  # continuation lines of a multi-line reason
        begin = eol + 1
        if not chunk.startswith(_CONTINUATION_INDENT, begin) and _KEY_LINE.match(chunk, begin):
            break
        nxt = chunk.find("\n", begin)
        if nxt < 0:
            nxt = size
        if not chunk[begin:nxt].strip():
            break
        eol = nxt
    return eol


def _without_free_text(chunk: str) -> str:
    """The record with its free-text values cut out, so that a ``State=`` or ``RealMemory=``
    written inside a reason or an OS string is never read as a field."""
    spans: list[tuple[int, str]] = []
    for pat, key in _FREE_KEYS:
        pos = chunk.find(pat)
        while pos != -1:
            if pos == 0 or chunk[pos - 1] in " \t\r\n":
                spans.append((pos + len(pat), key))
            pos = chunk.find(pat, pos + 1)
    if not spans:
        return chunk
    spans.sort()
    out: list[str] = []
    done = 0
    for start, key in spans:
        if start < done:  # inside a value already cut (``Reason=... Comment=x`` in a reason)
            continue
        out.append(chunk[done:start])
        done = _free_text_end(chunk, key, start)
    out.append(chunk[done:])
    return "".join(out)


def _find(chunk: str, key: str) -> str | None:
    """The value of ``key=`` in one record (free text already cut out): the first occurrence
    that starts the record or follows whitespace, up to the next whitespace (enough for
    names, numbers, lists and states; fast on 10,000 nodes)."""
    pat = key + "="
    pos = chunk.find(pat)
    while pos != -1:
        if pos == 0 or chunk[pos - 1] in " \t\r\n":
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
        raise _error(
            f"node {name}: {key}={value!r} is not an integer",
            source,
            line,
            OLDER_UNREAD.format(key=key),
        ) from None


_TRES_MEM = re.compile(r"(?:^|,)mem=([0-9]+(?:\.[0-9]+)?)([KMGTP]?)(?:,|$)")
_TRES_CPU = re.compile(r"(?:^|,)cpu=([0-9]+)(?:,|$)")
_TRES_MIB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def _tres_memory_mib(tres: str | None) -> int | None:
    """MiB of ``mem=`` in a ``CfgTRES=`` value (``cpu=40,mem=382000M,billing=40``)."""
    m = _TRES_MEM.search(tres or "")
    if m is None:
        return None
    return int(float(m.group(1)) * _TRES_MIB[m.group(2)])


def cpu_spec_count(value: str) -> int:
    """How many CPU ids a ``CPUSpecList`` names (``0-1,32-33`` is 4); ``ValueError`` if unreadable."""
    total = 0
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        total += (int(hi) - int(lo) + 1) if sep else (int(lo) >= 0)
    return total


def _usable_cpus(chunk: str, cpu_tot: int | None, name: str, line: int, source: str) -> int | None:
    """CPUs jobs can get: ``CPUEfctv``, else ``CPUTot`` less ``CoreSpecCount`` cores (times the
    threads Slurm schedules per core), else less the ``CPUSpecList`` CPUs."""
    efctv = _to_int(_find(chunk, "CPUEfctv"), "CPUEfctv", name, line, source)
    if efctv is not None or cpu_tot is None:
        return efctv
    spec = _to_int(_find(chunk, "CoreSpecCount"), "CoreSpecCount", name, line, source)
    if spec:
        threads = _to_int(_find(chunk, "ThreadsPerCore"), "ThreadsPerCore", name, line, source) or 1
        sockets = _to_int(_find(chunk, "Sockets"), "Sockets", name, line, source)
        cores = _to_int(_find(chunk, "CoresPerSocket"), "CoresPerSocket", name, line, source)
        # Slurm counts a specialized core as ThreadsPerCore CPUs only when it schedules
        # threads, i.e. when CPUTot exceeds the cores (common/node_conf.c)
        if sockets and cores and sockets * cores >= cpu_tot:
            threads = 1
        return cpu_tot - spec * threads
    spec_list = _find(chunk, "CPUSpecList")
    if spec_list is not None and spec_list not in _NULLS:
        try:
            return cpu_tot - cpu_spec_count(spec_list)
        except ValueError:
            raise _error(
                f"node {name}: CPUSpecList={spec_list!r} is not a list of CPU ids", source, line,
                OLDER_UNREAD.format(key="CPUSpecList"),
            ) from None  # fmt: skip
    return cpu_tot


def _node(chunk: str, line: int, cluster: str | None, source: str) -> SlurmNode:
    chunk = _without_free_text(chunk)
    name = _find(chunk, "NodeName") or ""
    if not name:
        raise _error(
            "NodeName= is empty", source, line,
            "experimaestro 1.5.7's slurm convert gave this record's features and partitions to the node before it",
        )  # fmt: skip
    features = _find(chunk, "AvailableFeatures")
    if features is None:
        features = _find(chunk, "Features")
        if features is None:
            features = _find(chunk, "ActiveFeatures")
    try:
        gres = parse_gres(_find(chunk, "Gres") or "")
    except ValueError as e:
        raise _error(f"node {name}: {e}", source, line, OLDER_UNREAD.format(key="Gres")) from None
    gpus = [g for g in gres if g.name == "gpu"]
    cpu_tot = _to_int(_find(chunk, "CPUTot"), "CPUTot", name, line, source)
    real_memory = _to_int(_find(chunk, "RealMemory"), "RealMemory", name, line, source)
    if not cpu_tot or not real_memory:  # CfgTRES (Slurm >= 17.02) says them too
        tres = _find(chunk, "CfgTRES")
        if not real_memory:
            real_memory = _tres_memory_mib(tres) or real_memory
        if not cpu_tot:
            m = _TRES_CPU.search(tres or "")
            cpu_tot = int(m.group(1)) if m else cpu_tot
    memory = real_memory or None  # RealMemory=0 tells nothing (the caller reports it)
    if memory is not None:
        memory -= _to_int(_find(chunk, "MemSpecLimit"), "MemSpecLimit", name, line, source) or 0
    partitions = _find(chunk, "Partitions")
    return SlurmNode(
        name=name,
        cpus=_usable_cpus(chunk, cpu_tot or None, name, line, source),
        memory_mib=memory,
        gpus=sum(g.count for g in gpus),
        gpu_types=tuple(dict.fromkeys(g.type for g in gpus if g.type)),
        features=_names(features),
        partitions=None if partitions is None else _names(partitions),
        state=_find(chunk, "State") or "",
        line=line,
        cluster=cluster,
        cpu_tot=cpu_tot,
        real_memory_mib=real_memory,
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
                    OLDER_SKIPPED,
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
    nodes: dict[tuple[str | None, str], SlurmNode] = {}
    text = text.removeprefix("\ufeff")  # a byte order mark left by an editor
    for cluster, section, first_line in _sections(text):
        for chunk, line in _node_chunks(section, first_line, source):
            node = _node(chunk, line, cluster, source)
            seen = nodes.get((cluster, node.name))
            if seen is None:
                nodes[(cluster, node.name)] = node
            elif attrs.evolve(seen, line=node.line, state=node.state) != node:
                raise _error(
                    f"node {node.name} is listed twice with different descriptions "
                    f"(lines {seen.line} and {node.line})",
                    source,
                    node.line,
                    "experimaestro 1.5.7's slurm convert put it in a node group for each feature list it had",
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


def _listed(value: str | None) -> tuple[str, ...]:
    """A comma-separated restriction list; ``ALL`` (or nothing) is no restriction: ``()``."""
    names = _names(value)
    return () if names == ("ALL",) else names


def parse_partitions(text: str, source: str = "<scontrol show partitions>") -> list[SlurmPartition]:
    """Partitions of ``scontrol show partitions`` text, in input order."""
    out = []
    for rec in parse_records(text.removeprefix("\ufeff"), "PartitionName", source):
        f = rec.fields
        name = f.get("PartitionName", "")
        if not name:
            raise _error("PartitionName= is empty", source, rec.line)
        qos = f.get("QoS")
        tier = "PriorityTier" if "PriorityTier" in f else "Priority"  # Slurm < 16.05: Priority
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
                allow_accounts=_listed(f.get("AllowAccounts")),
                allow_qos=_listed(f.get("AllowQos")),
                priority_tier=_int(f, tier, rec, source) or 1,
                line=rec.line,
                allow_groups=_listed(f.get("AllowGroups")),
                deny_accounts=_listed(f.get("DenyAccounts")),
                root_only=_bool(f.get("RootOnly")),
                deny_qos=_listed(f.get("DenyQos")),
                def_mem_per_cpu=_mib(f, "DefMemPerCPU", rec, source),
                max_mem_per_cpu=_mib(f, "MaxMemPerCPU", rec, source),
                max_mem_per_node=_mib(f, "MaxMemPerNode", rec, source),
            )
        )
    return out


def _mib(fields: dict[str, str], key: str, rec: Record, source: str) -> int | None:
    """A memory limit in MiB as scontrol prints it; ``UNLIMITED`` (or 0) is None."""
    value = fields.get(key)
    if value is None or value.upper() == "UNLIMITED":
        return None
    return _int(fields, key, rec, source) or None


#: Most names one hostlist may expand to (``n[0-99999999]`` is a typo, not a cluster).
MAX_HOSTLIST = 1_000_000


def _split_outside_brackets(value: str) -> list[str]:
    out: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(value):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append(value[start:i])
            start = i + 1
    out.append(value[start:])
    return [x.strip() for x in out if x.strip()]


def _range_names(spec: str) -> list[str]:
    """``01-03,7`` -> ``01 02 03 7``: zero padding as wide as each range's lower bound."""
    names: list[str] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {part.strip()!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"bad range {part.strip()!r} (decreasing)")
        if last - first >= MAX_HOSTLIST:
            raise ValueError(f"range {part.strip()!r} is too large")
        names.extend(str(i).zfill(len(lo)) for i in range(first, last + 1))
    return names


def expand_hostlist(value: str) -> tuple[str, ...]:
    """The host names of a Slurm hostlist (``r01c[01-48],gpu[1,3-4]``, ``rack[1-2]n[01-04]``);
    ``ValueError`` for an unreadable or too large one."""
    out: list[str] = []
    for item in _split_outside_brackets(value):
        pieces = re.split(r"\[([^\[\]]*)\]", item)
        if any(c in piece for piece in pieces[::2] for c in "[]"):
            raise ValueError(f"unbalanced brackets in {item!r}")
        ranges = [_range_names(spec) for spec in pieces[1::2]]
        count = 1
        for r in ranges:
            count *= len(r)
        if len(out) + count > MAX_HOSTLIST:
            raise ValueError(f"more than {MAX_HOSTLIST} names")
        for combo in itertools.product(*ranges):
            name = pieces[0]
            for k, part in enumerate(combo):
                name += part + pieces[2 * k + 2]
            out.append(name)
    return tuple(dict.fromkeys(out))


def with_partitions(
    nodes: Sequence[SlurmNode], partitions: Sequence[SlurmPartition], source: str = "<partitions>"
) -> list[SlurmNode]:
    """Nodes whose record has no ``Partitions=`` (Slurm < 17.02 never prints it) get the
    partitions whose ``Nodes=`` list them, in the order of ``partitions``; ``Nodes=ALL`` is
    every node. Nodes with their own list keep it."""
    if all(n.partitions is not None for n in nodes):
        return list(nodes)
    members: dict[str, list[str]] = {}
    every = [n.name for n in nodes]
    for p in partitions:
        if p.nodes.upper() == "ALL":
            names: Iterable[str] = every
        else:
            try:
                names = expand_hostlist(p.nodes)
            except ValueError as e:
                raise _error(
                    f"partition {p.name}: Nodes={p.nodes[:60]!r}: {e}", source, p.line
                ) from None
        for name in names:
            members.setdefault(name, []).append(p.name)
    return [
        n
        if n.partitions is not None
        else attrs.evolve(n, partitions=tuple(members.get(n.name, ())))
        for n in nodes
    ]


@attrs.frozen
class Access:
    """Who submits, to tell which partitions they may use: Unix groups, Slurm accounts
    (``None`` = unknown) and whether they are root (or SlurmUser), whom ``AllowGroups``
    and ``RootOnly`` do not restrict."""

    groups: frozenset[str] | None = None
    accounts: tuple[str, ...] | None = None
    superuser: bool = False


@attrs.frozen
class Usability:
    """Whether a partition is for this user: ``reason`` says why not (None = usable);
    ``accounts`` are the user's accounts to use there when it restricts accounts."""

    reason: str | None = None
    accounts: tuple[str, ...] = ()


def _few(names: Iterable[str], limit: int = 6) -> str:
    items = list(names)
    return ",".join(items[:limit]) + (f",... ({len(items)} in all)" if len(items) > limit else "")


def partition_usability(p: SlurmPartition, access: Access) -> Usability:
    """Whether ``access`` may submit to ``p`` as Slurm decides it: ``Hidden=YES`` (Slurm
    shows it to administrators only), ``RootOnly``, ``AllowGroups``, ``AllowAccounts`` /
    ``DenyAccounts``. Unknown groups or accounts never count as allowed."""
    if p.hidden:
        return Usability("Hidden=YES (Slurm shows it to administrators only)")
    if p.root_only and not access.superuser:
        return Usability("RootOnly=YES (only root may submit there)")
    if p.allow_groups and not access.superuser:
        if access.groups is None:
            return Usability(f"AllowGroups={_few(p.allow_groups)} and your groups are unknown")
        if not access.groups & set(p.allow_groups):
            mine = _few(sorted(access.groups)) or "none"
            return Usability(
                f"AllowGroups={_few(p.allow_groups)} includes none of your groups ({mine})"
            )
    if p.allow_accounts or p.deny_accounts:
        listed = (
            f"AllowAccounts={_few(p.allow_accounts)}"
            if p.allow_accounts
            else f"DenyAccounts={_few(p.deny_accounts)}"
        )
        if access.accounts is None:
            return Usability(f"{listed} and your Slurm accounts are unknown")
        usable = tuple(
            a for a in access.accounts
            if (not p.allow_accounts or a in p.allow_accounts) and a not in p.deny_accounts
        )  # fmt: skip
        if not usable:
            return Usability(
                f"{listed} admits none of your accounts ({_few(access.accounts) or 'none'})"
            )
        return Usability(None, usable)
    return Usability()


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
