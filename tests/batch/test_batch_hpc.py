"""hpc_batch compatibility: templates with context-aware quoting, and a dropbox served through
a batch launcher over the direct launcher."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from launchers.batch.hpc_batch import INLINE_LIMIT, HpcBatchServer, check_description
from launchers.batch.templates import TemplateError, render
from launchers.config.model import LocalGroup
from launchers.errors import LaunchersError
from launchers.local.launcher import DirectLauncher

TEMPLATE = "printf '%s|' <<v>> \"<<v>>\" 'x<<v>>y' \"a$(printf b)<<v>>\"\n"


@settings(max_examples=100, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30
    )
)
def test_quoting_in_every_context_round_trips(value: str) -> None:
    script = render(TEMPLATE, {"v": value})
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout.decode(
        "utf-8", "surrogateescape"
    )
    assert out == f"{value}|{value}|x{value}y|ab{value}|"


def test_values_as_yaml_writes_them_and_errors() -> None:
    assert (
        render("echo <<n>> <<b>> <<f>>", {"n": 6, "b": True, "f": 1.5}) == "echo '6' 'true' '1.5'"
    )
    with pytest.raises(TemplateError, match="<<nope>>"):
        render("echo <<nope>>", {"v": 1})
    with pytest.raises(TemplateError, match="list"):
        render("echo <<v>>", {"v": [1, 2]})
    assert (
        render("cat <<EOF\nx\nEOF\n", {}) == "cat <<EOF\nx\nEOF\n"
    )  # heredocs are not placeholders


def test_description_checks() -> None:
    ok = {
        "script": "align",
        "args": {"level": 6},
        "input_map": {"a": "/x/a.txt"},
        "output_map": {"o": "/y/o.txt"},
    }
    assert check_description(ok, "j.job") is ok
    for bad, text in [
        ({"script": "../etc/x"}, "must match"),
        ({"script": "s", "args": [1]}, "args must be a mapping"),
        ({"script": "s", "input_map": {"a": "rel/a"}}, "not an absolute path"),
        ({"script": "s", "output_map": {"a": "/p/o.txt", "b": "/q/o.txt"}}, "same base name"),
        (["script"], "not a YAML mapping"),
    ]:
        with pytest.raises(LaunchersError, match=text):
            check_description(bad, "j.job")


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HpcBatchServer:
    import launchers.batch.hpc_batch as H

    monkeypatch.setattr(H, "STABLE_FOR", 0.0)  # the files were written before the server started
    dropbox = tmp_path / "dropbox"
    templates = tmp_path / "templates"
    dropbox.mkdir()
    templates.mkdir()
    (templates / "copy.template").write_text(
        "#!/bin/bash\nset -e\ntr a-z A-Z < <<workspace>>/input/<<src>> > <<workspace>>/output/<<dst>>\n"
        'echo "level <<level>> in <<site>>"\n'
    )
    (templates / "fail.template").write_text("echo failing >&2\nexit 7\n")
    (templates / "noout.template").write_text("echo nothing\n")
    (templates / "big.template").write_text("head -c 100000 /dev/zero | tr '\\0' x\n")
    launcher = DirectLauncher(group=LocalGroup(max_jobs=2)).batched(slots=2, linger=1)
    srv = HpcBatchServer(
        dropbox, templates, launcher, workdir=tmp_path / "work", variables={"site": "lab's"}
    )
    srv.seen = {}
    return srv


def drop(dropbox: Path, name: str, data: object) -> Path:
    path = dropbox / f"{name}.job"
    path.write_text(yaml.safe_dump(data))
    old = time.time() - 10
    os.utime(path, (old, old))
    return path


def serve(srv: HpcBatchServer) -> None:
    done = threading.Event()
    t = threading.Thread(target=lambda: (srv.serve(once=True, interval=0.2), done.set()))
    t.start()
    t.join(60)
    assert done.is_set()


def result(dropbox: Path, name: str) -> dict:  # type: ignore[type-arg]
    assert not (dropbox / f"{name}.job.submitted").exists()
    return yaml.safe_load((dropbox / f"{name}.job.finished").read_text())  # type: ignore[no-any-return]


def test_dropbox_end_to_end(server: HpcBatchServer, tmp_path: Path) -> None:
    src = tmp_path / "in dir" / "a b.txt"
    src.parent.mkdir()
    src.write_text("hello\n")
    dest = tmp_path / "out" / "r.txt"
    dest.parent.mkdir()
    d = server.dropbox
    drop(d, "ok", {"script": "copy", "args": {"level": 6}, "input_map": {"src": str(src)},
                   "output_map": {"dst": str(dest)}, "extra": "kept"})  # fmt: skip
    drop(d, "fails", {"script": "fail"})
    drop(
        d, "missing", {"script": "noout", "output_map": {"o": str(tmp_path / "out" / "never.txt")}}
    )
    drop(d, "unknown", {"script": "copy", "args": {}})
    drop(d, "listarg", {"script": "copy", "args": {"level": [1]}})
    drop(d, "big", {"script": "big"})
    (d / "broken.job").write_text("script: [unclosed\n")
    os.utime(d / "broken.job", (time.time() - 10, time.time() - 10))
    serve(server)
    ok = result(d, "ok")
    assert ok["job"]["status"] == "ok" and ok["job"]["rc"] == 0 and ok["extra"] == "kept"
    assert "level 6 in lab's" in ok["job"]["stdout"]
    assert dest.read_text() == "HELLO\n"
    fails = result(d, "fails")
    assert fails["job"]["status"] == "error" and fails["job"]["rc"] == 7
    assert fails["job"]["message"].startswith("remote command failed with exit code 7")
    assert "failing" in fails["job"]["stderr"]
    missing = result(d, "missing")
    assert missing["job"]["status"] == "error" and "was not produced" in missing["job"]["message"]
    assert "<<src>>" in result(d, "unknown")["job"]["message"]
    assert "cannot be substituted" in result(d, "listarg")["job"]["message"]
    big = result(d, "big")["job"]["stdout"]
    assert big.startswith("[launchers: output truncated") and len(big) < INLINE_LIMIT + 200
    assert (d / "broken.job").exists()  # never parsed: left alone, the rest unaffected


def test_cli_serve_status_cancel(tmp_path: Path) -> None:
    import sys

    config = tmp_path / "launchers.yaml"
    config.write_text(
        "local:\n  - id: here\n    cpu: {cores: 2}\n    batch: {slots: 2, linger: 1s}\n"
    )
    dropbox = tmp_path / "dropbox"
    templates = tmp_path / "templates"
    dropbox.mkdir()
    templates.mkdir()
    (templates / "hello.template").write_text("echo hello <<who>> from <<site>>\n")
    drop(dropbox, "greet", {"script": "hello", "args": {"who": "world; rm -rf /"}})
    src = Path(__import__("launchers").__file__).parent.parent
    env = dict(os.environ, PYTHONPATH=str(src))
    cli = [sys.executable, "-m", "launchers"]
    proc = subprocess.run(
        [*cli, "batch", "serve", "--hpc-batch", str(dropbox), "--templates", str(templates), "--launcher", "here",
         "--config", str(config), "--var", "site=lab", "--once", "--cleanup"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = result(dropbox, "greet")["job"]
    assert (
        res["status"] == "ok" and res["stdout"].splitlines()[-1] == "hello world; rm -rf / from lab"
    )
    assert "==== launchers" not in res["stdout"] + res["stderr"]  # what the command wrote, only
    queue = next((dropbox / ".launchers" / "batch").iterdir())
    st = subprocess.run(
        [*cli, "batch", "status", str(queue)], capture_output=True, text=True, env=env, timeout=60
    )
    assert st.returncode == 0 and "COMPLETED 1" in st.stdout and "pilot 1: " in st.stdout
    assert "hpc-greet-" in st.stdout and "runner " in st.stdout
    bad = subprocess.run(
        [*cli, "batch", "status", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (
        bad.returncode == 2
        and bad.stderr.startswith("launchers: ")
        and "Traceback" not in bad.stderr
    )
    missing = subprocess.run([*cli, "batch", "serve", "--hpc-batch", str(dropbox), "--templates", str(templates),
                              "--launcher", "nope", "--config", str(config)],
                             capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert missing.returncode == 2 and "no such group" in missing.stderr
    from launchers.batch import queue as Q

    Q.publish(queue, {"id": "late-1", "dir": str(tmp_path / "late"), "argv": ["true"]})
    c = subprocess.run(
        [*cli, "batch", "cancel", str(queue), "late-1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert c.returncode == 0 and "late-1: cancelled" in c.stdout
    assert Q.read_done(queue, "late-1")["state"] == "CANCELLED"  # type: ignore[index]


def test_cli_serve_queue_for_producers_that_left(tmp_path: Path) -> None:
    import sys

    from launchers.batch import queue as Q

    config = tmp_path / "launchers.yaml"
    config.write_text("local:\n  - id: here\n    batch: {slots: 2, linger: 1s}\n")
    queue = Q.ensure_queue(tmp_path / "q")
    for i in range(3):
        Q.publish(
            queue, {"id": f"t{i}", "dir": str(tmp_path / f"j{i}"), "argv": ["echo", f"hi{i}"]}
        )
    src = Path(__import__("launchers").__file__).parent.parent
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.run([sys.executable, "-m", "launchers", "batch", "serve", str(queue), "--launcher", "here",
                           "--config", str(config), "--once"], capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for i in range(3):
        assert Q.read_done(queue, f"t{i}")["state"] == "COMPLETED"  # type: ignore[index]
        assert (tmp_path / f"j{i}" / "job.out").read_text().splitlines()[1] == f"hi{i}"
    assert os.listdir(queue / "pilots") == ["1"]
