"""Reading ``scontrol show partitions`` text into :class:`SlurmPartition` values and
deciding who may use a partition (pure, no I/O): times and memory limits, ``Nodes=`` lists
placed on nodes without ``Partitions=``, and ``AllowGroups``/``AllowAccounts``/``RootOnly``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from ..units import parse_slurm_time
from .hostlist import expand_hostlist
from .scontrol_nodes import SlurmNode
from .scontrol_records import _NULLS, Record, _error, _int, _names, parse_records


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
