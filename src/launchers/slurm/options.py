"""sbatch options chosen by the finder: one frozen value, rendered as ``--name=value`` arguments.

Field names are sbatch's long option names with underscores; ``None`` means "not set".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import ConfigurationError
from ..units import UnitError, mib_ceil, parse_duration, parse_size, slurm_time

_INT_FIELDS = ("gpus_per_node", "cpus_per_task", "nodes")
_STR_FIELDS = ("partition", "constraint", "gres", "mem", "time", "qos", "account", "exclude")
_SLURM_MEM = re.compile(r"^\d+[KMGT]?$")
_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^(UNLIMITED|INFINITE)$", re.IGNORECASE)


@attrs.frozen
class SlurmOptions:
    """The resource options of one Slurm job, named after sbatch's long options."""

    partition: str | None = None
    constraint: str | None = None
    gpus_per_node: int | None = None
    gres: str | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    qos: str | None = None
    account: str | None = None
    exclude: str | None = None
    nodes: int | None = None

    def sbatch_args(self) -> list[str]:
        """The options as ``--name=value`` strings (dashes in names), in field order."""
        out = []
        for f in attrs.fields(SlurmOptions):
            value = getattr(self, f.name)
            if value is not None:
                out.append(f"--{f.name.replace('_', '-')}={value}")
        return out

    def as_dict(self) -> dict[str, Any]:
        """Every field, ``None`` included (the ``--json`` form of ``launchers find``)."""
        return attrs.asdict(self)

    def replace(self, **changes: Any) -> SlurmOptions:
        """A copy with the given options changed, each checked and normalised."""
        return attrs.evolve(self, **normalize_options(changes))


def option_names() -> tuple[str, ...]:
    """The names ``SlurmOptions`` knows, in field order."""
    return tuple(f.name for f in attrs.fields(SlurmOptions))


def unknown_option_error(
    name: str, known: tuple[str, ...], what: str = "option"
) -> ConfigurationError:
    """A ``ConfigurationError`` for an unknown name, with a "did you mean" when one is close."""
    close = difflib.get_close_matches(name.replace("-", "_"), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
    return ConfigurationError(f"unknown {what} {name!r}{hint}", key=name)


def normalize_options(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Check option values and bring them to sbatch's form (sizes to ``NNNM``, seconds to time)."""
    known = option_names()
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in known:
            raise unknown_option_error(name, known)
        out[name] = _normalize(name, value)
    return out


def _normalize(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INT_FIELDS:
        low = 0 if name == "gpus_per_node" else 1
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigurationError(f"{name} must be an integer >= {low}, not {value!r}", key=name)
        return value
    if name == "mem":
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ConfigurationError(f"mem must be a size such as '16G', not {value!r}", key=name)
        if isinstance(value, int):
            return f"{value}M"  # sbatch's default unit
        text = value.strip()
        if _SLURM_MEM.match(text):
            return text
        try:
            return f"{mib_ceil(parse_size(text))}M"
        except UnitError as e:
            raise ConfigurationError(f"mem: {e}", key=name) from None
    if name == "time":
        if isinstance(value, bool):
            raise ConfigurationError(f"time must be a duration, not {value!r}", key=name)
        if isinstance(value, int):
            return slurm_time(value)  # seconds
        if isinstance(value, str) and _SLURM_TIME.match(value.strip()):
            return value.strip()
        if isinstance(value, str):
            try:
                return slurm_time(parse_duration(value))
            except UnitError as e:
                raise ConfigurationError(f"time: {e}", key=name) from None
        raise ConfigurationError(f"time must be a duration, not {value!r}", key=name)
    if isinstance(value, (list, tuple)) and name in ("partition", "exclude", "account", "qos"):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str) or isinstance(value, bool):
        raise ConfigurationError(f"{name} must be a string, not {value!r}", key=name)
    return value
