"""Pure parsers of ``sacctmgr --noheader --parsable2`` text: QoS, a user's associations and
default account (``launchers slurm discover``, docs/discover.md).

The commands name their columns with ``format=`` (:data:`QOS_FORMAT`, :data:`ASSOC_FORMAT`,
:data:`USER_FORMAT`), so each line is ``value|value|...`` in that order whatever the Slurm
version (the column names are the same from 15.08 to 25.05). Unreadable text raises
:class:`~launchers.slurm.scontrol.ScontrolFormatError` with the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ..units import parse_slurm_time
from .scontrol import ScontrolFormatError

#: ``sacctmgr -n -P show qos format=...``: name, priority, MaxWall, MinTRESPerJob, flags.
QOS_FORMAT = "Name,Priority,MaxWall,MinTRESPerJob,Flags"
#: ``sacctmgr -n -P show assoc where user=U cluster=C format=...``.
ASSOC_FORMAT = "Cluster,Account,User,Partition,QOS,DefaultQOS"
#: ``sacctmgr -n -P show user U format=...``.
USER_FORMAT = "User,DefaultAccount"

_GPU_TRES = re.compile(r"^gres/gpu(?::[^=]*)?$")


@attrs.frozen
class SlurmQoS:
    """A QoS as ``sacctmgr show qos`` describes it (``max_wall`` in seconds, None = no limit;
    ``min_gpus`` from ``MinTRESPerJob=gres/gpu=N``)."""

    name: str
    priority: int = 0
    max_wall: int | None = None
    min_gpus: int = 0
    flags: tuple[str, ...] = ()
    line: int = 0

    @property
    def partition_time_limit(self) -> bool:
        """``Flags=PartitionTimeLimit``: the QoS's MaxWall overrides the partition's MaxTime."""
        return any(f.lower() == "partitiontimelimit" for f in self.flags)


@attrs.frozen
class Association:
    """One association of a user: the account it may charge, on one partition (None = every
    partition), with the QoS it may ask for and the default one."""

    cluster: str
    account: str
    user: str
    partition: str | None
    qos: tuple[str, ...]
    default_qos: str | None
    line: int = 0


def _rows(text: str, columns: int, what: str, source: str) -> list[tuple[int, list[str]]]:
    """``(line, fields)`` of each non-blank line; a line with another number of fields is an
    error (the text is not the output of the command with our ``format=``)."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        fields = line.split("|")
        if len(fields) == columns + 1 and not fields[-1]:  # --parsable ends lines with '|'
            fields.pop()
        if len(fields) != columns:
            raise ScontrolFormatError(
                f"expected {columns} fields separated by '|' (the output of `sacctmgr "
                f"--noheader --parsable2 show {what}`), found {line[:80]!r}",
                file=source,
                line=lineno,
            )
        out.append((lineno, [f.strip() for f in fields]))
    return out


def _names(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


def gpu_count(tres: str) -> int:
    """The GPUs of a TRES list (``cpu=4,gres/gpu=2``, ``gres/gpu:a100=1``); 0 when none."""
    total = 0
    for item in _names(tres):
        key, sep, value = item.partition("=")
        if sep and _GPU_TRES.match(key.strip().lower()):
            try:
                total += int(value)
            except ValueError:
                raise ValueError(f"bad GPU count {value!r} in {tres!r}") from None
    return total


def parse_qos(text: str, source: str = "<sacctmgr show qos>") -> list[SlurmQoS]:
    """QoS of ``sacctmgr -n -P show qos format=`` :data:`QOS_FORMAT`, in input order."""
    out = []
    for line, (name, priority, max_wall, min_tres, flags) in _rows(text, 5, "qos", source):
        if not name:
            raise ScontrolFormatError("a QoS without a name", file=source, line=line)
        try:
            out.append(
                SlurmQoS(
                    name=name,
                    priority=int(priority) if priority else 0,
                    max_wall=parse_slurm_time(max_wall) if max_wall else None,
                    min_gpus=gpu_count(min_tres),
                    flags=_names(flags),
                    line=line,
                )
            )
        except ValueError as e:
            raise ScontrolFormatError(f"QoS {name}: {e}", file=source, line=line) from None
    return out


def parse_associations(text: str, source: str = "<sacctmgr show assoc>") -> list[Association]:
    """Associations of ``sacctmgr -n -P show assoc format=`` :data:`ASSOC_FORMAT`."""
    return [
        Association(
            cluster=cluster,
            account=account,
            user=user,
            partition=partition or None,
            qos=_names(qos),
            default_qos=default or None,
            line=line,
        )
        for line, (cluster, account, user, partition, qos, default) in _rows(
            text, 6, "assoc", source
        )
        if user  # the account's own line (no user) says nothing about this user
    ]


def parse_default_account(text: str, source: str = "<sacctmgr show user>") -> str | None:
    """The ``DefaultAccount`` of ``sacctmgr -n -P show user U format=`` :data:`USER_FORMAT`."""
    for _, (_, account) in _rows(text, 2, "user", source):
        return account or None
    return None


@attrs.frozen
class AccountAccess:
    """What a user's associations allow on one partition: the accounts in association order
    (the default account first) and, for each, the QoS it may ask for (default QoS first)."""

    accounts: tuple[str, ...]
    qos: dict[str, tuple[str, ...]] = attrs.field(hash=False)
    default_qos: dict[str, str | None] = attrs.field(hash=False)


def access_on(
    partition: str, associations: Sequence[Association], default_account: str | None
) -> AccountAccess:
    """The user's accounts and QoS on ``partition``: an association for that partition wins
    over the account's association for every partition, as Slurm picks them."""
    chosen: dict[str, Association] = {}
    for assoc in associations:
        if assoc.partition == partition:
            chosen[assoc.account] = assoc
        elif assoc.partition is None:
            chosen.setdefault(assoc.account, assoc)
    order = [a for a in chosen if a == default_account] + [
        a for a in chosen if a != default_account
    ]
    qos = {}
    for account in order:
        assoc = chosen[account]
        first = assoc.default_qos
        names = assoc.qos
        if first in names:
            names = (first, *(n for n in names if n != first))
        qos[account] = names
    return AccountAccess(tuple(order), qos, {a: chosen[a].default_qos for a in order})
