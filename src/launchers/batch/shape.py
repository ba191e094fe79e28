"""Sizing a batch shape (pure): what one task asks for, the shape's name, how many tasks a
pilot holds and for how long, and the inner launcher resized into the pilot's launcher
(docs/design/pilots.md §3.2). The executor and the pilot bookkeeping read these; nothing here runs."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..config.environment import EMPTY, Environment, merge_all
from ..errors import LaunchersError
from ..slurm.envscript import render_wrapper
from ..slurm.launcher import SlurmLauncher, SlurmLikeLauncher
from ..slurm.settings import launcher_environment
from ..units import format_duration, parse_size, parse_slurm_time
from .launcher import BatchLauncher

if TYPE_CHECKING:
    from ..launcher import Launcher

MAX_AUTO_SLOTS = 8
#: inner launchers whose queue lives at a site reached through a REST API (batch/rest.py)
REST_KINDS = ("unicore", "firecrest")
MIN_WALLTIME = 3600.0


@attrs.frozen
class Resources:
    """What one task asks for: cores, memory (bytes, 0 = unset), GPUs; and its declared duration."""

    cpus: int = 1
    memory: int = 0
    gpus: int = 0
    duration: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "memory": self.memory, "gpus": self.gpus}


def task_resources(inner: Launcher) -> Resources:
    """The resources the inner launcher would request for one task as a job of its own."""
    options = getattr(inner, "options", None)
    if options is None:
        return Resources()
    memory = 0
    if getattr(options, "mem", None):
        try:
            memory = parse_size(
                str(options.mem) if not str(options.mem)[-1].isdigit() else f"{options.mem}M"
            )
        except Exception:
            memory = 0
    duration = None
    if getattr(options, "time", None):
        seconds = parse_slurm_time(str(options.time))
        duration = float(seconds) if seconds else None
    gpus = int(getattr(options, "gpus_per_node", None) or 0)
    gres = _GRES_GPUS.fullmatch(str(getattr(options, "gres", None) or ""))
    if not gpus and gres:  # a group with gpu_option: gres asks --gres=gpu[:TYPE]:N
        gpus = int(gres.group(2))
    return Resources(
        cpus=int(getattr(options, "cpus_per_task", None) or 1),
        memory=memory,
        gpus=gpus,
        duration=duration,
    )


#: ``--gres`` asking for GPUs only: ``gpu:N`` or ``gpu:TYPE:N``
_GRES_GPUS = re.compile(r"gpu(?::([^:,]+))?:(\d+)")


def shape_of(inner: Launcher, environment: Environment = EMPTY) -> str:
    """12 hex digits naming the shape: the inner launcher's target and options without the
    time limit (tasks of several durations share a pilot), environment included: its
    variables and, when set, the task's whole ``environment:`` block (``task_environment``),
    so tasks with different environments never share a pilot."""
    args = [a for a in getattr(inner, "sbatch_args", list)() if not a.startswith("--time=")]
    group = getattr(inner, "group", None)
    data = {
        "kind": inner.kind,
        "group": getattr(group, "label", None),
        "connector": getattr(inner, "connector", "local"),
        "options": args,
        "export": getattr(inner, "export", None),
        "env": [list(p) for p in (getattr(inner, "env", ()) or ())],
        "python": getattr(inner, "python", None),
    }
    if not environment.is_empty:  # absent otherwise: the shapes of earlier versions stay
        data["environment"] = attrs.asdict(environment)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def task_environment(inner: Launcher, task_environment: Environment) -> Environment:
    """The whole ``environment:`` block of one task batched over ``inner``: its group's,
    partition's, node group's and launcher's, then the task's (docs/configuration.md)."""
    if isinstance(inner, SlurmLikeLauncher):
        base = launcher_environment(attrs.evolve(inner, use_environment=True))
    else:
        group = getattr(inner, "group", None)
        base = merge_all(
            getattr(group, "job_environment", EMPTY), getattr(inner, "environment", EMPTY)
        )
    return base.merged(task_environment)


def entry_argv(
    environment: Environment,
    argv: Sequence[str],
    *,
    job_dir: str,
    cwd: str,
    gpus: int,
    callable_task: bool,
) -> list[str]:
    """The command a pilot runs for a task: ``argv`` itself, or ``bash -c WRAPPER bash argv``
    applying the task's environment (variables travel in the entry's ``env``)."""
    block = environment.without_variables()
    if block.is_empty:
        return list(argv)
    script = render_wrapper(block, job_dir=job_dir, cwd=cwd, gpus=gpus, callable_task=callable_task)
    return ["bash", "-c", script, "bash", *argv]


def bare_launcher(inner: Any) -> Any:
    """``inner`` for a pilot's own job: without its ``environment:`` (applied per task)."""
    if hasattr(inner, "use_environment"):
        return attrs.evolve(inner, use_environment=False)
    return inner


def pilot_name(shape: str, n: int) -> str:
    """``lxpilot-<shape12>-<n>``: the pilot's job name."""
    return f"lxpilot-{shape}-{n}"


def pilot_tag(argv: Sequence[str]) -> str | None:
    """The ``--pilot`` value of a pilot's runner command line (None when absent)."""
    args = list(argv)
    for i, a in enumerate(args[:-1]):
        if a == "--pilot":
            return str(args[i + 1])
    return None


