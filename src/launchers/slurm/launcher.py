"""``SlurmLauncher``: a Slurm group plus the sbatch options the finder chose (a value, no I/O).

``SlurmLikeLauncher`` is shared with the UNICORE and firecREST launchers, which match the same
way and differ only in transport.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

import attrs

from ..config.environment import EMPTY, Environment
from ..config.environment_read import coerce
from ..config.model import SlurmGroup
from ..errors import ConfigurationError
from ..language.values import HostRequirement
from ..launcher import GroupLauncher
from .options import SlurmOptions, normalize_options, option_names, unknown_option_error
from .sbatch_options import check_sbatch_options

if TYPE_CHECKING:
    from .executor import SlurmExecutor

#: Launcher-level settings ``config()`` accepts besides the sbatch options.
LAUNCHER_SETTINGS = (
    "sbatch_options",
    "export",
    "env",
    "python",
    "max_requeues",
    "resume_signal",
    "resume_grace",
    "environment",
)


def _to_options(value: SlurmOptions | Mapping[str, Any] | None) -> SlurmOptions:
    if value.__class__ is SlurmOptions:
        return value
    if value is None:
        return SlurmOptions()
    if isinstance(value, SlurmOptions):
        return value
    if isinstance(value, Mapping):
        return SlurmOptions(**normalize_options(value))
    raise ConfigurationError(
        f"options must be SlurmOptions or a mapping, not {type(value).__name__}"
    )


def _pairs(value: Any) -> tuple[tuple[str, Any], ...]:
    if value == ():
        return ()
    if isinstance(value, Mapping):
        return tuple((str(k), v) for k, v in value.items())
    return tuple((str(k), v) for k, v in value)


@attrs.frozen(kw_only=True)
class SlurmLikeLauncher(GroupLauncher):
    """A Slurm-like group and the options chosen for one alternative of a requirement."""

    group: SlurmGroup = attrs.field(factory=SlurmGroup, repr=lambda g: repr(g.label))
    options: SlurmOptions = attrs.field(factory=SlurmOptions, converter=_to_options)
    alternative: int = 0
    requirement: HostRequirement = attrs.field(factory=HostRequirement)
    #: extra sbatch options given with ``config(sbatch_options=...)`` (the group's are in ``group``)
    sbatch_options: tuple[tuple[str, str | bool], ...] = attrs.field(default=(), converter=_pairs)
    export: str | None = None  # None: the group's
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    python: str | None = None
    #: requeue settings of resumable tasks (docs/design/runtime.md §9); None: the group's, else defaults
    max_requeues: int | None = None
    resume_signal: str | None = None
    resume_grace: int | None = None
    #: ``config(environment=...)``: over the group's, partition's and node group's (merged)
    environment: Environment = EMPTY
    #: False for a batch pilot: its job script applies no ``environment:`` (each task gets its
    #: own inside the pilot, batch/shape.py)
    use_environment: bool = True
    #: the hosts of the merged candidates (what a job may land on), for batching's slots=auto
    hosts: tuple[Any, ...] = attrs.field(default=(), eq=False, repr=False)
    #: why the finder chose this, formatted when read (see ``explanation``)
    why: Iterable[str] = attrs.field(default=(), eq=False, repr=False)

    @property
    def extra_options(self) -> tuple[tuple[str, str | bool], ...]:
        """The group's ``sbatch_options`` then the launcher's (later wins by name)."""
        merged: dict[str, str | bool] = dict(self.group.sbatch_options)
        merged.update(self.sbatch_options)
        return tuple(merged.items())

    def sbatch_args(self) -> list[str]:
        """The finder's options as ``--name=value`` strings, then the extra options."""
        args = self.options.sbatch_args()
        for name, value in self.extra_options:
            if value is True:
                args.append(f"--{name}")
            elif value is not False:
                args.append(f"--{name}={value}")
        return args

    def config(self, **options: Any) -> Any:
        """A new launcher with only the given options changed (sbatch long names with
        underscores, or ``sbatch_options=``, ``export=``, ``env=``, ``python=``,
        ``environment=`` merged key by key over the one set before)."""
        known = option_names()
        option_changes: dict[str, Any] = {}
        changes: dict[str, Any] = {}
        for name, value in options.items():
            if name in known:
                option_changes[name] = value
            elif name == "sbatch_options":
                extras: dict[str, Any] = dict(self.sbatch_options)
                for key, val in check_sbatch_options(_pairs(value), where="sbatch_options"):
                    field = key.replace("-", "_")
                    if field in known:
                        option_changes[field] = val
                    else:
                        extras[key] = val
                changes["sbatch_options"] = tuple(extras.items())
            elif name == "export":
                if value is not None and str(value).upper() not in ("ALL", "NONE"):
                    raise ConfigurationError(
                        f"export must be ALL or NONE, not {value!r}", key="export"
                    )
                changes["export"] = None if value is None else str(value).upper()
            elif name in ("env", "python"):
                changes[name] = value
            elif name == "environment":
                changes[name] = self.environment.merged(
                    coerce(value, where="launcher.config(environment=...)")
                )
            elif name in ("max_requeues", "resume_grace"):
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 0
                ):
                    raise ConfigurationError(
                        f"{name} must be a whole number >= 0, not {value!r}", key=name
                    )
                changes[name] = value
            elif name == "resume_signal":
                changes[name] = None if value is None else str(value).upper().removeprefix("SIG")
            else:
                raise unknown_option_error(name, known + LAUNCHER_SETTINGS)
        if option_changes:
            changes["options"] = self.options.replace(**option_changes)
        return attrs.evolve(self, **changes)


@attrs.frozen(kw_only=True)
class SlurmLauncher(SlurmLikeLauncher):
    """Submits with sbatch, here or through an SSH connector."""

    @property
    def kind(self) -> str:
        return "slurm"

    def submit_array(self, tasks: Sequence[Any], *, max_parallel: int | None = None) -> list[Any]:
        """Submit ``tasks`` in the current experiment as job arrays (split at MaxArraySize)."""
        with self.array(max_parallel):
            jobs = [t.submit(self) for t in tasks]
        return jobs

    def array(self, max_parallel: int | None = None) -> AbstractContextManager[list[Any]]:
        """``with launcher.array():`` around ``task.submit`` calls submits them as job arrays."""
        return self.executor().array(self, max_parallel=max_parallel)

    def executor(self) -> SlurmExecutor:
        """The process's Slurm executor for this launcher's connector and cluster."""
        return cast("SlurmExecutor", super().executor())


__all__ = ["SlurmLauncher", "SlurmLikeLauncher", "SlurmOptions"]
