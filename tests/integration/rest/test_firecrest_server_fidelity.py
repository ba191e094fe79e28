"""The loopback firecREST v2 server against the real pyfirecrest client (docs/design/sites.md §4.2),
and staged uploads of files above ``max_ops_file_size`` (docs/design/sites.md §3.3).

Shapes follow firecREST v2 (``ops/tail`` answers ``{content, contentType, startPosition,
endPosition}``; ``ops/ls`` entries are parsed ``ls -l`` lines; ``ops/download`` is limited to
``max_ops_file_size``; submit takes ``script``/``scriptPath``/``script_path``) and pyfirecrest
3.10's staged ``upload()``: ``POST .../transfer/upload``, a PUT per presigned part URL (each
answer's ``ETag``), a POST of ``<CompleteMultipartUpload>`` to the completion URL, then the
transfer job is awaited with ``GET .../jobs/{id}`` and its output log read with ``ops/view``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launchers.cli.main import main
from remote_fixtures import (  # noqa: F401 - fixtures
    FIRECREST_ID,
    FIRECREST_SECRET,
    FIRECREST_USER,
    firecrest_server_fixture,
    make_project,
)
from servers.common import query_jobs
from servers.firecrest import FirecrestServer

pytestmark = pytest.mark.slurm


@pytest.fixture(name="fc")
def client_fixture(firecrest_server: FirecrestServer) -> Iterator[Any]:
    """The real pyfirecrest v2 client of the loopback server."""
    from firecrest import ClientCredentialsAuth
    from firecrest.v2 import Firecrest

    client = Firecrest(
        firecrest_server.api_url,
        ClientCredentialsAuth(FIRECREST_ID, FIRECREST_SECRET, firecrest_server.token_url),
    )
    try:
        yield client
    finally:
        client.close_session()


def status_code(e: BaseException) -> int:
    return int(e.responses[-1].status_code)  # type: ignore[attr-defined]


def home(server: FirecrestServer) -> Path:
    d = server.scratch / FIRECREST_USER
    d.mkdir(parents=True, exist_ok=True)
    return d


# -- ops/tail ------------------------------------------------------------------------------------


def test_tail_lines_bytes_and_skip_heading(firecrest_server: FirecrestServer, fc: Any) -> None:
    f = home(firecrest_server) / "log.txt"
    f.write_text("".join(f"line {i}\n" for i in range(1, 21)))
    out = fc.tail("cluster", str(f), num_lines=2)
    assert out == {
        "content": "line 19\nline 20\n",
        "contentType": "lines",
        "startPosition": -2,
        "endPosition": -1,
    }
    out = fc.tail("cluster", str(f), num_bytes=8)
    assert out == {
        "content": "line 20\n",
        "contentType": "bytes",
        "startPosition": -8,
        "endPosition": -1,
    }
    # skipHeading: from line (byte) N on, as ``tail --lines=+N``
    out = fc.tail("cluster", str(f), num_lines=19, exclude_beginning=True)
    assert out == {
        "content": "line 19\nline 20\n",
        "contentType": "lines",
        "startPosition": 19,
        "endPosition": -1,
    }
    out = fc.tail("cluster", str(f), num_bytes=len(f.read_bytes()) - 7, exclude_beginning=True)
    assert out["content"] == "line 20\n" and out["contentType"] == "bytes"
    # neither: the last 10 lines (firecREST reports startPosition 10 then)
    out = fc.tail("cluster", str(f))
    assert (
        out["content"] == "".join(f"line {i}\n" for i in range(11, 21))
        and out["startPosition"] == 10
    )


def test_tail_errors(firecrest_server: FirecrestServer, fc: Any) -> None:
    from firecrest.FirecrestException import FirecrestException

    f = home(firecrest_server) / "x.txt"
    f.write_text("a\n")
    # both at once (pyfirecrest refuses it itself, so ask directly)
    resp = fc._get_request(
        endpoint="/filesystem/cluster/ops/tail", params={"path": str(f), "lines": 1, "bytes": 1}
    )
    assert resp.status_code == 400 and "Only one of" in resp.json()["message"]
    with pytest.raises(FirecrestException) as e:
        fc.tail("cluster", str(f) + ".missing", num_lines=1)
    assert status_code(e.value) == 404
    with pytest.raises(FirecrestException) as e:
        fc.tail("cluster", "relative/path", num_lines=1)
    assert status_code(e.value) == 400


# -- ops/ls --------------------------------------------------------------------------------------


def test_ls_hidden_recursive_and_entry_fields(firecrest_server: FirecrestServer, fc: Any) -> None:
    d = home(firecrest_server) / "tree"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / ".hidden").write_text("h")
    (d / "f").write_text("12345")
    (d / "sub" / "inner").write_text("i")
    (d / "sub" / ".dot").write_text("d")
    (d / "sub" / "deeper" / "leaf").write_text("l")
    (d / ".hdir").mkdir()
    (d / ".hdir" / "x").write_text("x")
    (d / "link").symlink_to("f")

    names = [e["name"] for e in fc.list_files("cluster", str(d))]
    assert names == ["f", "link", "sub"]
    assert [e["name"] for e in fc.list_files("cluster", str(d), show_hidden=True)] == [
        ".hdir",
        ".hidden",
        "f",
        "link",
        "sub",
    ]
    assert [e["name"] for e in fc.list_files("cluster", str(d), recursive=True)] == [
        "f",
        "link",
        "sub",
        "sub/deeper",
        "sub/inner",
        "sub/deeper/leaf",
    ]
    assert set(
        e["name"] for e in fc.list_files("cluster", str(d), recursive=True, show_hidden=True)
    ) == {
        ".hdir",
        ".hidden",
        "f",
        "link",
        "sub",
        ".hdir/x",
        "sub/.dot",
        "sub/deeper",
        "sub/inner",
        "sub/deeper/leaf",
    }

    entries = {e["name"]: e for e in fc.list_files("cluster", str(d))}
    for e in entries.values():
        assert set(e) == {
            "name",
            "type",
            "linkTarget",
            "user",
            "group",
            "permissions",
            "lastModified",
            "size",
        }
    f, link, sub = entries["f"], entries["link"], entries["sub"]
    assert f["type"] == "-" and f["size"] == "5" and f["linkTarget"] is None
    assert len(f["permissions"]) == 9 and f["permissions"][0] == "r"
    assert time.strptime(f["lastModified"], "%Y-%m-%dT%H:%M:%S")
    assert link["type"] == "l" and link["linkTarget"] == "f"
    assert sub["type"] == "d" and sub["permissions"].startswith("rwx")
    import pwd

    assert f["user"] == pwd.getpwuid(os.getuid()).pw_name
    numeric = {e["name"]: e for e in fc.list_files("cluster", str(d), numeric_uid=True)}
    assert numeric["f"]["user"] == str(os.getuid())
    # a file: its own entry, named as given
    assert [e["name"] for e in fc.list_files("cluster", str(d / "f"))] == [str(d / "f")]


# -- ops/download ----------------------------------------------------------------------------------


def test_download_is_limited_by_its_base64_output(
    firecrest_server: FirecrestServer, fc: Any, tmp_path: Path
) -> None:
    """``ops/download`` runs ``base64 --wrap=0`` over SSH, whose output may not reach
    ``max_ops_file_size`` bytes: a file of 3/4 of the limit already gets 413."""
    from firecrest.FirecrestException import FirecrestException

    firecrest_server.max_ops_file_size = 1024
    big, small = home(firecrest_server) / "big.bin", home(firecrest_server) / "small.bin"
    big.write_bytes(b"b" * 768)  # 1024 bytes of base64
    small.write_bytes((bytes(range(256)) * 3)[:765])  # every byte value; 1020 bytes of base64
    with pytest.raises(FirecrestException) as e:
        fc.download("cluster", str(big), tmp_path / "big.bin")
    assert status_code(e.value) == 413
    assert e.value.responses[-1].json()["message"] == "Command output exceeded buffer limit."  # type: ignore[attr-defined]
    assert not (tmp_path / "big.bin").exists() or (tmp_path / "big.bin").stat().st_size == 0
    fc.download("cluster", str(small), tmp_path / "small.bin")
    assert (tmp_path / "small.bin").read_bytes() == small.read_bytes()  # binary, byte for byte


# -- submit ------------------------------------------------------------------------------------------


def wait_for(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.3)
    raise AssertionError(f"{path} was not written")


@pytest.mark.parametrize("key", ["script_path", "scriptPath"])
def test_submit_accepts_both_script_path_spellings(
    firecrest_server: FirecrestServer, fc: Any, key: str
) -> None:
    d = home(firecrest_server) / key
    d.mkdir()
    script = d / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=1\necho from-$0-$PWD > out.txt\n")
    wd_key = "working_directory" if key == "script_path" else "workingDirectory"
    resp = fc._post_request(
        endpoint="/compute/cluster/jobs", json_data={"job": {key: str(script), wd_key: str(d)}}
    )
    assert resp.status_code == 201, resp.text
    assert resp.json()["jobId"] in firecrest_server.jobs
    assert str(d) in wait_for(d / "out.txt")
    # a script path that does not exist: sbatch refuses it, firecREST answers 500 with its words
    resp = fc._post_request(
        endpoint="/compute/cluster/jobs",
        json_data={"job": {key: str(d / "nope.sh"), wd_key: str(d)}},
    )
    assert resp.status_code == 500 and "Unable to open file" in resp.json()["message"]


# -- staged uploads: the server side, driven by pyfirecrest's upload() ------------------------------


def s3_system(server: FirecrestServer, max_ops: int = 64 * 1024, part: int = 100 * 1024) -> None:
    server.data_transfer = {"service_type": "s3", "name": "loopback-s3"}
    server.max_ops_file_size = max_ops
    server.max_part_size = part


def test_pyfirecrest_staged_upload(
    firecrest_server: FirecrestServer, fc: Any, tmp_path: Path
) -> None:
    server = firecrest_server
    s3_system(server, max_ops=5 * 1024 * 1024, part=512 * 1024)
    assert fc.systems()[0]["dataOperation"]["data_transfer"]["service_type"] == "s3"
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(1536 * 1024 + 17))  # above pyfirecrest's 1 MiB: staged, 4 parts
    target = home(server) / "in"
    target.mkdir()
    ext = fc.upload("cluster", local, str(target), "big.bin")
    assert ext is not None  # staged (a direct upload returns None)
    assert (target / "big.bin").read_bytes() == local.read_bytes()
    info = ext.transfer_data
    assert set(info) == {"transferJob", "transferDirectives"}
    assert set(info["transferJob"]) == {"jobId", "system", "workingDirectory", "logs"}
    assert isinstance(info["transferJob"]["jobId"], int)
    directives = info["transferDirectives"]
    assert directives["transferMethod"] == "s3" and directives["maxPartSize"] == 512 * 1024
    assert len(directives["partsUploadUrls"]) == 4
    log = Path(info["transferJob"]["logs"]["outputLog"])
    assert "File was successfully downloaded" in log.read_text()
    puts = [r for r in server.requests if r[0] == "PUT" and r[1].startswith("/s3/")]
    assert len(puts) == 4 and all(r[2] == 200 for r in puts)
    assert ("POST", "/filesystem/cluster/transfer/upload", 201) in server.requests
    jid = str(info["transferJob"]["jobId"])
    for _ in range(40):  # right after a job ends, sacct may name it "allocation" for a moment
        row = query_jobs([jid])[jid]
        if row["name"] != "allocation":
            break
        time.sleep(0.5)
    assert row["state"] == "COMPLETED" and row["name"] == "IngressFileTransfer"


def test_presigned_urls_need_their_signature_only(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    """No bearer token on the part URLs (S3 presigned); a changed URL is refused with 403."""
    import httpx

    server = firecrest_server
    s3_system(server)
    resp = fc._post_request(
        endpoint="/filesystem/cluster/transfer/upload",
        json_data={
            "path": str(home(server) / "x.bin"),
            "transfer_directives": {"file_size": 10, "transfer_method": "s3"},
        },
    )
    assert resp.status_code == 201, resp.text
    info = resp.json()
    url = info["transferDirectives"]["partsUploadUrls"][0]
    assert (
        httpx.put(url.replace("partNumber=1", "partNumber=2"), content=b"0123456789").status_code
        == 403
    )
    ok = httpx.put(url, content=b"0123456789")
    assert ok.status_code == 200 and ok.headers["ETag"].startswith('"')
    # completion naming a wrong ETag is refused; the object never appears
    bad = (
        '<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>"x"</ETag>'
        "<PartNumber>1</PartNumber></Part></CompleteMultipartUpload>"
    )
    assert (
        httpx.post(info["transferDirectives"]["completeUploadUrl"], content=bad).status_code == 400
    )
    fc.cancel_job("cluster", str(info["transferJob"]["jobId"]))


def test_transfer_upload_without_backend_or_other_method(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    server = firecrest_server
    body = {
        "path": str(home(server) / "x.bin"),
        "transfer_directives": {"file_size": 10, "transfer_method": "s3"},
    }
    resp = fc._post_request(endpoint="/filesystem/cluster/transfer/upload", json_data=body)
    # no data_transfer: firecREST fails (docs/design/sites.md §5)
    assert resp.status_code == 500
    server.data_transfer = {"service_type": "streamer"}
    resp = fc._post_request(endpoint="/filesystem/cluster/transfer/upload", json_data=body)
    assert (
        resp.status_code == 400
        and resp.json()["message"] == "Requested transfer method is not available."
    )
    assert server.jobs == {}


# -- staged uploads: the launcher (docs/design/sites.md §3.3) ---------------------------------------------


def backend(tmp_path: Path, server: FirecrestServer) -> Path:
    cfg = tmp_path / "backend.yaml"
    cfg.write_text(
        f"Firecrest:\n  ApiUrl: {server.api_url}\n  TokenUrl: {server.token_url}\n  Machine: {server.machine}\n"
        "Resources:\n  Queue: debug\n  Runtime: 10m\n  MemoryPerNode: 256M\nExclude: [logs/]\n"
    )
    return cfg


def run(proj: Path, cfg: Path, workdir: Path) -> int:
    return main(["run", str(proj), "--backend-config", str(cfg), "--workdir", str(workdir)])


def test_launcher_stages_big_files_through_the_backend(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    server = firecrest_server
    s3_system(server)
    proj = make_project(tmp_path)
    big = os.urandom(250 * 1024)
    (proj / "data" / "big.bin").write_bytes(
        big
    )  # above max_ops_file_size (64 KiB): staged, 3 parts
    (proj / "data" / "medium.bin").write_bytes(b"y" * (60 * 1024))  # below: direct
    rc = run(proj, backend(tmp_path, server), tmp_path / "runs")
    out, err = capfdbinary.readouterr()
    assert rc == 0, err.decode()
    runs = list((server.scratch / FIRECREST_USER / "launchers").iterdir())
    assert len(runs) == 1
    assert (runs[0] / "data" / "big.bin").read_bytes() == big
    assert (runs[0] / "data" / "medium.bin").read_bytes() == b"y" * (60 * 1024)
    assert b"data=hello-data" in out
    staged = [r for r in server.requests if r[1] == "/filesystem/cluster/transfer/upload"]
    assert staged == [("POST", "/filesystem/cluster/transfer/upload", 201)]
    assert len([r for r in server.requests if r[0] == "PUT" and r[1].startswith("/s3/")]) == 3
    # the transfer job finished before the job was submitted
    assert len(server.transfer_jobs) == 1 and len(server.jobs) == 2
    job = next(j for j in server.jobs if j not in server.transfer_jobs)
    assert int(job) > int(server.transfer_jobs[0])


def test_launcher_refuses_a_backend_it_cannot_stage_through(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    server = firecrest_server
    s3_system(server)
    server.data_transfer = {"service_type": "wormhole"}
    proj = make_project(tmp_path)
    (proj / "data" / "big.bin").write_bytes(b"x" * (200 * 1024))
    rc = run(proj, backend(tmp_path, server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    assert "data/big.bin (200 KiB)" in err and "'wormhole'" in err and "exclude it" in err
    assert server.jobs == {} and not any("/ops/upload" in r[1] for r in server.requests)


def test_failed_staged_upload_cancels_its_transfer_job(
    firecrest_server: FirecrestServer, tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    server = firecrest_server
    s3_system(server)
    server.transfer_poll = 2
    server.faults.only = ("/s3/",)
    server.faults.burst = [500] * 10  # every part PUT fails
    proj = make_project(tmp_path)
    (proj / "data" / "big.bin").write_bytes(b"x" * (200 * 1024))
    rc = run(proj, backend(tmp_path, server), tmp_path / "runs")
    err = capfdbinary.readouterr()[1].decode()
    assert rc == 1
    assert "staged upload of data/big.bin" in err and "nothing was submitted" in err
    assert "Signature=" not in err  # the presigned URLs are not shown
    assert server.jobs.keys() == set(server.transfer_jobs) and len(server.transfer_jobs) == 1
    jid = server.transfer_jobs[0]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = query_jobs([jid]).get(jid)
        if row is not None and row["state"].startswith("CANCELLED"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"transfer job {jid} was not cancelled: {row}")


# -- what the real server does where our client meets it (docs/remote-sites.md, firecREST section) -----


def test_empty_upload_never_ends_408_after_the_command_timeout(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    """firecREST writes an upload's content to ``base64 -d`` and closes its input only when there
    is some: an empty file waits for input until the command timeout, then 408 (file created)."""
    server = firecrest_server
    server.command_timeout = 1.0
    d = home(server)
    t0 = time.monotonic()
    resp = fc._post_request(
        endpoint="/filesystem/cluster/ops/upload",
        params={"path": str(d)},
        files={"file": ("empty.txt", b"")},
    )
    assert (
        resp.status_code == 408
        and resp.json()["message"] == "Command execution timeout limit exceeded."
    )
    assert (
        time.monotonic() - t0 >= 0.8
    )  # the command timeout (firecREST counts from before the channel opens)
    assert (d / "empty.txt").read_bytes() == b""
    resp = fc._post_request(
        endpoint="/filesystem/cluster/ops/upload",
        params={"path": str(d)},
        files={"file": ("one.txt", b"x")},
    )
    assert resp.status_code == 204 and (d / "one.txt").read_bytes() == b"x"


def test_view_slices_characters_and_replaces_invalid_utf8(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    """``ops/view`` dd's whole blocks, decodes them with replacement, then slices characters."""
    server = firecrest_server
    f = home(server) / "accents.txt"
    f.write_text("éééééééééé")  # 20 bytes

    def view(offset: int, size: int | None = None) -> Any:
        params: dict[str, Any] = {"path": str(f), "offset": offset}
        if size is not None:
            params["size"] = size
        return fc._get_request(endpoint="/filesystem/cluster/ops/view", params=params)

    assert (
        view(4, 4).json()["output"] == "éééé"
    )  # bytes 4..12 decoded, 4 characters: not bytes 4..8
    f.write_text("aéé")  # 5 bytes
    assert view(1, 1).json()["output"] == "é"  # size 1, yet 2 bytes: one character
    assert view(2, 2).json()["output"] == "\ufffdé"  # block 1 starts inside the first é
    f.write_bytes(b"ok \xff\xfe end")
    assert view(0, 100).json()["output"] == "ok \ufffd\ufffd end"
    # without ``size`` firecREST reads 5 MiB: refused by a system with a smaller limit
    server.max_ops_file_size = 1024 * 1024
    resp = view(0)
    assert (
        resp.status_code == 400
        and "`size` value must be less than 1048576 bytes" in resp.json()["message"]
    )
    # two blocks of ``size`` must fit the SSH output buffer (max_ops_file_size)
    f.write_bytes(b"a" * (1024 * 1024))
    assert view(0, 600 * 1024).status_code == 413
    assert len(view(0, 500 * 1024).json()["output"]) == 500 * 1024


