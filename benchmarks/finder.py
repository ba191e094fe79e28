"""Finder benchmark: ``launchers`` against experimaestro 1.5.7, and a 10,000-node cluster.

Run ``python benchmarks/finder.py`` from the repository. It creates (once, then reuses) the
venv ``benchmarks/.venv-xpm`` holding experimaestro 1.5.7, measures experimaestro there
(``finder_xpm.py``, a subprocess) and ``launchers`` in this interpreter on the same 2000
distinct requirement strings and the same ``launchers.yaml`` (experimaestro's own test file,
copied to ``benchmarks/data/``), and prints per-call times and ratios. Then it times
``launchers`` alone on a synthetic 10,000-node, 100-partition cluster against fixed targets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-xpm"
DATA_DIR = HERE / "data"
CONFIG = DATA_DIR / "launchers.yaml"
# setuptools must be < 80 (experimaestro 1.5.7 uses pkg_resources) and recent enough (>= 75)
# for pkg_resources to find dependencies whose dist-info names are normalized (zope_interface).
PINS = ("experimaestro==1.5.7", "setuptools>=75,<80", "click==8.1.7", "huggingface-hub==0.23.2")
SEED = 20261122
SAME = "duration=4 days & cuda(mem=24G)*2"  # found by both tools on data/launchers.yaml
TARGETS = {"convert": 1.0, "load": 0.5, "find": 0.001}  # seconds (find: per call)


# --- measuring (stdlib only: finder_xpm.py imports these inside the experimaestro venv) ----


def per_call(fn: Callable[[Any], Any], items: Sequence[Any]) -> float:
    """Mean seconds per call of ``fn`` over ``items`` (one pass)."""
    start = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - start) / len(items)


def best_of(runs: int, fn: Callable[[Any], Any], items: Sequence[Any]) -> float:
    """The best per-call mean over ``runs`` passes (for functions without caches)."""
    return min(per_call(fn, items) for _ in range(runs))


def requirement_strings(n: int, seed: int = SEED) -> list[str]:
    """``n`` distinct requirement strings written in the common subset of both languages.

    experimaestro 1.5.7 accepts sizes with ``G``/``M`` only, durations in whole hours or days,
    and no parentheses; every string here is valid for both tools."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []

    def atom() -> str:
        kind = rng.choice(("cuda", "cuda", "cpu", "duration"))
        if kind == "duration":
            n = rng.randint(1, 96)
            return (
                f"duration={n} {rng.choice(('h', 'hours', 'd', 'days'))}"
                if n < 10
                else f"duration={n}h"
            )
        if kind == "cuda":
            mem = f"{rng.choice((4, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80))}G"
            count = rng.choice((1, 1, 2, 2, 3, 4, 8))
            return f"cuda(mem={mem})" + (f"*{count}" if count > 1 else "")
        args = []
        if rng.random() < 0.8:
            mem = f"{rng.randint(1, 256)}G" if rng.random() < 0.7 else f"{rng.randint(100, 9000)}M"
            args.append(f"mem={mem}")
        if rng.random() < 0.6 or not args:
            args.append(f"cores={rng.randint(1, 32)}")
        rng.shuffle(args)
        return f"cpu({', '.join(args)})"

    while len(out) < n:
        alternatives = []
        for _ in range(rng.choice((1, 1, 2, 2, 3))):
            atoms = [atom() for _ in range(rng.randint(1, 3))]
            alternatives.append(" & ".join(atoms))
        text = " | ".join(alternatives)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


# --- the experimaestro side ---------------------------------------------------------------


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    """Create ``benchmarks/.venv-xpm`` with the pinned experimaestro (once; reused after)."""
    marker = VENV / "launchers-bench-pins.txt"
    wanted = "\n".join(PINS) + "\n"
    if venv_python().exists() and marker.exists() and marker.read_text() == wanted:
        return venv_python()
    print(f"creating {VENV} with {', '.join(PINS)} (once)...", file=sys.stderr)
    if not venv_python().exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(venv_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
        check=True,
    )
    marker.write_text(wanted)
    return venv_python()


def run_json(argv: list[str]) -> dict[str, Any]:
    """Run a measuring subprocess; its last stdout line is a JSON object."""
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=HERE)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def first_loads(argv: list[str], processes: int) -> list[float]:
    """The first configuration load, each in a fresh process (caches and imports cold)."""
    return [float(run_json(argv)["load"]) for _ in range(processes)]


