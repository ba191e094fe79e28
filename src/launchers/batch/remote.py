"""The queue directory protocol over a connector (docs/design/batching.md §3.3): the queue lives under the
SSH connector's ``workdir``; publication goes through SFTP (temporary name + rename) and each
manager cycle reads the whole queue with ONE remote command."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..connectors.registry import get_connector
from ..errors import ConnectorError, LaunchersError
from ..jobs.record import RESULT_FILES
from ..runtime.files import configured_base, fetch_outputs
from . import queue as Q
from . import runner as R

if TYPE_CHECKING:
    from ..connectors.base import Connector

#: lists every subdirectory and reads done/, running/ and runners/ entries; prints one JSON object
SCAN_SCRIPT = r"""
import json, os, sys
q = sys.argv[1]
out = {}
for sub in ("pending", "running", "done", "cancel", "runners"):
    try:
        out[sub] = sorted(n for n in os.listdir(os.path.join(q, sub)) if not n.startswith("."))
    except OSError:
        out[sub] = []
for sub in ("done", "running", "runners"):
    data = {}
    for n in out[sub]:
        if n.endswith(".json"):
            try:
                with open(os.path.join(q, sub, n)) as f:
                    data[n[:-5]] = json.load(f)
            except (OSError, ValueError):
                pass
    out[sub + "_entries"] = data
print(json.dumps(out))
"""

#: rename pending/<name> to done/<id>.json (prints "cancelled"), else write cancel/<id> ("requested")
CANCEL_SCRIPT = r"""
import json, os, sys, time
q, tid = sys.argv[1], sys.argv[2]
end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
for n in sorted(os.listdir(os.path.join(q, "pending"))):
    if n.endswith(".json") and n[:-5].split("-", 1)[-1] == tid:
        src, dst = os.path.join(q, "pending", n), os.path.join(q, "done", tid + ".json")
        try:
            with open(src) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            entry = {"id": tid}
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            continue
        entry.update(state="CANCELLED", reason="cancelled on request", rc=None, signal=None, end=end)
        with open(dst + ".tmp", "w") as f:
            json.dump(entry, f)
        os.replace(dst + ".tmp", dst)
        print("cancelled")
        sys.exit(0)
if not os.path.exists(os.path.join(q, "done", tid + ".json")):
    with open(os.path.join(q, "cancel", "." + tid), "w") as f:
        f.write(end + "\n")
    os.replace(os.path.join(q, "cancel", "." + tid), os.path.join(q, "cancel", tid))
print("requested")
"""

#: re-queue claims of lost runners with the runner's own code (runner.py sits in the queue)
RECOVER_SCRIPT = r"""
import json, sys
q = sys.argv[1]
sys.path.insert(0, q)
import runner
print(json.dumps(runner.recover_lost(q, sys.argv[2], float(sys.argv[3]), sys.argv[4:])))
"""

OUTPUTS = RESULT_FILES


@attrs.frozen
class RemoteSnapshot:
    """One remote scan: the listing (same shape as a local scan) plus the entries read."""

    snap: Q.Snapshot
    done: Mapping[str, dict[str, Any]]
    running: Mapping[str, dict[str, Any]]
    runners: Mapping[str, dict[str, Any]]


def parse_scan(text: str) -> RemoteSnapshot:
    """The remote scan's JSON as a snapshot (pure)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConnectorError(f"batch queue scan: unreadable answer {text[:200]!r}: {e}") from None
    pending: dict[str, str] = {}
    for name in data.get("pending", []):
        parsed = R.split_pending(name)
        if parsed is not None:
            pending[parsed[1]] = name

    def ids(sub: str, suffix: str = ".json") -> frozenset[str]:
        return frozenset(
            n[: -len(suffix)] if suffix and n.endswith(suffix) else n for n in data.get(sub, [])
        )

    snap = Q.Snapshot(
        pending=pending,
        running=ids(R.RUNNING),
        done=ids(R.DONE),
        cancel=ids(R.CANCEL, ""),
        runners=ids(R.RUNNERS),
    )
    return RemoteSnapshot(
        snap,
        data.get("done_entries", {}),
        data.get("running_entries", {}),
        data.get("runners_entries", {}),
    )


def connector_of(inner: Any) -> Connector:
    """The connector an inner launcher runs through (its group's launchers.yaml gives its settings)."""
    # lazy: the configuration loader (~80 ms to import) only for a connector
    from ..config.loader import load_config

    path = getattr(getattr(getattr(inner, "group", None), "position", None), "file", None)
    return get_connector(str(inner.connector), load_config(path))


def remote_base(connector: Connector) -> str:
    """The connector's ``workdir`` (where remote queues live; ``~`` expanded later)."""
    return configured_base(connector)