def test_tail_is_decoded_with_replacement(firecrest_server: FirecrestServer, fc: Any) -> None:
    f = home(firecrest_server) / "bin.txt"
    f.write_bytes(b"caf\xc3\xa9 \xff!")
    out = fc.tail("cluster", str(f), num_bytes=4, exclude_beginning=True)
    assert out["content"] == "\xe9 \ufffd!"  # from byte 4 (1-based): the é, then a replaced byte


def test_quote_in_a_path_is_a_shell_error_500(firecrest_server: FirecrestServer, fc: Any) -> None:
    """Paths sit between single quotes in firecREST's commands: a ``'`` breaks them."""
    d = home(firecrest_server)
    resp = fc._post_request(
        endpoint="/filesystem/cluster/ops/upload",
        params={"path": str(d)},
        files={"file": ("it's.txt", b"data")},
    )
    assert resp.status_code == 500
    assert resp.json()["message"].startswith(
        "Remote process failed with exit status:2 and error message:bash:"
    )
    (d / "it's.txt").write_text("x")
    resp = fc._get_request(
        endpoint="/filesystem/cluster/ops/stat", params={"path": str(d / "it's.txt")}
    )
    assert resp.status_code == 500


@pytest.mark.parametrize("version", ["2.5.6", "2.6.0"])
def test_app_version_gates_the_name_filter(
    firecrest_server: FirecrestServer, fc: Any, version: str
) -> None:
    """``f7t-appversion`` is 2.5.6 (as released) unless set; pyfirecrest refuses ``name`` below
    2.6.0, and a 2.5.6 server ignores it (every job of the user comes back)."""
    from firecrest.FirecrestException import NotImplementedOnAPIversion

    server = firecrest_server
    server.app_version = version
    assert FirecrestServer(home(server) / "x", {}).app_version == "2.5.6"
    d = home(server)
    names = [f"fidelity-{version}-{os.getpid()}-{time.time_ns()}-{n}" for n in "ab"]
    ids = [
        fc.submit(
            "cluster", working_dir=str(d), script_str=f"#!/bin/bash\n#SBATCH --job-name={n}\ntrue\n"
        )["jobId"]
        for n in names
    ]
    assert fc._get_request(endpoint="/status/systems").headers["f7t-appversion"] == version
    if version == "2.5.6":
        with pytest.raises(NotImplementedOnAPIversion):
            fc.job_info("cluster", name=names[0])
        # a job that just ended can be in neither squeue nor (yet) sacct for a moment, as on a
        # real site (docs/remote-sites.md, firecREST "Jobs"): ask again until both are listed
        deadline = time.monotonic() + 60
        while True:
            resp = fc._get_request(endpoint="/compute/cluster/jobs", params={"name": names[0]})
            listed = {j["jobId"] for j in resp.json()["jobs"]}
            if set(ids) <= listed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert set(ids) <= listed
    else:
        rows = fc.job_info("cluster", name=names[0])
        assert [r["jobId"] for r in rows] == [ids[0]]


