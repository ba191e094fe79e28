"""The experimaestro 1.5.7 side of ``finder.py``; runs inside ``benchmarks/.venv-xpm``.

``finder_xpm.py load DIR``: the first ``LauncherRegistry`` built in this process (experimaestro
can build only one per process, so each first load is a fresh process).
``finder_xpm.py run STRINGS.json DIR RUNS``: parse and find times, as ``finder.measure_ours``.
Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from finder import SAME, best_of, per_call  # stdlib-only helpers of finder.py (same directory)

logging.disable(logging.WARNING)  # "Using YAML file to configure launchers is deprecated"

from experimaestro.launcherfinder import find_launcher, parse  # noqa: E402
from experimaestro.launcherfinder.registry import (  # noqa: E402
    LauncherNotFoundError,
    LauncherRegistry,
)


def first_load(directory: Path) -> dict[str, Any]:
    start = time.perf_counter()
    LauncherRegistry.set_config_dir(directory)
    LauncherRegistry.instance()
    return {"load": time.perf_counter() - start}


def run(strings: list[str], directory: Path, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["parse"] = best_of(runs, parse, strings)
    LauncherRegistry.set_config_dir(directory)
    LauncherRegistry.instance()  # loaded once, as in an experiment script
    found = 0

    def find_text(text: str) -> None:
        nonlocal found
        try:
            find_launcher(text)
            found += 1
        except LauncherNotFoundError:
            pass

    for _ in range(20):  # warm-up (lazy imports, first-call costs), as finder.py does
        find_text(SAME)
    found = 0
    out["find_string"] = per_call(find_text, strings)
    out["found"] = found
    prebuilt = [parse(s) for s in strings]

    def find_value(value: list[Any]) -> None:
        try:
            find_launcher(*value)
        except LauncherNotFoundError:
            pass

    out["find_prebuilt"] = per_call(find_value, prebuilt)
    out["find_same"] = per_call(find_text, [SAME] * len(strings))
    return out


if __name__ == "__main__":
    if sys.argv[1] == "load":
        result = first_load(Path(sys.argv[2]))
    else:
        texts = json.loads(Path(sys.argv[2]).read_text())
        result = run(texts, Path(sys.argv[3]), int(sys.argv[4]))
    print(json.dumps(result))
