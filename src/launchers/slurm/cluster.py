"""``SlurmCluster``: runs the Slurm commands of one executor, on this machine or through a
connector (docs/slurm.md, "Over a connector"), and remembers what it learnt of the cluster: its
name, the user, whether accounting works, ``MaxArraySize``. The command lines come from
``slurm.commands``."""

from __future__ import annotations

import getpass
import logging
import os
from collections.abc import Callable, Sequence

from ..connectors.base import CommandResult, Connector
from ..connectors.local import LocalConnector
from ..errors import ConnectorError, LaunchersError
from . import commands as C
from . import parse as P
from .limits import Allowance, allowance_command, parse_allowance
from .options import SlurmOptions
from .script import submission_variable
from .settings import SlurmTuning

log = logging.getLogger("launchers.slurm")


class AccountingDisabled(Exception):
    """sacct says the cluster keeps no accounting."""


class QueryFailed(Exception):
    """sacct failed for another reason (that cycle uses squeue)."""


class SlurmCluster:
    """The Slurm side of one executor: a connector (made on first use by ``connect``), the
    commands run so far by name, and the facts learnt about the cluster."""

    def __init__(
        self,
        connect: Callable[[], Connector],
        *,
        local: bool,
        cluster: str | None,
        tuning: Callable[[], SlurmTuning],
        accounting: bool | None = None,
    ) -> None:
        self._connect = connect
        self._connector: Connector | None = None
        #: paths are this machine's, commands run here
        self.is_local = local
        #: the cluster named by ``--clusters``, or learnt from sbatch's ``ID;CLUSTER``
        self.name = cluster
        self._tuning = tuning
        #: None: unknown yet; False: no accounting (squeue and job.rc only)
        self.accounting = accounting
        #: Slurm commands run, by name (benchmarks and tests read it)
        self.commands: dict[str, int] = {}
        self.user_info: tuple[str, int] | None = None
        self._max_array: int | None = None

    @property
    def connector(self) -> Connector:
        if self._connector is None:
            self._connector = self._connect()
        return self._connector

    def learn(self, cluster: str | None) -> None:
        """The first cluster named by sbatch (``ID;CLUSTER``) or a record stays for good."""
        if cluster and not self.name:
            self.name = cluster

    def args(self) -> list[str]:
        return C.cluster_args(self.name)

    def count(self, name: str) -> None:
        self.commands[name] = self.commands.get(name, 0) + 1

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        clean_env: bool = False,
    ) -> CommandResult:
        """Run a Slurm command, counted by name; ``clean_env`` runs it without the variables
        sbatch reads as options: locally through the child's environment (no extra exec per
        job), over a connector by a small ``sh`` wrapper that unsets them there."""
        self.count(argv[0])
        if timeout is None:
            timeout = self._tuning().query_timeout
        connector = self.connector
        if clean_env and isinstance(connector, LocalConnector):
            unset = frozenset(k for k in os.environ if not submission_variable(k))
            return await connector.run(list(argv), timeout=timeout, cwd=cwd, unset=unset)
        if clean_env:
            argv = C.clean_env_argv(argv)
        return await connector.run(list(argv), timeout=timeout, cwd=cwd)

    async def user(self) -> tuple[str, int]:
        """The submitting user's name and uid on the cluster side."""
        if self.user_info is None:
            if self.is_local:
                self.user_info = (getpass.getuser(), os.getuid())
            else:
                res = await self.connector.run(
                    list(C.USER_ARGV), timeout=self._tuning().query_timeout
                )
                lines = res.stdout.split()
                if res.returncode != 0 or len(lines) < 2:
                    raise ConnectorError(f"cannot read the remote user: {res.stderr.strip()}")
                self.user_info = (lines[0], int(lines[1]))
        return self.user_info

    def my_uid(self) -> int | None:
        """Our uid there if known (this machine's when local), for "cancelled by you"."""
        if self.user_info is not None:
            return self.user_info[1]
        return os.getuid() if self.is_local else None

    # -- queries ----------------------------------------------------------------------------

    async def sacct(self, argv: Sequence[str]) -> dict[str, P.Row]:
        res = await self.run(argv)
        if res.returncode != 0:
            if P.sacct_accounting_disabled(res.returncode, res.stderr, res.stdout):
                raise AccountingDisabled(res.stderr.strip())
            raise QueryFailed(f"sacct exited {res.returncode}: {res.stderr.strip()}")
        return P.sacct_rows(res.stdout)

    async def squeue(self) -> dict[str, P.Row]:
        """Every job of ours with its state and reason (raises ``ConnectorError`` on failure)."""
        user, _ = await self.user()
        res = await self.run(C.squeue_argv(user, self.name))
        if res.returncode != 0:
            raise ConnectorError(f"squeue exited {res.returncode}: {res.stderr.strip()}")
        return P.squeue_rows(res.stdout)

    def accounting_off(self) -> None:
        """sacct said there is no accounting: squeue and job.rc for the process lifetime."""
        log.warning("Slurm accounting storage is disabled: following jobs with squeue and job.rc")
        self.accounting = False

    async def named(
        self, name: str, since: float | None, workdir: str | None, now: float
    ) -> tuple[list[str], set[str]]:
        """Ids (array master ids for arrays) of this user's jobs named ``name`` (squeue, and
        sacct over 7 days if available), oldest first, and which of them run in another
        directory than ``workdir`` (``commands.named_jobs``)."""
        user, _ = await self.user()
        res = await self.run(C.named_squeue_argv(user, name, self.name))
        sacct_out: str | None = None
        if self.accounting is not False:
            start = C.slurm_local_time(now - 7 * 86400)
            res2 = await self.run(C.named_sacct_argv(user, name, start, self.name))
            if res2.returncode == 0:
                sacct_out = res2.stdout
            elif P.sacct_accounting_disabled(res2.returncode, res2.stderr, res2.stdout):
                self.accounting = False
        ids, foreign = C.named_jobs(
            res.stdout if res.returncode == 0 else None,
            sacct_out,
            workdir=workdir,
            since=since,
            skew=self._tuning().clock_skew,
        )
        if (
            res.returncode != 0
            and not C.named_jobs(None, sacct_out, workdir=None, since=None, skew=0)[0]
        ):
            # squeue failed and accounting knows no such job either: nothing can be concluded
            raise ConnectorError(f"squeue failed: {res.stderr.strip()}")
        return ids, foreign

    async def scancel(self, ids: Sequence[str]) -> None:
        """Cancel ``ids``; complaints about jobs that already ended are not errors."""
        ids = [i for i in ids if i]
        if not ids:
            return
        res = await self.run(C.scancel_argv(ids, self.name))
        if res.returncode != 0 and not P.scancel_harmless(res.stderr):
            raise LaunchersError(f"scancel failed: {res.stderr.strip()}")

    async def max_array_size(self) -> int:
        """``MaxArraySize`` from ``scontrol show config`` (read once per cluster)."""
        if self._max_array is None:
            res = await self.run(C.config_argv(self.name))
            value = (
                P.parse_config_value(res.stdout, "MaxArraySize") if res.returncode == 0 else None
            )
            self._max_array = int(value) if value and value.isdigit() else 1001
        return self._max_array

    async def submit_allowance(self, options: SlurmOptions) -> Allowance | None:
        """How many more jobs Slurm accepts from this user now, or None: no accounting, no
        limit, or limits that cannot be read (a rejection then teaches them)."""
        if self.accounting is False:
            return None
        try:
            user = (await self.user())[0]
            res = await self.run(allowance_command(user, self.name))
        except (ConnectorError, OSError) as e:
            log.debug("submit limits not readable: %s", e)
            return None
        if res.returncode != 0:
            return None
        return parse_allowance(
            res.stdout, account=options.account, qos=options.qos, partition=options.partition
        )


__all__ = ["AccountingDisabled", "QueryFailed", "SlurmCluster"]
