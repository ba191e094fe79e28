"""Retries of the REST sites' calls (docs/remote-sites.md, "Retries"): which failures are
transient, the HTTP status behind an error of pyunicore or pyfirecrest, a retry loop with
exponential backoff honouring ``Retry-After``, and secrets kept out of messages."""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ..errors import ConnectorError, LaunchersError
from .decide import ssh_unreachable

log = logging.getLogger("launchers.remote")
#: retry jitter from a generator of our own: the global one is the user's (seeded runs)
_JITTER = random.Random()
T = TypeVar("T")

#: HTTP statuses worth retrying: the request was not processed (rate limit, proxy, overload).
TRANSIENT_STATUS = frozenset({408, 429, 502, 503, 504})
#: How many times a transient failure is retried (then the error surfaces).
MAX_TRIES = 8


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for s in secrets:
        if s and len(s) >= 3:
            text = text.replace(s, "***")
    return text


_STATUS_RE = re.compile(r"^(\d{3}) ")
_LAST_STATUS_RE = re.compile(r"last request: (\d{3}) ")


def status_of(error: BaseException) -> int | None:
    """The HTTP status behind a pyunicore or pyfirecrest error, if it names one (pyunicore 2
    raises a plain ``httpx.HTTPError`` whose text starts with the status)."""
    responses = getattr(error, "responses", None)
    if responses:
        code = getattr(responses[-1], "status_code", None)
        if isinstance(code, int):
            return code
    response = getattr(error, "response", None)
    code = getattr(response, "status_code", None)
    if isinstance(code, int):
        return code
    text = str(error)
    m = _STATUS_RE.match(text) or _LAST_STATUS_RE.search(text)
    return int(m.group(1)) if m else None


def error_message(error: BaseException) -> str:
    """The ``message`` of the firecREST answer behind a pyfirecrest error (else its text)."""
    responses = getattr(error, "responses", None)
    if responses:
        try:
            body = responses[-1].json()
        except ValueError:
            return str(getattr(responses[-1], "text", ""))
        if isinstance(body, Mapping):
            return str(body.get("message") or body.get("error") or "")
    return str(error)


def describe(error: BaseException, secrets: Sequence[str]) -> str:
    """A pyfirecrest error for a message: ``STATUS MESSAGE`` of the answer behind it (its
    ``message``, else its body), else its text; secrets redacted."""
    responses = getattr(error, "responses", None)
    if responses:
        r = responses[-1]
        try:
            body = r.json()
            text = body.get("message") or body.get("error") or json.dumps(body)
        except ValueError:
            text = r.text
        return redact(f"{r.status_code} {text}", secrets)
    return redact(str(error), secrets)


def retry_after_of(error: BaseException) -> float | None:
    """``Retry-After`` (seconds or an HTTP date) of the response behind ``error``, if any."""
    responses = getattr(error, "responses", None) or [getattr(error, "response", None)]
    headers = getattr(responses[-1], "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_transient(error: BaseException) -> bool:
    """A failure worth retrying: a transient HTTP status, or no answer at all."""
    # lazy: httpx and requests (the two REST clients' transports) only to classify an error
    import httpx
    import requests

    if isinstance(
        error,
        (
            httpx.TransportError,
            requests.ConnectionError,
            requests.Timeout,
            TimeoutError,
            ConnectionError,
        ),
    ):
        return True
    code = status_of(error)
    return code is not None and code in TRANSIENT_STATUS


def firecrest_transient(error: BaseException) -> bool:
    """Worth retrying on firecREST: pyfirecrest already waited out 429s (10 times,
    ``Retry-After``), so an API 429 that reaches us is final for this call; the token endpoint's
    429/5xx are retried; the site's SSH being unreachable (500 refused, 424) passes."""
    # lazy: pyfirecrest and httpx are heavy: loaded when a firecREST site is used
    from firecrest.FirecrestException import ClientsCredentialsException

    if isinstance(error, ClientsCredentialsException):
        return status_of(error) in TRANSIENT_STATUS
    if is_transient(error) and status_of(error) != 429:
        return True
    return ssh_unreachable(status_of(error), error_message(error))


def backoff(attempt: int, *, first: float = 0.5, cap: float = 10.0) -> float:
    """Delay before retry ``attempt`` (0-based): ``first`` doubling to ``cap``, ±20 % jitter."""
    return min(cap, first * (2**attempt)) * _JITTER.uniform(0.8, 1.2)


def with_retries(
    call: Callable[[], T],
    what: str,
    *,
    tries: int = MAX_TRIES,
    transient: Callable[[BaseException], bool] = is_transient,
    secrets: Sequence[str] = (),
) -> T:
    """``call()``, retried on transient failures with backoff (``Retry-After`` honoured);
    after ``tries`` attempts, or on another failure, a ``ConnectorError``/the error itself."""
    for attempt in range(tries):
        try:
            return call()
        except LaunchersError:
            raise
        except Exception as e:
            if not transient(e):
                raise
            if attempt == tries - 1:
                raise ConnectorError(
                    f"{what}: {redact(str(e), secrets)} (gave up after {tries} tries)"
                ) from None
            delay = retry_after_of(e)
            delay = backoff(attempt) if delay is None else min(delay, 60.0)
            log.info(
                "%s: %s; retrying in %.1f s",
                what,
                redact(str(e), secrets).splitlines()[0][:200],
                delay,
            )
            time.sleep(delay)
    raise AssertionError("unreachable")


__all__ = [
    "MAX_TRIES",
    "TRANSIENT_STATUS",
    "backoff",
    "describe",
    "error_message",
    "firecrest_transient",
    "is_transient",
    "redact",
    "retry_after_of",
    "status_of",
    "with_retries",
]
