"""``launchers slurm discover``: a complete ``slurm:`` group for one user, from what a live
cluster says (docs/discover.md). Pure: :class:`Facts` (the commands' texts) -> :func:`discover`
-> :class:`Discovery` -> :func:`render` (a new file) or :func:`update` (refresh an existing
one, keeping what a person wrote). :mod:`launchers.slurm.facts` runs the commands.

What discover owns in a group (``--update`` rewrites these and nothing else):

- ``partitions.P.nodes``, ``.disabled`` (when Slurm's state is not UP; removed again only when
  discover wrote it), ``.qos``, ``.accounts``, ``.configuration.max_duration`` and
  ``.configuration.cpu.mem_per_cpu``, for every partition Slurm lists; a partition Slurm no
  longer lists is removed; one the user may not use is added only if the file names it;
- ``qos.Q.priority``, ``.max_duration``, ``.min_gpu``, ``.partition_time_limit`` for the QoS
  the partitions list (a QoS Slurm no longer knows is removed);
- ``configuration.cpu.mem_per_cpu`` (the cluster's ``DefMemPerCPU``);
- the comment lines starting with ``# discover:`` in the group.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..config.yamledit import Editor, dump
from ..errors import ConfigurationError
from ..units import UnitError, parse_duration, parse_size
from .convert import NodeGroupSpec, duration_text, group_nodes, node_warnings
from .sacctmgr import (
    Association,
    SlurmQoS,
    access_on,
    parse_associations,
    parse_default_account,
    parse_qos,
)
from .scontrol import (
    Access,
    ScontrolFormatError,
    SlurmNode,
    SlurmPartition,
    cluster_name,
    parse_config,
    parse_nodes,
    parse_partitions,
    partition_usability,
    with_partitions,
)

#: Every comment line discover writes starts so; ``--update`` replaces them all.
MARK = "discover:"
_DISABLED = "disabled:"


@attrs.frozen
class Facts:
    """What the commands printed on one cluster (None: the command failed, see ``failures``,
    each ``(command, message)``). ``user`` is who the file is for; ``groups`` its Unix groups
    (None = unknown), ``superuser`` whether it is root."""

    nodes: str
    partitions: str
    config: str | None = None
    qos: str | None = None
    associations: str | None = None
    user_record: str | None = None
    user: str | None = None
    groups: frozenset[str] | None = None
    superuser: bool = False
    failures: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Discovery:
    """The group discover writes, as plain data, and what the user should know about it."""

    group_id: str
    #: usable partitions in scontrol's order: name -> entry (configuration, disabled, qos,
    #: accounts, nodes)
    partitions: dict[str, dict[str, Any]]
    #: the partitions the user may not use: name -> (entry, reason); kept only if a file names them
    unusable: dict[str, tuple[dict[str, Any], str]]
    #: every partition Slurm lists
    known_partitions: frozenset[str]
    #: QoS entries the partitions use; None when accounting could not be read
    qos: dict[str, dict[str, Any]] | None
    known_qos: frozenset[str] | None
    mem_per_cpu: str | None
    #: comment lines for the group (without the mark)
    notes: tuple[str, ...]
    #: partition -> why it is disabled
    disabled: dict[str, str]
    warnings: tuple[str, ...]
    nodes: int
    node_groups: int
    use_hosts: bool = True

    @property
    def accounting(self) -> bool:
        """Whether QoS and associations were read."""
        return self.qos is not None


# ---------------------------------------------------------------------------------- GPUs

_MEM_AT_END = re.compile(r"(\d+)\s*(gib|gb|g)$")
_MEM_IN_TYPE = re.compile(r"(\d+)(gib|gb|g)(?![a-z0-9])")
_GPU_WORDS = ("gpu", "vram", "gmem")


def gpu_memory(features: Sequence[str], gpu_types: Sequence[str]) -> tuple[str | None, str]:
    """The memory of one GPU (``80G``) where a node says it: in a Gres type (``a100_80gb``,
    ``a100-sxm4-40gb``, MIG ``3g.20gb``) or in a feature naming a GPU (``GPUM48G``,
    ``gpu_mem_40gb``, ``a100_80gb`` for Gres type ``a100``). ``(None, why)`` when no value, or
    several, are found. ``G`` and ``GB`` both mean GiB here, as GPU makers use them."""
    found: dict[str, str] = {}
    for t in gpu_types:
        matches = _MEM_IN_TYPE.findall(t.lower())
        if matches:
            gb = [m for m in matches if m[1] != "g"]
            number = (gb or matches)[-1][0]
            found.setdefault(f"{int(number)}G", f"Gres type {t}")
        elif len(gpu_types) > 1:  # GPUs of several kinds, one of unknown memory
            return None, f"several Gres types ({', '.join(gpu_types)}), {t} of unknown memory"
    types = [t.lower() for t in gpu_types]
    for f in features:
        low = f.lower()
        if not (any(w in low for w in _GPU_WORDS) or any(low.startswith(t) for t in types)):
            continue
        m = _MEM_AT_END.search(low)
        if m and m.start() > 0:
            found.setdefault(f"{int(m.group(1))}G", f"feature {f}")
    if len(found) == 1:
        ((memory, where),) = found.items()
        return memory, where
    if found:
        return None, "several values (" + ", ".join(f"{m} from {w}" for m, w in found.items()) + ")"
    return None, "not in its features nor Gres types"


# ---------------------------------------------------------------------------- partitions


def _mib(value: int) -> str:
    return f"{value}M"


def _node_entry(
    spec: NodeGroupSpec, node: SlurmNode, sp: SlurmPartition, no_hosts: bool
) -> tuple[dict[str, Any], str | None]:
    """A node group of one partition, with the partition's memory caps applied; and, for a
    GPU node group whose GPU memory is unknown, why."""
    memory = spec.memory_mib
    caps = [c for c in (sp.max_mem_per_node,) if c]
    if sp.max_mem_per_cpu and spec.cpus:
        caps.append(sp.max_mem_per_cpu * spec.cpus)
    if memory is not None and caps:
        memory = min([memory, *caps])
    cpu: dict[str, Any] = {}
    if spec.cpus is not None:
        cpu["cores"] = spec.cpus
    if memory is not None:
        cpu["memory"] = _mib(memory)
    gpu: dict[str, Any] = {"count": spec.gpus}
    missing = None
    if spec.gpus:
        if len(node.gpu_types) == 1:
            gpu["model"] = node.gpu_types[0]
        found, why = gpu_memory(spec.features, node.gpu_types)
        if found is not None:
            gpu["memory"] = found
        else:
            missing = why
    conf: dict[str, Any] = {}
    if cpu:
        conf["cpu"] = cpu
    conf["gpu"] = gpu
    entry = {
        "hosts": [] if no_hosts else list(spec.hosts),
        "features": list(spec.features),
        "configuration": conf,
    }
    return entry, missing


def _few(names: Sequence[str], limit: int = 6) -> str:
    return ", ".join(names[:limit]) + (f" ... ({len(names)} in all)" if len(names) > limit else "")


@attrs.frozen
class _Accounting:
    qos: dict[str, SlurmQoS]
    associations: tuple[Association, ...]
    default_account: str | None


def _read_accounting(facts: Facts, cluster: str | None) -> _Accounting | None:
    if facts.qos is None or facts.associations is None:
        return None
    qos = {q.name: q for q in parse_qos(facts.qos, "sacctmgr show qos")}
    assocs = parse_associations(facts.associations, "sacctmgr show assoc")
    if cluster is not None:
        assocs = [a for a in assocs if a.cluster == cluster]
    if facts.user is not None:
        assocs = [a for a in assocs if a.user == facts.user]
    default = None
    if facts.user_record is not None:
        default = parse_default_account(facts.user_record, "sacctmgr show user")
    if default is None and assocs:
        default = assocs[0].account
    return _Accounting(qos, tuple(assocs), default)


def _qos_entry(q: SlurmQoS) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if q.priority:
        entry["priority"] = q.priority
    if q.max_wall is not None:
        entry["max_duration"] = duration_text(q.max_wall)
    if q.min_gpus:
        entry["min_gpu"] = q.min_gpus
    if q.partition_time_limit:
        entry["partition_time_limit"] = True
    return entry


def _qos_allowed(sp: SlurmPartition, names: Sequence[str]) -> list[str]:
    return [n for n in names if (not sp.allow_qos or n in sp.allow_qos) and n not in sp.deny_qos]


def _access_with_accounts(
    sp: SlurmPartition, acct: _Accounting, notes: list[str]
) -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
    """``(reason not usable, accounts to write, QoS to write)`` on one partition."""
    on = access_on(sp.name, acct.associations, acct.default_account)
    if not on.accounts:
        return "none of your associations is for this partition", (), ()
    verdict = partition_usability(
        attrs.evolve(sp, hidden=False, root_only=False, allow_groups=()),
        Access(accounts=on.accounts),
    )
    if verdict.reason is not None:
        return verdict.reason, (), ()
    admitted = verdict.accounts or on.accounts
    if acct.default_account in admitted:
        accounts: tuple[str, ...] = ()
        qos = list(on.qos[acct.default_account])
    else:
        accounts = admitted
        qos = list(on.qos[admitted[0]])
        for a in admitted[1:]:
            qos = [q for q in qos if q in on.qos[a]]
        dropped = sorted({q for a in admitted for q in on.qos[a]} - set(qos))
        if dropped:
            notes.append(
                f"partition {sp.name}: QoS {', '.join(dropped)} not listed: only some of "
                f"your accounts there ({', '.join(admitted)}) may use them (a partition's QoS "
                "are offered with each of its accounts)"
            )
    allowed = _qos_allowed(sp, qos)
    if not allowed:
        rule = (
            f"AllowQos={','.join(sp.allow_qos)}"
            if sp.allow_qos
            else f"DenyQos={','.join(sp.deny_qos)}"
        )
        return f"{rule} admits none of your QoS ({', '.join(qos) or 'none'})", (), ()
    known = [q for q in allowed if q in acct.qos]
    return None, accounts, tuple(known)


def _access_without_accounts(sp: SlurmPartition) -> str | None:
    if sp.allow_accounts or sp.deny_accounts:
        what = "AllowAccounts" if sp.allow_accounts else "DenyAccounts"
        names = sp.allow_accounts or sp.deny_accounts
        return (
            f"{what}={','.join(names)} and your accounts are unknown (sacctmgr could not be read)"
        )
    if sp.allow_qos or sp.deny_qos:
        what = "AllowQos" if sp.allow_qos else "DenyQos"
        names = sp.allow_qos or sp.deny_qos
        return f"{what}={','.join(names)} and your QoS are unknown (sacctmgr could not be read)"
    return None


def discover(
    facts: Facts,
    *,
    group_id: str | None = None,
    no_hosts: bool = False,
) -> Discovery:
    """The group for ``facts.user`` (see the module's docstring for what it holds)."""
    slurm_partitions = parse_partitions(facts.partitions, "scontrol show partitions")
    if not slurm_partitions:
        raise ScontrolFormatError(
            "no partition records found; expected the output of `scontrol show partitions`",
            file="scontrol show partitions",
        )
    nodes = with_partitions(parse_nodes(facts.nodes, "scontrol show nodes"), slurm_partitions)
    if not nodes:
        raise ScontrolFormatError(
            "no node records found; expected the output of `scontrol show nodes`",
            file="scontrol show nodes",
        )
    config = parse_config(facts.config) if facts.config else {}
    cluster = config.get("ClusterName") or cluster_name(facts.nodes)
    warnings = node_warnings(nodes, "scontrol show nodes")
    notes: list[str] = []
    who = facts.user or "the user"
    acct = _read_accounting(facts, cluster)
    for command, message in facts.failures:
        notes.append(f"`{command}` failed: {message}")
        warnings.append(f"`{command}` failed: {message}")
    if acct is None:
        notes.append(
            "no accounting read: QoS, accounts and associations are not written; partitions "
            "restricted by AllowAccounts, DenyAccounts, AllowQos or DenyQos are left out"
        )
    else:
        default_qos = None
        if acct.default_account is not None:
            default_qos = next(
                (
                    a.default_qos
                    for a in acct.associations
                    if a.account == acct.default_account and a.partition is None
                ),
                None,
            )
        notes.append(
            f"cluster {cluster or '?'}, user {who}: default account "
            f"{acct.default_account or 'none'}, default QoS {default_qos or 'none'}"
        )
        if not acct.associations:
            notes.append(
                f"{who} has no association on cluster {cluster or '?'}: Slurm refuses their jobs"
            )
    by_name = {n.name: n for n in nodes}
    grouped = group_nodes(nodes)
    access = Access(groups=facts.groups, accounts=None, superuser=facts.superuser)
    entries: dict[str, dict[str, Any]] = {}
    unusable: dict[str, tuple[dict[str, Any], str]] = {}
    disabled: dict[str, str] = {}
    used_qos: dict[str, None] = {}
    gpu_unknown: dict[str, list[str]] = {}
    n_groups = 0
    for sp in slurm_partitions:
        # Hidden, RootOnly, AllowGroups first; accounts and QoS from the associations below
        reason = partition_usability(
            attrs.evolve(sp, allow_accounts=(), deny_accounts=()), access
        ).reason
        accounts: tuple[str, ...] = ()
        qos: tuple[str, ...] = ()
        if reason is None:
            if acct is not None:
                reason, accounts, qos = _access_with_accounts(sp, acct, notes)
            else:
                reason = _access_without_accounts(sp)
        specs = grouped.get(sp.name, [])
        if not specs and reason is None:
            reason = (
                "none of its nodes is listed by `scontrol show nodes` (FUTURE or powered-down "
                "cloud nodes): nothing to describe"
            )
        entry: dict[str, Any] = {}
        configuration: dict[str, Any] = {}
        max_time = sp.max_time
        if acct is not None and sp.qos and sp.qos in acct.qos:
            part_qos = acct.qos[sp.qos]
            if part_qos.max_wall is not None and (max_time is None or part_qos.max_wall < max_time):
                max_time = part_qos.max_wall
                notes.append(
                    f"partition {sp.name}: max_duration {duration_text(max_time)} is the "
                    f"MaxWall of its partition QoS {sp.qos}"
                )
            if part_qos.min_gpus and reason is None:
                notes.append(
                    f"partition {sp.name}: its partition QoS {sp.qos} requires at least "
                    f"{part_qos.min_gpus} GPU(s) per job, which a partition cannot say here: "
                    "jobs without GPUs found there are refused by Slurm"
                )
        if max_time is not None:
            configuration["max_duration"] = duration_text(max_time)
        if sp.def_mem_per_cpu:
            configuration["cpu"] = {"mem_per_cpu": _mib(sp.def_mem_per_cpu)}
        if configuration:
            entry["configuration"] = configuration
        if sp.state.upper() != "UP":
            entry["disabled"] = True
            disabled[sp.name] = f"State={sp.state.upper()} in `scontrol show partitions`"
        if qos:
            entry["qos"] = list(qos)
        if accounts:
            entry["accounts"] = list(accounts)
        node_entries = []
        for spec in specs:
            node_entry, missing = _node_entry(spec, by_name[spec.hosts[0]], sp, no_hosts)
            node_entries.append(node_entry)
            if missing is not None and reason is None:
                types = by_name[spec.hosts[0]].gpu_types
                named = [f for f in spec.features if f.lower() in {t.lower() for t in types}]
                where = gpu_unknown.setdefault(",".join(types) or "(none)", [])
                where.append(named[0] if named else "FEATURE")
        entry["nodes"] = node_entries
        if reason is not None:
            unusable[sp.name] = (entry, reason)
            notes.append(f"partition {sp.name} left out: {reason}")
            continue
        entries[sp.name] = entry
        n_groups += len(node_entries)
        used_qos.update(dict.fromkeys(qos))
    if not entries:
        raise ConfigurationError(
            "no partition is usable by "
            + who
            + ": "
            + "; ".join(f"{name}: {r}" for name, (_, r) in unusable.items())
        )
    for model, named in gpu_unknown.items():
        feature = named[0]
        notes.append(
            f"the memory of GPUs of Gres type {model} is not in their features nor Gres types: "
            f"add `features: {{{feature}: {{configuration: {{gpu: {{memory: SIZE}}}}}}}}`, or "
            "features naming it (GPUM80G) with `features_regex: ['GPUM(?P<cuda_memory>[0-9]+G)']`, "
            "so that cuda(mem=...) can match them"
        )
    qos_entries = None
    known_qos = None
    if acct is not None:
        known_qos = frozenset(acct.qos)
        qos_entries = {name: _qos_entry(acct.qos[name]) for name in used_qos if name in acct.qos}
    mem_per_cpu = None
    value = config.get("DefMemPerCPU")
    if value and value.isdigit() and int(value):
        mem_per_cpu = _mib(int(value))
    return Discovery(
        group_id=group_id or cluster or "slurm",
        partitions=entries,
        unusable=unusable,
        known_partitions=frozenset(p.name for p in slurm_partitions),
        qos=qos_entries,
        known_qos=known_qos,
        mem_per_cpu=mem_per_cpu,
        notes=tuple(notes),
        disabled=disabled,
        warnings=tuple(warnings),
        nodes=len(nodes),
        node_groups=n_groups,
        use_hosts=not no_hosts,
    )


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


__all__ = [
    "MARK",
    "Discovery",
    "Facts",
    "Update",
    "discover",
    "gpu_memory",
    "group_document",
    "render",
    "update",
]
