"""The Slurm command lines the executor runs, and the one shell command of a poll cycle through
a connector, with the readers of their output (docs/slurm.md, "Tracking"). Built and read
here, run by ``slurm.cluster``: pure, so that the exact commands are tested in milliseconds.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import attrs

from ..jobs.record import RC, RcRecord, iso_epoch, parse_rc
from .parse import SACCT_FORMAT, SQUEUE_FORMAT, master_id

#: Runs "$@" without SBATCH_*, SALLOC_*, SRUN_* and SLURM_* (but SLURM_CONF) on the cluster side
#: (POSIX sh and sed; ``command unset`` so that a read-only variable cannot end the shell).
CLEAN_ENV = (
    "for v in $(env | sed -n -e 's/^\\(SBATCH_[A-Za-z0-9_]*\\)=.*/\\1/p' "
    "-e 's/^\\(SALLOC_[A-Za-z0-9_]*\\)=.*/\\1/p' -e 's/^\\(SRUN_[A-Za-z0-9_]*\\)=.*/\\1/p' "
    "-e 's/^\\(SLURM_[A-Za-z0-9_]*\\)=.*/\\1/p'); do "
    '[ "$v" = SLURM_CONF ] || command unset "$v" 2>/dev/null; done; exec "$@"'
)
#: The submitting user's name and uid, one a line.
USER_ARGV = ("sh", "-c", "id -un; id -u")
#: What a remote poll cycle is counted as (``SlurmExecutor.commands``).
REMOTE_CYCLE = "remote-cycle"
#: sacct's window when it asks by user: this long before the oldest submission (seconds); over
#: a connector the cluster's time zone may differ from ours by up to 26 h, so a day more.
WINDOW_MARGIN_LOCAL = 3600
WINDOW_MARGIN_REMOTE = 27 * 3600


def cluster_args(cluster: str | None) -> list[str]:
    """``--clusters=NAME`` when the executor knows a cluster, else nothing."""
    return [f"--clusters={cluster}"] if cluster else []


def clean_env_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` run by ``sh`` without the variables sbatch reads as options (over a connector)."""
    return ["sh", "-c", CLEAN_ENV, "sh", *argv]


def sbatch_argv(script: str, cluster: str | None) -> list[str]:
    return ["sbatch", "--parsable", *cluster_args(cluster), script]


def scancel_argv(ids: Sequence[str], cluster: str | None) -> list[str]:
    return ["scancel", *cluster_args(cluster), *ids]


def config_argv(cluster: str | None) -> list[str]:
    """``scontrol show config`` (``MaxArraySize``)."""
    return ["scontrol", "show", "config", *cluster_args(cluster)]


def squeue_argv(user: str, cluster: str | None) -> list[str]:
    """Every job of ``user`` with its array elements, in ``SQUEUE_FORMAT``."""
    return ["squeue", "--noheader", "--array", "--states=all", f"--user={user}",
            f"--format={SQUEUE_FORMAT}", *cluster_args(cluster)]  # fmt: skip


def slurm_local_time(epoch: float) -> str:
    """``2026-01-01T10:00:00`` in this machine's time zone (sacct's ``--starttime``)."""
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%dT%H:%M:%S")


@attrs.frozen
class IdList:
    """The ids of a poll's jobs as sacct's ``--jobs=`` list (array elements by master id)."""

    text: str

    @classmethod
    def of(cls, native_ids: Iterable[str | None]) -> IdList:
        ids = sorted({master_id(n) for n in native_ids if n}, key=int)
        return cls(",".join(ids))

    def too_long(self, max_bytes: int) -> bool:
        """Whether sacct should ask by user and start time instead (docs/slurm.md, Tracking)."""
        return len(self.text) > max_bytes


def sacct_argv(
    ids: IdList,
    *,
    cluster: str | None,
    window: tuple[str, float, bool] | None = None,
) -> list[str]:
    """sacct for a poll: ``--jobs=ID,...``, or with ``window`` = (user, oldest submission as
    epoch, local?) ``--user=U --starttime=T``, T some margin before the oldest submission."""
    argv = ["sacct", "--noheader", "--parsable2", "--allocations", f"--format={SACCT_FORMAT}",
            *cluster_args(cluster)]  # fmt: skip
    if window is None:
        argv.append(f"--jobs={ids.text}")
        return argv
    user, oldest, local = window
    margin = WINDOW_MARGIN_LOCAL if local else WINDOW_MARGIN_REMOTE
    argv += [f"--user={user}", f"--starttime={slurm_local_time(oldest - margin)}"]
    return argv


def named_squeue_argv(user: str, name: str, cluster: str | None) -> list[str]:
    """The jobs of ``user`` named ``name``: id, submit time, working directory."""
    return ["squeue", "--noheader", "--states=all", f"--user={user}", f"--name={name}", "--format=%F|%V|%Z",
            *cluster_args(cluster)]  # fmt: skip


