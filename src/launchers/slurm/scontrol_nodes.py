"""Reading ``scontrol show nodes`` text into :class:`SlurmNode` values (pure, no I/O): the
fast per-record scan (free text cut out first), usable CPUs and memory, GPUs from ``Gres=``."""

from __future__ import annotations

import re

import attrs

from .scontrol_records import (
    _CONTINUATION_INDENT,
    _KEY_LINE,
    _NULLS,
    NODE_FREE_TEXT,
    OLDER_SKIPPED,
    OLDER_UNREAD,
    _error,
    _names,
    parse_gres,
)


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
