"""Fakes for decision tests that would otherwise wait on the real cluster (docs/testing.md,
"Fakes"): ``FakeClock`` (``protocols.Clock``) and ``FakeSlurm`` (the Slurm commands the executor
runs, answered in memory in their real output formats; ``FakeSlurm(remote=DIR)`` reached through
its ``FakeSSH`` connector). ``tests/integration/slurm/test_fake_slurm_fidelity.py`` checks them
against the real cluster and sshd."""

from .clock import FakeClock
from .slurm import FakeJob, FakeSlurm, FakeSSH, fake_executor

__all__ = ["FakeClock", "FakeJob", "FakeSSH", "FakeSlurm", "fake_executor"]
