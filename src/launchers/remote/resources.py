"""The ``Resources`` block of a Compute Backend Config
(docs/design/sites.md §1.2): checked types, exact units.

Also the two renderings of it: UNICORE's ``Resources`` object and firecREST's sbatch options,
and the reverse direction for a finder match (a Slurm-like launcher's options).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..config.problems import (
    Problems,
    key_path,
    key_pos,
    type_name,
    unknown_key,
    value_pos,
)
from ..errors import ConfigurationError
from ..units import (
    NoUnit,
    SeveralUnits,
    UnitError,
    duration_text,
    mib_ceil,
    parse_seconds,
    parse_size,
    parse_slurm_time,
    slurm_time,
)

RESOURCE_KEYS = (
    "Queue",
    "Runtime",
    "Nodes",
    "TotalCPUs",
    "CPUsPerNode",
    "GPUsPerNode",
    "MemoryPerNode",
    "Memory",
    "Reservation",
    "NodeConstraints",
    "QoS",
)
_INT_MIN = {"Nodes": 1, "TotalCPUs": 1, "CPUsPerNode": 1, "GPUsPerNode": 0}
_STRINGS = ("Queue", "Reservation", "NodeConstraints", "QoS")


@attrs.frozen
class Resources:
    """What a job asks for; durations in seconds, memory in bytes, ``None`` when not set."""

    queue: str | None = None
    runtime: int | None = None
    nodes: int | None = None
    total_cpus: int | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None
    memory_per_node: int | None = None
    reservation: str | None = None
    node_constraints: str | None = None
    qos: str | None = None

    def unicore(self, gpu_resource_name: str = "GPUsPerNode") -> dict[str, Any]:
        """These values as UNICORE's ``Resources`` object, keys that are set only. Not sent: a
        stock site maps them wrongly, so runs are raw jobs with #SBATCH lines (docs/design/sites.md)."""
        out: dict[str, Any] = {}
        if self.queue is not None:
            out["Queue"] = self.queue
        if self.runtime is not None:
            out["Runtime"] = str(self.runtime)
        if self.nodes is not None:
            out["Nodes"] = self.nodes
        if self.total_cpus is not None:
            out["TotalCPUs"] = self.total_cpus
        if self.cpus_per_node is not None:
            out["CPUsPerNode"] = self.cpus_per_node
        if self.gpus_per_node is not None:
            out[gpu_resource_name] = self.gpus_per_node
        if self.memory_per_node is not None:
            out["MemoryPerNode"] = f"{mib_ceil(self.memory_per_node)}M"
        if self.reservation is not None:
            out["Reservation"] = self.reservation
        if self.node_constraints is not None:
            out["NodeConstraints"] = self.node_constraints
        if self.qos is not None:
            out["QoS"] = self.qos
        return out

    def sbatch_options(self, gpu_option: str = "gpus-per-node") -> list[tuple[str, str]]:
        """firecREST ``#SBATCH`` options as (long name, value) pairs, in the table's order."""
        out: list[tuple[str, str]] = []
        if self.queue is not None:
            out.append(("partition", self.queue))
        if self.runtime is not None:
            out.append(("time", slurm_time(self.runtime, days=True)))
        if self.nodes is not None:
            out.append(("nodes", str(self.nodes)))
        if self.total_cpus is not None:
            out.append(("ntasks", str(self.total_cpus)))
        if self.cpus_per_node is not None and self.total_cpus is not None:
            # both (UNICORE only): TotalCPUs one-CPU tasks, at most CPUsPerNode of them per node,
            # as UNICORE's own mapping means them
            out.append(("ntasks-per-node", str(self.cpus_per_node)))
        elif self.cpus_per_node is not None:
            out.append(("ntasks-per-node", "1"))
            out.append(("cpus-per-task", str(self.cpus_per_node)))
        if self.gpus_per_node is not None:
            if gpu_option == "gres":
                out.append(("gres", f"gpu:{self.gpus_per_node}"))
            else:
                out.append(("gpus-per-node", str(self.gpus_per_node)))
        if self.memory_per_node is not None:
            out.append(("mem", f"{mib_ceil(self.memory_per_node)}M"))
        if self.reservation is not None:
            out.append(("reservation", self.reservation))
        if self.node_constraints is not None:
            out.append(("constraint", self.node_constraints))
        if self.qos is not None:
            out.append(("qos", self.qos))
        return out


def parse_runtime(value: Any) -> int:
    """Seconds of a ``Runtime``: Mantik's ``<integer><unit>`` or any finder duration, in one
    unit (a bare number is ambiguous here, and a sum of units is refused with its one-unit
    form)."""
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
        raise UnitError(f"expected a duration such as 2h or 90m, not {type_name(value)}")
    try:
        seconds = parse_seconds(
            value.strip() if isinstance(value, str) else value, bare="error", several=False
        )
    except NoUnit as e:
        alone = repr(value.strip()) if isinstance(value, str) else value
        raise UnitError(
            f"a duration needs a unit ({e.number}s, {e.number}m…); {alone} alone is ambiguous"
        ) from None
    except SeveralUnits as e:
        raise UnitError(
            f"{value!r} has several units; write one, such as {duration_text(e.seconds)}"
        ) from None
    if seconds <= 0:
        raise UnitError(f"{value!r} is not a positive duration")
    return int(seconds)


