"""The Compute Backend Config (Mantik's format, docs/design/sites.md §1): load, check, resolve the site.

``load_backend_config(path)`` reads YAML or JSON (by suffix), reports every problem with its
position, and returns a ``BackendConfig`` value. The site comes from ``UnicoreApiUrl``,
``Firecrest`` or ``SSH`` (exactly one), or from a ``unicore``/``firecrest`` group of
``launchers.yaml`` (``group=``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import attrs
import yaml

from ..config.located import load_located, plain
from ..config.model import FirecrestGroup, FirecrestSite, Position, UnicoreGroup, UnicoreSite
from ..config.problems import (
    Problems,
    key_path,
    key_pos,
    suggest,
    type_name,
    unknown_key,
    unknown_keys,
    value_pos,
)
from ..errors import ConfigurationError
from ..slurm.options import SlurmOptions
from ..units import mib_ceil, slurm_time
from .environment import Environment, check_login_commands, validate_environment
from .exclude import ExcludeRules, PatternError, compile_pattern
from .firecrest import FirecrestLauncher
from .resources import Resources, check_for_site, validate_resources
from .ssh_site import SSHSite, ssh_launcher
from .unicore import UnicoreLauncher

TOP_KEYS = ("UnicoreApiUrl", "Firecrest", "SSH", "Environment", "Resources", "Exclude")
SITE_KEYS = ("UnicoreApiUrl", "Firecrest", "SSH")
SITE_KIND = {"UnicoreApiUrl": "unicore", "Firecrest": "firecrest", "SSH": "ssh"}
FIRECREST_KEYS = ("ApiUrl", "TokenUrl", "Machine")
SSH_KEYS = ("Hostname", "Port")
SUFFIXES = (".yaml", ".yml", ".json")
ACCOUNT_ENV = "MANTIK_COMPUTE_BUDGET_ACCOUNT"

Site = Union[UnicoreSite, FirecrestSite, SSHSite]  # noqa: UP007 (a runtime alias, Python 3.10)


@attrs.frozen
class BackendConfig:
    """A loaded Compute Backend Config; ``site`` is None only before a group supplies it."""

    path: Path
    site: Site | None
    environment: Environment
    resources: Resources
    exclude: ExcludeRules
    account: str | None = None
    group: str | None = None  # the launchers.yaml group id the site came from, if any
    #: the Environment mapping as written (plain data), for a launcher's group
    environment_data: Mapping[str, Any] | None = attrs.field(default=None, eq=False, hash=False)

    @property
    def site_kind(self) -> str | None:
        if isinstance(self.site, UnicoreSite):
            return "unicore"
        if isinstance(self.site, FirecrestSite):
            return "firecrest"
        if isinstance(self.site, SSHSite):
            return "ssh"
        return None

    def with_group(
        self,
        group: UnicoreGroup | FirecrestGroup,
        *,
        account: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> BackendConfig:
        """This config completed by a group: its site, its environment under ours, its account."""
        if group.site is None:
            raise ConfigurationError(f"group {group.label!r} has no site", key="site")
        kind = "firecrest" if isinstance(group, FirecrestGroup) else "unicore"
        file = str(self.path)
        check_login_commands(self.environment, kind, file)
        check_for_site(self.resources, kind, file)
        env = self.environment
        if group.environment:
            base = validate_environment(
                group.environment, None, f"{kind}.{group.label}.environment", site_kind=kind
            )
            env = base.overridden_by(self.environment)
        return attrs.evolve(
            self,
            site=group.site,
            environment=env,
            account=resolve_account(account, group.site, environ),
            group=group.label,
        )


def resolve_account(
    explicit: str | None, site: Site | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """``--account``, else the site's ``account``, else ``$MANTIK_COMPUTE_BUDGET_ACCOUNT``, else None."""
    if explicit:
        return explicit
    if site is not None and site.account:
        return site.account
    env = os.environ if environ is None else environ
    return env.get(ACCOUNT_ENV) or None


