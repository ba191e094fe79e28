"""The loopback UNICORE site behaves as a stock UNICORE/X with its Slurm TSI (docs/remote-sites.md,
"UNICORE: server behaviours we rely on and work around"), bugs included, driven by the real
pyunicore 2.x client. The mapping of ``Resources`` is checked without Slurm; the rest runs jobs
on the real local Slurm."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from remote_fixtures import UNICORE_PASSWORD, UNICORE_USER, unicore_server_fixture  # noqa: F401
from servers.unicore import ABORTED, NO_EXIT_CODE, UnicoreServer, sbatch_lines, storage_path

WD = Path("/w")


def mapped(resources: dict[str, Any], **desc: Any) -> dict[str, str]:
    """The ``#SBATCH`` options a stock site writes, as {name: value}."""
    out = {}
    for line in sbatch_lines({"Resources": resources, **desc}, WD):
        name, _, value = line.removeprefix("#SBATCH --").partition("=")
        out[name] = value
    return out


@pytest.mark.parametrize(
    ("memory", "mem"),
    [
        ("1024M", "1024"),
        ("2047M", "2047"),
        ("2048M", None),
        ("4096M", None),
        ("6144M", None),
        ("65536M", None),
        ("8G", None),
        ("5120M", "1024"),
        ("9216M", "1024"),
        ("1T", None),
        ("1073741824", "1024"),
        ("512m", "512"),
    ],
)
def test_memory_goes_through_a_32_bit_int(memory: str, mem: str | None) -> None:
    """Item 1: bytes in a Java int, then MiB: 2 GiB and more are lost or shrunk."""
    assert mapped({"MemoryPerNode": memory}).get("mem") == mem


def test_gpus_are_requested_with_the_memory_value() -> None:
    """Item 2: ``#TSI_GPUS_PER_NODE`` is written from the memory variable."""
    assert "gpus-per-node" not in mapped({"GPUsPerNode": 1})  # no memory: -1, no GPU
    assert "gpus-per-node" not in mapped(
        {"GPUsPerNode": 1, "MemoryPerNode": "8G"}
    )  # memory dropped
    assert mapped({"GPUsPerNode": 1, "MemoryPerNode": "1024M"})["gpus-per-node"] == "1024"


def test_cpus_only_with_nodes() -> None:
    """Item 3: ``--ntasks-per-node`` only with Nodes, else ``--ntasks`` from TotalCPUs; never
    ``--cpus-per-task``."""
    assert not {"ntasks", "ntasks-per-node", "cpus-per-task"} & set(mapped({"CPUsPerNode": 2}))
    assert mapped({"Nodes": 1, "CPUsPerNode": 2})["ntasks-per-node"] == "2"
    assert mapped({"TotalCPUs": 4, "CPUsPerNode": 2})["ntasks"] == "4"
    assert "ntasks" not in mapped({"Nodes": 2, "TotalCPUs": 4})


def test_runtime_names_and_other_options() -> None:
    """Item 9: runtime rounded down to whole minutes (at least 1); a name outside
    ``[0-9a-zA-Z.:=~/]`` becomes ``UNICORE_job``."""
    assert mapped({"Runtime": "119"})["time"] == "1" and mapped({"Runtime": "30"})["time"] == "1"
    assert mapped({"Runtime": "2h"})["time"] == "120" and mapped({"Runtime": "90m"})["time"] == "90"
    assert mapped({}, Name="train-3f2a")["job-name"] == "UNICORE_job"
    assert mapped({}, Name="a.b:c=d~e/f")["job-name"] == "a.b:c=d~e/f"
    got = mapped(
        {"Queue": "gpu", "QoS": "high", "NodeConstraints": "GPU", "Reservation": "r"},
        Project="acct",
    )
    assert (
        got["partition"],
        got["qos"],
        got["constraint"],
        got["reservation"],
        got["account"],
    ) == ("gpu", "high", "GPU", "r", "acct")
    assert (got["output"], got["error"], got["chdir"]) == ("/w/stdout", "/w/stderr", "/w/")


