"""SSH sites of a Compute Backend Config (docs/remote-sites.md, "SSH sites"): ``SSH: {Hostname, Port}``
read as Mantik 0.5 reads it, credentials from ``MANTIK_SSH_*``, and ``launchers run`` through the
SSH connector and sbatch on the real sshd (127.0.0.1) and Slurm."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from launchers.cli.main import main
from launchers.config.model import SSHConnectorConfig
from launchers.connectors.ssh import SSHAuthenticationError, SSHConnector, private_key_from
from launchers.errors import AuthenticationError, ConfigurationError
from launchers.remote.backend_config import load_backend_config, to_launcher
from launchers.remote.ssh_kind import check_credentials
from launchers.remote.ssh_site import SSHSite
from launchers.runtime.core import current as current_runtime

MANTIK_VARS = ("MANTIK_SSH_USERNAME", "MANTIK_SSH_PASSWORD", "MANTIK_SSH_PRIVATE_KEY")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------- the file


@pytest.mark.parametrize(("port", "expected"), [("8000", 8000), (2222, 2222), (None, 22)])
def test_ssh_site_as_mantik_reads_it(tmp_path: Path, port: object, expected: int) -> None:
    """Mantik writes Port as a string ("8000"); a number and no Port (22) are read too."""
    ssh: dict[str, Any] = {"Hostname": "login.example.org"}
    if port is not None:
        ssh["Port"] = port
    cfg = write(
        tmp_path / "c.json",
        json.dumps(
            {
                "SSH": ssh,
                "Resources": {"Queue": "devel", "Nodes": 2, "NodeConstraints": "gpu"},
                "Environment": {"Variables": {"A": "1"}},
                "Exclude": ["*.csv"],
            }
        ),
    )
    backend = load_backend_config(cfg)
    assert backend.site == SSHSite("login.example.org", expected)
    assert backend.site_kind == "ssh"
    launcher = to_launcher(backend)
    assert launcher.kind == "ssh" and launcher.group.site == backend.site
    assert launcher.sbatch_args() == ["--partition=devel", "--constraint=gpu", "--nodes=2"]
    assert main(["validate", str(cfg)]) == 0


def test_resources_become_the_sbatch_options_of_the_other_sites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MANTIK_COMPUTE_BUDGET_ACCOUNT", "budget")
    cfg = write(
        tmp_path / "c.yaml",
        "SSH: {Hostname: h}\nResources: {Queue: q, Runtime: 90m, Nodes: 1, "
        "CPUsPerNode: 4, GPUsPerNode: 2, MemoryPerNode: 1000MB, Reservation: r, QoS: high, TotalCPUs: 8}\n",
    )
    # TotalCPUs with CPUsPerNode: TotalCPUs one-CPU tasks, at most CPUsPerNode per node (as UNICORE)
    args = to_launcher(load_backend_config(cfg)).sbatch_args()
    assert sorted(args) == sorted(
        [
            "--partition=q",
            "--time=0-01:30:00",
            "--nodes=1",
            "--ntasks=8",
            "--ntasks-per-node=4",
            "--gpus-per-node=2",
            "--mem=954M",
            "--reservation=r",
            "--qos=high",
            "--account=budget",
        ]
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "SSH: {Hostname: h}\nUnicoreApiUrl: https://u.example/S/rest/core\n",
            "UnicoreApiUrl and SSH are both set",
        ),
        (
            "SSH: {Hostname: h}\nUnicoreApiUrl: https://u/S/rest/core\nFirecrest: {ApiUrl: https://a, TokenUrl: "
            "https://b, Machine: m}\n",
            "UnicoreApiUrl and Firecrest and SSH are all set",
        ),
        ("SSH: {Port: 22}\n", "SSH.Hostname: Hostname is required"),
        (
            "SSH: {Hostname: h, Port: ssh}\n",
            "SSH.Port: expected a port number from 1 to 65535, not 'ssh'",
        ),
        ("SSH: {Hostname: h, Port: 70000}\n", "SSH.Port: expected a port number from 1 to 65535"),
        ("SSH: {Hostname: h, User: me}\n", "SSH.User: unknown key"),
        ("SSH: login.example.org\n", "SSH: expected a mapping with Hostname"),
        (
            "SSH: {Hostname: h}\nEnvironment: {PreRunCommandOnLoginNode: [echo]}\n",
            "an SSH site runs nothing on the login node (Mantik 0.5 ignored this key for SSH sites)",
        ),
    ],
)
def test_ssh_site_errors(
    tmp_path: Path, text: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(
        tmp_path / "c.yaml", text + ("" if "Resources" in text else "Resources: {Queue: q}\n")
    )
    with pytest.raises(ConfigurationError) as info:
        load_backend_config(cfg)
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{cfg}:")
    assert main(["validate", str(cfg)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_misspelt_site_key_is_one_line(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.yaml", "UnicoreApiUrlFalseKey: https://u/S/rest/core\nResources: {Queue: q}\n"
    )
    with pytest.raises(ConfigurationError) as info:
        load_backend_config(cfg)
    assert info.value.problems == [
        f"{cfg}:1:1: UnicoreApiUrlFalseKey: unknown key (did you mean 'UnicoreApiUrl'?); known keys: UnicoreApiUrl, "
        "Firecrest, SSH, Environment, Resources, Exclude (Mantik 0.5 ignores unknown keys); without a site Mantik "
        "refuses the file"
    ]


def test_mantik_01_image_keys_say_what_mantik_does(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.json",
        '{"UnicoreApiUrl": "https://u/S/rest/core", "Resources": {"Queue": "q"},'
        ' "SingularityImage": "x.sif"}',
    )
    with pytest.raises(
        ConfigurationError, match=r"Mantik 0\.5 ignores it and runs without the image"
    ):
        load_backend_config(cfg)


# ----------------------------------------------------------------------------- credentials


def test_username_is_required_before_anything_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in MANTIK_VARS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(
        AuthenticationError, match="set the environment variable MANTIK_SSH_USERNAME"
    ):
        check_credentials(SSHSite("h"))
    proj = write(tmp_path / "p" / "MLproject", "entry_points: {main: {command: echo hi}}\n").parent
    cfg = write(
        tmp_path / "c.yaml", "SSH: {Hostname: 127.0.0.1, Port: 1}\nResources: {Queue: debug}\n"
    )
    assert (
        main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(tmp_path / "runs")])
        == 2
    )
    err = capsys.readouterr().err
    assert "MANTIK_SSH_USERNAME" in err and "Traceback" not in err
    assert not list((tmp_path / "runs").glob("jobs/*/*/state.json"))


@pytest.mark.filterwarnings(
    "ignore:.*bcrypt.kdf.. called with only:UserWarning"
)  # few rounds on purpose
def test_private_key_text_escaped_text_or_path(tmp_path: Path) -> None:
    """Mantik reads the key's text from MANTIK_SSH_PRIVATE_KEY; a one-line ``\\n``-escaped text
    and the path of a key file are read too; anything else is refused without showing it."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    text = key.export_private_key().decode()
    fp = key.get_fingerprint()
    assert private_key_from(text, what="V").get_fingerprint() == fp
    assert private_key_from(text.strip().replace("\n", "\\n"), what="V").get_fingerprint() == fp
    path = tmp_path / "id"
    path.write_text(text)
    assert private_key_from(str(path), what="V").get_fingerprint() == fp
    with pytest.raises(ConfigurationError) as info:
        private_key_from("not-a-key-secret", what="MANTIK_SSH_PRIVATE_KEY")
    assert "MANTIK_SSH_PRIVATE_KEY holds neither a private key" in str(info.value)
    assert "not-a-key-secret" not in str(info.value)
    with pytest.raises(ConfigurationError, match="the private key is invalid"):
        private_key_from(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----", what="V"
        )
    encrypted = key.export_private_key(
        passphrase="pw", rounds=2
    ).decode()  # few rounds: fast to decrypt
    with pytest.raises(
        ConfigurationError, match="it is encrypted: give its passphrase in MANTIK_SSH_PASSWORD"
    ):
        private_key_from(encrypted, what="V", passphrase_env="MANTIK_SSH_PASSWORD")
    assert private_key_from(encrypted, what="V", passphrase="pw").get_fingerprint() == fp


