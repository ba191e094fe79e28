"""Dependencies between jobs (docs/design/runtime.md §15): the edges a job records, and what a
dependent is, given its dependencies' states (wait, submit, or end without running). Pure.

An edge comes from ``task.submit(after=[job, finished(job)])`` (scheduling only) or from a ``Job``
used as a parameter of a ``@task`` function (an *input*: part of the identity, and the function
receives the job's result). Edges name the dependency's task id and its absolute job directory,
so that a restarted client finds the dependency again, also in another experiment directory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Union

import attrs

from ..errors import LaunchersError, TaskError
from .state import JobState

#: Satisfied by ``COMPLETED`` only (``after=[job]``, a job parameter): Slurm's ``afterok``.
OK = "ok"
#: Satisfied by any final state (``after=[finished(job)]``): Slurm's ``afterany``.
ANY = "any"
#: The key of an encoded job parameter: ``{"$job": "NAME-DIGEST"}`` (what the digest covers).
JOB_KEY = "$job"
#: The record key (``state.json``) holding a job's edges.
RECORD_KEY = "after"
#: The record key naming the dependency whose end ended this job without running.
FAILED_KEY = "dependency_failed"
#: The record key holding the ``--dependency`` value a Slurm dependent was submitted with.
NATIVE_KEY = "native_dependency"
#: The file of a dependent's job directory giving its inputs' results to ``launchers.run``.
INPUTS = "inputs.json"
#: How the reason of a dependent waiting for others starts (``waiting for NAME-DIGEST (STATE)``).
WAITING_FOR = "waiting for"


def is_job(value: Any) -> bool:
    """Whether ``value`` is a submitted ``Job`` (duck-typed: values do not import the job layer)."""
    return getattr(type(value), "__launchers_job__", False) is True


@attrs.frozen
class Finished:
    """An ``after=`` entry satisfied by any final state of ``job`` (``finished(job)``)."""

    job: Any


def finished(job: Any) -> Finished:
    """``task.submit(after=[finished(job)])``: wait until ``job`` ends, whatever its state."""
    if not is_job(job):
        raise TaskError(
            f"finished(): {type(job).__name__} is not a Job (pass what task.submit() returned)"
        )
    return Finished(job)


@attrs.frozen
class Edge:
    """One dependency of a job: its task id, absolute job directory and condition."""

    task_id: str
    directory: str
    condition: str = OK
    #: True for a job parameter: the dependent's function receives its result
    input: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "directory": self.directory,
            "condition": self.condition,
            "input": self.input,
        }

    @classmethod
    def from_json(cls, data: Any, *, where: str = "state.json") -> Edge:
        """An edge of a record; a malformed one is a ``LaunchersError`` naming ``where``."""
        if (
            not isinstance(data, Mapping)
            or not isinstance(data.get("task_id"), str)
            or not isinstance(data.get("directory"), str)
            or data.get("condition", OK) not in (OK, ANY)
        ):
            raise LaunchersError(f"{where}: {RECORD_KEY}: not an edge: {data!r}")
        return cls(
            task_id=data["task_id"],
            directory=data["directory"],
            condition=data.get("condition", OK),
            input=bool(data.get("input", False)),
        )


def edges_of(extra: Mapping[str, Any], *, where: str = "state.json") -> tuple[Edge, ...]:
    """The edges recorded in a record's extra keys (none when absent)."""
    raw = extra.get(RECORD_KEY) or ()
    if not isinstance(raw, list):
        raise LaunchersError(f"{where}: {RECORD_KEY}: not a list")
    return tuple(Edge.from_json(e, where=where) for e in raw)


def edges_json(edges: Iterable[Edge]) -> list[dict[str, Any]]:
    """The record form of ``edges``."""
    return [e.to_json() for e in edges]


def after_edges(after: Any) -> list[tuple[Edge, Any]]:
    """The (edge, job) pairs of an ``after=`` argument: jobs and ``finished(job)`` only."""
    if after is None:
        return []
    if is_job(after) or isinstance(after, Finished) or not isinstance(after, (list, tuple)):
        raise TaskError(
            f"after=: expected a list of jobs, not {type(after).__name__} "
            "(write after=[job] or after=[finished(job)])"
        )
    out = []
    for i, item in enumerate(after):
        if isinstance(item, Finished):
            job, condition = item.job, ANY
        elif is_job(item):
            job, condition = item, OK
        else:
            raise TaskError(
                f"after=[{i}]: {type(item).__name__} is not a Job "
                "(pass what task.submit() returned, or finished(job))"
            )
        out.append((Edge(job.task_id, str(job.directory), condition), job))
    return out


def merge_edges(pairs: Iterable[tuple[Edge, Any]]) -> list[tuple[Edge, Any]]:
    """One edge per dependency: an input or ``OK`` edge wins over ``ANY`` for the same job."""
    merged: dict[str, tuple[Edge, Any]] = {}
    for edge, job in pairs:
        old = merged.get(edge.directory)
        if old is None:
            merged[edge.directory] = (edge, job)
            continue
        condition = OK if OK in (old[0].condition, edge.condition) else ANY
        merged[edge.directory] = (
            attrs.evolve(old[0], condition=condition, input=old[0].input or edge.input),
            old[1],
        )
    return list(merged.values())


# -- the decision -----------------------------------------------------------------------------


@attrs.frozen
class DepState:
    """What a dependent knows of one dependency now. ``native_id`` is set only when Slurm itself
    can hold the dependent on it (same cluster, same connector, the dependency submitted)."""

    edge: Edge
    state: JobState
    native_id: str | None = None


