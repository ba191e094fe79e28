"""``launchers slurm discover``: write (or refresh with ``--update FILE``) the ``slurm:`` group
of a live cluster for the user running it, here or through an SSH connector (docs/discover.md).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

from ..connectors.base import Connector
from ..errors import ConfigurationError, LaunchersError

_SSH_TARGET = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?P<host>[^@:\s]+|\[[^\]]+\])(?::(?P<port>\d+))?$"
)


def register(sub: Any) -> None:
    """Add ``discover`` to the ``slurm`` command group."""
    p = sub.add_parser(
        "discover",
        help="describe a live cluster for you: write its slurm group (or refresh it with --update)",
        description=(
            "Read a live Slurm cluster (scontrol show nodes/partitions/config, sacctmgr show "
            "qos/assoc/user) here or through an SSH connector, and write the slurm group of the "
            "user running it: partitions with their limits and the QoS and accounts you may "
            "use there, node groups with cores, memory and GPUs. Partitions you may not use are "
            "left out, with a comment. Without accounting (sacctmgr failing) the nodes and "
            "partitions are still written."
        ),
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--connector",
        metavar="NAME",
        help="read the cluster through this SSH connector (declared in the configuration)",
    )
    how.add_argument(
        "--ssh",
        metavar="[USER@]HOST[:PORT]",
        help="read the cluster through SSH to HOST (your ~/.ssh/config applies)",
    )
    p.add_argument(
        "--config",
        metavar="PATH",
        help="the configuration declaring --connector (default: --update's file, else the "
        "file find_launcher would use)",
    )
    p.add_argument(
        "--cluster",
        metavar="NAME",
        help="the group's id (default: Slurm's ClusterName); with --update, an existing "
        "group of that id is refreshed through its own connector and path",
    )
    p.add_argument("--path", metavar="DIR", help="directory of scontrol and sacctmgr")
    p.add_argument(
        "--no-hosts",
        action="store_true",
        help="leave the host lists empty and write use_hosts: false",
    )
    p.add_argument(
        "--update",
        metavar="FILE",
        help="refresh the group in FILE (created when absent), keeping what a person wrote",
    )
    p.add_argument(
        "--diff",
        action="store_true",
        help="with --update: print what would change (a unified diff), write nothing",
    )
    p.set_defaults(func=run)


def ssh_connector(target: str) -> Any:
    """An SSH connector for ``[USER@]HOST[:PORT]`` (``~/.ssh/config`` supplies the rest)."""
    # lazy: a command's own modules load only when it runs
    from ..config.model import SSHConnectorConfig

    m = _SSH_TARGET.match(target.strip())
    if m is None:
        raise LaunchersError(f"--ssh {target!r}: expected [USER@]HOST[:PORT]")
    host = m.group("host").strip("[]")
    fields: dict[str, Any] = {"name": host, "hostname": host}
    if m.group("user"):
        fields["username"] = m.group("user")
    if m.group("port"):
        fields["port"] = int(m.group("port"))
    return SSHConnectorConfig(**fields)


def _declaration(cfg: Any) -> dict[str, Any]:
    """The ``connectors.ssh.NAME`` mapping of a connector: its keys that are not defaults."""
    # lazy: a command's own modules load only when it runs
    from ..config.model import SSHConnectorConfig

    defaults = SSHConnectorConfig(name=cfg.name, hostname=cfg.hostname)
    out: dict[str, Any] = {}
    for field in attrs.fields(SSHConnectorConfig):
        if field.name == "name":
            continue
        value = getattr(cfg, field.name)
        if field.name == "hostname" or value != getattr(defaults, field.name):
            if field.name == "identity_file":
                value = list(value) if len(value) != 1 else value[0]
            out[field.name] = value
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise LaunchersError(f"{path}: cannot read: {e}") from None


def _load(path: Path) -> Any:
    # lazy: a command's own modules load only when it runs
    from ..config.loader import load_config

    return load_config(path)


def _config_beside(target: Path) -> Any:
    """What a new ``target`` would load besides itself: ``connectors.yaml`` and ``tokens.yaml``
    in its directory (the file is not there yet)."""
    # lazy: a command's own modules load only when it runs
    from ..config.loader import clear_cache

    with tempfile.NamedTemporaryFile(
        "w", dir=target.parent.resolve(), prefix=f".{target.name}.", suffix=".discover"
    ) as f:
        f.write("{}\n")
        f.flush()
        try:
            return _load(Path(f.name))
        finally:
            clear_cache()


def run(args: argparse.Namespace) -> int:
    """Discover, then print the file, write it, or print the diff."""
    # lazy: a command's own modules load only when it runs
    from ..connectors.registry import get_connector
    from ..slurm.discover import discover, render, update
    from ..slurm.facts import read_facts

    if args.diff and not args.update:
        raise LaunchersError("--diff needs --update FILE (the file to compare with)")
    target = Path(args.update) if args.update else None
    old_text = _read(target) if target is not None else None
    file_config = None
    if target is not None:
        try:
            if old_text is not None and old_text.strip():
                file_config = _load(target)
            elif target.parent.resolve().is_dir():
                file_config = _config_beside(target)
        except ConfigurationError as e:
            raise LaunchersError(f"{target} does not load; fix it first:\n{e}") from None
    connector_name = "local"
    declaration: dict[str, Any] | None = None
    path = args.path
    existing = None
    if file_config is not None and args.cluster:
        existing = next((g for g in file_config.groups if g.id == args.cluster), None)
        if existing is not None and existing.kind != "slurm":
            raise LaunchersError(
                f"{target}: {args.cluster} is a {existing.kind} group, not a slurm one"
            )
    connector: Connector
    if args.ssh:
        cfg = ssh_connector(args.ssh)
        # lazy: a command's own modules load only when it runs
        from ..connectors.ssh import SSHConnector

        connector = SSHConnector(cfg)
        connector_name = cfg.name
        declaration = _declaration(cfg)
    elif args.connector or (existing is not None and existing.connector != "local"):
        connector_name = args.connector or (existing.connector if existing is not None else "")
        config = file_config
        if args.config is not None or config is None:
            config = _load(Path(args.config)) if args.config else None
            if config is None:
                # lazy: a command's own modules load only when it runs
                from ..config.loader import load_config

                config = load_config()
        connector = get_connector(connector_name, config)
        if file_config is None or connector_name not in file_config.connectors:
            declaration = _declaration(config.connectors[connector_name])
    else:
        connector = get_connector("local")
    if path is None and existing is not None:
        path = existing.path
    facts = read_facts(connector, path=path)
    found = discover(facts, group_id=args.cluster, no_hosts=args.no_hosts)
    for warning in found.warnings:
        print(f"launchers: warning: {warning}", file=sys.stderr)
    connectors = {connector_name: declaration} if declaration is not None else None
    if target is None:
        text = render(found, connector=connector_name, path=args.path, connectors=connectors)
        _check(text, None)
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    result = update(
        old_text or "",
        found,
        source=str(target),
        connector=connector_name,
        path=args.path,
        connectors=connectors,
    )
    if args.diff:
        diff = difflib.unified_diff(
            (old_text or "").splitlines(keepends=True),
            result.text.splitlines(keepends=True),
            fromfile=str(target),
            tofile=f"{target} (discovered)",
        )
        sys.stdout.writelines(diff)
        sys.stdout.flush()
        return 0
    if result.text == old_text:
        print(f"launchers: {target}: unchanged (group {found.group_id})", file=sys.stderr)
        return 0
    _check(result.text, target)
    what = "; ".join(result.changes) or "refreshed"
    print(f"launchers: {target}: group {found.group_id}: {what}", file=sys.stderr)
    return 0


def _check(text: str, target: Path | None) -> None:
    """The text must load (with the sidecar files beside ``target``); then it replaces
    ``target`` atomically. A refusal names what does not load and writes nothing."""
    # lazy: a command's own modules load only when it runs
    from ..config.loader import clear_cache, load_config_text

    if target is None:
        try:
            load_config_text(text, "<discover>")
        except ConfigurationError as e:
            raise LaunchersError(
                f"the discovered file does not load (please report it):\n{e}"
            ) from None
        return
    directory = target.resolve().parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".discover", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            _load(Path(tmp))
        except ConfigurationError as e:
            shown = str(e).replace(tmp, str(target))
            raise LaunchersError(
                f"{target}: the refreshed file would not load, nothing written:\n{shown}"
            ) from None
        finally:
            clear_cache()
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
