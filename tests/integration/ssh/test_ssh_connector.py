"""The SSH connector against the real sshd of the sandbox (and a private sshd for outages)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import unavailable
from file_store_checks import check_file_store
from launchers.config.model import LaunchersConfig, SSHConnectorConfig
from launchers.connectors import registry
from launchers.connectors.ssh import (
    HostKeyError,
    SSHAuthenticationError,
    SSHConnector,
    backoff_delays,
    build_command,
    known_hosts_pattern,
    parse_proxy_jump,
    split_pid_marker,
)
from launchers.errors import (
    AuthenticationError,
    ConfigurationError,
    ConnectorError,
    ScriptError,
)

T = TypeVar("T")
OWN_SSHD_PORT = 3422


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture()
def sandbox(slurm_cluster: dict[str, str]) -> dict[str, str]:
    return slurm_cluster


def cfg(info: dict[str, str], **kw: Any) -> SSHConnectorConfig:
    base: dict[str, Any] = {
        "name": "sandbox",
        "hostname": info["CLUSTER_SSH_HOST"],
        "port": int(info["CLUSTER_SSH_PORT"]),
        "username": info["CLUSTER_SSH_USER"],
        "identity_file": (info["CLUSTER_SSH_KEY"],),
        "known_hosts": info["CLUSTER_SSH_KNOWN_HOSTS"],
        "ssh_config": False,
    }
    base.update(kw)
    return SSHConnectorConfig(**base)


def host_key_line(info: dict[str, str]) -> str:
    pub = Path(info["CLUSTER_DIR"], "ssh", "ssh_host_ed25519_key.pub").read_text().split()
    return f"{pub[0]} {pub[1]}"


async def using(c: SSHConnector, fn: Callable[[SSHConnector], Awaitable[T]]) -> T:
    try:
        return await fn(c)
    finally:
        await c.close()


# ----------------------------------------------------------------------------- pure parts


def test_build_command_quoting_env_cwd() -> None:
    assert build_command(["echo", "a b", "$x"]) == "echo 'a b' '$x'"
    line = build_command(["printf", "%s"], env={"A": "x y", "B": "'"}, cwd="/tmp/d ir")
    assert line == "cd '/tmp/d ir' && env A='x y' B=''\"'\"'' printf %s"
    assert build_command(["true"], cwd="~/jobs/a b") == "cd ~/'jobs/a b' && true"
    assert build_command(["true"], cwd="~/x y").startswith("cd ~/'x y' && ")
    assert build_command(["true"], cwd="~").startswith("cd ~ && ")
    assert build_command(["true"], cwd="-odd").startswith("cd ./-odd && ")
    assert build_command(["squeue"], login_shell=True) == "bash -lc squeue"
    assert build_command(["echo", "a b"], login_shell=True) == "bash -lc 'echo '\"'\"'a b'\"'\"''"


def test_build_command_rejects_bad_input() -> None:
    for bad in ([], "ls -l"):
        with pytest.raises(ScriptError):
            build_command(bad)  # type: ignore[arg-type]
    with pytest.raises(ScriptError, match="NUL"):
        build_command(["echo", "a\0b"])
    with pytest.raises(ScriptError, match="environment variable name"):
        build_command(["true"], env={"A-B": "1"})
    with pytest.raises(ScriptError, match="environment variable name"):
        build_command(["true"], env={"1A": "1"})


def test_pid_marker_round_trip() -> None:
    line = build_command(["true"], pid_marker=True)
    assert line.startswith("printf '\\036launchers-pid=%s\\n' \"$$\" >&2; exec true")
    assert split_pid_marker(b"x\n\x1elaunchers-pid=42\nwarn\n") == (42, b"x\nwarn\n")
    assert split_pid_marker(b"plain") == (None, b"plain")


def test_backoff_delays_double_cap_and_jitter() -> None:
    gen = backoff_delays(rng=random.Random(1))
    delays = [next(gen) for _ in range(12)]
    nominal = [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60]
    for d, n in zip(delays, nominal, strict=True):
        assert 0.8 * n <= d <= 1.2 * n
    assert len({round(d / n, 6) for d, n in zip(delays, nominal, strict=True)}) > 1  # jittered


def test_known_hosts_pattern_and_proxy_jump() -> None:
    assert known_hosts_pattern("h", 22) == "h"
    assert known_hosts_pattern("127.0.0.1", 2222) == "[127.0.0.1]:2222"
    assert parse_proxy_jump("bob@gw:2200,gw2") == [("bob", "gw", 2200), (None, "gw2", None)]
    assert parse_proxy_jump("[::1]:22") == [(None, "::1", 22)]
    with pytest.raises(ConfigurationError, match="proxy_jump"):
        parse_proxy_jump("gw:port")


def test_bad_policy_rejected() -> None:
    with pytest.raises(ConfigurationError, match="strict_host_key_checking"):
        SSHConnector(SSHConnectorConfig(name="x", hostname="h", strict_host_key_checking="maybe"))


# ----------------------------------------------------------------------------- registry


def test_registry_one_instance_per_config_and_name(tmp_path: Path) -> None:
    a = SSHConnectorConfig(name="cl", hostname="cl.example.org")
    conf1 = LaunchersConfig(connectors={"cl": a}, path=tmp_path / "one.yaml")
    conf2 = LaunchersConfig(connectors={"cl": a}, path=tmp_path / "two.yaml")
    registry.forget_all()
    try:
        c1 = registry.get_connector("cl", conf1)
        assert isinstance(c1, SSHConnector)
        assert registry.get_connector("cl", conf1) is c1
        assert registry.get_connector("cl", conf2) is not c1
        with pytest.raises(ConfigurationError, match=r"unknown connector 'nope'.*known: local, cl"):
            registry.get_connector("nope", conf1)
        with pytest.raises(ConfigurationError, match="unknown connector 'cl'"):
            registry.get_connector("cl", None)
        edited = LaunchersConfig(
            connectors={"cl": attrs.evolve(a, port=2200)}, path=tmp_path / "one.yaml"
        )
        c3 = registry.get_connector("cl", edited)
        assert c3 is not c1 and isinstance(c3, SSHConnector) and c3.config.port == 2200
    finally:
        registry.forget_all()


def test_registry_local() -> None:
    pytest.importorskip("launchers.connectors.local")
    registry.forget_all()
    try:
        c = registry.get_connector("local", None)
        assert c.is_local
        assert registry.get_connector("local", LaunchersConfig()) is c
    finally:
        registry.forget_all()


# ----------------------------------------------------------------------------- commands


@pytest.mark.ssh
def test_run_output_exit_codes_and_stdin(sandbox: dict[str, str]) -> None:
    async def body(c: SSHConnector) -> None:
        r = await c.run(["echo", "hello world", "$HOME"])
        assert (r.returncode, r.stdout, r.stderr) == (0, "hello world $HOME\n", "")
        r = await c.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
        assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")
        r = await c.run(["sh", "-c", "kill -TERM $$"])
        assert r.returncode == -signal.SIGTERM
        r = await c.run(["cat"], input=b"fed \xff through stdin")
        assert r.stdout == "fed \ufffd through stdin"  # UTF-8 with replacement
        r = await c.run(["no-such-command-xyz"])
        assert r.returncode == 127
        r = await c.run(["pwd"], cwd="~")
        assert r.stdout.strip() == await c.home()
        assert c.connections_opened == 1

    run(using(SSHConnector(cfg(sandbox)), body))


@pytest.mark.ssh
@pytest.mark.slow
def test_nasty_arguments_env_and_cwd_survive(sandbox: dict[str, str], tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    conn = SSHConnector(cfg(sandbox))
    base = str(tmp_path / "remote")
    loop.run_until_complete(conn.mkdir(base))
    text = st.text(
        st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=30
    )
    names = st.from_regex(r"V_[A-Za-z0-9_]{0,10}", fullmatch=True)
    dirnames = text.filter(lambda s: s not in ("", ".", "..") and "/" not in s)
    # one remote command per example (each costs a remote shell start), many values in each
    script = 'if [ $# -gt 0 ]; then printf "%s\\0" "$@"; fi; for n in $NAMES; do eval "printf \'%s\\0\' \\"\\$$n\\""; done; pwd -P'

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        args=st.lists(text, max_size=5),
        env=st.dictionaries(names, text, max_size=4),
        dirname=dirnames,
    )
    def check(args: list[str], env: dict[str, str], dirname: str) -> None:
        async def body() -> None:
            d = f"{base}/{dirname}"
            await conn.mkdir(d)
            r = await conn.run(
                ["sh", "-c", script, "sh", *args], env={**env, "NAMES": " ".join(env)}, cwd=d
            )
            assert r.returncode == 0, r.stderr
            *values, pwd = r.stdout.split("\0")
            assert values == [*args, *env.values()]
            assert pwd == d + "\n"

        loop.run_until_complete(body())

    try:
        check()
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


@pytest.mark.timing
@pytest.mark.ssh
def test_timeout_closes_channel_and_kills_the_command(sandbox: dict[str, str]) -> None:
    async def body(c: SSHConnector) -> None:
        t0 = time.monotonic()
        # 3 s: the remote shell must have started and reported its pid (root's .bashrc here
        # runs `pyenv init`, which can take seconds when many shells start at once)
        with pytest.raises(
            ConnectorError,
            match=r"timed out after 3 s \(channel closed, remote process \d+ sent SIGTERM\)",
        ):
            await c.run(["sleep", "47.25"], timeout=3)
        assert time.monotonic() - t0 < 4.5
        for _ in range(50):  # the process group got SIGTERM
            r = await c.run(["pgrep", "-f", "^sleep 47.25$"])
            if r.returncode == 1:
                break
            await asyncio.sleep(0.1)
        assert r.returncode == 1, r.stdout
        # the connection is still usable
        assert (await c.run(["true"])).returncode == 0

    run(using(SSHConnector(cfg(sandbox, command_timeout=30)), body))


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


@pytest.mark.ssh
def test_max_channels_limits_concurrency(sandbox: dict[str, str], tmp_path: Path) -> None:
    async def overlap(n_channels: int, meet: int) -> int:
        """Six commands on ``n_channels`` channels; each waits (up to a minute) until ``meet``
        of them have started: a barrier, since remote shells start in a time that varies by
        seconds under load (root's .bashrc here runs `pyenv init`)."""
        c = SSHConnector(cfg(sandbox, max_channels=n_channels))
        started = tmp_path / f"started-{n_channels}"
        started.mkdir()
        script = (
            f"date +%s.%N; touch {started}/$$; n=0; "
            f'while [ "$(ls {started} | wc -l)" -lt {meet} ] && [ $n -lt 600 ]; '
            "do n=$((n+1)); sleep 0.1; done; sleep 0.3; date +%s.%N"
        )
        try:
            rs = await asyncio.gather(*(c.run(["sh", "-c", script]) for _ in range(6)))
        finally:
            await c.close()
        spans = []
        for r in rs:
            start, end = map(float, r.stdout.split())
            spans.append((start, end))
        return _max_overlap(spans)

    # remote timestamps: never more than two commands at once with max_channels 2 (the first
    # two meet at the barrier: two at once is reached) ...
    assert run(overlap(2, meet=2)) == 2
    # ... and all six at once when allowed (each waits until all six have started)
    assert run(overlap(6, meet=6)) == 6


@pytest.mark.slurm
def test_squeue_and_sbatch_over_ssh(sandbox: dict[str, str]) -> None:
    async def body(c: SSHConnector) -> None:
        r = await c.run(["squeue", "--noheader", "--format=%i|%T"])
        assert r.returncode == 0, r.stderr
        r = await c.run(["sbatch", "--parsable", "--wrap", "true"], cwd=sandbox["CLUSTER_JOBS_DIR"])
        assert r.returncode == 0, r.stderr
        job_id = r.stdout.strip().splitlines()[-1]
        assert re.fullmatch(r"\d+(;\S+)?", job_id)
        r = await c.run(
            ["squeue", "--noheader", "--states=all", "--format=%A", "-j", job_id.split(";")[0]]
        )
        assert r.returncode == 0

    run(using(SSHConnector(cfg(sandbox)), body))


@pytest.mark.ssh
def test_login_shell_keeps_quoting(sandbox: dict[str, str]) -> None:
    async def body(c: SSHConnector) -> None:
        r = await c.run(["printf", "%s", 'it\'s a "test" $HOME'], env={"V": "a b"})
        assert r.stdout == 'it\'s a "test" $HOME'
        r = await c.run(["sh", "-c", 'printf %s "$V"'], env={"V": "a 'b'"}, cwd="/tmp")
        assert r.stdout == "a 'b'"
        r = await c.run(["squeue", "--noheader"])
        assert r.returncode == 0, r.stderr

    run(using(SSHConnector(cfg(sandbox, login_shell=True)), body))


# ----------------------------------------------------------------------------- files


@pytest.mark.ssh
def test_sftp_is_a_file_store(sandbox: dict[str, str], tmp_path: Path) -> None:
    run(using(SSHConnector(cfg(sandbox)), lambda c: check_file_store(c, str(tmp_path))))


@pytest.mark.ssh
def test_sftp_write_read_exists_mkdir(sandbox: dict[str, str], tmp_path: Path) -> None:
    base = str(tmp_path / "remote")  # the "remote" host is this machine

    async def body(c: SSHConnector) -> None:
        path = f"{base}/deep/er/file.bin"
        assert not await c.exists(path)
        await c.write_file(path, b"0123456789", mode=0o640)
        assert await c.exists(path)
        assert await c.read_file(path) == b"0123456789"
        assert await c.read_file(path, offset=3, max_bytes=4) == b"3456"
        assert await c.read_file(path, offset=8, max_bytes=100) == b"89"
        assert await c.read_file(path, offset=50) == b""
        assert await c.read_file(path, max_bytes=0) == b""
        r = await c.run(["stat", "-c", "%a", path])
        assert r.stdout.strip() == "640"
        await c.write_file(path, b"new")
        assert await c.read_file(path) == b"new"
        with pytest.raises(FileNotFoundError):
            await c.read_file(f"{base}/missing")
        await c.mkdir(f"{base}/a/b/c")
        await c.mkdir(f"{base}/a/b/c")
        assert await c.exists(f"{base}/a/b/c")
        # ~ expands to the remote home
        rel = f"~/.launchers-sftp-test-{os.getpid()}/x.txt"
        home = await c.home()
        try:
            await c.write_file(rel, b"home")
            r = await c.run(["cat", f"{home}/.launchers-sftp-test-{os.getpid()}/x.txt"])
            assert r.stdout == "home"
            assert await c.read_file(rel) == b"home"
            assert await c.expand_path("~/x") == f"{home}/x"
        finally:
            await c.run(["rm", "-rf", f"{home}/.launchers-sftp-test-{os.getpid()}"])

    run(using(SSHConnector(cfg(sandbox)), body))


@pytest.mark.ssh
def test_sftp_write_is_atomic(sandbox: dict[str, str], tmp_path: Path) -> None:
    base = str(tmp_path / "remote")
    size = 1 << 20
    contents = [bytes([c]) * size for c in b"ab"]

    async def body(c: SSHConnector) -> None:
        path = f"{base}/big"
        await c.write_file(path, contents[0])
        stop = False
        seen: list[bytes] = []

        async def reader() -> None:
            while not stop:
                seen.append(await c.read_file(path))

        task = asyncio.create_task(reader())
        for i in range(1, 9):
            await c.write_file(path, contents[i % 2])
            await asyncio.sleep(0)
        stop = True
        await task
        assert len(seen) >= 4
        assert all(x in contents for x in seen), "a reader saw a partly written file"
        r = await c.run(["ls", "-A", base])
        assert r.stdout.split() == ["big"]  # no temporary left behind

    run(using(SSHConnector(cfg(sandbox)), body))


# ----------------------------------------------------------------------------- host keys


@pytest.mark.ssh
def test_unknown_host_refused_with_yes(sandbox: dict[str, str], tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    c = SSHConnector(cfg(sandbox, known_hosts=str(kh)))
    with pytest.raises(
        HostKeyError, match=r"host key of \[127\.0\.0\.1\]:\d+ .*is unknown: ssh-ed25519 SHA256:"
    ):
        run(using(c, lambda c: c.run(["true"])))
    assert kh.read_text() == ""  # nothing recorded
    missing = SSHConnector(cfg(sandbox, known_hosts=str(tmp_path / "absent")))
    with pytest.raises(HostKeyError, match="unknown"):
        run(using(missing, lambda c: c.run(["true"])))


@pytest.mark.ssh
def test_accept_new_records_key(
    sandbox: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kh = tmp_path / "sub" / "known_hosts"
    c = SSHConnector(cfg(sandbox, known_hosts=str(kh), strict_host_key_checking="accept-new"))
    with caplog.at_level(logging.WARNING, logger="launchers.connectors.ssh"):
        assert run(using(c, lambda c: c.run(["true"]))).returncode == 0
    port = sandbox["CLUSTER_SSH_PORT"]
    assert kh.read_text() == f"[127.0.0.1]:{port} {host_key_line(sandbox)}\n"
    assert any("added the new host key" in r.getMessage() for r in caplog.records)
    # the recorded key is now trusted under the strict policy too
    strict = SSHConnector(cfg(sandbox, known_hosts=str(kh)))
    assert run(using(strict, lambda c: c.run(["true"]))).returncode == 0


@pytest.mark.ssh
@pytest.mark.parametrize("policy", ["yes", "accept-new"])
def test_changed_key_refused_with_hint(
    sandbox: dict[str, str], tmp_path: Path, policy: str
) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    port = sandbox["CLUSTER_SSH_PORT"]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{port} {other[0]} {other[1]}\n")
    real_fp = asyncssh.import_public_key(host_key_line(sandbox)).get_fingerprint()
    c = SSHConnector(cfg(sandbox, known_hosts=str(kh), strict_host_key_checking=policy))
    with pytest.raises(HostKeyError) as err:
        run(using(c, lambda c: c.run(["true"])))
    msg = str(err.value)
    assert "HOST KEY CHANGED" in msg and real_fp in msg
    assert f"ssh-keygen -R '[127.0.0.1]:{port}' -f {kh}" in msg
    assert kh.read_text().count("\n") == 1  # not overwritten


@pytest.mark.ssh
def test_no_checking_warns_every_connection(
    sandbox: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    c = SSHConnector(
        cfg(sandbox, known_hosts=str(tmp_path / "none"), strict_host_key_checking="no")
    )
    with caplog.at_level(logging.WARNING, logger="launchers.connectors.ssh"):
        run(using(c, lambda c: c.run(["true"])))
        run(using(c, lambda c: c.run(["true"])))
    warnings = [r for r in caplog.records if "host key checking is disabled" in r.getMessage()]
    assert len(warnings) == 2
    assert not (tmp_path / "none").exists()


# ----------------------------------------------------------------------------- auth, config


@pytest.mark.ssh
def test_wrong_key_is_an_authentication_error(sandbox: dict[str, str], tmp_path: Path) -> None:
    key = tmp_path / "stranger"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(key))
    c = SSHConnector(cfg(sandbox, identity_file=(str(key),)))
    with pytest.raises(SSHAuthenticationError) as err:
        run(using(c, lambda c: c.run(["true"])))
    assert isinstance(err.value, AuthenticationError) and isinstance(err.value, ConnectorError)
    with pytest.raises(ConfigurationError, match=r"identity file .* does not exist"):
        run(
            using(
                SSHConnector(cfg(sandbox, identity_file=(str(tmp_path / "nope"),))),
                lambda c: c.run(["true"]),
            )
        )


@pytest.mark.ssh
def test_passphrase_from_environment(
    sandbox: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "locked"
    # PKCS#8 encryption works without bcrypt (OpenSSH-format encrypted keys need it)
    asyncssh.read_private_key(sandbox["CLUSTER_SSH_KEY"]).write_private_key(
        str(key), format_name="pkcs8-pem", passphrase="s3cret"
    )
    conf = cfg(sandbox, identity_file=(str(key),), passphrase_env="LAUNCHERS_TEST_PASSPHRASE")
    monkeypatch.delenv("LAUNCHERS_TEST_PASSPHRASE", raising=False)
    with pytest.raises(ConfigurationError, match="LAUNCHERS_TEST_PASSPHRASE"):
        run(using(SSHConnector(conf), lambda c: c.run(["true"])))
    monkeypatch.setenv("LAUNCHERS_TEST_PASSPHRASE", "wrong")
    with pytest.raises(ConfigurationError, match="identity"):
        run(using(SSHConnector(conf), lambda c: c.run(["true"])))
    monkeypatch.setenv("LAUNCHERS_TEST_PASSPHRASE", "s3cret")
    assert run(using(SSHConnector(conf), lambda c: c.run(["true"]))).returncode == 0


@pytest.mark.ssh
def test_ssh_config_host_alias(
    sandbox: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(
        f"Host launchers-alias\n  HostName 127.0.0.1\n  Port {sandbox['CLUSTER_SSH_PORT']}\n"
        f"  User root\n  IdentityFile {sandbox['CLUSTER_SSH_KEY']}\n"
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    conf = SSHConnectorConfig(
        name="alias", hostname="launchers-alias", known_hosts=sandbox["CLUSTER_SSH_KNOWN_HOSTS"]
    )
    r = run(using(SSHConnector(conf), lambda c: c.run(["whoami"])))
    assert r.stdout == "root\n"
    off = attrs.evolve(conf, ssh_config=False, connect_timeout=3)
    with pytest.raises(ConnectorError, match="cannot connect"):
        run(using(SSHConnector(off), lambda c: c.run(["whoami"])))


def test_broken_ssh_config_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host broken\n  Port notanumber\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    c = SSHConnector(SSHConnectorConfig(name="b", hostname="broken", connect_timeout=2))
    with pytest.raises(ConfigurationError, match=r"connectors\.ssh\.b\.ssh_config: .*line 2"):
        run(using(c, lambda c: c.run(["true"])))


@pytest.mark.ssh
def test_proxy_jump_through_the_same_sshd(sandbox: dict[str, str]) -> None:
    port = sandbox["CLUSTER_SSH_PORT"]
    conf = cfg(sandbox, proxy_jump=f"root@127.0.0.1:{port}")
    assert (
        run(using(SSHConnector(conf), lambda c: c.run(["echo", "via jump"]))).stdout == "via jump\n"
    )


# ----------------------------------------------------------------------------- outages


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:  # breadth first: parents before children
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class OwnSSHD:
    """A private sshd on 127.0.0.1:3422 that the test can kill (with its sessions) and restart."""

    def __init__(self, cluster_dir: str, workdir: Path) -> None:
        ssh = Path(cluster_dir, "ssh")
        self.config = workdir / "sshd_config"
        self.log = workdir / "sshd.log"
        self.config.write_text(
            f"Port {OWN_SSHD_PORT}\nListenAddress 127.0.0.1\nHostKey {ssh}/ssh_host_ed25519_key\n"
            f"PidFile {workdir}/sshd.pid\nAuthorizedKeysFile {ssh}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPrintMotd no\nMaxSessions 100\nLogLevel INFO\n"
            "Subsystem sftp internal-sftp\n"
            f"SetEnv SLURM_CONF={cluster_dir}/etc/slurm.conf\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-f", str(self.config), "-E", str(self.log)],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", OWN_SSHD_PORT), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"own sshd did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL this sshd and every session process it forked."""
        if self.proc is None:
            return
        for pid in _descendants(self.proc.pid):  # sshd processes first: no exit status goes out
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture()
def own_sshd(
    sandbox: dict[str, str], tmp_path: Path
) -> Iterator[tuple[OwnSSHD, SSHConnectorConfig]]:
    if not shutil.which("/usr/sbin/sshd"):
        unavailable("no sshd (/usr/sbin/sshd)")
    server = OwnSSHD(sandbox["CLUSTER_DIR"], tmp_path)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{OWN_SSHD_PORT} {host_key_line(sandbox)}\n")
    server.start()
    conf = cfg(sandbox, name="own", port=OWN_SSHD_PORT, known_hosts=str(kh), keepalive_interval=1)
    try:
        yield server, conf
    finally:
        server.kill()


@pytest.mark.timing
@pytest.mark.ssh
def test_reconnects_and_command_issued_during_outage_succeeds(
    own_sshd: tuple[OwnSSHD, SSHConnectorConfig],
) -> None:
    server, conf = own_sshd
    c = SSHConnector(attrs.evolve(conf, command_timeout=30))

    async def body() -> None:
        assert (await c.run(["echo", "before"])).stdout == "before\n"
        server.kill()  # no pause: the command below may find the loss not yet noticed

        async def restart_later() -> None:
            await asyncio.sleep(1.5)
            server.start()

        t0 = time.monotonic()
        restart = asyncio.create_task(restart_later())
        r = await c.run(["echo", "during"])  # issued while the server is down
        took = time.monotonic() - t0
        await restart
        assert r.stdout == "during\n"
        assert 1.5 <= took < 30
        assert c.connections_opened == 2
        assert await c.read_file("/proc/self/status", max_bytes=5) == b"Name:"  # SFTP reopened

    try:
        run(body())
    finally:
        run(c.close())


@pytest.mark.timing
@pytest.mark.ssh
def test_outage_longer_than_command_timeout_raises(
    own_sshd: tuple[OwnSSHD, SSHConnectorConfig],
) -> None:
    server, conf = own_sshd
    c = SSHConnector(attrs.evolve(conf, command_timeout=2, reconnect_timeout=4))

    async def body() -> None:
        await c.run(["true"])
        in_flight = asyncio.create_task(c.run(["sleep", "5"], timeout=10))
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        server.kill()
        with pytest.raises(ConnectorError, match="failed in transit"):
            await in_flight  # a command running when the connection drops fails at once
        assert time.monotonic() - t0 < 1.5
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        with pytest.raises(ConnectorError, match=r"lost .* not back after waiting 2 s"):
            await c.run(["true"])
        assert 1.8 <= time.monotonic() - t0 < 3.5
        await asyncio.sleep(2.5)  # reconnect_timeout passes: the connector gives up
        with pytest.raises(ConnectorError, match=r"(could not reconnect|cannot connect)"):
            await c.run(["true"])
        server.start()  # the next command connects again at once
        assert (await c.run(["echo", "back"], timeout=30)).stdout == "back\n"

    try:
        run(body())
    finally:
        run(c.close())