def pending_entry(entry: Mapping[str, Any]) -> tuple[bytes, str]:
    """The bytes and the ``pending/`` name of a task entry to publish (submit time as ``seq``)."""
    data = dict(entry)
    data.setdefault("seq", time.time_ns())
    data.setdefault("attempt", 0)
    return json.dumps(data).encode(), R.pending_name(int(data["seq"]), str(data["id"]))


@attrs.define(eq=False)
class RemoteQueue:
    """A queue directory on the far side of a connector; async mirror of ``queue.py``."""

    connector: Connector
    path: str
    ready: bool = False
    #: the launchers.yaml that declares the connector (recorded so a record alone reaches it)
    config_file: str | None = None

    def locator(self) -> dict[str, Any]:
        """What a job record keeps to reach this queue again (``launchers cancel``)."""
        return {
            "kind": "ssh",
            "connector": self.connector.name,
            "config": self.config_file,
            "path": self.path,
        }

    async def _resolve(self) -> None:
        """Expand a leading ``~`` of the queue path with the remote home (once): remote
        commands receive the path as an argument, where no shell expands it."""
        original = self.path
        if original == "~" or original.startswith("~/"):
            home = (await self.connector.home()).rstrip("/")
            # concurrent submissions may resolve at once: expand the path we read, once
            if self.path == original:
                self.path = home + original[1:]

    async def _py(self, script: str, *args: str) -> str:
        await self._resolve()
        res = await self.connector.run(["python3", "-c", script, self.path, *args])
        if res.returncode != 0:
            raise ConnectorError(
                f"batch queue {self.path}: remote command failed: {res.stderr.strip()[:300]}"
            )
        return res.stdout

    async def ensure(self) -> None:
        """Create the subdirectories and write ``runner.py`` (once per process)."""
        await self._resolve()
        if self.ready:
            return
        subs = " ".join(shlex.quote(f"{self.path}/{s}") for s in (*R.SUBDIRS, "tasks"))
        res = await self.connector.run(["sh", "-c", f"mkdir -p {subs}"])
        if res.returncode != 0:
            raise LaunchersError(
                f"batch queue {self.path}: cannot prepare it: {res.stderr.strip()}"
            )
        await self.connector.write_file(f"{self.path}/{Q.RUNNER_FILE}", Q.runner_source())
        self.ready = True

    def task_dir(self, task_id: str) -> str:
        """Where a task's outputs are written on the remote side."""
        return f"{self.path}/tasks/{task_id}"

    async def prepare_task(self, task_id: str) -> str:
        """Create the task's remote directory, emptied of a previous run's outputs and queue entries."""
        await self._resolve()
        d = self.task_dir(task_id)
        names = " ".join(shlex.quote(f"{d}/{n}") for n in OUTPUTS)
        old = f"{shlex.quote(self.path)}/done/{shlex.quote(task_id)}.json {shlex.quote(self.path)}/cancel/{shlex.quote(task_id)}"
        res = await self.connector.run(
            ["sh", "-c", f"mkdir -p {shlex.quote(d)} && rm -f {names} {old}"]
        )
        if res.returncode != 0:
            raise ConnectorError(
                f"batch queue {self.path}: cannot prepare {d}: {res.stderr.strip()}"
            )
        return d

    async def publish(self, entry: Mapping[str, Any]) -> str:
        """Publish ``pending/<seq>-<id>.json`` through the connector (temporary name + rename)."""
        await self._resolve()
        data, name = pending_entry(entry)
        await self.connector.write_file(f"{self.path}/{R.PENDING}/{name}", data)
        return name

    async def scan(self) -> RemoteSnapshot:
        """ONE remote command: every listing plus the done/, running/ and runners/ entries."""
        await self._resolve()
        return parse_scan(await self._py(SCAN_SCRIPT))

    async def cancel_task(self, task_id: str) -> str:
        """ "cancelled" when still pending (renamed to done/), "requested" (cancel/<id> written) otherwise."""
        await self._resolve()
        return (await self._py(CANCEL_SCRIPT, task_id)).strip() or "requested"

    async def recover(
        self, who: str, final_runners: list[str], lost_after: float = R.LOST_AFTER
    ) -> list[str]:
        """Re-queue claims whose runner's pilot is final or whose heartbeat is older than ``lost_after``."""
        await self._resolve()
        text = await self._py(RECOVER_SCRIPT, who, f"{lost_after:g}", *final_runners)
        try:
            return [str(t) for t in json.loads(text)]
        except ValueError:
            raise ConnectorError(
                f"batch queue {self.path}: unreadable recovery answer {text[:200]!r}"
            ) from None

    async def fetch_outputs(self, task_id: str, local: Path) -> None:
        """Copy the task's outputs back into its local job directory."""
        await self._resolve()
        await fetch_outputs(self.connector, self.task_dir(task_id), local)


__all__ = ["RemoteQueue", "RemoteSnapshot", "connector_of", "parse_scan", "remote_base"]
