"""Fakes for decision tests that would otherwise wait on the real cluster (docs/testing.md,
"Fakes"): ``FakeClock`` (``protocols.Clock``) and ``FakeSlurm`` (the Slurm commands the executor
runs, answered in memory in their real output formats). ``tests/integration/slurm/test_fake_slurm_fidelity.py``
checks them against the real cluster."""

from .clock import FakeClock
from .slurm import FakeJob, FakeSlurm, fake_executor

__all__ = ["FakeClock", "FakeJob", "FakeSlurm", "fake_executor"]
