"""``launchers.config.problems``, the one problem collector of every configuration reader, and
``launchers.config.keypath`` (docs/configuration.md and docs/remote-sites.md, Errors)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from launchers.config.keypath import join
from launchers.config.loader import load_config_text
from launchers.config.located import load_located
from launchers.config.model import Position
from launchers.config.problems import (
    Problems,
    describe,
    did_you_mean,
    key_path,
    key_pos,
    suggest,
    type_name,
    unknown_key,
    unknown_keys,
)
from launchers.errors import ConfigurationError
from launchers.remote.backend_config import load_backend_config


def test_problems_are_raised_together_in_file_order() -> None:
    probs = Problems("f.yaml")
    assert not probs
    probs.raise_if_any()  # nothing to raise
    probs.add(Position("f.yaml", 3, 1), "b", "second")
    probs.add(None, "", "unplaced")
    probs.add(Position("f.yaml", 1, 5), "a.x", "first")
    with pytest.raises(ConfigurationError) as info:
        probs.raise_if_any()
    e = info.value
    assert e.problems == ["f.yaml: unplaced", "f.yaml:1:5: a.x: first", "f.yaml:3:1: b: second"]
    assert (e.file, e.line, e.column, e.key, e.reason) == ("f.yaml", None, None, None, "unplaced")
    assert str(e) == "\n".join(e.problems)


def test_a_file_without_a_name_is_config() -> None:
    probs = Problems(None)
    probs.add(None, "Environment", "expected a mapping")
    assert probs.lines == ["<config>: Environment: expected a mapping"]


def test_one_problem_has_the_same_attributes_in_both_families(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config_text("local:\n  - cpu: {cores: x}\n", "f.yaml")
    e = info.value
    assert (e.file, e.line, e.column, e.key) == ("f.yaml", 2, 18, "local[0].cpu.cores")
    assert e.reason == "expected an integer, found a string ('x')"
    assert e.problems == [str(e)]
    cfg = tmp_path / "b.yaml"
    cfg.write_text("UnicoreApiUrl: https://u/S/rest/core\nResources: {Queue: q, Nodes: 0}\n")
    with pytest.raises(ConfigurationError) as info:
        load_backend_config(cfg)
    e = info.value
    assert (e.file, e.line, e.column, e.key) == (str(cfg), 2, 30, "Resources.Nodes")
    assert e.reason == "expected an integer ≥ 1, not 0"
    assert e.problems == [str(e)]


def test_an_environment_in_launchers_yaml_gives_one_line_per_problem() -> None:
    text = (
        "unicore:\n  - id: u\n    weight: x\n    site: {url: 'https://x/rest/core'}\n"
        "    environment:\n      Modules: x\n      Apptainer: {Path: a, Typo: 1}\n"
    )
    with pytest.raises(ConfigurationError) as info:
        load_config_text(text, "f.yaml")
    assert [line.split(": ")[1] for line in info.value.problems] == [
        "unicore[0].weight",
        "unicore[0].environment.Modules",
        "unicore[0].environment.Apptainer.Typo",
    ]


@pytest.mark.parametrize(
    ("value", "name", "described"),
    [
        (None, "null", "nothing (null)"),
        (True, "a boolean", "a boolean (true)"),
        (3, "an integer", "an integer (3)"),
        (1.5, "a number", "a number (1.5)"),
        ("x", "a string", "a string ('x')"),
        ("y" * 50, "a string", f"a string ({'y' * 37 + '...'!r})"),
        ([1], "a list", "a list"),
        ({"a": 1}, "a mapping", "a mapping"),
        (datetime.date(2024, 1, 2), "date", "a date"),
    ],
)
def test_the_two_wordings_of_a_value(value: object, name: str, described: str) -> None:
    assert type_name(value) == name
    assert describe(value) == described


def test_the_two_wordings_of_a_suggestion() -> None:
    assert did_you_mean("featurs", ["features", "hosts"]) == "; did you mean 'features'?"
    assert did_you_mean("zzz", ["features"]) == ""
    assert suggest("queue", ["Queue"]) == " (did you mean 'Queue'? keys are case-sensitive)"
    assert suggest("Quue", ["Queue"]) == " (did you mean 'Queue'?)"
    assert suggest("Memo", ["MemoryPerNode", "Nodes"]) == " (did you mean 'MemoryPerNode'?)"
    assert unknown_key("Qeue", ("Queue", "Nodes")) == (
        "unknown key (did you mean 'Queue'?); known keys: Queue, Nodes"
    )


def test_key_paths() -> None:
    assert join("", "slurm") == "slurm"
    assert join("slurm", 0) == "slurm[0]"
    assert join("slurm[0]", "partitions") == "slurm[0].partitions"
    assert join("p", "a b") == "p['a b']"  # launchers.yaml quotes a name it could not read back
    assert join("p", "") == "p['']"
    assert join("p", "a-b") == "p.a-b"
    assert key_path("Resources", "a b") == "Resources.a b"  # the remote files: as written
    assert key_path("Exclude", 2) == "Exclude[2]"
    assert key_path("", "Queue") == "Queue"


def test_positions_of_located_and_plain_data() -> None:
    data = load_located("a: 1\nb:\n  c: 2\n", "f.yaml")
    assert key_pos(data["b"], "c") == Position("f.yaml", 3, 3)
    assert key_pos({"c": 2}, "c") is None


def test_unknown_keys_are_reported_at_the_key() -> None:
    data = load_located("SSH:\n  Hostname: h\n  user: x\n  Prt: 1\n", "b.yaml")
    probs = Problems("b.yaml")
    assert unknown_keys(data["SSH"], ("Hostname", "Port"), "SSH", probs, note=" (note)") is False
    assert probs.lines == [
        "b.yaml:3:3: SSH.user: unknown key; known keys: Hostname, Port (note)",
        "b.yaml:4:3: SSH.Prt: unknown key (did you mean 'Port'?); known keys: Hostname, Port (note)",
    ]
    assert unknown_keys({"Port": 1}, ("Hostname", "Port"), "SSH", probs) is True