@pytest.mark.parametrize(
    ("version", "query", "since"),
    [
        ("2.5.6", {}, "now-7days"),
        ("2.6.0", {}, "now-24hours"),
        ("2.6.0", {"time_window": "1h"}, "now-1hour"),
    ],
)
def test_jobs_list_every_job_of_the_user_in_a_window(
    firecrest_server: FirecrestServer, fc: Any, version: str, query: dict[str, str], since: str
) -> None:
    """``GET jobs`` is sacct over a window (7 days on 2.5.6, 24 h or ``time_window`` later) plus
    squeue, for the Unix user: a job submitted without firecREST is listed too."""
    from servers.common import run_slurm

    server = firecrest_server
    server.app_version = version
    # running: a job that just ended may be in neither squeue nor (yet) sacct for a moment
    r = run_slurm(
        [
            "sbatch",
            "--parsable",
            "--job-name=outside-firecrest",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 30",
        ]
    )
    outside = r.stdout.strip().split(";")[0]
    try:
        resp = fc._get_request(endpoint="/compute/cluster/jobs", params=query)
        assert outside in {j["jobId"] for j in resp.json()["jobs"]}
        sacct = [c for c in server.slurm_calls if c[0] == "sacct"][-1]
        assert f"--starttime={since}" in sacct
    finally:
        run_slurm(["scancel", outside])