# --- the launchers side -------------------------------------------------------------------

_OURS_FIRST_LOAD = """
import json, sys, time
from launchers.config.loader import load_config
start = time.perf_counter()
load_config(sys.argv[1])
print(json.dumps({"load": time.perf_counter() - start}))
"""


def measure_ours(strings: list[str], config: Path, runs: int) -> dict[str, Any]:
    """The same measurements as finder_xpm.py, for ``launchers`` (this interpreter)."""
    from launchers import LauncherNotFoundError, find_launcher, parse
    from launchers.config.loader import clear_cache, load_config

    def fresh_config() -> None:
        """Reload the file: a new configuration value, so the finder's memos start empty."""
        clear_cache()
        load_config(config)

    out: dict[str, Any] = {}
    out["parse"] = best_of(runs, parse, strings)
    fresh_config()  # loaded once, then reused while unchanged, as in an experiment script
    out["load_cached"] = best_of(runs, lambda _: load_config(config), range(len(strings)))
    found = 0

    def find_text(text: str) -> None:
        nonlocal found
        try:
            find_launcher(text, config=config)
            found += 1
        except LauncherNotFoundError:
            pass

    # One pass over the distinct strings, from a freshly loaded configuration: the parsed-string
    # LRU (512 entries) never hits; the finder's per-configuration memos (selections per
    # alternative, merges per set of matching hosts) fill as they would in a long script.
    for _ in range(20):  # warm-up (lazy imports, first-call costs), as finder_xpm.py does
        find_text(SAME)
    found = 0
    fresh_config()
    out["find_string"] = per_call(find_text, strings)
    out["found"] = found
    prebuilt = [parse(s) for s in strings]

    def find_value(value: Any) -> None:
        try:
            find_launcher(value, config=config)
        except LauncherNotFoundError:
            pass

    fresh_config()
    out["find_prebuilt"] = per_call(find_value, prebuilt)
    out["find_same"] = per_call(find_text, [SAME] * len(strings))
    out["find_prebuilt_search_path"] = _find_on_search_path(config, prebuilt)
    return out


def _find_on_search_path(config: Path, prebuilt: list[Any]) -> float:
    """Per call: ``find_launcher(value)`` with no ``config=``, the file found through the
    default search path (``$HOME/.config/launchers/launchers.yaml``), as most scripts call it."""
    import shutil

    from launchers import LauncherNotFoundError, find_launcher
    from launchers.config.loader import clear_cache

    with tempfile.TemporaryDirectory() as home:
        target = Path(home) / ".config" / "launchers" / "launchers.yaml"
        target.parent.mkdir(parents=True)
        shutil.copy(config, target)
        past = time.time_ns() - 60_000_000_000  # settled files, as a user's configuration is
        for path in (target, target.parent, target.parent.parent, Path(home)):
            os.utime(path, ns=(past, past))
        saved = {k: os.environ.get(k) for k in ("HOME", "LAUNCHERS_CONFIG")}
        os.environ["HOME"] = home
        os.environ.pop("LAUNCHERS_CONFIG", None)
        try:
            clear_cache()

            def find_value(value: Any) -> None:
                try:
                    find_launcher(value)
                except LauncherNotFoundError:
                    pass

            return per_call(find_value, prebuilt)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def with_gpu_regex(text: str) -> str:
    """The converted YAML with ``features_regex`` reading GPU count and memory from features."""
    import yaml

    document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    document["slurm"][0]["features_regex"] = [
        r"GPU(?P<cuda_count>\d+)",
        r"GPUM(?P<cuda_memory>\d+G)",
    ]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump(document, Dumper=dumper, sort_keys=False))


