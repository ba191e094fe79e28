"""The settings of a UNICORE or firecREST launcher, resolved once into typed values
(docs/remote-sites.md, "Running"): the site, whether Mantik's variables are fallbacks, what
the group adds to every job, the credential variables, the executor key, and the site as a
job's record keeps it. Values only: reading the variables is the executor's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..config.model import FirecrestSite, UnicoreSite
from ..errors import AuthenticationError, LaunchersError
from ..slurm.options import SlurmOptions
from .resources import Resources

MANTIK_UNICORE_USER = "MANTIK_UNICORE_USERNAME"
MANTIK_UNICORE_PASSWORD = "MANTIK_UNICORE_PASSWORD"
MANTIK_FIRECREST_ID = "MANTIK_FIRECREST_CLIENT_ID"
MANTIK_FIRECREST_SECRET = "MANTIK_FIRECREST_CLIENT_SECRET"

#: the name of each kind's site in messages
SITE_NAME = {"unicore": "UNICORE", "firecrest": "firecREST"}
#: the fields of each kind's site kept in a job's record (never a secret: variable names only)
RECORD_FIELDS = {
    "unicore": (
        "url",
        "auth",
        "username_env",
        "password_env",
        "token_env",
        "verify_tls",
        "user_preferences",
    ),
    "firecrest": (
        "api_url",
        "token_url",
        "machine",
        "client_id_env",
        "client_secret_env",
        "workdir",
        "verify_tls",
    ),
}
#: the field that must be set in a recorded site
_REQUIRED = {"unicore": "url", "firecrest": "api_url"}
_SITE_CLASS: dict[str, Any] = {"unicore": UnicoreSite, "firecrest": FirecrestSite}

Site = UnicoreSite | FirecrestSite


@attrs.frozen
class SiteSettings:
    """What a UNICORE or firecREST launcher says about its jobs, read once from the launcher
    and its group (``of``)."""

    kind: str
    site: Site | None
    #: a standalone Compute Backend Config (no position in a launchers.yaml): Mantik's
    #: credential variables are fallbacks
    standalone: bool
    #: the group's label (for the positions of its ``environment`` in messages)
    label: str
    #: the group's ``environment`` block as written (None: none)
    environment: Mapping[str, Any] | None = attrs.field(default=None, eq=False)
    #: a Compute Backend Config's ``Resources``, sent as written (None: the finder's options)
    resources: Resources | None = attrs.field(default=None, eq=False)
    options: SlurmOptions | None = None
    gpu_option: str = "gpus-per-node"
    #: the group's then the launcher's ``sbatch_options``
    extra_options: tuple[tuple[str, str | bool], ...] = ()

    @classmethod
    def of(cls, launcher: Any, kind: str) -> SiteSettings:
        """The settings of ``launcher`` (a ``UnicoreLauncher`` or ``FirecrestLauncher``)."""
        group = getattr(launcher, "group", None)
        site = getattr(group, "site", None)
        position = getattr(group, "position", None)
        return cls(
            kind=kind,
            site=site if isinstance(site, (UnicoreSite, FirecrestSite)) else None,
            standalone=getattr(position, "line", None) is None,
            label=str(getattr(group, "label", "") or ""),
            environment=getattr(group, "environment", None) or None,
            resources=getattr(launcher, "resources", None),
            options=getattr(launcher, "options", None),
            gpu_option=str(getattr(group, "gpu_option", None) or "gpus-per-node"),
            extra_options=tuple(getattr(launcher, "extra_options", ()) or ()),
        )

    def require_site(self, launcher: Any) -> Site:
        """The site, of this kind; a ``LaunchersError`` when the launcher has none."""
        if not isinstance(self.site, _SITE_CLASS[self.kind]):
            raise LaunchersError(f"launcher {launcher!r} has no {SITE_NAME[self.kind]} site")
        assert self.site is not None
        return self.site

    @property
    def account(self) -> str | None:
        """The launcher's ``account`` option (the site's and Mantik's come later)."""
        return getattr(self.options, "account", None)


