"""``query_slurm: true``: rebuild a slurm group's partitions from the live ``scontrol`` output.

:func:`refresh_group` runs ``scontrol show nodes`` and ``scontrol show partitions`` (through the
group's ``path`` when set; locally, or over the group's SSH connector), groups nodes as
``launchers slurm convert`` does, takes each partition's ``MaxTime`` as its ``max_duration``,
leaves out the partitions the user may not use unless the file names them, and keeps what the
file says about the group and about the partitions it names. Results are cached for
:data:`CACHE_SECONDS`.
"""

from __future__ import annotations

import grp
import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

import attrs

from ..config.model import (
    CPUConfig,
    GPUConfig,
    NodeGroup,
    Partition,
    ResourceConfig,
    SlurmGroup,
)
from ..connectors.registry import get_connector
from ..errors import ConfigurationError, LaunchersError
from ..runtime.loop import in_loop_thread, run_sync
from ..units import MIB
from .convert import NodeGroupSpec, choose_partitions, group_nodes, node_warnings
from .scontrol import (
    Access,
    SlurmPartition,
    parse_nodes,
    parse_partitions,
    partition_usability,
    with_partitions,
)

log = logging.getLogger(__name__)

#: How long a refreshed group is reused before scontrol is asked again (seconds).
CACHE_SECONDS = 60.0
#: Time limit of one scontrol call (seconds).
SCONTROL_TIMEOUT = 30.0

_cache: dict[tuple[int, str, str], tuple[float, SlurmGroup, SlurmGroup]] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every refreshed group (the next search asks scontrol again)."""
    with _lock:
        _cache.clear()


def _where(group: SlurmGroup) -> str:
    pos = group.position
    loc = f"{pos}: " if pos.file or pos.key else ""
    return f"{loc}slurm group {group.label}"


def _fail(
    group: SlurmGroup, shown: str, returncode: int, stderr: str, stdout: str
) -> ConfigurationError:
    message = (stderr.strip() or stdout.strip() or "no message").splitlines()
    return ConfigurationError(
        f"{_where(group)}: `{shown}` failed (exit {returncode}): " + " / ".join(message[:5])
    )


def _run_local(group: SlurmGroup, command: list[str], shown: str) -> str:
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=SCONTROL_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        where = f" in {group.path}" if group.path else " on PATH"
        raise ConfigurationError(
            f"{_where(group)}: query_slurm needs scontrol, which is not found{where}"
        ) from None
    except subprocess.TimeoutExpired:
        raise ConfigurationError(
            f"{_where(group)}: `{shown}` did not answer within {SCONTROL_TIMEOUT:g} s"
        ) from None
    except OSError as e:
        raise ConfigurationError(f"{_where(group)}: cannot run `{shown}`: {e}") from None
    if proc.returncode != 0:
        raise _fail(group, shown, proc.returncode, proc.stderr, proc.stdout)
    return proc.stdout


def _run_remote(group: SlurmGroup, command: list[str], shown: str) -> str:
    """Run scontrol (or ``id``) through the group's SSH connector (declared in the group's own file)."""
    # lazy: the configuration loader (~80 ms to import) only for a connector
    from ..config.loader import load_config

    if in_loop_thread():
        raise ConfigurationError(
            f"{_where(group)}: query_slurm over SSH cannot run inside the launchers event loop"
        )
    file = group.position.file
    try:
        connector = get_connector(group.connector, load_config(file) if file else None)
        result = run_sync(connector.run(command, timeout=SCONTROL_TIMEOUT))
    except LaunchersError as e:
        raise ConfigurationError(
            f"{_where(group)}: `{shown}` over {group.connector!r}: {e}"
        ) from None
    if result.returncode == 127:
        program = os.path.basename(command[0])
        where = (
            f" in {group.path}" if group.path and program == "scontrol" else " on the remote PATH"
        )
        raise ConfigurationError(
            f"{_where(group)}: query_slurm needs {program}, which is not found{where} "
            f"(connector {group.connector!r})"
        )
    if result.returncode != 0:
        raise _fail(group, shown, result.returncode, result.stderr, result.stdout)
    return result.stdout


def run_scontrol(group: SlurmGroup, args: Sequence[str]) -> str:
    """stdout of ``scontrol ARGS`` for the group, here or through its SSH connector;
    errors are ``ConfigurationError`` naming the group and quoting scontrol's message."""
    if group.path:
        exe = os.path.join(
            os.path.expanduser(group.path) if group.connector == "local" else group.path, "scontrol"
        )
    else:
        exe = "scontrol"
    command = [exe, *args]
    shown = "scontrol " + " ".join(args)
    if group.connector == "local":
        return _run_local(group, command, shown)
    return _run_remote(group, command, shown)