def synthetic_requirements(n: int, seed: int = SEED) -> list[str]:
    """``n`` distinct requirements fitting the synthetic cluster's hardware, a few too large."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        kind = rng.random()
        cores = rng.randint(1, 64)
        mem = rng.randint(1, 500)
        if kind < 0.45:
            gpu = rng.choice((8, 16, 24, 32, 40, 48, 64, 80))
            text = f"cuda(mem={gpu}G)*{rng.choice((1, 2, 4, 8))} & cpu(cores={cores}, mem={mem}G)"
        elif kind < 0.65:
            text = f"cuda()*{rng.choice((1, 2, 4, 8))} & cpu(cores={cores})"
        elif kind < 0.9:
            text = f"cpu(cores={rng.randint(1, 128)}, mem={rng.randint(1, 1000)}G)"
        elif kind < 0.97:
            text = f"cuda(mem={rng.choice((24, 48, 80))}G)*8 | cpu(cores={cores})"
        else:  # more GPU memory than any node has: LauncherNotFoundError
            text = f"cuda(mem={rng.randint(100, 200)}G) & cpu(cores={cores})"
        if rng.random() < 0.5:
            text += f" & duration={rng.randint(1, 72)}h"
        out[text] = None
    return list(out)


def _timed_find(
    find: Any, not_found: type[Exception], spec: str, config: Path
) -> tuple[float, bool]:
    start = time.perf_counter()
    try:
        find(spec, config=config)
        ok = True
    except not_found:
        ok = False
    return time.perf_counter() - start, ok


def measure_synthetic(n_nodes: int, n_partitions: int, runs: int) -> dict[str, Any]:
    """convert / load / find on a synthetic ``scontrol show nodes`` listing."""
    sys.path.insert(0, str(HERE))
    from synthetic import generate_scontrol_nodes

    from launchers import LauncherNotFoundError, find_launcher
    from launchers.config.loader import clear_cache, load_config
    from launchers.slurm.convert import convert_text

    text = generate_scontrol_nodes(n_nodes, n_partitions)
    out: dict[str, Any] = {"nodes": n_nodes, "partitions": n_partitions, "text_mb": len(text) / 1e6}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        conversion = convert_text(text)
        times.append(time.perf_counter() - start)
    out["convert"] = min(times)
    out["node_groups"] = conversion.node_groups
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "launchers.yaml"
        path.write_text(conversion.text)
        out["yaml_mb"] = len(conversion.text) / 1e6
        times = []
        for _ in range(runs):
            clear_cache()
            start = time.perf_counter()
            load_config(path)
            times.append(time.perf_counter() - start)
        out["load"] = min(times)
        start = time.perf_counter()
        load_config(path)
        out["load_cached"] = time.perf_counter() - start
        # scontrol does not give GPU memory; as the converted file's header advises, declare
        # it through features_regex (the synthetic features are GPU4, GPUM32G, ...)
        regex_path = Path(tmp) / "regex" / "launchers.yaml"
        regex_path.parent.mkdir()
        regex_path.write_text(with_gpu_regex(conversion.text))
        load_config(regex_path)
        specs = synthetic_requirements(500)
        found: list[float] = []
        missed: list[float] = []
        start = time.perf_counter()
        _timed_find(find_launcher, LauncherNotFoundError, specs[0], regex_path)
        out["find_first"] = time.perf_counter() - start  # builds the group index once
        for spec in specs[1:]:
            seconds, ok = _timed_find(find_launcher, LauncherNotFoundError, spec, regex_path)
            (found if ok else missed).append(seconds)
        out["find"] = statistics.fmean(found) if found else None
        out["find_found"] = len(found)
        out["find_missed"] = len(missed)
        out["find_missed_mean"] = statistics.fmean(missed) if missed else None
        out["find_all_mean"] = statistics.fmean(found + missed)
    return out


# --- report -------------------------------------------------------------------------------


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 0.1:
        return f"{seconds * 1e3:,.0f} ms"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:,.1f} µs"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs:
        return "-"
    return f"{theirs / ours:,.1f}x"


def table(rows: Iterable[tuple[str, str, str, str]]) -> str:
    rows = list(rows)
    header = ("operation (per call)", "launchers", "experimaestro 1.5.7", "speed-up")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(
                [
                    r[0].ljust(widths[0]),
                    *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)),
                ]
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strings", type=int, default=2000, help="distinct requirement strings (2000)")
    ap.add_argument("--runs", type=int, default=3, help="passes for parse, loads (3)")
    ap.add_argument("--no-xpm", action="store_true", help="skip experimaestro (no venv)")
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--json", type=Path, help="also write every number to this file")
    ap.add_argument(
        "--no-live",
        action="store_true",
        help="skip the live clusters (discover on the sandbox, earliest_start over two clusters)",
    )
    args = ap.parse_args(argv)

    strings = requirement_strings(args.strings)
    results: dict[str, Any] = {"strings": len(strings), "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        strings_file = Path(tmp) / "strings.json"
        strings_file.write_text(json.dumps(strings))
        theirs: dict[str, Any] = {}
        if not args.no_xpm:
            python = str(ensure_venv())
            script = str(HERE / "finder_xpm.py")
            theirs = run_json(
                [python, script, "run", str(strings_file), str(DATA_DIR), str(args.runs)]
            )
            theirs["load"] = min(first_loads([python, script, "load", str(DATA_DIR)], args.runs))
        from launchers import LaunchersError

        try:
            ours = measure_ours(strings, CONFIG, args.runs)
        except LaunchersError as e:
            print(f"launchers cannot use {CONFIG}:\n{e}", file=sys.stderr)
            return 2
        ours["load"] = min(
            first_loads([sys.executable, "-c", _OURS_FIRST_LOAD, str(CONFIG)], args.runs)
        )
    results["launchers"], results["experimaestro"] = ours, theirs

    rows = [
        ("parse a requirement string", "parse"),
        ("find_launcher from a string", "find_string"),
        ("find_launcher from a prebuilt requirement", "find_prebuilt"),
        ("first load of the configuration", "load"),
    ]
    print(f"Finder: {len(strings)} distinct requirement strings, {CONFIG.relative_to(HERE.parent)}")
    print(
        table(
            (label, _us(ours.get(k)), _us(theirs.get(k)), _ratio(ours.get(k), theirs.get(k)))
            for label, k in rows
        )
    )
    print()
    print("cached paths (launchers only; experimaestro has none):")
    print(
        f"  configuration already loaded, file unchanged: {_us(ours['load_cached'])} per load_config()"
    )
    print(
        f"  find_launcher(prebuilt value) with no config= (file from the search path): "
        f"{_us(ours['find_prebuilt_search_path'])} per call"
    )
    same = f"  find_launcher({SAME!r}) {len(strings)} times: {_us(ours['find_same'])} per call"
    if theirs:
        same += f" (experimaestro: {_us(theirs.get('find_same'))})"
    print(same)
    found = f"  launcher found for {ours['found']}/{len(strings)} strings"
    if theirs:
        found += (
            f" (experimaestro: {theirs['found']}; it rejects e.g. cores on hosts that declare none)"
        )
    print(found)
    if ours["parse"] and theirs.get("parse"):
        ok = theirs["parse"] / ours["parse"] >= 20
        print(f"  parse target >= 20x experimaestro: {'PASS' if ok else 'FAIL'}")

    syn = measure_synthetic(args.nodes, args.partitions, args.runs)
    results["synthetic"] = syn
    print()
    print(
        f"Synthetic cluster: {syn['nodes']:,} nodes, {syn['partitions']} partitions "
        f"({syn['text_mb']:.1f} MB of scontrol text -> {syn['node_groups']} node groups, "
        f"{syn['yaml_mb']:.1f} MB of YAML)"
    )
    checks = [
        ("convert (scontrol text -> launchers.yaml)", syn["convert"], TARGETS["convert"]),
        ("load (first, validated)", syn["load"], TARGETS["load"]),
        (
            f"find ({syn['find_found']} distinct requirements found, per call)",
            syn["find"],
            TARGETS["find"],
        ),
    ]
    width = max(len(c[0]) for c in checks)
    failed = False
    for label, value, target in checks:
        status = "PASS" if value is not None and value < target else "FAIL"
        failed |= status == "FAIL"
        print(f"  {label.ljust(width)}  {_us(value):>10}  target < {_us(target):>8}  {status}")
    print(f"  first find (builds the group index once): {_us(syn['find_first'])}")
    print(f"  load again, file unchanged (cache): {_us(syn['load_cached'])}")
    print(
        f"  requirements no group can run: {syn['find_missed']}, {_us(syn['find_missed_mean'])} per call "
        "(LauncherNotFoundError, with the explanation of every rejected node group)"
    )
    print(
        f"  mean over all {syn['find_found'] + syn['find_missed']} calls: {_us(syn['find_all_mean'])}"
    )
    import finder_live

    discovered = finder_live.measure_discover_synthetic(args.nodes, args.partitions, args.runs)
    live = None if args.no_live else finder_live.measure_live(args.runs)
    results["discover"], results["live"] = discovered, live
    failed |= not finder_live.report(discovered, live, _us)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
