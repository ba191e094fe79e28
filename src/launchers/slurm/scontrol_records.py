"""Reading ``scontrol show ...`` text into ``Key=Value`` records (pure, no I/O): the record
splitter, the free-text rules for node keys, ``Gres=`` values and the shared refusal.

The node and partition readers (:mod:`.scontrol_nodes`, :mod:`.scontrol_partitions`) build on
it; :mod:`.scontrol` is the public face that re-exports them all.
"""

from __future__ import annotations

import functools
import re

import attrs

from ..errors import ConfigurationError

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
