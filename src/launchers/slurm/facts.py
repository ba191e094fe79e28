"""Read what ``launchers slurm discover`` needs from a live cluster, here or through an SSH
connector: ``scontrol show nodes|partitions|config``, ``id``, then ``sacctmgr show
qos|assoc|user`` for the user found (docs/discover.md). Each round's commands run at once.

``scontrol`` must answer (its failure is an error naming the command); ``sacctmgr`` and ``id``
may fail (a cluster without accounting): the failure is recorded in :class:`Facts` and
:func:`launchers.slurm.discover.discover` writes what it can.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Sequence

from ..connectors.base import CommandResult, Connector
from ..errors import ConfigurationError, LaunchersError
from .discover import Facts
from .sacctmgr import ASSOC_FORMAT, QOS_FORMAT, USER_FORMAT
from .scontrol import parse_config

#: Time limit of one command (seconds).
COMMAND_TIMEOUT = 30.0


def _program(path: str | None, name: str, local: bool) -> str:
    if not path:
        return name
    return os.path.join(os.path.expanduser(path) if local else path, name)


def _message(result: CommandResult) -> str:
    text = (result.stderr.strip() or result.stdout.strip() or "no message").splitlines()
    return f"exit {result.returncode}: " + " / ".join(text[:3])


async def _run(
    connector: Connector, argv: Sequence[str], timeout: float
) -> CommandResult | LaunchersError:
    try:
        return await asyncio.wait_for(connector.run(list(argv), timeout=timeout), timeout + 5)
    except asyncio.TimeoutError:
        return LaunchersError(f"no answer within {timeout:g} s")
    except FileNotFoundError:
        return LaunchersError("command not found")
    except LaunchersError as e:
        return e


async def read_facts_async(
    connector: Connector, *, path: str | None = None, timeout: float = COMMAND_TIMEOUT
) -> Facts:
    """The facts of the cluster ``connector`` reaches (``path``: directory of the Slurm
    commands). Raises ``ConfigurationError`` when scontrol does not answer."""
    local = connector.is_local
    scontrol = _program(path, "scontrol", local)
    sacctmgr = _program(path, "sacctmgr", local)
    where = "" if local else f" (connector {connector.name})"
    first = {
        "nodes": [scontrol, "show", "nodes"],
        "partitions": [scontrol, "show", "partitions"],
        "config": [scontrol, "show", "config"],
        "id": ["sh", "-c", ID_SCRIPT],
    }
    answers = dict(
        zip(
            first,
            await asyncio.gather(*(_run(connector, argv, timeout) for argv in first.values())),
            strict=True,
        )
    )
    texts: dict[str, str | None] = {}
    failures: list[tuple[str, str]] = []
    for key, argv in first.items():
        shown = shlex.join([os.path.basename(argv[0]), *argv[1:]])
        got = answers[key]
        if isinstance(got, CommandResult) and (
            got.returncode == 0 or (key == "id" and got.stdout.strip())  # a nameless group
        ):
            texts[key] = got.stdout
            continue
        why = str(got) if isinstance(got, LaunchersError) else _message(got)
        if isinstance(got, CommandResult) and got.returncode == 127:
            why = f"{os.path.basename(argv[0])} not found" + (f" in {path}" if path else "")
        if key in ("nodes", "partitions"):
            raise ConfigurationError(f"`{shown}`{where} failed: {why}")
        texts[key] = None
        failures.append((shown, why))
    user, uid, groups = parse_id(texts.get("id") or "")
    config = parse_config(texts.get("config") or "")
    cluster = config.get("ClusterName")
    second = {"qos": [sacctmgr, "--noheader", "--parsable2", "show", "qos", f"format={QOS_FORMAT}"]}
    if user is not None:
        where_assoc = [f"user={user}"] + ([f"cluster={cluster}"] if cluster else [])
        second["associations"] = [
            sacctmgr, "--noheader", "--parsable2", "show", "assoc", "where", *where_assoc,
            f"format={ASSOC_FORMAT}",
        ]  # fmt: skip
        second["user_record"] = [
            sacctmgr, "--noheader", "--parsable2", "show", "user", user, f"format={USER_FORMAT}",
        ]  # fmt: skip
    results = await asyncio.gather(*(_run(connector, argv, timeout) for argv in second.values()))
    accounting: dict[str, str | None] = {}
    for (key, argv), got in zip(second.items(), results, strict=True):
        if isinstance(got, CommandResult) and got.returncode == 0:
            accounting[key] = got.stdout
            continue
        shown = f"sacctmgr show {argv[4]}"
        why = str(got) if isinstance(got, LaunchersError) else _message(got)
        failures.append((shown, why))
        accounting[key] = None
    if any(v is None for v in accounting.values()) or len(accounting) < 3:
        accounting = {"qos": None, "associations": None, "user_record": None}
    return Facts(
        nodes=texts["nodes"] or "",
        partitions=texts["partitions"] or "",
        config=texts.get("config"),
        qos=accounting["qos"],
        associations=accounting["associations"],
        user_record=accounting["user_record"],
        user=user,
        groups=groups,
        superuser=uid == 0,
        failures=tuple(_unique(failures)),
    )


#: who the commands run as: user name, uid and group names, one per line (``id``'s own
#: ``uid=0(root) ...`` labels are translated in some locales)
ID_SCRIPT = "id -un; id -u; id -Gn"


def parse_id(text: str) -> tuple[str | None, int | None, frozenset[str] | None]:
    """``(user name, uid, group names)`` from the output of :data:`ID_SCRIPT`; None for what
    it does not say."""
    lines = [line.strip() for line in text.splitlines()]
    lines += [""] * (3 - len(lines))
    user = lines[0] or None
    uid = int(lines[1]) if lines[1].isdigit() else None
    groups = frozenset(lines[2].split()) if lines[2] else None
    return user, uid, groups


def _unique(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One line per distinct failure message (sacctmgr fails the same way three times)."""
    seen: dict[str, tuple[str, str]] = {}
    for command, why in items:
        seen.setdefault(why, (command, why))
    return list(seen.values())


def read_facts(
    connector: Connector, *, path: str | None = None, timeout: float = COMMAND_TIMEOUT
) -> Facts:
    """:func:`read_facts_async` from synchronous code (on the launchers event loop)."""
    # lazy: kept off the module's import
    from ..runtime.loop import run_sync

    return run_sync(read_facts_async(connector, path=path, timeout=timeout))
