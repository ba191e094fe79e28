"""Writing a :class:`~.discover_group.Discovery` as YAML (pure): a new ``launchers.yaml``
(:func:`render`) or an existing one refreshed in place (:func:`update`), rewriting only what
discover owns and keeping every other key and comment (docs/discover.md)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..config.yamledit import Editor, dump
from ..errors import ConfigurationError
from ..units import UnitError, parse_duration, parse_size
from .discover_group import _DISABLED, MARK, Discovery

# ------------------------------------------------------------------------------ new file


def group_document(
    d: Discovery, *, connector: str | None = None, path: str | None = None
) -> dict[str, Any]:
    """The group as a plain mapping, in the order discover writes keys."""
    group: dict[str, Any] = {"id": d.group_id}
    if connector and connector != "local":
        group["connector"] = connector
    if path:
        group["path"] = path
    if not d.use_hosts:
        group["use_hosts"] = False
    if d.mem_per_cpu:
        group["configuration"] = {"cpu": {"mem_per_cpu": d.mem_per_cpu}}
    if d.qos:
        group["qos"] = d.qos
    group["partitions"] = d.partitions
    return group


_HEADER = """\
launchers.yaml written by `launchers slurm discover` ({nodes} nodes, {partitions} partitions,
{groups} node groups) from scontrol and sacctmgr. `launchers slurm discover --update FILE`
refreshes what it owns (partitions, node groups, QoS, accounts, limits, the `# discover:`
comments) and keeps what you add: weights, tags, priorities, features, features_regex...
(docs/discover.md)."""


def _group_comments(ed: Editor, path: tuple[Any, ...], d: Discovery) -> None:
    ed.comment(path, [f"{MARK} {note}" for note in d.notes])
    for name, why in d.disabled.items():
        if ed.node((*path, "partitions", name)) is not None:
            ed.comment((*path, "partitions", name), [f"{MARK} {_DISABLED} {why}"])


def render(
    d: Discovery,
    *,
    connector: str | None = None,
    path: str | None = None,
    connectors: Mapping[str, Any] | None = None,
) -> str:
    """A new ``launchers.yaml`` holding the group (and ``connectors``, the SSH connector
    declarations it needs), with discover's comments."""
    doc: dict[str, Any] = {}
    if connectors:
        doc["connectors"] = {"ssh": dict(connectors)}
    doc["slurm"] = [group_document(d, connector=connector, path=path)]
    ed = Editor(dump(doc), "<discover>")
    ed.top_comment(
        _HEADER.format(
            nodes=d.nodes, partitions=len(d.partitions), groups=d.node_groups
        ).splitlines()
    )
    _group_comments(ed, ("slurm", 0), d)
    return ed.text()


# -------------------------------------------------------------------------------- update


def _same_duration(old: Any, new: Any) -> bool:
    try:
        return old == new or parse_duration(old) == parse_duration(new)
    except (UnitError, TypeError, ValueError):
        return False


def _same_size(old: Any, new: Any) -> bool:
    try:
        return old == new or parse_size(old) == parse_size(new)
    except (UnitError, TypeError, ValueError):
        return False


def _set_or_delete(
    ed: Editor,
    path: tuple[Any, ...],
    value: Any,
    same: Callable[[Any, Any], bool] | None = None,
) -> None:
    if value is None:
        ed.delete(path)
    else:
        ed.set(path, value, same)


_SAME: dict[str, Callable[[Any, Any], bool]] = {
    "max_duration": _same_duration,
    "mem_per_cpu": _same_size,
}


def _refresh_partition(
    ed: Editor,
    at: tuple[Any, ...],
    entry: dict[str, Any],
    discover_disabled: bool,
    accounting: bool,
) -> None:
    """Rewrite what discover owns in one partition the file has."""
    conf = entry.get("configuration", {})
    _set_or_delete(
        ed, (*at, "configuration", "max_duration"), conf.get("max_duration"), _same_duration
    )
    mem = conf.get("cpu", {}).get("mem_per_cpu")
    _set_or_delete(ed, (*at, "configuration", "cpu", "mem_per_cpu"), mem, _same_size)
    if entry.get("disabled"):
        ed.set((*at, "disabled"), True)
    elif discover_disabled:
        ed.delete((*at, "disabled"))
    if accounting:
        _set_or_delete(ed, (*at, "qos"), entry.get("qos"))
        _set_or_delete(ed, (*at, "accounts"), entry.get("accounts"))
    ed.set((*at, "nodes"), entry["nodes"])


def _strip_marks(text: str, first: int, last: int) -> tuple[str, set[str]]:
    """The text without discover's comment lines between lines ``first`` and ``last`` (0-based,
    inclusive), and the partitions that had a ``disabled:`` note (the key under it)."""
    lines = text.split("\n")
    kept: list[str] = []
    noted: set[str] = set()
    pending = False
    mark = re.compile(r"^\s*#\s*" + re.escape(MARK))
    for i, line in enumerate(lines):
        if first <= i <= last and mark.match(line):
            pending = pending or (_DISABLED in line.split(MARK, 1)[1][:12])
            continue
        if pending and line.strip() and not line.lstrip().startswith("#"):
            key = line.strip().split(":", 1)[0].strip().strip("'\"")
            noted.add(key)
            pending = False
        kept.append(line)
    return "\n".join(kept), noted


