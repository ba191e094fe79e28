"""The ``launchers.yaml`` model: frozen attrs values filled by the loader, read by the finder.

``None`` in a layered field means "not set at this level" (so an explicit 0 or false overrides).
Sizes are bytes, durations seconds, ratios ``Fraction`` (exact arithmetic).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, Union

import attrs

from launchers.config.environment import EMPTY, Environment
from launchers.units import parse_size


@attrs.frozen
class Position:
    """Where a value was read: file, 1-based line and column, and key path."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    key: str = ""

    def __str__(self) -> str:
        loc = self.file or "<config>"
        if self.line is not None:
            loc += f":{self.line}"
            if self.column is not None:
                loc += f":{self.column}"
        return f"{loc}: {self.key}" if self.key else loc


@attrs.frozen
class CPUConfig:
    cores: int | None = None
    memory: int | None = None
    mem_per_cpu: int | None = None
    cpu_per_gpu: int | None = None


@attrs.frozen
class GPUConfig:
    count: int | None = None
    kind: str | None = None  # cuda (when not set), mps or other
    memory: int | None = None
    model: str | None = None
    min_memory: int | None = None
    min_mem_ratio: Fraction | None = None


_WHOLE = re.compile(r"\s*([0-9]+)\s*\Z")


def regex_gpu(found: Mapping[str, str | None]) -> GPUConfig:
    """The GPU layer one ``features_regex`` match sets (docs/design/matching.md §4, §7) from its named groups:
    ``cuda_count`` a whole number, ``cuda_memory`` a size with its unit. A group that did not
    take part in the match sets nothing. ``ValueError`` (with the reason) for a captured text
    that is not such a value; the loader reports it at load, with the feature's position."""
    count = found.get("cuda_count")
    memory = found.get("cuda_memory")
    gpu_count: int | None = None
    if count is not None:
        m = _WHOLE.match(count)
        if m is None:
            raise ValueError(f"cuda_count captured {count!r}, which is not a whole number of GPUs")
        gpu_count = int(m.group(1))
    gpu_memory = None
    if memory is not None:
        try:
            gpu_memory = parse_size(memory)
        except ValueError as e:
            raise ValueError(f"cuda_memory: {e}") from None
    return GPUConfig(count=gpu_count, memory=gpu_memory)


def _merge(a: Any, b: Any) -> Any:
    """Key-by-key merge of two attrs values: fields of ``b`` that are not None win."""
    changes = {}
    for f in attrs.fields(type(a)):
        vb = getattr(b, f.name)
        if vb is None:
            continue
        va = getattr(a, f.name)
        changes[f.name] = _merge(va, vb) if attrs.has(type(vb)) else vb
    return attrs.evolve(a, **changes)


@attrs.frozen
class ResourceConfig:
    """One configuration layer (group, partition, node group, feature, regex)."""

    max_duration: int | None = None
    cpu: CPUConfig = CPUConfig()
    gpu: GPUConfig = GPUConfig()

    def merged(self, more_specific: ResourceConfig) -> ResourceConfig:
        """A new layer where every field set in ``more_specific`` wins."""
        merged: ResourceConfig = _merge(self, more_specific)
        return merged


@attrs.frozen
class NodeGroup:
    hosts: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    count: int | None = None
    configuration: ResourceConfig = ResourceConfig()
    position: Position = Position()
    #: ``environment:`` of this node group (over the partition's), docs/configuration.md
    job_environment: Environment = EMPTY


@attrs.frozen
class Partition:
    name: str
    nodes: tuple[NodeGroup, ...] = ()
    configuration: ResourceConfig = ResourceConfig()
    priority: int = 0
    disabled: bool = False
    qos: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    position: Position = Position()
    #: ``environment:`` of this partition (over the group's)
    job_environment: Environment = EMPTY


@attrs.frozen
class QoS:
    name: str
    max_duration: int | None = None
    min_gpu: int = 0
    priority: int = 0
    partition_time_limit: bool = False
    position: Position = Position()


@attrs.frozen
class BatchOptions:
    """The ``batch:`` mapping of a group (docs/design/pilots.md §3.1); durations in seconds."""

    slots: int | None = None  # None = auto
    linger: int = 120
    walltime: int | None = None
    task_timeout: int | None = None
    max_attempts: int = 3
    drain_margin: int = 300
    max_pilots: int = 1
    scale_after: int = 300
    kill_grace: int = 30


@attrs.frozen
class UnicoreSite:
    url: str
    auth: str = "basic"  # basic | bearer
    username_env: str = "LAUNCHERS_UNICORE_USERNAME"
    password_env: str = "LAUNCHERS_UNICORE_PASSWORD"
    token_env: str = "LAUNCHERS_UNICORE_TOKEN"
    account: str | None = None
    verify_tls: bool = True
    gpu_resource_name: str = "GPUsPerNode"
    user_preferences: str | None = None
    batch_storage: str = "HOME"


@attrs.frozen
class FirecrestSite:
    api_url: str
    token_url: str
    machine: str
    client_id_env: str = "LAUNCHERS_FIRECREST_CLIENT_ID"
    client_secret_env: str = "LAUNCHERS_FIRECREST_CLIENT_SECRET"
    api_version: int = 2
    account: str | None = None
    workdir: str | None = None
    verify_tls: bool = True