def test_pending_job_record_has_null_codes_and_no_tasks(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    """A PENDING job comes from squeue: exit code and signal null, ``tasks: []``."""
    d = home(firecrest_server)
    jid = fc.submit(
        "cluster",
        working_dir=str(d),
        script_str="#!/bin/bash\n#SBATCH --partition=gpu\n#SBATCH --gres=gpu:a100:1\n#SBATCH --time=90\n"
        "true\n",
    )["jobId"]
    try:
        (row,) = fc.job_info("cluster", jid)
        assert row["status"]["state"] == "PENDING"
        assert row["status"]["exitCode"] is None and row["status"]["interruptSignal"] is None
        assert row["tasks"] == []
        assert row["time"]["limit"] == 90 * 60  # seconds, as firecREST converts squeue's 1:30:00
    finally:
        fc.cancel_job("cluster", jid)


def test_finished_job_record_has_its_steps_as_tasks(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    d = home(firecrest_server)
    jid = fc.submit(
        "cluster", working_dir=str(d), script_str="#!/bin/bash\n#SBATCH --time=2\nexit 3\n"
    )["jobId"]
    deadline = time.monotonic() + 30
    while True:
        (row,) = fc.job_info("cluster", jid)
        if row["status"]["state"] == "FAILED" and row["tasks"]:
            break
        assert time.monotonic() < deadline, row
        time.sleep(0.3)
    assert row["status"]["exitCode"] == 3 and row["status"]["interruptSignal"] == 0
    assert isinstance(row["time"]["start"], int) and isinstance(row["time"]["end"], int)
    assert any(t["id"] == f"{jid}.batch" and t["status"]["exitCode"] == 3 for t in row["tasks"])


def test_cancel_of_an_unknown_or_finished_job_is_500_with_exit_status_0(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    """``scancel --verbose`` exits 0 but prints an error: firecREST answers 500, never 404."""
    resp = fc._delete_request(endpoint="/compute/cluster/jobs/99999999")
    assert resp.status_code == 500
    message = resp.json()["message"]
    assert message.startswith("Unexpected Slurm command response. exit_status:0 std_err:")
    assert "Invalid job id specified" in message


def test_invalid_account_is_500(firecrest_server: FirecrestServer, fc: Any) -> None:
    """Only accounting/QOS limits (``QOSMax...Limit``, ``AssocMax...Limit``) are 403."""
    resp = fc._post_request(
        endpoint="/compute/cluster/jobs",
        json_data={
            "job": {
                "working_directory": str(home(firecrest_server)),
                "script": "#!/bin/bash\n#SBATCH --account=nosuch\ntrue\n",
            }
        },
    )
    assert resp.status_code == 500
    assert resp.json()["message"].startswith(
        "Unexpected Slurm command response. exit_status:1 std_err:sbatch: error:"
    )
    assert "Invalid account" in resp.json()["message"]


def test_slow_sbatch_answers_408_and_submits_all_the_same(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    server = firecrest_server
    server.command_timeout, server.slow_sbatch = 1.0, 2.0
    resp = fc._post_request(
        endpoint="/compute/cluster/jobs",
        json_data={
            "job": {
                "working_directory": str(home(server)),
                "script": "#!/bin/bash\n#SBATCH --job-name=late-one\ntrue\n",
            }
        },
    )
    assert resp.status_code == 408
    deadline = time.monotonic() + 20
    while not server.jobs:
        assert time.monotonic() < deadline, "the late sbatch never submitted"
        time.sleep(0.2)


@pytest.mark.timing
def test_ssh_outage_500_then_503_until_a_health_check_sees_it_back(
    firecrest_server: FirecrestServer, fc: Any
) -> None:
    """A refused SSH connection is 500 (the OSError); once a health check failed, 503 for every
    request needing SSH, until the first check after SSH is back (every ``health_interval``)."""
    server = firecrest_server
    server.health_interval = None  # checks only when asked
    path = str(home(server))

    def codes() -> tuple[int, int, int]:
        jobs = fc._get_request(endpoint="/compute/cluster/jobs")
        ls = fc._get_request(endpoint="/filesystem/cluster/ops/ls", params={"path": path})
        systems = fc._get_request(endpoint="/status/systems")
        return jobs.status_code, ls.status_code, systems.status_code

    server.set_ssh(False)
    assert codes() == (500, 500, 200)
    assert (
        "Connect call failed" in fc._get_request(endpoint="/compute/cluster/jobs").json()["message"]
    )
    server.health_check()
    assert codes() == (503, 503, 200)
    assert (
        fc._get_request(endpoint="/compute/cluster/jobs").json()["message"]
        == "The scheduler service for the requested system (cluster) is unhealthy."
    )
    assert not any(s["healthy"] for s in fc.systems()[0]["servicesHealth"])
    server.set_ssh(True)
    assert codes() == (503, 503, 200)  # SSH is back, the last check says otherwise
    server.health_check()
    assert codes() == (200, 200, 200)
    # checks every second: down, at most one interval of 500, then 503 up to an interval after
    server.health_interval = 1.0
    server.health_check()

    # (a cheap request that needs SSH: a job list runs sacct over every job of the user, which
    # takes seconds on a cluster that has run thousands of jobs)
    def ls() -> int:
        return int(
            fc._get_request(
                endpoint="/filesystem/cluster/ops/ls", params={"path": path}
            ).status_code
        )

    server.set_ssh(False)
    deadline = time.monotonic() + 5
    while ls() != 503:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    server.set_ssh(True)
    back = time.monotonic()
    while ls() != 200:
        assert time.monotonic() < back + 3.5
        time.sleep(0.1)
    assert time.monotonic() - back <= 1.5
