"""The launcher base: a launcher is a *value* (where and with which options); running jobs is
the job of an *executor* (I/O), looked up by launcher kind, as in PSI/J's executor split."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from .runtime.executor import Executor


@attrs.frozen
class Launcher:
    """Base of every launcher kind; subclasses are frozen attrs classes."""

    @property
    def kind(self) -> str:
        raise NotImplementedError

    def executor(self) -> Executor:
        """The process-wide executor that runs jobs for this launcher (created on first use)."""
        from .registry import executor_for

        return executor_for(self)

    def batched(self, **options: Any) -> Any:
        """This launcher wrapped in a ``BatchLauncher`` (batching.md §3.1)."""
        from .batch.launcher import BatchLauncher

        return BatchLauncher(self, **options)
