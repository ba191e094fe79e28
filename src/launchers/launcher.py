"""The launcher values: a launcher says where and with which options a job runs; running jobs
is the work of an *executor* (I/O), looked up by launcher kind, as in PSI/J's executor split.

``Launcher`` is the base of every kind; ``BatchLauncher`` runs many tasks through few pilot jobs
of an inner launcher (docs/design/pilots.md §3.1), and lives here because every launcher can be
``batched()``. Durations of the batch options are given as seconds or duration strings
(``"2m"``, ``"30s"``) and stored in seconds; the pilot manager is ``launchers.batch.executor``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import attrs

from .errors import ConfigurationError
from .hooks import services
from .units import Negative, UnitError, parse_seconds

if TYPE_CHECKING:
    from .batch.executor import BatchExecutor
    from .runtime.executor import Executor


@attrs.frozen
class Launcher:
    """Base of every launcher kind; subclasses are frozen attrs classes."""

    @property
    def kind(self) -> str:
        raise NotImplementedError

    def executor(self) -> Executor:
        """The process-wide executor that runs jobs for this launcher (created on first use)."""
        return services().executor_for(self)

    def batched(self, **options: Any) -> BatchLauncher:
        """This launcher wrapped in a ``BatchLauncher`` (docs/design/pilots.md §3.1)."""
        return BatchLauncher(self, **options)


@attrs.frozen
class GroupLauncher(Launcher):
    """A launcher made from one launchers.yaml group: connector and id are the group's, the
    explanation is the finder's notes (``why``, formatted when read)."""

    if TYPE_CHECKING:  # fields of the subclasses, typed there
        group: Any
        why: Iterable[str]

    @property
    def explanation(self) -> tuple[str, ...]:
        """Why the finder chose this launcher (soundness notes included)."""
        return tuple(self.why)

    @property
    def connector(self) -> str:
        """``local``, or the name of the SSH connector that reaches the group."""
        return str(self.group.connector)

    @property
    def group_id(self) -> str:
        """The group id, or ``kind[index]`` for a group without one."""
        return str(self.group.label)


def _to_seconds(name: str, value: Any) -> float:
    """A duration option in seconds: a number of seconds (kept as given) or a duration string."""
    if isinstance(value, bool) or value is None:
        raise ConfigurationError(f"batch option {name}: {value!r} is not a duration", key=name)
    try:
        seconds = parse_seconds(value if isinstance(value, (int, float)) else str(value))
    except Negative:
        raise ConfigurationError(
            f"batch option {name}: must not be negative ({value!r})", key=name
        ) from None
    except UnitError as e:
        raise ConfigurationError(f"batch option {name}: {e}", key=name) from None
    return float(seconds)


def _linger(value: Any) -> float:
    return _to_seconds("linger", value)


def _drain_margin(value: Any) -> float:
    return _to_seconds("drain_margin", value)


def _scale_after(value: Any) -> float:
    return _to_seconds("scale_after", value)


def _kill_grace(value: Any) -> float:
    return _to_seconds("kill_grace", value)


def _walltime(value: Any) -> float | None:
    return None if value is None else _to_seconds("walltime", value)


def _task_timeout(value: Any) -> float | None:
    return None if value is None else _to_seconds("task_timeout", value)


def _max_attempts(value: Any) -> int:
    return _positive_int("max_attempts", value)


def _max_pilots(value: Any) -> int:
    return _positive_int("max_pilots", value)


def _slots(value: Any) -> int | str:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"batch option slots: must be 'auto' or an integer >= 1, not {value!r}", key="slots"
        )
    return value


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"batch option {name}: must be an integer >= 1, not {value!r}", key=name
        )
    return value


def _inner(value: Any) -> Launcher:
    if not isinstance(value, Launcher):
        raise ConfigurationError(f"BatchLauncher wraps a launcher, not {type(value).__name__}")
    if isinstance(value, BatchLauncher):
        raise ConfigurationError("BatchLauncher cannot wrap another BatchLauncher")
    return value


@attrs.frozen
class BatchLauncher(Launcher):
    """Tasks submitted here are queued in ``<workdir>/batch/<shape>/`` and run by pilots of
    ``inner`` (each pilot: ``slots`` x the task's resources on one node)."""

    inner: Launcher = attrs.field(converter=_inner)
    slots: int | str = attrs.field(default="auto", converter=_slots, kw_only=True)
    linger: float = attrs.field(default=120.0, converter=_linger, kw_only=True)
    walltime: float | None = attrs.field(default=None, converter=_walltime, kw_only=True)
    task_timeout: float | None = attrs.field(default=None, converter=_task_timeout, kw_only=True)
    max_attempts: int = attrs.field(default=3, converter=_max_attempts, kw_only=True)
    drain_margin: float = attrs.field(default=300.0, converter=_drain_margin, kw_only=True)
    max_pilots: int = attrs.field(default=1, converter=_max_pilots, kw_only=True)
    scale_after: float = attrs.field(default=300.0, converter=_scale_after, kw_only=True)
    kill_grace: float = attrs.field(default=30.0, converter=_kill_grace, kw_only=True)

    @property
    def kind(self) -> str:
        return "batch"

    @property
    def group(self) -> Any:
        """The inner launcher's group."""
        return getattr(self.inner, "group", None)

    @property
    def connector(self) -> str:
        """The inner launcher's connector."""
        return str(getattr(self.inner, "connector", "local") or "local")

    @property
    def group_id(self) -> str:
        return str(getattr(self.inner, "group_id", "") or "")

    @property
    def explanation(self) -> tuple[str, ...]:
        """The inner launcher's explanation."""
        return tuple(getattr(self.inner, "explanation", ()))

    def sbatch_args(self) -> list[str]:
        """The inner launcher's options (what one task would request as a job of its own)."""
        args = getattr(self.inner, "sbatch_args", None)
        return list(args()) if callable(args) else []

    def batched(self, **options: Any) -> BatchLauncher:
        """The same inner launcher with other batch options."""
        return attrs.evolve(self, **options)

    def executor(self) -> BatchExecutor:
        """The process's batch executor."""
        return cast("BatchExecutor", super().executor())

    def cancel(self) -> None:
        """Cancel this launcher's pilots (one request) and mark its unclaimed tasks CANCELLED."""
        self.executor().cancel_launcher_sync(self)


__all__ = ["BatchLauncher", "Launcher"]