def _no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise _Duplicate(k)
        seen[k] = v
    return seen


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _read(path: Path) -> Any:
    """Parse the file by its suffix; JSON is checked by ``json`` (syntax, duplicates) first."""
    file = str(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigurationError(
            f"a Compute Backend Config must end in .yaml, .yml or .json, not {path.suffix or 'no suffix'!r}",
            file=file,
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError("no such file", file=file)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"cannot read: {e}", file=file)
    if path.suffix.lower() == ".json":
        try:
            json.loads(text, object_pairs_hook=_no_duplicate_pairs)
        except _Duplicate as d:
            _load_with_key_paths(text, file)  # reports the duplicate with its position when it can
            raise ConfigurationError(f"duplicate key {d.key!r}", file=file)
        except json.JSONDecodeError as e:
            raise ConfigurationError(
                f"JSON syntax error: {e.msg}", file=file, line=e.lineno, column=e.colno
            )
    return _load_with_key_paths(text, file)


def _load_with_key_paths(text: str, file: str) -> Any:
    """``load_located``, with the key path added to a duplicate-key error (docs/design/sites.md §1.4's line format)."""
    try:
        return load_located(text, file)
    except ConfigurationError as e:
        if e.key or not e.line or not e.column or not e.reason.startswith("duplicate key"):
            raise
        path = _key_path_at(text, e.line, e.column)
        if path is None:
            raise
        raise ConfigurationError(
            e.reason, file=e.file, line=e.line, column=e.column, key=path
        ) from None


def _key_path_at(text: str, line: int, column: int) -> str | None:
    """The ``KEY.PATH`` of the mapping key written at ``line``:``column`` (1-based), if any."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None

    def walk(node: Any, prefix: str) -> str | None:
        if isinstance(node, yaml.MappingNode):
            for knode, vnode in node.value:
                here = key_path(prefix, str(knode.value))
                if knode.start_mark.line + 1 == line and knode.start_mark.column + 1 == column:
                    return here
                found = walk(vnode, here)
                if found is not None:
                    return found
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                found = walk(item, key_path(prefix, i))
                if found is not None:
                    return found
        return None

    return walk(root, "") if root is not None else None


def load_backend_config(
    path: str | os.PathLike[str],
    *,
    account: str | None = None,
    group: UnicoreGroup | FirecrestGroup | None = None,
    environ: Mapping[str, str] | None = None,
) -> BackendConfig:
    """Load and check a Compute Backend Config; every problem in one ``ConfigurationError``.

    ``group`` gives the site when the file has neither ``UnicoreApiUrl`` nor ``Firecrest``.
    """
    p = Path(path)
    file = str(path)
    data = _read(p)
    probs = Problems(file)
    if not isinstance(data, Mapping):
        probs.add(
            getattr(data, "position", None) or Position(file, 1, 1),
            "",
            f"expected a mapping with Resources (and UnicoreApiUrl, Firecrest or SSH), not {type_name(data)}",
        )
        probs.raise_if_any()
    assert isinstance(data, Mapping)
    for key in data:
        if key not in TOP_KEYS:
            near_site = suggest(str(key), SITE_KEYS)
            probs.add(
                key_pos(data, key),
                str(key),
                unknown_key(key, TOP_KEYS)
                + _MANTIK_IGNORES.get(str(key), _MANTIK_IGNORED)
                + (
                    "; without a site Mantik refuses the file"
                    if near_site and not any(k in data for k in SITE_KEYS)
                    else ""
                ),
            )
    site: Site | None = None
    kind: str | None = None
    given = [k for k in SITE_KEYS if k in data]
    if len(given) > 1:
        probs.add(
            key_pos(data, given[1]),
            given[1],
            f"{' and '.join(given)} are all set; keep the one of the site "
            "to use (Mantik refuses such a file too)"
            if len(given) > 2
            else f"{given[0]} and {given[1]} are both set; keep the one of the site to use (Mantik refuses such a "
            "file too)",
        )
    elif given == ["UnicoreApiUrl"]:
        kind = "unicore"
        url = data["UnicoreApiUrl"]
        if _check_url(url, data, "UnicoreApiUrl", "UnicoreApiUrl", probs):
            site = UnicoreSite(url=url.rstrip("/"))
    elif given == ["Firecrest"]:
        kind = "firecrest"
        site = _firecrest(data["Firecrest"], data, probs)
    elif given == ["SSH"]:
        kind = "ssh"
        site = _ssh(data["SSH"], data, probs)
    if group is not None:
        gkind = "firecrest" if isinstance(group, FirecrestGroup) else "unicore"
        if kind is not None:
            key = given[0]
            probs.add(
                key_pos(data, key),
                key,
                f"the file names its own site, and --group {group.label} names another; "
                f"remove {key} to use the group's site, or drop --group",
            )
        kind = gkind
    elif not given and not any(suggest(str(k), SITE_KEYS) for k in data if k not in TOP_KEYS):
        # (a misspelt site key is reported once, with its "did you mean", above)
        probs.add(
            getattr(data, "position", None) or Position(file, 1, 1),
            "",
            "no site: write UnicoreApiUrl, Firecrest or SSH (Mantik refuses a file without one too), or "
            "pass --group ID naming a unicore or firecrest group of launchers.yaml",
        )
    env = Environment()
    if "Environment" in data:
        env = validate_environment(
            data["Environment"], file, "Environment", site_kind=kind, problems=probs
        )
    resources = Resources()
    if "Resources" in data:
        resources = validate_resources(
            data["Resources"], file, "Resources", site_kind=kind, problems=probs
        )
    else:
        probs.add(
            getattr(data, "position", None) or Position(file, 1, 1),
            "Resources",
            "Resources is required (at least Queue)",
        )
    exclude = ExcludeRules()
    if "Exclude" in data:
        exclude = _exclude(data["Exclude"], data, probs)
    probs.raise_if_any()
    env_data = (
        plain(data.get("Environment")) if isinstance(data.get("Environment"), Mapping) else None
    )
    cfg = BackendConfig(
        p,
        site,
        env,
        resources,
        exclude,
        resolve_account(account, site, environ),
        environment_data=env_data,
    )
    if group is not None and site is None:
        cfg = cfg.with_group(group, account=account, environ=environ)
    return cfg


def _check_url(url: Any, container: Any, key: str, kp: str, probs: Problems) -> bool:
    if not isinstance(url, str):
        probs.add(value_pos(container, key), kp, f"expected a URL, not {type_name(url)}")
        return False
    if (
        not url.startswith(("https://", "http://"))
        or len(url.split("/")) < 3
        or not url.split("/")[2]
    ):
        probs.add(
            value_pos(container, key), kp, "not an http(s) URL; write https://HOST[:PORT]/..."
        )
        return False
    return True


def _firecrest(value: Any, data: Any, probs: Problems) -> FirecrestSite | None:
    if not isinstance(value, Mapping):
        probs.add(
            value_pos(data, "Firecrest"),
            "Firecrest",
            f"expected a mapping with ApiUrl, TokenUrl, Machine, not {type_name(value)}",
        )
        return None
    ok = unknown_keys(value, FIRECREST_KEYS, "Firecrest", probs)
    for key in FIRECREST_KEYS:
        if key not in value:
            probs.add(
                getattr(value, "position", None), key_path("Firecrest", key), f"{key} is required"
            )
            ok = False
    for key in ("ApiUrl", "TokenUrl"):
        if key in value and not _check_url(
            value[key], value, key, key_path("Firecrest", key), probs
        ):
            ok = False
    machine = value.get("Machine")
    if "Machine" in value and (not isinstance(machine, str) or not machine.strip()):
        probs.add(
            value_pos(value, "Machine"),
            "Firecrest.Machine",
            f"expected the system's name as a string, not {type_name(machine)}",
        )
        ok = False
    if not ok:
        return None
    return FirecrestSite(
        api_url=value["ApiUrl"].rstrip("/"), token_url=value["TokenUrl"], machine=str(machine)
    )


def _ssh(value: Any, data: Any, probs: Problems) -> SSHSite | None:
    """``SSH: {Hostname, Port}``: Hostname required, Port (22 by default) a number or a string of
    digits, as Mantik reads it."""
    if not isinstance(value, Mapping):
        probs.add(
            value_pos(data, "SSH"),
            "SSH",
            f"expected a mapping with Hostname (and Port), not {type_name(value)}"
            "; Mantik refuses it too",
        )
        return None
    ok = unknown_keys(
        value,
        SSH_KEYS,
        "SSH",
        probs,
        note=" (Mantik 0.5 ignores other keys; the user name and key come from "
        "MANTIK_SSH_USERNAME and MANTIK_SSH_PRIVATE_KEY)",
    )
    host = value.get("Hostname")
    if "Hostname" not in value:
        probs.add(
            getattr(value, "position", None),
            "SSH.Hostname",
            "Hostname is required (Mantik requires it too)",
        )
        ok = False
    elif not isinstance(host, str) or not host.strip() or any(c.isspace() for c in host.strip()):
        probs.add(
            value_pos(value, "Hostname"),
            "SSH.Hostname",
            f"expected a host name or address, not {type_name(host) if not isinstance(host, str) else repr(host)}",
        )
        ok = False
    port = value.get("Port", 22)
    number: int | None = None
    if isinstance(port, int) and not isinstance(port, bool):
        number = port
    elif isinstance(port, str) and port.strip().isdigit():
        number = int(port.strip())
    if number is None or not 0 < number < 65536:
        probs.add(
            value_pos(value, "Port"),
            "SSH.Port",
            f"expected a port number from 1 to 65535, not {port!r}"
            if isinstance(port, (str, int))
            else f"expected a port number, not {type_name(port)}",
        )
        ok = False
    if not ok:
        return None
    assert isinstance(host, str) and number is not None
    return SSHSite(hostname=host.strip(), port=number)


#: what Mantik 0.5 did with a top-level key it does not know (unknown keys are errors here)
_MANTIK_IGNORED = " (Mantik 0.5 ignores unknown keys)"
_MANTIK_IGNORES = {
    "DockerImage": " (a Mantik 0.1 key: Mantik 0.5 ignores it and runs without the image; "
    "write Environment: {Apptainer: {Path: IMAGE}})",
    "SingularityImage": " (a Mantik 0.1 key: Mantik 0.5 ignores it and runs without the image; "
    "write it as Environment: {Apptainer: {Path: IMAGE, Type: local or remote}})",
}


def _exclude(value: Any, data: Any, probs: Problems) -> ExcludeRules:
    if not isinstance(value, list):
        probs.add(
            value_pos(data, "Exclude"),
            "Exclude",
            f"expected a list of patterns, not {type_name(value)}"
            + (f"; write [{value!r}]" if isinstance(value, str) else ""),
        )
        return ExcludeRules()
    patterns = []
    for i, item in enumerate(value):
        pos = value.item_position(i) if hasattr(value, "item_position") else None
        try:
            if not isinstance(item, str):
                raise PatternError(
                    f"a pattern must be a string, not {type_name(item)}"
                    + ("; write it in quotes" if isinstance(item, (int, float)) else "")
                )
            patterns.append(compile_pattern(item, i))
        except PatternError as e:
            probs.add(pos, key_path("Exclude", i), e.reason)
    return ExcludeRules(tuple(patterns))


def to_launcher(cfg: BackendConfig) -> Any:
    """A ``UnicoreLauncher``/``FirecrestLauncher``/``SSHSiteLauncher`` value running with this
    config's site, environment and ``Resources`` as written (no finder)."""

    if cfg.site is None:
        raise ConfigurationError(
            "no site: write UnicoreApiUrl, Firecrest or SSH, or give a group", file=str(cfg.path)
        )
    r = cfg.resources
    if isinstance(cfg.site, SSHSite):
        return ssh_launcher(
            cfg.site,
            r,
            environment=cfg.environment_data,
            account=cfg.account,
            label=cfg.group or cfg.path.stem,
        )
    options = SlurmOptions(
        partition=r.queue,
        time=slurm_time(r.runtime) if r.runtime is not None else None,
        nodes=r.nodes,
        cpus_per_task=r.cpus_per_node,
        gpus_per_node=r.gpus_per_node,
        mem=f"{mib_ceil(r.memory_per_node)}M" if r.memory_per_node is not None else None,
        qos=r.qos,
        account=cfg.account,
        constraint=r.node_constraints,
    )
    # ``options`` describe the job (``launcher.options``, batching's slots); what is sent is
    # ``Resources`` as written: TotalCPUs, Reservation, Runtime in seconds (docs/design/sites.md §1.2)
    label = cfg.group or cfg.path.stem
    env = cfg.environment_data
    if isinstance(cfg.site, UnicoreSite):
        ugroup = UnicoreGroup(id=label, site=cfg.site, environment=env)
        return UnicoreLauncher(group=ugroup, options=options, resources=r)
    fgroup = FirecrestGroup(id=label, site=cfg.site, environment=env)
    return FirecrestLauncher(group=fgroup, options=options, resources=r)


def from_backend_config(path: str | os.PathLike[str], account: str | None = None) -> Any:
    """A launcher of its own for a standalone Compute Backend Config (docs/design/sites.md §2)."""
    return to_launcher(load_backend_config(path, account=account))
