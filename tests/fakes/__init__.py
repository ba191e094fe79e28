"""Fakes for decision tests that would otherwise wait on the real cluster (docs/testing.md,
"Fakes"): ``FakeClock`` (``protocols.Clock``) and ``FakeSlurm`` (the Slurm commands the executor
runs, answered in memory in their real output formats; ``FakeSlurm(remote=DIR)`` reached through
its ``FakeSSH`` connector). ``tests/integration/slurm/test_fake_slurm_fidelity.py`` checks them
against the real cluster and sshd."""

from .clock import FakeClock
from .slurm import FAST_POLLING, FakeJob, FakeSlurm, FakeSSH, fake_executor, fake_launcher

__all__ = [
    "FAST_POLLING",
    "FakeClock",
    "FakeJob",
    "FakeSSH",
    "FakeSlurm",
    "fake_executor",
    "fake_launcher",
]
