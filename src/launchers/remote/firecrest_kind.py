"""The firecREST launcher kind: one executor per (API, machine, credentials), of the class of
the site's ``api_version`` (2, ``FirecrestExecutor``, or 1, ``FirecrestV1Executor``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..config.model import FirecrestSite
from ..errors import LaunchersError
from . import settings as S
from .firecrest_executor import FirecrestExecutor
from .firecrest_v1 import FirecrestV1Executor

if TYPE_CHECKING:
    from ..jobs.record import StateRecord
    from ..launcher import Launcher


def executor_key(launcher: Launcher) -> tuple[Any, ...]:
    """One executor per (API, machine, credentials)."""
    return S.executor_key(launcher, "firecrest")


def create_executor(launcher: Launcher) -> FirecrestExecutor:
    site, mantik, key = S.resolve(launcher, "firecrest")
    assert isinstance(site, FirecrestSite)
    if site.api_version == 1:
        return FirecrestV1Executor(site, mantik=mantik, key=key)
    if site.api_version != 2:
        raise LaunchersError(
            f"firecREST site {site.api_url}: api_version {site.api_version} is not supported "
            "(write 2, the default, or 1)"
        )
    return FirecrestExecutor(site, mantik=mantik, key=key)


def executor_from_record(info: Mapping[str, Any], record: StateRecord) -> FirecrestExecutor:
    """For ``launchers cancel`` on a job known only from its record."""
    site, mantik = S.site_from_record("firecrest", record.task_id, record.extra)
    assert isinstance(site, FirecrestSite)
    key = ("record-firecrest", site.api_url, site.machine, site.api_version)
    if site.api_version == 1:
        return FirecrestV1Executor(site, mantik=mantik, key=key)
    return FirecrestExecutor(site, mantik=mantik, key=key)


__all__ = ["create_executor", "executor_from_record", "executor_key"]
