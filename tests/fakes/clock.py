"""``FakeClock``: the time an executor reads (``protocols.Clock``), moved by the test."""

from __future__ import annotations

import threading
import time


class FakeClock:
    """Wall-clock and monotonic seconds that move only when told: ``advance(s)``, or
    ``sleep(s)``, which returns at once with the time ``s`` later."""

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        #: starts at the machine's time, so that records written with it stay plausible
        self._wall = time.time() if start is None else start
        self._mono = 1000.0

    def time(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


__all__ = ["FakeClock"]