def validate_resources(
    located_value: Any,
    file: str | None,
    key_prefix: str = "Resources",
    *,
    site_kind: str | None = None,
    require_queue: bool = True,
    problems: Problems | None = None,
) -> Resources:
    """Check a ``Resources`` mapping (docs/design/sites.md §1.2) and return its value; all problems at once."""
    own = problems is None
    probs = problems if problems is not None else Problems(file)
    if not isinstance(located_value, Mapping):
        probs.add(
            getattr(located_value, "position", None),
            key_prefix,
            f"expected a mapping, not {type_name(located_value)}",
        )
        if own:
            probs.raise_if_any()
        return Resources()
    v = located_value
    fields: dict[str, Any] = {}
    for key, value in v.items():
        kp = key_path(key_prefix, str(key))
        vpos = value_pos(v, key)
        if key not in RESOURCE_KEYS:
            probs.add(
                key_pos(v, key),
                kp,
                unknown_key(key, RESOURCE_KEYS),
            )
        elif key in _STRINGS:
            if isinstance(value, str) and value.strip():
                fields[_field(key)] = value
            elif isinstance(value, str):
                probs.add(vpos, kp, "an empty string; remove the key or write a value")
            else:
                probs.add(
                    vpos,
                    kp,
                    f"expected a string, not {type_name(value)}"
                    + (
                        f'; write it in quotes: "{value}"'
                        if isinstance(value, (int, float)) and not isinstance(value, bool)
                        else ""
                    ),
                )
        elif key in _INT_MIN:
            low = _INT_MIN[key]
            if isinstance(value, bool) or not isinstance(value, int):
                hint = ""
                if isinstance(value, str) and value.strip().isdigit():
                    hint = f"; write {value.strip()} without quotes"
                probs.add(
                    vpos, kp, f"expected an integer ≥ {low}, not {type_name(value)} {value!r}{hint}"
                )
            elif value < low:
                probs.add(vpos, kp, f"expected an integer ≥ {low}, not {value}")
            else:
                fields[_field(key)] = value
        elif key == "Runtime":
            try:
                fields["runtime"] = parse_runtime(value)
            except UnitError as e:
                probs.add(vpos, kp, str(e))
        else:  # MemoryPerNode, Memory
            if key == "Memory" and "MemoryPerNode" in v:
                probs.add(
                    key_pos(v, key),
                    kp,
                    "Memory is an alias of MemoryPerNode; write only one of them",
                )
                continue
            try:
                if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                    raise UnitError(f"expected a size such as 16G, not {type_name(value)}")
                size = parse_size(str(value))
                if size <= 0:
                    raise UnitError(f"{value!r} is not a positive size")
                fields["memory_per_node"] = size
            except UnitError as e:
                probs.add(vpos, kp, str(e))
    if require_queue and "Queue" not in v:
        probs.add(
            getattr(v, "position", None),
            key_path(key_prefix, "Queue"),
            "Queue (the partition) is required",
        )
    if site_kind in _SBATCH_SITES and "TotalCPUs" in v and "CPUsPerNode" in v:
        probs.add(key_pos(v, "TotalCPUs"), key_path(key_prefix, "TotalCPUs"), _both_cpus(site_kind))
    if own:
        probs.raise_if_any()
    return Resources(**fields)


def _field(key: str) -> str:
    return {
        "Queue": "queue",
        "Reservation": "reservation",
        "NodeConstraints": "node_constraints",
        "QoS": "qos",
        "Nodes": "nodes",
        "TotalCPUs": "total_cpus",
        "CPUsPerNode": "cpus_per_node",
        "GPUsPerNode": "gpus_per_node",
    }[key]


def check_for_site(resources: Resources, site_kind: str, file: str | None) -> None:
    """Rules that depend on the site kind, for configs whose site comes from ``--group``."""
    if (
        site_kind in _SBATCH_SITES
        and resources.total_cpus is not None
        and resources.cpus_per_node is not None
    ):
        raise ConfigurationError(_both_cpus(site_kind), file=file, key="Resources.TotalCPUs")


#: site kinds that refuse TotalCPUs with CPUsPerNode (UNICORE takes both: TotalCPUs tasks, at
#: most CPUsPerNode of them per node, as its own mapping reads them)
_SBATCH_SITES = {"firecrest": "firecREST"}


def _both_cpus(site_kind: str) -> str:
    return (
        f"TotalCPUs and CPUsPerNode together are refused for a {_SBATCH_SITES[site_kind]} site "
        "(sbatch would multiply --ntasks by --cpus-per-task); keep one"
    )


def resources_from_options(options: Any) -> Resources:
    """UNICORE ``Resources`` from a finder match (a Slurm-like launcher's ``.options``).

    UNICORE's ``Queue`` takes one partition: the first (the best candidate's).
    """

    def get(name: str) -> Any:
        return getattr(options, name, None)

    partition = get("partition")
    queue = str(partition).split(",")[0] if partition else None
    time = get("time")
    runtime = parse_slurm_time(str(time)) if time else None
    mem = get("mem")
    memory = parse_size(str(mem)) if mem else None
    gpus = get("gpus_per_node")
    if gpus is None and get("gres"):
        m = re.search(r"gpu(?::[^:,]+)?:(\d+)", str(get("gres")))
        gpus = int(m.group(1)) if m else None
    cpus = get("cpus_per_task")
    nodes = get("nodes")
    return Resources(
        queue=queue,
        runtime=runtime,
        nodes=int(nodes) if nodes else None,
        cpus_per_node=int(cpus) if cpus else None,
        gpus_per_node=int(gpus) if gpus is not None else None,
        memory_per_node=memory,
        node_constraints=str(get("constraint")) if get("constraint") else None,
        qos=str(get("qos")) if get("qos") else None,
        reservation=str(get("reservation")) if get("reservation") else None,
    )
