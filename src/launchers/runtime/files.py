"""The remote-files layer over ``protocols.FileStore`` (docs/design/runtime.md §2): where a job's
directory is on another host (``remote_job_dir``, under ``connector_base``), copying a
finished job's results home (``fetch_outputs``), following its outputs while it runs
(``follow_outputs``) and the local copy of its exit record (``store_rc``). Used by Slurm over
SSH, the direct launcher over SSH, the SSH, UNICORE and firecREST sites and the batch queues."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..protocols import Runner

#: the remote root of job directories (and batch queues) when a connector names none
DEFAULT_BASE = "~/.local/share/launchers"


def configured_base(connector: Any) -> str:
    """The connector's ``workdir`` as configured (``~`` not expanded), else ``DEFAULT_BASE``;
    no trailing ``/``."""
    base = getattr(getattr(connector, "config", None), "workdir", None) or DEFAULT_BASE
    return str(base).rstrip("/")


def expand_home(path: str, home: str) -> str:
    """``path`` with a leading ``~`` (alone or followed by ``/``) replaced by ``home`` (pure)."""
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


async def connector_base(connector: Runner) -> str:
    """The root of remote job directories on the connector's host: its ``workdir`` (else
    ``DEFAULT_BASE``) with ``~`` expanded against the remote home."""
    base = configured_base(connector)
    if base == "~" or base.startswith("~/"):
        base = expand_home(base, await connector.home()).rstrip("/")
    return base


def remote_job_dir(base: str, local_dir: Path, *, named: bool) -> str:
    """The remote job directory of the local job directory ``local_dir``
    (``<workdir>/jobs/<task name>/<digest>``) under ``base`` (pure):
    ``BASE/<workdir name>-<sha12>/jobs/<name>/<digest>`` when ``named`` (Slurm over SSH and
    SSH sites), ``BASE/<sha12>/jobs/<name>/<digest>`` otherwise (the direct launcher over SSH);
    ``sha12`` is 12 hex digits of the SHA-256 of the local workdir's path. Records keep the
    directory chosen (``remote_dir``), so a layout change never moves a submitted job."""
    root = local_dir.parent.parent.parent
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    top = f"{root.name}-{tag}" if named else tag
    return f"{base.rstrip('/')}/{top}/jobs/{local_dir.parent.name}/{local_dir.name}"


__all__ = [
    "DEFAULT_BASE",
    "configured_base",
    "connector_base",
    "expand_home",
    "remote_job_dir",
]