@attrs.frozen
class Update:
    """The refreshed text and what changed, in words (for ``--diff`` and the summary)."""

    text: str
    changes: tuple[str, ...]
    created: bool


def _find_group(ed: Editor, group_id: str) -> int | None:
    groups = ed.value(("slurm",))
    if not isinstance(groups, list):
        return None
    for i, g in enumerate(groups):
        if isinstance(g, dict) and str(g.get("id")) == group_id:
            return i
    return None


def update(
    text: str,
    d: Discovery,
    *,
    source: str = "launchers.yaml",
    connector: str | None = None,
    path: str | None = None,
    connectors: Mapping[str, Any] | None = None,
) -> Update:
    """``text`` with the group ``d.group_id`` refreshed (added when absent): what discover
    owns is rewritten, every other key and comment stays as it was."""
    if not text.strip():
        return Update(
            render(d, connector=connector, path=path, connectors=connectors), ("new file",), True
        )
    ed = Editor(text, source)
    if ed.root is not None and not isinstance(ed.value(()), dict):
        raise ConfigurationError("the top level is not a mapping", file=source, line=1)
    index = _find_group(ed, d.group_id)
    changes: list[str] = []
    if index is None:
        for name, decl in (connectors or {}).items():
            if ed.node(("connectors", "ssh", name)) is None:
                ed.set(("connectors", "ssh", name), decl)
                changes.append(f"connector {name} added")
        group = group_document(d, connector=connector, path=path)
        ed.append(("slurm",), group)
        changes.append(f"slurm group {d.group_id} added")
        out = Editor(ed.text(), source)
        new_index = _find_group(out, d.group_id)
        assert new_index is not None
        _group_comments(out, ("slurm", new_index), d)
        return Update(out.text(), tuple(changes), False)
    # discover's own comments are written again: drop the old ones in the group's lines
    item = ed.node(("slurm", index))
    assert item is not None
    first = item.start_mark.line
    while first > 0 and re.match(r"^\s*#", text.split("\n")[first - 1]):
        first -= 1
    last_line = ed.last_line(("slurm", index))
    stripped, noted = _strip_marks(text, first, last_line)
    ed = Editor(stripped, source)
    at: tuple[Any, ...] = ("slurm", index)
    current = ed.value(at) or {}
    file_parts = current.get("partitions") or {}
    if not isinstance(file_parts, dict):
        raise ConfigurationError(
            f"slurm group {d.group_id}: partitions is not a mapping", file=source
        )
    use_hosts = d.use_hosts and current.get("use_hosts", True) is not False
    if not use_hosts and d.use_hosts:
        d = attrs.evolve(
            d,
            partitions={k: _without_hosts(v) for k, v in d.partitions.items()},
            unusable={k: (_without_hosts(v), r) for k, (v, r) in d.unusable.items()},
            use_hosts=False,
        )
    if not d.use_hosts:
        ed.set((*at, "use_hosts"), False)
    for name in file_parts:
        if name not in d.known_partitions:
            ed.delete((*at, "partitions", name))
            changes.append(f"partition {name} removed: Slurm does not list it")
    for name, entry in d.partitions.items():
        if name in file_parts:
            _refresh_partition(ed, (*at, "partitions", name), entry, name in noted, d.accounting)
        else:
            ed.set((*at, "partitions", name), entry)
            changes.append(f"partition {name} added")
    kept_notes = []
    for name, (entry, reason) in d.unusable.items():
        if name in file_parts:
            _refresh_partition(ed, (*at, "partitions", name), entry, name in noted, d.accounting)
            kept_notes.append(
                f"partition {name} kept because the file names it, though Slurm says: {reason}"
            )
    if d.mem_per_cpu is not None or isinstance(current.get("configuration"), dict):
        _set_or_delete(ed, (*at, "configuration", "cpu", "mem_per_cpu"), d.mem_per_cpu, _same_size)
    if d.qos is not None:
        file_qos = current.get("qos") or {}
        for name in file_qos:
            if d.known_qos is not None and name not in d.known_qos:
                ed.delete((*at, "qos", name))
                changes.append(f"QoS {name} removed: Slurm does not know it")
        for name, entry in d.qos.items():
            if name not in file_qos:
                ed.set((*at, "qos", name), entry)
                changes.append(f"QoS {name} added")
                continue
            for key in ("priority", "max_duration", "min_gpu", "partition_time_limit"):
                _set_or_delete(ed, (*at, "qos", name, key), entry.get(key), _SAME.get(key))
    refreshed = Editor(ed.text(), source)
    # a `disabled: true` a person wrote stays theirs: discover notes only the ones it writes
    theirs = {
        name
        for name, entry in file_parts.items()
        if isinstance(entry, dict) and entry.get("disabled") is True and name not in noted
    }
    kept = {name for name in d.unusable if name in file_parts}
    d2 = attrs.evolve(
        d,
        notes=tuple(
            n for n in d.notes if not any(n.startswith(f"partition {k} left out:") for k in kept)
        )
        + tuple(kept_notes),
        disabled={k: v for k, v in d.disabled.items() if k not in theirs},
    )
    _group_comments(refreshed, at, d2)
    return Update(refreshed.text(), tuple(changes), False)


def _without_hosts(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    out["nodes"] = [dict(ng, hosts=[]) for ng in entry.get("nodes", [])]
    return out
