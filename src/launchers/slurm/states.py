"""Slurm job states and pending reasons mapped to ``JobState`` names (docs/design/runtime.md §6).

Pure: text in, values out. States are returned as ``JobState`` member *names* so this module
needs nothing from the jobs layer; the executor converts with ``JobState[name]``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import attrs

log = logging.getLogger(__name__)

#: Every Slurm job state: long name -> (compact code, JobState name).
SLURM_STATES: dict[str, tuple[str, str]] = {
    "PENDING": ("PD", "PENDING"),
    "CONFIGURING": ("CF", "PENDING"),
    "REQUEUED": ("RQ", "PENDING"),
    "REQUEUE_FED": ("RF", "PENDING"),
    "REQUEUE_HOLD": ("RH", "PENDING"),
    "RESV_DEL_HOLD": ("RD", "PENDING"),
    "SPECIAL_EXIT": ("SE", "PENDING"),
    "RUNNING": ("R", "RUNNING"),
    "COMPLETING": ("CG", "RUNNING"),
    "SIGNALING": ("SI", "RUNNING"),
    "STAGE_OUT": ("SO", "RUNNING"),
    "RESIZING": ("RS", "RUNNING"),
    "SUSPENDED": ("S", "SUSPENDED"),
    "STOPPED": ("ST", "SUSPENDED"),
    "COMPLETED": ("CD", "COMPLETED"),
    "FAILED": ("F", "FAILED"),
    "CANCELLED": ("CA", "CANCELLED"),
    "TIMEOUT": ("TO", "TIMEOUT"),
    "PREEMPTED": ("PR", "PREEMPTED"),
    "NODE_FAIL": ("NF", "NODE_FAIL"),
    "OUT_OF_MEMORY": ("OOM", "OUT_OF_MEMORY"),
    "BOOT_FAIL": ("BF", "BOOT_FAIL"),
    "DEADLINE": ("DL", "DEADLINE"),
    "REVOKED": ("RV", "FAILED"),
}

_BY_CODE: dict[str, str] = {code: name for name, (code, _) in SLURM_STATES.items()}

#: Reasons attached to some states whatever the scheduler's own reason column says.
STATE_NOTES: dict[str, str] = {
    "REQUEUE_HOLD": "held after a requeue (REQUEUE_HOLD); release it with scontrol release",
    "RESV_DEL_HOLD": "held because its reservation was deleted (RESV_DEL_HOLD)",
    "SPECIAL_EXIT": "held after a special exit (SPECIAL_EXIT); release it with scontrol release",
    "REVOKED": "federated sibling revoked; federations are not supported",
}

FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE", "REVOKED"}
)  # fmt: skip


@attrs.frozen
class SlurmStatus:
    """One Slurm state text, read: ``state`` is a JobState name, or None when unknown."""

    raw: str
    slurm_state: str | None  # the long Slurm name (REQUEUED, CANCELLED, ...)
    state: str | None
    cancelled_by: int | None = None
    note: str | None = None

    @property
    def known(self) -> bool:
        return self.state is not None

    @property
    def slurm_final(self) -> bool:
        """Whether Slurm considers the job (or element) finished."""
        return self.slurm_state in FINAL_STATES


def _lookup(word: str) -> str | None:
    """The long Slurm state name for one word (long name or compact code, ``+`` = prefix)."""
    w = word.upper()
    if w.endswith("+"):
        prefix = w.rstrip("+")
        if not prefix:
            return None
        names = [n for n in SLURM_STATES if n.startswith(prefix)]
        if prefix in SLURM_STATES:
            return prefix
        if len(names) == 1:
            return names[0]
        # Several candidates (REQUEUE+): acceptable only if they all mean the same JobState.
        mapped = {SLURM_STATES[n][1] for n in names}
        if len(mapped) == 1 and names:
            return sorted(names)[0]
        return None
    if w in SLURM_STATES:
        return w
    return _BY_CODE.get(w)


def map_state(text: str) -> SlurmStatus:
    """Read a state as printed by sacct or squeue (``CANCELLED by 0``, ``OUT_OF_ME+``, ``CD``)."""
    raw = text.strip()
    words = raw.split()
    if not words:
        return SlurmStatus(raw=raw, slurm_state=None, state=None)
    name = _lookup(words[0])
    if name is None:
        return SlurmStatus(raw=raw, slurm_state=None, state=None)
    uid: int | None = None
    if name == "CANCELLED" and len(words) >= 3 and words[1].lower() == "by":
        try:
            uid = int(words[2])
        except ValueError:
            uid = None
    return SlurmStatus(
        raw=raw,
        slurm_state=name,
        state=SLURM_STATES[name][1],
        cancelled_by=uid,
        note=STATE_NOTES.get(name),
    )


def cancel_reason(cancelled_by: int | None, *, requested: bool, my_uid: int | None) -> str:
    """The reason of a CANCELLED job, as docs/design/runtime.md §6 words it."""
    if requested:
        return "cancelled on request"
    if cancelled_by is None:
        return "cancelled"
    if my_uid is not None and cancelled_by == my_uid:
        return "cancelled by you"
    return f"cancelled by uid {cancelled_by}"


class UnknownStateWarner:
    """Warns once per unknown state name (per instance; the executor keeps one per process)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, raw: str) -> bool:
        """Log a warning the first time ``raw``'s first word is seen; True if it warned."""
        key = (raw.split() or [""])[0].upper()
        if key in self._seen:
            return False
        self._seen.add(key)
        log.warning(
            "unknown Slurm job state %r: the job keeps its previous state (its job.rc can still end it)",
            raw,
        )
        return True


# --- fatal pending reasons -------------------------------------------------------------------

FATAL_REASONS: tuple[str, ...] = (
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "PartitionConfig",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "DependencyNeverSatisfied",
)
#: Per-job maxima (QOSMax…PerJob…, AssocMax…PerJob…); PerUser, PerAccount and Grp only wait.
FATAL_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^QOSMax\w*PerJob\w*$", re.IGNORECASE),
    re.compile(r"^AssocMax\w*PerJob\w*$", re.IGNORECASE),
)

_REASON_WORD = re.compile(r"^\(?([A-Za-z_][A-Za-z0-9_]*)")


def reason_word(reason: str) -> str:
    """The reason's leading identifier (``ReqNodeNotAvail, UnavailableNodes:...`` -> ``ReqNodeNotAvail``)."""
    m = _REASON_WORD.match(reason.strip())
    return m.group(1) if m else ""


def is_fatal_reason(
    reason: str | None, *, add: Iterable[str] = (), remove: Iterable[str] = ()
) -> bool:
    """Whether a pending reason can never be satisfied (the job would pend forever).

    ``add``/``remove`` are the group's ``fatal_reasons`` adjustments (exact names, any case);
    ``remove`` wins over both the built-in list and the patterns.
    """
    if not reason:
        return False
    word = reason_word(reason)
    if not word or word.lower() in ("none", "null"):
        return False
    low = word.lower()
    if low in {r.lower() for r in remove}:
        return False
    if low in {r.lower() for r in add}:
        return True
    if low in {r.lower() for r in FATAL_REASONS}:
        return True
    return any(p.match(word) for p in FATAL_PATTERNS)


__all__ = [
    "FATAL_PATTERNS",
    "FATAL_REASONS",
    "SLURM_STATES",
    "SlurmStatus",
    "UnknownStateWarner",
    "cancel_reason",
    "is_fatal_reason",
    "map_state",
    "reason_word",
]
