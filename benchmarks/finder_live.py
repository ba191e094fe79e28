"""The ``finder.py`` parts about live clusters (docs/discover.md, docs/finder.md "Strategies"):

- ``launchers slurm discover`` on the synthetic 10,000-node / 100-partition description (target
  under 2 s) and on the sandbox cluster (locally and through its sshd);
- ``find_launcher`` with ``strategy="earliest_start"`` over two live clusters (the sandbox, and
  a second instance started here, filled with jobs, stopped afterwards): the first call (both
  clusters asked) and cached calls, against the plain ``find_launcher``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
START = ROOT / "tests" / "cluster" / "start.sh"
STOP = ROOT / "tests" / "cluster" / "stop.sh"
#: The second cluster of the benchmark (its own ports: the test suite's is /tmp/slurm-second).
SECOND_DIR = "/tmp/slurm-bench-second"
SECOND = {
    "CLUSTER_NAME": "benchsecond",
    "CLUSTER_SLURMCTLD_PORT": "13817",
    "CLUSTER_SLURMDBD_PORT": "13819",
    "CLUSTER_SLURMD_PORT_BASE": "13820",
    "CLUSTER_MYSQL_PORT": "6007",
    "CLUSTER_SSH_PORT": "4022",
}
TARGET_DISCOVER = 2.0  # seconds, synthetic 10,000 nodes / 100 partitions
REQUIREMENT = "cpu(cores=2) & duration=10m"


def measure_discover_synthetic(n_nodes: int, n_partitions: int, runs: int) -> dict[str, Any]:
    """discover + render (the new file) and update (refresh of that file) on synthetic facts."""
    sys.path.insert(0, str(HERE))
    import synthetic

    from launchers.slurm.discover import Facts, discover, render, update

    facts = Facts(
        nodes=synthetic.generate_scontrol_nodes(n_nodes, n_partitions),
        partitions=synthetic.generate_scontrol_partitions(n_nodes, n_partitions),
        config="ClusterName = synth\nDefMemPerCPU = 2000\n",
        qos=synthetic.SACCTMGR_QOS,
        associations=synthetic.SACCTMGR_ASSOC,
        user_record=synthetic.SACCTMGR_USER,
        user="alice",
        groups=frozenset({"alice"}),
    )
    best: dict[str, float] = {}
    for _ in range(runs):
        start = time.perf_counter()
        found = discover(facts)
        middle = time.perf_counter()
        text = render(found)
        end = time.perf_counter()
        refreshed = update(text, found)
        done = time.perf_counter()
        assert refreshed.text == text
        for key, value in (
            ("discover", middle - start), ("write", end - middle), ("total", end - start),
            ("update", done - end),
        ):  # fmt: skip
            best[key] = min(best.get(key, value), value)
    best["node_groups"] = found.node_groups
    best["partitions"] = len(found.partitions)
    return best


def _sandbox() -> dict[str, str] | None:
    """The main sandbox's environment (tests/cluster/start.sh), if it answers."""
    env_file = Path(os.environ.get("CLUSTER_DIR", "/tmp/slurm-sandbox"), "env.sh")
    if not env_file.exists():
        return None
    info = {}
    for line in env_file.read_text().splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export ") :].partition("=")
            info[k] = v
    ping = subprocess.run(
        ["scontrol", "ping"], env={**os.environ, "SLURM_CONF": info.get("SLURM_CONF", "")},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return info if "UP" in ping.stdout else None


def _connectors(**clusters: dict[str, str]) -> str:
    """connectors.yaml: an SSH connector per cluster, to its sshd on 127.0.0.1."""
    return "ssh:\n" + "".join(
        f"  {name}:\n    hostname: 127.0.0.1\n    port: {info['CLUSTER_SSH_PORT']}\n"
        f"    username: root\n    identity_file: {info['CLUSTER_SSH_KEY']}\n"
        f"    known_hosts: {info['CLUSTER_SSH_KNOWN_HOSTS']}\n    ssh_config: false\n"
        for name, info in clusters.items()
    )


def _discover_cli(*args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "launchers", "slurm", "discover", *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return time.perf_counter() - start


def measure_live(runs: int) -> dict[str, Any] | None:
    """discover on the sandbox, and earliest_start over it and a second, busy cluster."""
    main = _sandbox()
    if main is None:
        return None
    os.environ["SLURM_CONF"] = main["SLURM_CONF"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "connectors.yaml").write_text(_connectors(main=main))
        out["discover_local"] = min(_discover_cli() for _ in range(runs))
        # --update of a file not there yet, --diff: the connector of connectors.yaml beside it
        probe = str(d / "probe.yaml")
        out["discover_ssh"] = min(
            _discover_cli("--connector", "main", "--update", probe, "--diff") for _ in range(runs)
        )
        second = _start_second()
        try:
            _fill(second)
            out.update(_earliest(d, main, second))
        finally:
            subprocess.run(
                ["bash", str(STOP)], env={**os.environ, "CLUSTER_DIR": SECOND_DIR},
                capture_output=True, check=False, timeout=300,
            )  # fmt: skip
    return out


def _start_second() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTER_")}
    env.update(CLUSTER_DIR=SECOND_DIR, **SECOND)
    text = subprocess.run(
        ["bash", str(START)], env=env, check=True, capture_output=True, text=True, timeout=900,
        stdin=subprocess.DEVNULL,
    ).stdout  # fmt: skip
    return dict(
        line[len("export ") :].split("=", 1)
        for line in text.splitlines()
        if line.startswith("export ")
    )


def _fill(second: dict[str, str]) -> None:
    env = {**os.environ, "SLURM_CONF": second["SLURM_CONF"]}
    for node, partition, limit in (
        ("cpu01", "long", "2-00:00:00"), ("gpu01", "gpu", "1-00:00:00"), ("gpu02", "gpu", "1-00:00:00"),
    ):  # fmt: skip
        subprocess.run(
            ["sbatch", "-p", partition, "-w", node, "-c", "8", "-t", limit, "--wrap", "sleep 100000"],
            env=env, check=True, capture_output=True, cwd=second["CLUSTER_JOBS_DIR"],
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        running = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING", "-o", "%i"], env=env, capture_output=True, text=True
        ).stdout.split()
        if len(running) >= 3:
            return
        time.sleep(0.3)


def _earliest(d: Path, main: dict[str, str], second: dict[str, str]) -> dict[str, Any]:
    from launchers import find_launcher
    from launchers.config.loader import clear_cache, load_config
    from launchers.finder import estimate

    (d / "connectors.yaml").write_text(_connectors(main=main, second=second))
    target = d / "launchers.yaml"
    for args in (["--connector", "second"], []):
        done = subprocess.run(
            [sys.executable, "-m", "launchers", "slurm", "discover", *args, "--update", str(target)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
    busy = f"- id: {SECOND['CLUSTER_NAME']}\n"
    target.write_text(target.read_text().replace(busy, busy + "  weight: 1\n", 1))
    clear_cache()
    config = load_config(target)
    out: dict[str, Any] = {}
    plain = find_launcher(REQUIREMENT, config=config)
    n = 1000
    start = time.perf_counter()
    for _ in range(n):
        find_launcher(REQUIREMENT, config=config)
    out["plain"] = (time.perf_counter() - start) / n
    firsts = []
    runs_first = 3
    for _ in range(runs_first):
        estimate.clear_cache()
        start = time.perf_counter()
        chosen = find_launcher(REQUIREMENT, config=config, strategy="earliest_start")
        firsts.append(time.perf_counter() - start)
    out["first"] = min(firsts)
    out["first_connect"] = firsts[0]  # the SSH connection to the second cluster opened too
    out["first_runs"] = runs_first
    start = time.perf_counter()
    for _ in range(n):
        find_launcher(REQUIREMENT, config=config, strategy="earliest_start")
    out["cached"] = (time.perf_counter() - start) / n
    out["plain_group"] = plain.group.id
    out["chosen_group"] = chosen.group.id
    return out


def report(syn: dict[str, Any], live: dict[str, Any] | None, us: Any) -> bool:
    """Print the figures; False when the discover target fails."""
    ok = syn["total"] < TARGET_DISCOVER
    print()
    print(
        f"discover on the synthetic cluster ({syn['partitions']} usable partitions, "
        f"{syn['node_groups']} node groups): {us(syn['discover'])} + writing the file "
        f"{us(syn['write'])} = {us(syn['total'])}  target < {us(TARGET_DISCOVER)}  "
        f"{'PASS' if ok else 'FAIL'}; refreshing that file (--update) {us(syn['update'])}"
    )
    if live is None:
        print("live clusters: no sandbox answering (tests/cluster/start.sh): skipped")
        return ok
    print(
        f"discover on the sandbox (the whole command, Python start included): "
        f"{us(live['discover_local'])} here, {us(live['discover_ssh'])} over SSH"
    )
    print(f"find_launcher over two live clusters ({live['plain_group']} busy, first by weight):")
    print(f"  plain (order): {us(live['plain'])} per call -> {live['plain_group']}")
    print(
        f"  earliest_start, first call (both clusters asked, best of {live['first_runs']}): "
        f"{us(live['first'])} -> {live['chosen_group']} (the very first, opening the SSH "
        f"connection: {us(live['first_connect'])})"
    )
    print(f"  earliest_start, answers reused: {us(live['cached'])} per call")
    return ok