def test_paths_are_url_decoded_twice() -> None:
    """Item 8: JAX-RS decodes, then makeSMSLocal again (``+`` kept, a bad escape left alone)."""
    assert storage_path("x%41.txt") == "xA.txt" and storage_path("x%2541.txt") == "xA.txt"
    assert storage_path("x%252541.txt") == "x%41.txt" and storage_path("a+b") == "a+b"
    assert storage_path("50%25.txt") == "50%.txt"


# -- over HTTP, with the real pyunicore ---------------------------------------------------------


def client(server: UnicoreServer, password: str = UNICORE_PASSWORD) -> Any:
    from pyunicore.client import Client, Transport
    from pyunicore.credentials import UsernamePassword

    return Client(Transport(UsernamePassword(UNICORE_USER, password)), server.base_url)


def wait_status(transport: Any, url: str, want: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        props: dict[str, Any] = transport.get(url=url)
        if props["status"] in want:
            return props
        assert time.monotonic() < deadline, props
        time.sleep(0.1)


@pytest.mark.slurm
def test_wrong_credentials_answer_403_everywhere(unicore_server: UnicoreServer) -> None:
    """Item 5: 403 with no body on every path, the base URL included; pyunicore raises a plain
    ``httpx.HTTPError`` naming the status."""
    from pyunicore.client import Transport
    from pyunicore.credentials import UsernamePassword

    transport = Transport(UsernamePassword(UNICORE_USER, "wrong"))
    for path in ("", "/jobs", "/storages/HOME/files/x"):
        with pytest.raises(httpx.HTTPError, match=r"^403 Server Error"):
            transport.get(url=unicore_server.base_url + path)


@pytest.mark.slurm
def test_ranges_as_unicore_serves_them(unicore_server: UnicoreServer) -> None:
    """Item 4: 206 without Content-Range; start == size: 206 and no body; start past the end:
    no answer at all (a bounded hang standing for UNICORE's endless loop)."""
    server = unicore_server
    server.range_hang_seconds = 0.2
    storage = client(server).new_job({"Executable": "true"}, autostart=False).working_dir
    storage.put(b"0123456789", "f.txt")
    url = storage.resource_url + "/files/f.txt"
    t = storage.transport
    part = t.get(
        url=url, headers={"Accept": "application/octet-stream", "Range": "bytes=4-"}, to_json=False
    )
    assert (
        part.status_code == 206
        and part.content == b"456789"
        and "Content-Range" not in part.headers
    )
    end = t.get(
        url=url, headers={"Accept": "application/octet-stream", "Range": "bytes=10-"}, to_json=False
    )
    assert end.status_code == 206 and end.content == b""
    with pytest.raises(httpx.TransportError):
        t.get(
            url=url,
            headers={"Accept": "application/octet-stream", "Range": "bytes=11-"},
            to_json=False,
        )
    assert server.range_past_end == 1


@pytest.mark.slurm
def test_jobs_expire_and_answer_404(unicore_server: UnicoreServer) -> None:
    """Item 6: past its termination time a job is aborted, its directory deleted, its URL 404."""
    server = unicore_server
    # long enough for the creation and the first read on a loaded machine; then the test polls
    # until the job is gone rather than sleeping a guessed time
    server.job_lifetime = 5.0
    job = client(server).new_job({"Executable": "sleep 30"})
    props = job.transport.get(url=job.resource_url)
    assert props["terminationTime"]
    workdir = server.jobs[job.job_id].workdir
    deadline = time.monotonic() + 60
    while True:
        try:
            job.transport.get(url=job.resource_url)
        except httpx.HTTPError as e:
            assert str(e).startswith("404 "), e
            break
        assert time.monotonic() < deadline, "the job outlived its termination time"
        time.sleep(0.2)
    assert not workdir.exists()


@pytest.mark.slurm
def test_abort_is_immediate_and_actions_answer_204(unicore_server: UnicoreServer) -> None:
    """Item 7: FAILED "Job aborted." right after scancel, no exit code, no STAGINGOUT; action
    replies are 204; a finished job stays as it was."""
    uc = client(unicore_server)
    job = uc.new_job({"Executable": "sleep 30"})
    t = job.transport
    wait_status(t, job.resource_url, {"RUNNING"})
    reply = t.post(url=job.resource_url + "/actions/abort", json={})
    assert reply.status_code == 204
    props = t.get(url=job.resource_url)
    assert (props["status"], props["statusMessage"], props.get("exitCode")) == (
        "FAILED",
        ABORTED,
        None,
    )
    done = uc.new_job({"Executable": "true"})
    wait_status(t, done.resource_url, {"SUCCESSFUL"})
    assert t.post(url=done.resource_url + "/actions/abort", json={}).status_code == 204
    assert t.get(url=done.resource_url)["status"] == "SUCCESSFUL"


@pytest.mark.slurm
def test_another_users_job_is_403(unicore_server: UnicoreServer) -> None:
    server = unicore_server
    server.users["mallory"] = "m-pass-1"
    job = client(server).new_job({"Executable": "true"}, autostart=False)
    from pyunicore.client import Transport
    from pyunicore.credentials import UsernamePassword

    other = Transport(UsernamePassword("mallory", "m-pass-1"))
    with pytest.raises(httpx.HTTPError, match=r"^403 "):
        other.get(url=job.resource_url)


@pytest.mark.slurm
def test_precommand_runs_while_queued(unicore_server: UnicoreServer) -> None:
    """Item 9: the login-node precommand runs while the job shows QUEUED, into .UNICORE_PRE_0/."""
    job = client(unicore_server).new_job(
        {"Executable": "true", "User precommand": "sleep 1; echo pre"}
    )
    props = wait_status(job.transport, job.resource_url, {"QUEUED", "RUNNING", "SUCCESSFUL"})
    assert props["status"] == "QUEUED" and props["batchSystemID"] == "N/A"
    wait_status(job.transport, job.resource_url, {"SUCCESSFUL"})
    assert (
        unicore_server.jobs[job.job_id].workdir / ".UNICORE_PRE_0" / "stdout"
    ).read_text() == "pre\n"


@pytest.mark.slurm
def test_missing_exit_code_file(unicore_server: UnicoreServer) -> None:
    """Item 9: without UNICORE_SCRIPT_EXIT_CODE the job stays RUNNING for a grace period, then
    FAILED "Job did not complete normally on BSS" without exit code."""
    server = unicore_server
    server.exit_code_grace = 1.5
    job = client(server).new_job({"Executable": "kill -9 $$"})
    t = job.transport
    seen = wait_status(t, job.resource_url, {"RUNNING"})
    assert seen["status"] == "RUNNING"
    props = wait_status(t, job.resource_url, {"FAILED", "SUCCESSFUL"})
    assert props["statusMessage"] == NO_EXIT_CODE and "exitCode" not in props


@pytest.mark.slurm
def test_post_answers_201_and_resources_fail_later(unicore_server: UnicoreServer) -> None:
    """Item 9: resource checks happen after the start: an unknown queue still gets 201."""
    job = client(unicore_server).new_job(
        {"Executable": "true", "Resources": {"Queue": "nosuchqueue"}}
    )
    props = wait_status(job.transport, job.resource_url, {"FAILED", "SUCCESSFUL"})
    assert props["status"] == "FAILED" and "batch system" in props["statusMessage"]


@pytest.mark.slurm
def test_raw_job_submits_the_bss_file_and_keeps_the_exit_code(
    unicore_server: UnicoreServer,
) -> None:
    """UNICORE's ``Job type: raw``: the BSS file goes to sbatch unchanged, followed by the call
    of the job script, so the exit code file is still written."""
    job = client(unicore_server).new_job(
        {
            "Executable": "bash -c 'exit 3'",
            "Job type": "raw",
            "BSS file": "my.sbatch",
            "haveClientStageIn": "true",
            "Resources": {"MemoryPerNode": "8G"},
        },
        autostart=False,
    )
    job.working_dir.put(b"#!/bin/bash\n#SBATCH --mem=100M\n#SBATCH --output=o.txt\n", "my.sbatch")
    job.start()
    props = wait_status(job.transport, job.resource_url, {"FAILED", "SUCCESSFUL"})
    assert props.get("exitCode") == "3", props
    workdir = unicore_server.jobs[job.job_id].workdir
    bss = (workdir / "bss_submit_ID").read_text()
    assert bss.startswith("#!/bin/bash\n#SBATCH --mem=100M\n") and "--mem=8" not in bss