def node_capacities(inner: Launcher) -> list[tuple[int, int, int]]:
    """``(cores, memory, gpus)`` of each node the inner launcher may land on (0 = unknown)."""
    out = []
    for host in getattr(inner, "hosts", ()) or ():
        out.append((int(host.cores or 0), int(host.memory or 0), len(host.gpus or ())))
    if out:
        return out
    group = getattr(inner, "group", None)
    cpu = getattr(group, "cpu", None)
    if cpu is not None and not getattr(group, "implicit", False):
        gpus = sum(int(g.count) for g in getattr(group, "gpus", ()) or ())
        out.append((int(cpu.cores or 0), int(cpu.memory or 0), gpus))
    return out


def auto_slots(inner: Launcher, res: Resources) -> int:
    """The largest k <= 8 such that k tasks fit the smallest node matched (1 when unknown)."""
    best: int | None = None
    for cores, memory, gpus in node_capacities(inner):
        limits = []
        if cores:
            limits.append(cores // max(1, res.cpus))
        if memory and res.memory:
            limits.append(memory // res.memory)
        if res.gpus:
            limits.append(gpus // res.gpus)
        if not limits:
            continue
        k = min(limits)
        best = k if best is None else min(best, k)
    if best is None:
        return 1
    return max(1, min(MAX_AUTO_SLOTS, best))


def inner_limit(inner: Launcher) -> float | None:
    """The inner launcher's time limit (smallest partition/QoS maximum of its nodes)."""
    limits = [
        float(h.max_duration)
        for h in getattr(inner, "hosts", ()) or ()
        if getattr(h, "max_duration", 0)
    ]
    return min(limits) if limits else None


def pilot_walltime(batch: BatchLauncher, longest: float | None) -> float:
    """``walltime``, else min(inner limit, max(1 h, 2 x longest declared duration))."""
    if batch.walltime:
        return float(batch.walltime)
    want = max(MIN_WALLTIME, 2 * (longest or 0))
    limit = inner_limit(batch.inner)
    return min(limit, want) if limit else want


def check_fits(batch: BatchLauncher, task_id: str, longest: float | None = None) -> None:
    """Refuse a task that can never run: its limit plus ``drain_margin`` exceeds the walltime."""
    res = task_resources(batch.inner)
    limit = batch.task_timeout or res.duration
    if not limit:
        return
    walltime = pilot_walltime(batch, max(longest or 0, res.duration or 0))
    if limit + batch.drain_margin > walltime:
        what = "task_timeout" if batch.task_timeout else "declared duration"
        raise LaunchersError(
            f"task {task_id} can never run in a batch pilot: its {what} {format_duration(int(limit))} "
            f"plus drain_margin {format_duration(int(batch.drain_margin))} exceeds the pilot walltime "
            f"{format_duration(int(walltime))}"
        )


def _pilot_slurm_launcher(
    inner: Any, batch: BatchLauncher, res: Resources, slots: int, walltime: float
) -> Any:
    """The inner Slurm launcher resized for ``slots`` tasks and the walltime, warned with USR1."""
    changes: dict[str, Any] = {"cpus_per_task": res.cpus * slots, "time": int(walltime)}
    if res.memory:
        changes["mem"] = f"{-(-res.memory * slots // (1024 * 1024))}M"
    if res.gpus:
        options = getattr(inner, "options", None)
        gres = _GRES_GPUS.fullmatch(str(getattr(options, "gres", None) or ""))
        if gres and not getattr(options, "gpus_per_node", None):  # keep the group's gpu_option
            changes["gres"] = (
                f"gpu:{gres.group(1) + ':' if gres.group(1) else ''}{res.gpus * slots}"
            )
        else:
            changes["gpus_per_node"] = res.gpus * slots
    launcher = inner.config(**changes)
    if isinstance(
        launcher, SlurmLikeLauncher
    ):  # the runner runs bare; each task in its environment
        launcher = attrs.evolve(launcher, use_environment=False)
    if isinstance(launcher, SlurmLauncher):
        warning: dict[str, Any] = {
            "max_requeues": 0,
            "resume_signal": "USR1",
            "resume_grace": max(1, int(batch.drain_margin)),
        }
        names = {f.name for f in attrs.fields(type(launcher))}
        if set(warning) <= names:  # the launcher carries these settings itself
            return attrs.evolve(launcher, **warning)
        fields = {f.name: getattr(launcher, f.name) for f in attrs.fields(type(launcher)) if f.init}
        fields.update(warning)
        return PilotSlurmLauncher(**fields)
    return launcher


def _pilot_class() -> Any:
    @attrs.frozen(kw_only=True)
    class _Pilot(SlurmLauncher):
        """A Slurm launcher for pilots: USR1 ``drain_margin`` before the end, never requeued."""

        max_requeues: int = 0
        resume_signal: str = "USR1"
        resume_grace: int = 300

    _Pilot.__name__ = _Pilot.__qualname__ = "PilotSlurmLauncher"
    return _Pilot


PilotSlurmLauncher: Any = _pilot_class()
