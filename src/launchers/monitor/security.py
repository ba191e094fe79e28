"""The monitor's security rules, as pure decisions (docs/monitor.md, "Security").

* A random token, printed in the URL at start, is required on every request and compared in
  constant time (``hmac.compare_digest``).
* State-changing requests are POSTs carrying the token in the ``X-Launchers-Token`` header (not
  in the URL): a cross-site form can neither set a header nor know the token, and a cross-site
  script asking for a custom header needs a CORS preflight that the server never grants. A POST
  whose ``Origin`` is another site is refused as well.
* Bound to a loopback address, the server answers only requests whose ``Host`` is a loopback
  name (a DNS-rebinding page cannot reach it under its own name).
* A request names a job by ``NAME/DIGEST`` and a file among a fixed list; the path built from
  them must stay inside the experiment's ``jobs/`` folder, symbolic links resolved.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

TOKEN_HEADER = "x-launchers-token"

#: Files of a job directory the page may read (``attempts/N/`` has the first four).
JOB_FILES = ("job.out", "job.err", "job.rc", "error.json", "job.sh", "params.json", "result.json")
ATTEMPT_FILES = ("job.out", "job.err", "job.rc", "error.json")

_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


def new_token() -> str:
    """48 random hex digits (192 bits), as Jupyter's."""
    return secrets.token_hex(24)


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is the token, compared in constant time."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("utf-8"))


def token_from(headers: dict[str, str], query: dict[str, str], *, method: str) -> str | None:
    """The token a request carries: the ``X-Launchers-Token`` header, else (GET and HEAD only)
    ``Authorization: token T`` or the ``token`` query parameter (links and ``EventSource``).
    A POST must use the header."""
    header = headers.get(TOKEN_HEADER)
    if header or method not in ("GET", "HEAD"):
        return header
    auth = headers.get("authorization", "")
    if auth[:6].lower() == "token ":
        return auth[6:].strip()
    return query.get("token")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(host_header: str | None, *, bound_to_loopback: bool) -> bool:
    """Whether a request's ``Host`` is acceptable: any when the server listens beyond the
    loopback (the token protects it), else only a loopback name or address (any port: an
    ``ssh -L`` tunnel may use another local port)."""
    if not bound_to_loopback:
        return True
    if not host_header:
        return False
    name = urlsplit(f"//{host_header}").hostname or ""
    return is_loopback(name)


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """A POST is accepted without ``Origin`` (not a browser) or from the page's own origin."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    return bool(host_header) and parts.netloc.lower() == (host_header or "").lower()


def job_part_ok(part: str) -> bool:
    """Whether a ``NAME`` or ``DIGEST`` from a request is a plain directory name (no ``/``,
    ``..``, NUL or hidden name): launchers writes only ``[A-Za-z0-9_.-]`` there."""
    return bool(_PART.match(part)) and part not in (".", "..")


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path``, symbolic links resolved, is ``folder`` or below it."""
    try:
        resolved = Path(os.path.realpath(path))
        base = Path(os.path.realpath(folder))
    except (OSError, ValueError):
        return False
    return resolved == base or base in resolved.parents


def job_file(
    jobs: Path, name: str, digest: str, file: str, attempt: int | None = None
) -> Path | None:
    """The path of ``file`` of job ``NAME/DIGEST`` (of ``attempts/N/`` when ``attempt`` is
    given) under the experiment's ``jobs`` folder, or None when the request may not read it."""
    if not (job_part_ok(name) and job_part_ok(digest)):
        return None
    allowed = JOB_FILES if attempt is None else ATTEMPT_FILES
    if file not in allowed or (attempt is not None and attempt < 1):
        return None
    directory = jobs / name / digest
    path = directory / file if attempt is None else directory / "attempts" / str(attempt) / file
    return path if inside(path, jobs) else None


__all__ = [
    "ATTEMPT_FILES",
    "JOB_FILES",
    "TOKEN_HEADER",
    "host_allowed",
    "inside",
    "is_loopback",
    "job_file",
    "job_part_ok",
    "new_token",
    "origin_allowed",
    "token_from",
    "token_matches",
]