def _node_group(spec: NodeGroupSpec) -> NodeGroup:
    return NodeGroup(
        hosts=spec.hosts,
        features=spec.features,
        configuration=ResourceConfig(
            cpu=CPUConfig(
                cores=spec.cpus,
                memory=None if spec.memory_mib is None else spec.memory_mib * MIB,
            ),
            gpu=GPUConfig(count=spec.gpus),
        ),
    )


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def build_partitions(
    group: SlurmGroup,
    slurm_partitions: Sequence[SlurmPartition],
    node_groups: Mapping[str, Sequence[NodeGroupSpec]],
    access: Access | None = None,
) -> tuple[Partition, ...]:
    """Partitions in scontrol's order: node groups from the nodes, ``max_duration`` from
    MaxTime (the smaller one if the file sets one too), the file's other partition keys kept.

    A partition ``access`` may not use (hidden, AllowGroups, AllowAccounts, DenyAccounts,
    RootOnly: ``scontrol.partition_usability``) is left out unless the file names it; a named
    one comes after the others, and keeps only the accounts of the file that it admits (none:
    left out). Each is logged once per refresh, with the reason."""
    access = access or Access()
    from_file = {p.name: p for p in group.partitions}
    usable, unusable = choose_partitions(
        [sp.name for sp in slurm_partitions], slurm_partitions, access
    )
    out: list[Partition] = []
    later: list[Partition] = []
    for choice in [*usable, *unusable]:
        sp = choice.info
        assert sp is not None  # every name comes from slurm_partitions
        mine = from_file.get(sp.name)
        target = out
        if choice.reason is not None:
            if mine is None:
                log.info(
                    "%s: partition %s left out: %s (name it in the file to use it)",
                    _where(group),
                    sp.name,
                    choice.reason,
                )
                continue
            target = later
            if mine.accounts and (sp.allow_accounts or sp.deny_accounts):
                admitted = partition_usability(
                    sp, attrs.evolve(access, accounts=mine.accounts)
                ).accounts
                if not admitted:
                    log.warning(
                        "%s: partition %s left out: the file's accounts (%s) are not admitted by Slurm (%s)",
                        _where(group), sp.name, ", ".join(mine.accounts), choice.reason,
                    )  # fmt: skip
                    continue
                mine = attrs.evolve(mine, accounts=admitted)
        specs = node_groups.get(sp.name, ())
        nodes = tuple(_node_group(s) for s in specs)
        configuration = ResourceConfig(max_duration=sp.max_time)
        not_up = sp.state.upper() != "UP"
        if mine is None:
            target.append(
                Partition(
                    name=sp.name, nodes=nodes, configuration=configuration, disabled=not_up,
                    accounts=choice.usability.accounts,
                )
            )  # fmt: skip
            continue
        merged = configuration.merged(mine.configuration)
        merged = attrs.evolve(
            merged, max_duration=_min(sp.max_time, mine.configuration.max_duration)
        )
        target.append(
            attrs.evolve(mine, nodes=nodes, configuration=merged, disabled=mine.disabled or not_up)
        )
    known = {sp.name for sp in slurm_partitions}
    missing = [name for name in from_file if name not in known]
    if missing:
        log.warning(
            "%s: partition(s) %s of the file are not known to Slurm and are left out",
            _where(group),
            ", ".join(missing),
        )
    return tuple(out + later)


def local_access(
    groups: Sequence[str] | None = None, accounts: Sequence[str] | None = None
) -> Access:
    """The user of this process: its Unix groups (or ``groups``), root or not, ``accounts``."""
    if groups is None:
        names = set()
        for gid in {*os.getgroups(), os.getegid()}:
            try:
                names.add(grp.getgrgid(gid).gr_name)
            except KeyError:
                names.add(str(gid))
        return Access(
            frozenset(names), None if accounts is None else tuple(accounts), os.geteuid() == 0
        )
    return Access(frozenset(groups), None if accounts is None else tuple(accounts), False)


def _remote_access(group: SlurmGroup) -> Access:
    """The groups of the user the group's SSH connector logs in as (``id -u``, ``id -Gn``)."""
    uid = _run_remote(group, ["id", "-u"], "id -u").strip()
    names = _run_remote(group, ["id", "-Gn"], "id -Gn").split()
    return Access(frozenset(names), None, uid == "0")


def _access(group: SlurmGroup, slurm_partitions: Sequence[SlurmPartition]) -> Access:
    """Who submits, asked only when a partition restricts groups or root (``AllowGroups``,
    ``RootOnly``): the local user, or the remote one over the group's connector."""
    if not any(p.allow_groups or p.root_only for p in slurm_partitions):
        return Access()
    if group.connector == "local":
        return local_access()
    return _remote_access(group)


def query_group(group: SlurmGroup) -> SlurmGroup:
    """Ask scontrol now (no cache) and return the refreshed group (``query_slurm`` false)."""
    nodes_text = run_scontrol(group, ["show", "nodes"])
    parts_text = run_scontrol(group, ["show", "partitions"])
    try:
        slurm_partitions = parse_partitions(parts_text, "scontrol show partitions")
        nodes = with_partitions(parse_nodes(nodes_text, "scontrol show nodes"), slurm_partitions)
    except ConfigurationError as e:
        raise ConfigurationError(f"{_where(group)}: cannot read scontrol's answer: {e}") from None
    for warning in node_warnings(nodes, "scontrol show nodes"):
        log.warning("%s: %s", _where(group), warning)
    access = _access(group, slurm_partitions)
    partitions = build_partitions(group, slurm_partitions, group_nodes(nodes), access)
    return attrs.evolve(group, partitions=partitions, query_slurm=False)


def refresh_group(group: SlurmGroup) -> SlurmGroup:
    """The group as Slurm describes it now; reused for :data:`CACHE_SECONDS` per group object
    (and ``SLURM_CONF``), so repeated searches do not run scontrol each time."""
    key = (id(group), os.environ.get("SLURM_CONF", ""), os.environ.get("PATH", ""))
    now = time.monotonic()
    with _lock:
        for k in [k for k, v in _cache.items() if v[0] <= now]:
            del _cache[k]
        hit = _cache.get(key)
        if hit is not None and hit[1] is group:
            return hit[2]
    refreshed = query_group(group)
    with _lock:
        _cache[key] = (now + CACHE_SECONDS, group, refreshed)
    return refreshed
