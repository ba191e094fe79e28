"""The in-place YAML editor behind ``launchers slurm discover --update``: edits touch only what
they address; comments, order, quoting and the style of everything else stay byte for byte."""

from __future__ import annotations

import pytest
import yaml

from launchers.config.yamledit import Editor, render_entry, render_item

TEXT = """\
# head
tokens: {a: 1}
slurm:
# about g
- id: g   # inline
  weight: 3
  partitions:
    debug:
      priority: 5   # mine
      configuration: {max_duration: 60m}
      nodes:
      - hosts: [a, b]
        features: [X]
      # trailing comment in nodes

    # about gpu
    gpu:
      nodes: []
  tags: [x]
- id: other
"""


def test_an_equal_value_is_not_rewritten() -> None:
    ed = Editor(TEXT)
    assert not ed.set(("slurm", 0, "weight"), 3)
    assert not ed.set(
        ("slurm", 0, "partitions", "debug", "nodes"), [{"hosts": ["a", "b"], "features": ["X"]}]
    )
    assert ed.text() == TEXT


def test_edits_keep_everything_else() -> None:
    ed = Editor(TEXT)
    ed.set(("slurm", 0, "partitions", "debug", "nodes"), [{"hosts": ["a"], "features": ["Y"]}])
    ed.set(("slurm", 0, "partitions", "debug", "configuration", "max_duration"), "1h")
    ed.set(("slurm", 0, "partitions", "gpu", "disabled"), True)
    ed.set(("slurm", 0, "partitions", "new"), {"nodes": [{"hosts": ["n"]}]})
    ed.set(("slurm", 0, "qos"), {"high": {"priority": 10}})
    ed.delete(("slurm", 0, "weight"))
    ed.comment(("slurm", 0, "partitions", "gpu"), ["note: down"])
    ed.append(("slurm",), {"id": "new", "partitions": {}})
    ed.set(("tokens", "b"), 2)
    out = ed.text()
    for kept in (
        "# head\n",
        "# about g\n- id: g   # inline\n",
        "      priority: 5   # mine\n",
        "      # trailing comment in nodes\n",
        "    # about gpu\n    # note: down\n    gpu:\n",
        "  tags: [x]\n",
    ):
        assert kept in out, kept
    assert "weight" not in out
    assert "tokens: {a: 1, b: 2}" in out
    assert yaml.safe_load(out) == {
        "tokens": {"a": 1, "b": 2},
        "slurm": [
            {
                "id": "g",
                "partitions": {
                    "debug": {
                        "priority": 5,
                        "configuration": {"max_duration": "1h"},
                        "nodes": [{"hosts": ["a"], "features": ["Y"]}],
                    },
                    "gpu": {"nodes": [], "disabled": True},
                    "new": {"nodes": [{"hosts": ["n"]}]},
                },
                "tags": ["x"],
                "qos": {"high": {"priority": 10}},
            },
            {"id": "other"},
            {"id": "new", "partitions": {}},
        ],
    }


def test_insertions_at_one_place_nest_right() -> None:
    """A new key of an inner mapping and one of its parent, both after the same last line."""
    ed = Editor("g:\n  qos:\n    a: {}\n")
    ed.set(("g", "configuration"), {"cpu": 1})
    ed.set(("g", "qos", "b"), {"priority": 2})
    assert yaml.safe_load(ed.text()) == {
        "g": {"qos": {"a": {}, "b": {"priority": 2}}, "configuration": {"cpu": 1}}
    }


def test_a_flow_mapping_becomes_block_once_it_nests() -> None:
    ed = Editor("p:\n  hid: {priority: 1}   # mine\n  other: 2\n")
    ed.set(("p", "hid", "nodes"), [{"hosts": ["a"]}])
    out = ed.text()
    assert out == "p:\n  hid:\n    priority: 1\n    nodes:\n    - hosts: [a]   # mine\n  other: 2\n"
    ed = Editor("p: {a: 1, b: {c: 2}}\n")
    ed.set(("p", "b", "c"), 3)
    ed.delete(("p", "a"))
    assert ed.text() == "p:\n  b: {c: 3}\n"


def test_null_parents_and_missing_mappings_are_created() -> None:
    ed = Editor("slurm:\n- id: a\n  partitions:\n")
    ed.set(("slurm", 0, "partitions", "p", "nodes"), [])
    ed.set(("connectors", "ssh", "h"), {"hostname": "h"})
    assert yaml.safe_load(ed.text()) == {
        "slurm": [{"id": "a", "partitions": {"p": {"nodes": []}}}],
        "connectors": {"ssh": {"h": {"hostname": "h"}}},
    }


def test_deleting_the_first_key_of_an_item_keeps_its_dash() -> None:
    ed = Editor("- a: 1\n  b: 2\n")
    ed.delete((0, "a"))
    assert yaml.safe_load(ed.text()) == [{"b": 2}]


def test_rendering_of_entries_and_items() -> None:
    assert render_entry("a", True) == "a: true"
    assert render_entry("cpu", {"cores": 8}) == "cpu: {cores: 8}"
    assert render_entry("yes", "on") == "'yes': 'on'"
    assert render_entry("n", [{"hosts": ["a"]}]) == "n:\n- hosts: [a]"
    assert render_item({"id": "x"}) == "- id: x"


def test_a_syntax_error_is_a_configuration_error() -> None:
    from launchers.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"f.yaml:2:"):
        Editor("a: [1\nb: 2\n", "f.yaml")
