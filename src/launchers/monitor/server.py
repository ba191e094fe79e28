"""Running the monitor: read the experiments, bind the port, print the URL with its token, serve
the application of ``app`` with uvicorn until Ctrl-C (or ``stop()`` from another thread)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

import uvicorn

from ..errors import LaunchersError
from .actions import OWNER_CHECK, Tracking
from .app import create_app
from .index import Index
from .scan import ExperimentDir
from .security import is_loopback, new_token
from .watch import describe as describe_watch

DEFAULT_PORT = 8780
#: Ports tried after the default one when it is busy (as Jupyter does); a port given is not
#: replaced.
PORT_TRIES = 20

log = logging.getLogger("launchers.monitor")


def bind(host: str, port: int, *, tries: int) -> socket.socket:
    """A listening socket on ``host``: ``port``, else the next of ``tries`` ports that is free."""
    last: OSError | None = None
    for candidate in range(port, port + max(1, tries)):
        try:
            infos = socket.getaddrinfo(host, candidate, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise LaunchersError(f"--host {host}: {e.strerror}") from None
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as e:
            sock.close()
            last = e
            if e.errno == errno.EADDRINUSE and port != 0:
                continue
            raise LaunchersError(f"cannot listen on {host}:{candidate}: {e.strerror}") from None
        sock.listen(128)
        sock.setblocking(False)
        return sock
    what = f"ports {port}-{port + tries - 1} are" if tries > 1 else f"port {port} is"
    raise LaunchersError(f"cannot listen on {host}: {what} in use ({last}); give another --port")


def url_host(host: str) -> str:
    """How ``host`` is written in a URL (an IPv6 address in brackets; any address: this
    machine's name)."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


class _Server(uvicorn.Server):
    """uvicorn's server, ending the event streams as soon as it is asked to stop (they would
    otherwise keep it waiting for its connections to close)."""

    monitor: Monitor

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self.monitor._closing()


class Monitor:
    """One monitor server over ``experiments``."""

    def __init__(
        self,
        experiments: Sequence[ExperimentDir],
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        port_given: bool = True,
        track: bool = False,
        use_inotify: bool = True,
        token: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.tries = 1 if port_given or port == 0 else PORT_TRIES
        self.token = token or new_token()
        self.index = Index(experiments, use_inotify=use_inotify)
        self.track = track
        self.tracking: Tracking | None = None
        self.url = ""
        self.server: _Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- running ------------------------------------------------------------------------------

    async def serve(self, out: TextIO | None = None) -> None:
        """Read, bind, print the banner to ``out``, serve until asked to stop."""
        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        sock = bind(self.host, self.port, tries=self.tries)
        self.port = sock.getsockname()[1]
        self.url = f"http://{url_host(self.host)}:{self.port}/?token={self.token}"
        try:
            await self.index.start()
            if self.track:
                self.tracking = Tracking(self.index)
            app = create_app(
                self.index,
                self.token,
                bound_to_loopback=is_loopback(self.host),
                tracking=self.tracking,
                stopping=self.stopping,
            )
            config = uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=2,
                loop="asyncio",
                http="h11",
            )
            self.server = _Server(config)
            self.server.monitor = self
            if out is not None:
                self.banner(out)
            periodic = asyncio.get_running_loop().create_task(self._periodic())
            self._ready.set()
            try:
                await self.server.serve(sockets=[sock])
            finally:
                periodic.cancel()
        finally:
            sock.close()
            await self.index.stop()

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(OWNER_CHECK)
            if self.tracking is not None:
                self.tracking.check_all()

    def _closing(self) -> None:
        """Stop the event streams (called in the loop's thread by the signal handler)."""
        if self.stopping is not None:
            self.stopping.set()
        self.index.close_streams()

    def banner(self, out: TextIO) -> None:
        """What the monitor prints when it is ready: what it reads, how, and the URL."""
        total = sum(len(s.rows) for s in self.index.experiments.values())
        n = len(self.index.experiments)
        seconds = self.index.stats["scan_seconds"]
        print(
            f"launchers monitor: {n} experiment{'s' if n != 1 else ''}, {total:,} jobs read in "
            f"{seconds:.2f} s; changes found by {describe_watch(self.index.watches)}"
            f"{'; --track: following unfinished jobs no live process owns' if self.track else ''}",
            file=out,
        )
        for state in self.index.experiments.values():
            print(f"  {state.exp.path}  ({len(state.rows):,} jobs)", file=out)
        if not is_loopback(self.host):
            print(
                f"launchers monitor: listening on {self.host}, beyond this machine: whoever "
                "reaches it with the token can see these jobs and cancel them",
                file=out,
            )
        print(f"\n    {self.url}\n", file=out)
        ssh = os.environ.get("SSH_CONNECTION")
        if ssh and is_loopback(self.host):
            host = socket.gethostname()
            print(
                f"Over SSH: on your computer run  ssh -N -L {self.port}:127.0.0.1:{self.port} "
                f"{host}  and open the URL there (docs/monitor.md).",
                file=out,
            )
        print("Ctrl-C stops the monitor (the jobs go on).", file=out)
        out.flush()

    def run(self, out: TextIO = sys.stdout) -> int:
        """Serve in this thread until Ctrl-C; exit status 0."""
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(self.serve(out))
        return 0

    # -- in a thread (tests, benchmarks) ------------------------------------------------------

    def start(self, timeout: float = 60.0) -> Monitor:
        """Serve in a background thread; returns once the URL answers."""

        def target() -> None:
            try:
                asyncio.run(self.serve())
            except BaseException as e:
                self._error = e
                self._ready.set()

        self._thread = threading.Thread(target=target, name="launchers-monitor", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the monitor did not start")
        if self._error is not None:
            raise self._error
        server = self.server
        assert server is not None
        while not server.started and self._thread.is_alive():
            self._ready.wait(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a monitor started with ``start``."""
        if self.server is None or self.loop is None:
            return
        self.server.should_exit = True
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._closing)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def base(self) -> str:
        """``http://host:port`` (no token)."""
        return f"http://{url_host(self.host)}:{self.port}"


__all__ = ["DEFAULT_PORT", "Monitor", "bind", "url_host"]