@attrs.frozen
class GroupBase:
    """Keys common to every group kind."""

    id: str | None = None
    weight: int = 0
    tags: tuple[str, ...] = ()
    connector: str = "local"
    batch: BatchOptions | None = None
    index: int = 0  # position of the group in file order (across kinds); JSON "group"
    kind_index: int = 0  # position among the groups of its kind, as in key paths (local[0])
    position: Position = Position()

    @property
    def kind(self) -> str:
        raise NotImplementedError

    @property
    def label(self) -> str:
        """The group id, or ``kind[i]`` (``i`` its index among the groups of its kind, as in
        the key paths of configuration errors) when it has none."""
        return self.id if self.id is not None else f"{self.kind}[{self.kind_index}]"


@attrs.frozen
class LocalGPU:
    model: str | None = None
    count: int = 1
    memory: int = 0
    min_memory: int | None = None
    kind: str = "cuda"  # or mps (an Apple GPU: its memory is the machine's) or other


@attrs.frozen
class LocalGroup(GroupBase):
    cpu: CPUConfig = CPUConfig()
    gpus: tuple[LocalGPU, ...] = ()
    tokens: tuple[tuple[str, int], ...] = ()
    disabled: bool = False
    max_jobs: int | None = None
    export: str = "ALL"
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None
    kill_grace: int | None = None  # seconds between SIGTERM and SIGKILL on cancel (10)
    implicit: bool = False  # the launcher describing this machine when no file exists
    #: ``environment:`` (modules, venv, conda, container, setup, teardown); its variables are in ``env``
    job_environment: Environment = EMPTY

    @property
    def kind(self) -> str:
        return "local"


@attrs.frozen
class SlurmGroup(GroupBase):
    """A ``slurm:`` group; ``unicore``/``firecrest`` groups share these matching keys."""

    partitions: tuple[Partition, ...] = ()
    features_regex: tuple[re.Pattern[str], ...] = ()
    features: Mapping[str, ResourceConfig] = attrs.field(factory=dict, hash=False)
    configuration: ResourceConfig = ResourceConfig()
    qos: Mapping[str, QoS] = attrs.field(factory=dict, hash=False)
    use_features: bool = True
    use_hosts: bool = True
    use_memory_constraint: bool = True
    query_slurm: bool = False
    path: str | None = None
    gpu_option: str = "gpus-per-node"  # or "gres"
    sbatch_options: tuple[tuple[str, str | bool], ...] = ()
    export: str = "ALL"
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None
    status_source: str = "auto"  # auto | sacct | squeue
    fatal_pending: str = "cancel"  # cancel | report
    fatal_reasons_add: tuple[str, ...] = ()
    fatal_reasons_remove: tuple[str, ...] = ()
    # requeue of resumable tasks and tracking (docs/design/runtime.md §5, §9); None = the default
    max_requeues: int | None = None  # 3
    resume_signal: str | None = None  # USR1
    resume_grace: int | None = None  # 120 s
    lost_after: int | None = None  # 600 s
    poll_max: int | None = None  # 60 s
    #: ``environment:`` of a slurm group (its variables are in ``env``); unicore and firecrest
    #: groups read theirs as a Compute Backend Config ``Environment`` (``environment``)
    job_environment: Environment = EMPTY

    @property
    def kind(self) -> str:
        return "slurm"


@attrs.frozen
class UnicoreGroup(SlurmGroup):
    site: UnicoreSite | None = None
    environment: Mapping[str, Any] | None = attrs.field(default=None, hash=False)

    @property
    def kind(self) -> str:
        return "unicore"


@attrs.frozen
class FirecrestGroup(SlurmGroup):
    site: FirecrestSite | None = None
    environment: Mapping[str, Any] | None = attrs.field(default=None, hash=False)

    @property
    def kind(self) -> str:
        return "firecrest"


Group = Union[LocalGroup, SlurmGroup, UnicoreGroup, FirecrestGroup]  # noqa: UP007


@attrs.frozen
class SSHConnectorConfig:
    """``connectors: {ssh: {NAME: {...}}}`` (docs/design/runtime.md §12); durations in seconds."""

    name: str
    hostname: str
    port: int = 22
    username: str | None = None
    identity_file: tuple[str, ...] = ()
    passphrase_env: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    strict_host_key_checking: str = "yes"  # yes | accept-new | no
    proxy_jump: str | None = None
    ssh_config: bool = True
    keepalive_interval: int = 15
    keepalive_count_max: int = 3
    connect_timeout: int = 20
    command_timeout: int = 60
    reconnect_timeout: int = 600
    max_channels: int = 8
    login_shell: bool = False
    workdir: str = "~/.local/share/launchers"
    #: names of variables holding a password (also the passphrase of an encrypted key) and a
    #: private key (its text, or the path of a key file): the SSH sites of a Compute Backend
    #: Config (Mantik's ``MANTIK_SSH_PASSWORD`` / ``MANTIK_SSH_PRIVATE_KEY``); unset: keys only
    password_env: str | None = None
    private_key_env: str | None = None


@attrs.frozen
class LaunchersConfig:
    """One loaded configuration: groups in file order, connectors and counter tokens."""

    groups: tuple[Group, ...] = ()
    connectors: Mapping[str, SSHConnectorConfig] = attrs.field(factory=dict, hash=False)
    tokens: Mapping[str, int] = attrs.field(factory=dict, hash=False)
    path: Path | None = None
    #: how find_launcher picks among groups (``order`` or ``earliest_start``), and the bounds
    #: of the start-time estimates (seconds)
    strategy: str = "order"
    estimate_timeout: float = 5.0
    estimate_cache: float = 30.0

    @property
    def is_empty(self) -> bool:
        return not self.groups