class _PasswordServer(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        return username == "mantik" and password == "s3cret pw"


async def _password_round(tmp_path: Path, password: str) -> str:
    host_key = asyncssh.generate_private_key("ssh-ed25519")

    def reply(process: asyncssh.SSHServerProcess[str]) -> None:
        process.stdout.write("logged in\n")
        process.exit(0)

    server = await asyncssh.create_server(
        _PasswordServer, "127.0.0.1", 0, server_host_keys=[host_key], process_factory=reply
    )
    port = server.sockets[0].getsockname()[1]
    os.environ["TEST_SSH_PASSWORD"] = password
    config = SSHConnectorConfig(
        name="pw",
        hostname="127.0.0.1",
        port=port,
        username="mantik",
        known_hosts=str(tmp_path / "known_hosts"),
        strict_host_key_checking="accept-new",
        ssh_config=False,
        password_env="TEST_SSH_PASSWORD",
        private_key_env="TEST_SSH_NO_KEY",
    )
    conn = SSHConnector(config)
    try:
        return (await conn.run(["true"])).stdout
    finally:
        await conn.close()
        server.close()
        os.environ.pop("TEST_SSH_PASSWORD", None)


def test_password_authentication(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MANTIK_SSH_PASSWORD: password authentication (keys only otherwise); a refusal names the
    variables to check, never the password."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh keys of this machine
    assert asyncio.run(_password_round(tmp_path, "s3cret pw")) == "logged in\n"
    with pytest.raises(SSHAuthenticationError) as info:
        asyncio.run(_password_round(tmp_path, "wrong pw"))
    assert "the password in TEST_SSH_PASSWORD" in str(info.value) and "wrong pw" not in str(
        info.value
    )


def test_dry_run_shows_site_options_and_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proj = write(
        tmp_path / "p" / "MLProject",
        "entry_points:\n  main:\n    parameters: {n: {type: int, default: 2}}\n"
        "    command: python t.py {n}\n",
    ).parent
    write(proj / "t.py", "")
    write(proj / "big.csv", "1")
    cfg = write(
        tmp_path / "c.yaml",
        "SSH: {Hostname: login.example.org, Port: '2222'}\n"
        "Resources: {Queue: batch, CPUsPerNode: 2}\nEnvironment: {Modules: [Python]}\nExclude: ['*.csv']\n",
    )
    assert main(["run", str(proj), "--backend-config", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "site: ssh login.example.org:2222 (user $MANTIK_SSH_USERNAME, sbatch over SSH)" in out
    assert "big.csv  (pattern '*.csv')" in out
    assert (
        "sbatch options:\n  --partition=batch\n  --cpus-per-task=2\n  --ntasks-per-node=1\n" in out
    )
    assert "module load Python" in out and 'export SRUN_CPUS_PER_TASK="2"' in out
    assert out.rstrip().endswith("python t.py 2")


# ----------------------------------------------------------------------------- real sshd and Slurm


def _reset() -> None:
    from launchers.runtime.loop import run_sync

    executors = current_runtime().executors_of("ssh")
    current_runtime().forget_executors("ssh")
    for ex in executors:
        connector = getattr(ex, "_connector", None)
        if connector is not None:
            run_sync(connector.close(), timeout=10)


@pytest.fixture
def mantik_env(
    slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Mantik's variables for the sandbox's sshd, the key given as its text (as Mantik takes
    it), and a HOME of the test's own (its ``~/.ssh/known_hosts`` starts empty)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("MANTIK_SSH_PASSWORD", raising=False)
    monkeypatch.setenv("MANTIK_SSH_USERNAME", slurm_cluster["CLUSTER_SSH_USER"])
    monkeypatch.setenv("MANTIK_SSH_PRIVATE_KEY", Path(slurm_cluster["CLUSTER_SSH_KEY"]).read_text())
    _reset()
    remote: list[str] = []
    yield home
    _reset()
    for state in tmp_path.glob("**/jobs/*/*/state.json"):
        remote_dir = json.loads(state.read_text()).get("remote_dir")
        if remote_dir:
            remote.append(remote_dir)
    for r in remote:  # the sshd is this machine: remove the run directories it got
        shutil.rmtree(Path(r).parent.parent.parent, ignore_errors=True)


def site_config(tmp_path: Path, info: dict[str, str], extra: str = "") -> Path:
    return write(
        tmp_path / "compute-backend-ssh-config.yaml",
        f'SSH:\n  Hostname: {info["CLUSTER_SSH_HOST"]}\n  Port: "{info["CLUSTER_SSH_PORT"]}"\n'
        "Resources:\n  Queue: debug\n  Runtime: 5m\n  CPUsPerNode: 1\n"
        "Environment:\n  Variables: {GREETING: 'hello there'}\n  PreRunCommandOnComputeNode: [echo pre-run]\n"
        "Exclude: ['*.csv', compute-backend-ssh-config.yaml]\n" + extra,
    )


PROJECT = """\
name: ssh-site
entry_points:
  main:
    parameters:
      code: {type: int, default: 3}
    command: "./run.sh {code}"
  slow:
    command: "sleep 300"
"""

RUN_SH = """\
#!/bin/sh
echo "greeting=$GREETING cwd=$PWD"
for f in *; do echo "file $f"; done
echo "to stderr" >&2
exit "$1"
"""


@pytest.mark.ssh
@pytest.mark.slurm
def test_run_on_an_ssh_site(
    mantik_env: Path,
    slurm_cluster: dict[str, str],
    tmp_path: Path,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    """Upload minus Exclude (executable bit kept), Environment around the command, output
    followed, the command's exit code as ours; an unknown host key is recorded (accept-new)."""
    proj = write(tmp_path / "proj" / "MLproject", PROJECT).parent
    write(proj / "run.sh", RUN_SH).chmod(0o755)
    write(proj / "data.csv", "1,2\n")
    write(proj / "sub" / "keep.txt", "kept\n")
    cfg = site_config(proj, slurm_cluster)
    workdir = tmp_path / "runs"
    rc = main(
        ["run", str(proj), "--backend-config", str(cfg), "-P", "code=3", "--workdir", str(workdir)]
    )
    out, err = capfdbinary.readouterr()
    assert rc == 3, err.decode()
    text = out.decode()
    (state_file,) = workdir.glob("jobs/main/*/state.json")
    state = json.loads(state_file.read_text())
    remote = state["remote_dir"] + "/project"
    assert f"greeting=hello there cwd={remote}\n" in text
    assert "pre-run\n" in text
    assert (
        "file MLproject\nfile run.sh\nfile sub\n" in text
    )  # data.csv and the config were excluded
    assert b"to stderr" in err and b"launchers: the command failed with exit code 3" in err
    assert (
        state["state"] == "FAILED"
        and state["exit_code"] == 3
        and state["launcher"]["kind"] == "ssh"
    )
    assert state["ssh_site"]["hostname"] == slurm_cluster["CLUSTER_SSH_HOST"]
    assert "--partition=debug" in Path(state["remote_dir"], "job.sh").read_text()
    assert (state_file.parent / "job.out").read_text().count(
        "greeting="
    ) == 1  # followed, then copied once
    assert (
        f"[{slurm_cluster['CLUSTER_SSH_HOST']}]:{slurm_cluster['CLUSTER_SSH_PORT']} ssh-ed25519"
        in (mantik_env / ".ssh" / "known_hosts").read_text()
    )
    assert os.environ["MANTIK_SSH_PRIVATE_KEY"].strip().splitlines()[1] not in "".join(
        p.read_text(errors="replace") for p in workdir.rglob("*") if p.is_file()
    )


@pytest.mark.ssh
@pytest.mark.slurm
def test_cancel_an_ssh_site_run_from_its_record(
    mantik_env: Path,
    slurm_cluster: dict[str, str],
    tmp_path: Path,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    """``--no-follow`` returns once submitted; ``launchers cancel`` and ``status`` reach the site
    again from the record alone (scancel over SSH)."""
    proj = write(tmp_path / "proj" / "MLproject", PROJECT).parent
    write(proj / "run.sh", RUN_SH).chmod(0o755)
    cfg = site_config(proj, slurm_cluster)
    workdir = tmp_path / "runs"
    assert (
        main(
            [
                "run",
                str(proj),
                "-e",
                "slow",
                "--backend-config",
                str(cfg),
                "--workdir",
                str(workdir),
                "--no-follow",
            ]
        )
        == 0
    ), capfdbinary.readouterr()[1].decode()
    (job_dir,) = workdir.glob("jobs/slow/*")
    native = json.loads((job_dir / "state.json").read_text())["native_id"]
    assert native
    _reset()  # as another process would: nothing but the record
    assert main(["cancel", str(job_dir)]) == 0
    capfdbinary.readouterr()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert main(["status", str(job_dir), "--json"]) == 0
        status = json.loads(capfdbinary.readouterr()[0].decode().strip().splitlines()[-1])
        if status["state"] == "CANCELLED":
            break
        time.sleep(0.5)
    assert status["state"] == "CANCELLED", status
    assert (
        status["site"]
        == f"ssh://{slurm_cluster['CLUSTER_SSH_HOST']}:{slurm_cluster['CLUSTER_SSH_PORT']}"
    )


@pytest.mark.ssh
@pytest.mark.slurm
def test_experiment_tasks_on_an_ssh_site(
    mantik_env: Path, slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    """``from_backend_config`` gives a launcher for experiments: a command task runs inside the
    Environment, in the remote job directory's ``project/``."""
    from launchers import command, experiment
    from launchers.remote import from_backend_config

    launcher = from_backend_config(site_config(tmp_path, slurm_cluster))
    with experiment(tmp_path / "xp", launcher):
        job = command(["sh", "-c", 'echo "$GREETING in $PWD cpus=$SRUN_CPUS_PER_TASK"']).submit()
    remote = json.loads((job.directory / "state.json").read_text())["remote_dir"]
    assert f"hello there in {remote}/project cpus=1\n" in (job.directory / "job.out").read_text()


@pytest.mark.timing
@pytest.mark.ssh
@pytest.mark.slurm
def test_refused_key_fails_the_run_at_once(
    mantik_env: Path,
    slurm_cluster: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    """A key the site refuses is no transient failure: the run ends FAILED with the reason, no retries."""
    monkeypatch.setenv(
        "MANTIK_SSH_PRIVATE_KEY",
        asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode(),
    )
    proj = write(tmp_path / "proj" / "MLproject", PROJECT).parent
    write(proj / "run.sh", RUN_SH).chmod(0o755)
    t0 = time.monotonic()
    assert (
        main(
            [
                "run",
                str(proj),
                "--backend-config",
                str(site_config(proj, slurm_cluster)),
                "--workdir",
                str(tmp_path / "runs"),
            ]
        )
        == 1
    )
    err = capfdbinary.readouterr()[1].decode()
    assert (
        "was not submitted (FAILED: " in err
        and "refused us" in err
        and "tried the key in MANTIK_SSH_PRIVATE_KEY: check it" in err
    )
    assert "retrying" not in err and time.monotonic() - t0 < 15