def executor_key(launcher: Any, kind: str) -> tuple[Any, ...]:
    """One executor per site and credential set (UNICORE), per API, machine and credentials
    (firecREST)."""
    settings = SiteSettings.of(launcher, kind)
    site = settings.require_site(launcher)
    if isinstance(site, UnicoreSite):
        return (
            "unicore",
            site.url,
            site.auth,
            site.username_env,
            site.password_env,
            site.token_env,
            site.user_preferences,
            settings.standalone,
        )
    return (
        "firecrest",
        site.api_url,
        site.machine,
        site.token_url,
        site.client_id_env,
        site.client_secret_env,
        site.workdir,
        site.api_version,
        settings.standalone,
    )


def resolve(launcher: Any, kind: str) -> tuple[Site, bool, tuple[Any, ...]]:
    """What a kind's ``create_executor`` needs of ``launcher``: its site, whether Mantik's
    variables are fallbacks, and the executor key."""
    settings = SiteSettings.of(launcher, kind)
    return settings.require_site(launcher), settings.standalone, executor_key(launcher, kind)


def site_record(site: Site, mantik: bool) -> dict[str, Any]:
    """The site as a job's record keeps it (``unicore_site`` / ``firecrest_site``)."""
    kind = "unicore" if isinstance(site, UnicoreSite) else "firecrest"
    return {**{f: getattr(site, f) for f in RECORD_FIELDS[kind]}, "mantik": mantik}


def site_from_record(kind: str, task_id: str, extra: Mapping[str, Any]) -> tuple[Site, bool]:
    """The site a job's record names and whether Mantik's variables were fallbacks (for
    ``launchers status``/``cancel`` of a job known only from its record)."""
    data = extra.get(f"{kind}_site")
    if not isinstance(data, Mapping) or not data.get(_REQUIRED[kind]):
        raise LaunchersError(f"job {task_id}: its record does not name its {SITE_NAME[kind]} site")
    fields = RECORD_FIELDS[kind] + (("api_version",) if kind == "firecrest" else ())
    site = _SITE_CLASS[kind](**{k: v for k, v in data.items() if k in fields})
    return site, bool(data.get("mantik"))


# -- credentials --------------------------------------------------------------------------------


@attrs.frozen
class Credential:
    """One credential: the first set variable among ``names``; ``missing`` says what is
    missing when none is; a ``secret`` value never appears in a message."""

    missing: str
    names: tuple[str, ...]
    secret: bool


def credential_names(site: Site, mantik: bool) -> tuple[Credential, ...]:
    """The variables a site's credentials come from, Mantik's as fallbacks for a standalone
    Compute Backend Config (a bearer token has none)."""
    if isinstance(site, UnicoreSite):
        if site.auth == "bearer":
            return (Credential("no token", (site.token_env,), secret=True),)
        users = (site.username_env, *((MANTIK_UNICORE_USER,) if mantik else ()))
        passwords = (site.password_env, *((MANTIK_UNICORE_PASSWORD,) if mantik else ()))
        return (
            Credential("no user name", users, secret=False),
            Credential("no password", passwords, secret=True),
        )
    ids = (site.client_id_env, *((MANTIK_FIRECREST_ID,) if mantik else ()))
    secrets = (site.client_secret_env, *((MANTIK_FIRECREST_SECRET,) if mantik else ()))
    return (
        Credential("no client id", ids, secret=False),
        Credential("no client secret", secrets, secret=True),
    )


def env_value(names: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The first set variable among ``names``: (name, value)."""
    for n in names:
        value = environ.get(n)
        if value:
            return n, value
    return None


def require_env(names: Sequence[str], what: str, environ: Mapping[str, str]) -> str:
    """The value of the first set variable among ``names``; an ``AuthenticationError`` naming
    them all (never a value) when none is set."""
    found = env_value(names, environ)
    if found is None:
        raise AuthenticationError(f"{what}: set the environment variable {' or '.join(names)}")
    return found[1]


def variables_used(credentials: Sequence[Credential], environ: Mapping[str, str]) -> str:
    """The variables credentials were read from, for a message (``A and B``)."""
    used = []
    for c in credentials:
        found = env_value(c.names, environ)
        used.append(found[0] if found else c.names[0])
    return " and ".join(used)


__all__ = [
    "Credential",
    "SiteSettings",
    "credential_names",
    "env_value",
    "executor_key",
    "require_env",
    "resolve",
    "site_from_record",
    "site_record",
    "variables_used",
]
