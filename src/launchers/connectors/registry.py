"""Connector lookup by name: ``local`` or an SSH connector declared in ``launchers.yaml``.

One instance per (configuration file, connector name) per process, so that every launcher
and tracker using a connector shares its single SSH connection (docs/design/runtime.md §12).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launchers.connectors.base import Connector
from launchers.connectors.local import LocalConnector
from launchers.errors import ConfigurationError
from launchers.runtime.core import current

if TYPE_CHECKING:
    from launchers.config.model import LaunchersConfig

LOCAL = "local"


def _config_key(config: LaunchersConfig | None) -> str | None:
    if config is None or config.path is None:
        return None
    return str(config.path)


def _local() -> Connector:
    return LocalConnector()


def get_connector(name: str, config: LaunchersConfig | None = None) -> Connector:
    """The connector ``name`` (``local``, or one of ``config.connectors``), created once.

    Raises ``ConfigurationError`` naming the connector (and the known ones) when it is not
    declared.
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"connector name must be a non-empty string, got {name!r}")
    key = (None if name == LOCAL else _config_key(config), name)
    runtime = current()
    with runtime.connectors_lock:
        found = runtime.connectors.get(key)
        if name == LOCAL:
            if found is not None:
                return found
            conn = _local()
        else:
            declared = dict(config.connectors) if config is not None else {}
            cfg = declared.get(name)
            if found is not None and (cfg is None or getattr(found, "config", None) == cfg):
                return found  # an edited file with other settings gets a new connector
            if cfg is None:
                known = ", ".join([LOCAL, *sorted(declared)])
                where = f" in {config.path}" if config is not None and config.path else ""
                raise ConfigurationError(
                    f"unknown connector {name!r}: it is not declared under connectors.ssh{where} "
                    f"(known: {known})",
                    file=str(config.path) if config is not None and config.path else None,
                    key="connector",
                )
            # lazy: asyncssh (~0.3 s to import) only for SSH connectors
            from launchers.connectors.ssh import SSHConnector

            conn = SSHConnector(cfg)
        runtime.connectors[key] = conn
        return conn


def cached_connectors() -> list[Connector]:
    """Every connector created so far in this process."""
    runtime = current()
    with runtime.connectors_lock:
        return list(runtime.connectors.values())


async def close_all() -> None:
    """Close every connector created so far (they reopen lazily if used again)."""
    for conn in cached_connectors():
        await conn.close()


def forget_all() -> None:
    """Drop the cache without closing anything (tests; a fresh process state)."""
    current().forget_connectors()


__all__ = ["LOCAL", "cached_connectors", "close_all", "forget_all", "get_connector"]