@attrs.frozen
class Wait:
    """Stay ``WAITING`` with ``reason``."""

    reason: str


@attrs.frozen
class Submit:
    """Submit now; ``native`` lists the dependencies left to Slurm (``--dependency``)."""

    native: tuple[tuple[Edge, str], ...] = ()


@attrs.frozen
class End:
    """End without running: ``state`` with ``reason``, naming the dependency ``dependency``."""

    state: JobState
    reason: str
    dependency: str


Decision = Union[Wait, Submit, End]  # noqa: UP007


def satisfied(edge: Edge, state: JobState) -> bool:
    """Whether ``state`` of the dependency lets the dependent run."""
    return state.is_final if edge.condition == ANY else state is JobState.COMPLETED


def broken(edge: Edge, state: JobState) -> bool:
    """Whether the dependency ended in a way the dependent can never run after."""
    return edge.condition == OK and state.is_final and state is not JobState.COMPLETED


def failed_reason(task_id: str, state: JobState) -> str:
    """The reason of a dependent ended by its dependency: ``dependency NAME-DIGEST ended FAILED``."""
    return f"dependency {task_id} ended {state.value}"


def decide_dependent(deps: Sequence[DepState]) -> Decision:
    """What a dependent is, given its dependencies (docs/design/runtime.md §15).

    A dependency that can never be satisfied ends it ``CANCELLED`` (as Slurm does with
    ``--kill-on-invalid-dep``), the first such one named; all satisfied: submit; those left all
    held by Slurm itself (``native_id``, and still in Slurm's queue): submit with them as
    ``--dependency``; else wait, naming the first dependency it waits for and its state."""
    for d in deps:
        if broken(d.edge, d.state):
            return End(JobState.CANCELLED, failed_reason(d.edge.task_id, d.state), d.edge.task_id)
    open_ = [d for d in deps if not satisfied(d.edge, d.state)]
    if not open_:
        return Submit()

    waiting = [d for d in open_ if not held_by_slurm(d)]
    if not waiting:
        return Submit(tuple((d.edge, str(d.native_id)) for d in open_))
    return wait_for(waiting[0], len(waiting))


def decide_tally(
    changed: Sequence[DepState], open_: Mapping[int, DepState], waiting: Collection[int]
) -> Decision:
    """``decide_dependent`` for a dependent whose open dependencies are kept up to date one
    change at a time (``jobs.graph``): ``changed`` the states just read (a broken one ends it;
    the others were read when they changed), ``open_`` the unsatisfied ones by edge index,
    ``waiting`` the indices of those Slurm cannot hold. The same answer, in O(changed) unless
    it submits: a dependent of N jobs costs O(N) over the graph, not O(N^2)."""
    for d in changed:
        if broken(d.edge, d.state):
            return End(JobState.CANCELLED, failed_reason(d.edge.task_id, d.state), d.edge.task_id)
    if not open_:
        return Submit()
    if not waiting:
        return Submit(tuple((open_[i].edge, str(open_[i].native_id)) for i in sorted(open_)))
    return wait_for(open_[min(waiting)], len(waiting))


def held_by_slurm(d: DepState) -> bool:
    """Whether Slurm itself can hold the dependent on this open dependency (``--dependency``)."""
    return d.native_id is not None and d.state.is_active


def wait_for(first: DepState, count: int) -> Wait:
    """Waiting for ``count`` dependencies, ``first`` of them named (``and N more``)."""
    reason = f"{WAITING_FOR} {first.edge.task_id} ({first.state.value})"
    if count > 1:
        reason += f" and {count - 1} more"
    return Wait(reason)


def explain(deps: Sequence[tuple[Edge, JobState | None]]) -> str:
    """Why a job with dependencies is not running yet, for ``launchers jobs``: each dependency
    with its state, ``after NAME-DIGEST (RUNNING), NAME-DIGEST (COMPLETED)``; ``finished()``
    edges are marked ``any end``, a dependency without a record ``no record``."""
    parts = []
    for edge, state in deps:
        words = [state.value if state is not None else "no record"]
        if edge.condition == ANY:
            words.append("any end")
        parts.append(f"{edge.task_id} ({', '.join(words)})")
    return "after " + ", ".join(parts) if parts else ""


def slurm_dependency(native: Sequence[tuple[Edge, str]]) -> str:
    """sbatch's ``--dependency`` value: ``afterok:ID[:ID...]`` and/or ``afterany:...`` joined by
    ``,`` (all must hold). An array element is ``ID_N``, a whole array its master ``ID``."""
    groups: dict[str, list[str]] = {}
    for edge, native_id in native:
        kind = "afterany" if edge.condition == ANY else "afterok"
        groups.setdefault(kind, []).append(native_id)
    return ",".join(f"{k}:{':'.join(ids)}" for k, ids in sorted(groups.items(), reverse=True))


def slurm_directives(dependency: str | None) -> tuple[str, ...]:
    """The sbatch directives of a dependent submitted with native dependencies."""
    if not dependency:
        return ()
    return (f"--dependency={dependency}", "--kill-on-invalid-dep=yes")


__all__ = [
    "ANY",
    "FAILED_KEY",
    "INPUTS",
    "JOB_KEY",
    "NATIVE_KEY",
    "OK",
    "RECORD_KEY",
    "WAITING_FOR",
    "DepState",
    "Edge",
    "End",
    "Finished",
    "Submit",
    "Wait",
    "after_edges",
    "decide_dependent",
    "decide_tally",
    "edges_of",
    "explain",
    "failed_reason",
    "finished",
    "held_by_slurm",
    "is_job",
    "merge_edges",
    "slurm_dependency",
    "slurm_directives",
    "wait_for",
]
