"""The firecREST launcher kind: one executor per (API, machine, credentials), of the class of
the site's ``api_version`` (2, ``FirecrestExecutor``, or 1, ``FirecrestV1Executor``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config.model import FirecrestSite
from ..errors import LaunchersError
from .firecrest_executor import FirecrestExecutor
from .firecrest_v1 import FirecrestV1Executor

if TYPE_CHECKING:
    from ..jobs.record import StateRecord
    from ..launcher import Launcher


def _site_of(launcher: Any) -> FirecrestSite:
    site = getattr(getattr(launcher, "group", None), "site", None)
    if not isinstance(site, FirecrestSite):
        raise LaunchersError(f"launcher {launcher!r} has no firecREST site")
    return site


def _standalone(launcher: Any) -> bool:
    group = getattr(launcher, "group", None)
    return getattr(getattr(group, "position", None), "line", None) is None


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """One executor per (API, machine, credentials)."""
    s = _site_of(launcher)
    return (
        "firecrest",
        s.api_url,
        s.machine,
        s.token_url,
        s.client_id_env,
        s.client_secret_env,
        s.workdir,
        s.api_version,
        _standalone(launcher),
    )


def create_executor(launcher: Launcher) -> FirecrestExecutor:
    site = _site_of(launcher)
    if site.api_version == 1:
        return FirecrestV1Executor(site, mantik=_standalone(launcher), key=executor_key(launcher))
    if site.api_version != 2:
        raise LaunchersError(
            f"firecREST site {site.api_url}: api_version {site.api_version} is not supported "
            "(write 2, the default, or 1)"
        )
    return FirecrestExecutor(site, mantik=_standalone(launcher), key=executor_key(launcher))


def executor_from_record(info: Mapping[str, Any], record: StateRecord) -> FirecrestExecutor:
    """For ``launchers cancel`` on a job known only from its record."""
    data = record.extra.get("firecrest_site")
    if not isinstance(data, Mapping) or not data.get("api_url"):
        raise LaunchersError(f"job {record.task_id}: its record does not name its firecREST site")
    fields = (
        "api_url",
        "token_url",
        "machine",
        "client_id_env",
        "client_secret_env",
        "workdir",
        "verify_tls",
        "api_version",
    )
    site = FirecrestSite(**{k: v for k, v in data.items() if k in fields})
    key = ("record-firecrest", site.api_url, site.machine, site.api_version)
    if site.api_version == 1:
        return FirecrestV1Executor(site, mantik=bool(data.get("mantik")), key=key)
    return FirecrestExecutor(site, mantik=bool(data.get("mantik")), key=key)


__all__ = ["create_executor", "executor_from_record", "executor_key"]