def named_sacct_argv(user: str, name: str, start: str, cluster: str | None) -> list[str]:
    """The same from accounting, since ``start`` (finished jobs squeue forgot)."""
    return ["sacct", "--noheader", "--parsable2", "--allocations", f"--name={name}", f"--user={user}",
            f"--starttime={start}", "--format=JobID,Submit,WorkDir", *cluster_args(cluster)]  # fmt: skip


def named_jobs(
    squeue_out: str | None,
    sacct_out: str | None,
    *,
    workdir: str | None,
    since: float | None,
    skew: float,
) -> tuple[list[str], set[str]]:
    """The ids (master ids) in the answers of ``named_squeue_argv``/``named_sacct_argv``
    (None: that command failed or did not run), oldest first, and which of them Slurm says run
    in another directory than ``workdir``. With ``since`` (epoch), jobs submitted before it
    (minus ``skew``) are left out: the same task in another experiment has the same name."""
    found: dict[str, float | None] = {}
    others: set[str] = set()
    for text, master in ((squeue_out, False), (sacct_out, True)):
        for line in (text or "").splitlines():
            jid, _, rest = line.strip().partition("|")
            submit, _, where = rest.partition("|")
            if master:
                jid = master_id(jid)
            if not jid.isdigit():
                continue
            if master:
                found.setdefault(jid, iso_epoch(submit))  # squeue's (live) time first
            else:
                found[jid] = iso_epoch(submit)
            if (
                workdir is not None
                and where.strip()
                and where.strip().rstrip("/") != workdir.rstrip("/")
            ):
                others.add(jid)
    if since is not None:
        found = {j: t for j, t in found.items() if t is None or t >= since - skew}
    return sorted(found, key=int), others & set(found)


# -- the poll cycle through a connector: one command ---------------------------------------------


def remote_cycle(
    directories: Sequence[str], sacct: Sequence[str] | None, squeue: Sequence[str]
) -> tuple[list[str], bytes]:
    """The one command of a poll cycle (argv, stdin): each directory's ``job.rc``, then sacct
    (unless None) and squeue, each section marked ``@@name`` and followed by its exit status.

    The directories go on stdin, one a line, so that the command stays the same size whatever
    the number of jobs (one argument is limited to 128 KiB on Linux). A directory with a newline
    in it (never made by launchers) is passed as an argument instead: an empty line stands for
    the next one."""
    lines: list[str] = []
    odd: list[str] = []
    for directory in directories:
        if "\n" in directory:
            odd.append(directory)
            directory = ""
        lines.append(directory + "\n")
    parts = [
        "i=0",
        "while IFS= read -r d; do",
        '    [ -n "$d" ] || { d=$1; shift; }',
        "    printf '@@rc %s\\n' \"$i\"",
        f'    [ ! -f "$d"/{shlex.quote(RC)} ] || cat -- "$d"/{shlex.quote(RC)} 2>/dev/null',
        "    echo",
        "    i=$((i + 1))",
        "done",
    ]
    if sacct is not None:
        parts.append(f"printf '@@sacct\\n'; {shlex.join(sacct)} 2>&1; printf '@@status %s\\n' $?")
    parts.append(f"printf '@@squeue\\n'; {shlex.join(squeue)} 2>&1; printf '@@status %s\\n' $?")
    argv = ["sh", "-c", "\n".join(parts), "sh", *odd]
    return argv, "".join(lines).encode("utf-8", "surrogateescape")


@attrs.frozen
class CycleOutput:
    """What the cycle command printed: each job's ``job.rc`` (None: none or unreadable), the
    text and exit status of each command section."""

    rcs: tuple[RcRecord | None, ...]
    sections: Mapping[str, str]
    status: Mapping[str, int]


def read_remote_cycle(stdout: str, count: int) -> CycleOutput:
    """Read the output of ``remote_cycle`` for ``count`` directories."""
    sections: dict[str, list[str]] = {}
    status: dict[str, int] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("@@status "):
            status[current] = int(line.split()[1])
        elif line.startswith("@@"):
            current = line[2:]
            sections.setdefault(current, [])
        else:
            sections.setdefault(current, []).append(line)
    rcs = tuple(parse_rc("\n".join(sections.get(f"rc {i}", []))) for i in range(count))
    return CycleOutput(rcs, {k: "\n".join(v) for k, v in sections.items()}, status)


__all__ = [
    "CLEAN_ENV",
    "REMOTE_CYCLE",
    "USER_ARGV",
    "CycleOutput",
    "IdList",
    "clean_env_argv",
    "cluster_args",
    "config_argv",
    "named_jobs",
    "named_sacct_argv",
    "named_squeue_argv",
    "read_remote_cycle",
    "remote_cycle",
    "sacct_argv",
    "sbatch_argv",
    "scancel_argv",
    "slurm_local_time",
    "squeue_argv",
]
