"""The submit allowance of an array chunk (docs/design/runtime.md §8): pure.

Slurm refuses a whole array when its elements would exceed the association's ``MaxSubmitJobs``
or the QoS's ``MaxSubmitJobsPerUser``; each element counts as one job. Reading both limits with
``sacctmgr`` and this user's queued jobs with ``squeue`` sizes a chunk to what fits, instead of
learning it from rejections. One shell command asks everything, so that it costs one round trip
over SSH; its sections are separated by a marker line.
"""

from __future__ import annotations

import shlex

import attrs

_MARK = "@@launchers@@"


def allowance_command(user: str, cluster: str | None = None) -> list[str]:
    """``sh -c`` reading: the user's default account, their associations, the QoS limits and
    their queued jobs (one line per array element)."""
    u = shlex.quote(user)
    where = f"cluster={shlex.quote(cluster)} " if cluster else ""
    clusters = f" --clusters={shlex.quote(cluster)}" if cluster else ""
    script = "; ".join(
        [
            f"sacctmgr -nP show user {u} format=DefaultAccount",
            f"echo {_MARK}",
            f"sacctmgr -nP show assoc where user={u} {where}format=Account,Partition,MaxSubmit,DefaultQOS",
            f"echo {_MARK}",
            "sacctmgr -nP show qos format=Name,MaxSubmitPU",
            f"echo {_MARK}",
            f"squeue -h -r -u {u}{clusters} -o '%a|%q'",
        ]
    )
    return ["sh", "-c", script]


@attrs.frozen
class Allowance:
    """How many more jobs may be submitted now, and the limit that sets it (for the reason)."""

    jobs: int
    limit: str


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_allowance(
    text: str, *, account: str | None = None, qos: str | None = None, partition: str | None = None
) -> Allowance | None:
    """The allowance from :func:`allowance_command`'s output, or None when no limit applies or
    the output cannot be read (a rejection then teaches the limit, docs/design/runtime.md §4)."""
    sections = text.split(_MARK + "\n")
    if len(sections) != 4:
        return None
    default_account = next((ln.strip() for ln in sections[0].splitlines() if ln.strip()), "")
    acct = (account or "").split(",")[0].strip() or default_account
    parts = {p.strip() for p in (partition or "").split(",") if p.strip()}
    assoc_limit: int | None = None
    default_qos = ""
    for line in sections[1].splitlines():
        fields = line.split("|")
        if len(fields) < 4 or fields[0] != acct or (fields[1] and fields[1] not in parts):
            continue
        limit = _int(fields[2])
        if limit is not None:
            assoc_limit = limit if assoc_limit is None else min(assoc_limit, limit)
        if fields[3] and not default_qos:
            default_qos = fields[3]
    qos_name = (qos or "").split(",")[0].strip() or default_qos or "normal"
    qos_limit: int | None = None
    for line in sections[2].splitlines():
        fields = line.split("|")
        if len(fields) >= 2 and fields[0] == qos_name:
            qos_limit = _int(fields[1])
    queued = [ln.split("|") for ln in sections[3].splitlines() if "|" in ln]
    found: list[Allowance] = []
    if assoc_limit is not None:
        used = sum(1 for f in queued if f[0] == acct)
        found.append(
            Allowance(
                assoc_limit - used, f"MaxSubmitJobs={assoc_limit} of account {acct}, {used} queued"
            )
        )
    if qos_limit is not None:
        used = sum(1 for f in queued if len(f) > 1 and f[1] == qos_name)
        found.append(
            Allowance(
                qos_limit - used,
                f"MaxSubmitJobsPerUser={qos_limit} of QoS {qos_name}, {used} queued",
            )
        )
    return min(found, key=lambda a: a.jobs) if found else None


__all__ = ["Allowance", "allowance_command", "parse_allowance"]
