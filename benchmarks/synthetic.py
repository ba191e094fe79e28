"""Synthetic but realistic ``scontrol show nodes`` text for benchmarks (10,000 nodes by default).

Deterministic (no randomness): node ``i`` gets one of a few hardware types, partition
``i % n_partitions``, and every 25th node a second partition, as on real clusters.
"""

from __future__ import annotations

import sys

#: (name prefix, CPUTot, sockets, RealMemory MiB, Gres, features)
_TYPES: tuple[tuple[str, int, int, int, str, str], ...] = (
    ("cpu", 40, 2, 192000, "(null)", "CPU,XEON,IB"),
    ("cpu-big", 128, 2, 1024000, "(null)", "CPU,EPYC,BIGMEM,IB"),
    ("gpu-v100", 40, 2, 384000, "gpu:v100:4(S:0-1)", "GPU,GPU4,GPUM32G,V100,IB"),
    ("gpu-a100", 64, 2, 512000, "gpu:a100:8(S:0-1)", "GPU,GPU8,GPUM80G,A100"),
    ("gpu-rtx", 32, 2, 256000, "gpu:rtx8000:2", "GPU,GPU2,GPUM48G,RTX8000"),
    ("gpu-mig", 64, 2, 512000, "gpu:1g.10gb:7,gpu:a100:1", "GPU,MIG,A100"),
    ("cpu-old", 24, 2, 96000, "(null)", "(null)"),
)


def _node(i: int, n_partitions: int) -> str:
    prefix, cpus, sockets, mem, gres, features = _TYPES[i % len(_TYPES)]
    parts = [f"p{i % n_partitions:03d}"]
    if i % 25 == 0 and n_partitions > 1:
        parts.append(f"p{(i + 1) % n_partitions:03d}")
    name = f"{prefix}-{i:05d}"
    if i % 97 == 0:
        name = f"{prefix}-{i:05d}.rack{i % 7}"
    state = "IDLE" if i % 50 else "DOWN+NOT_RESPONDING"
    reason = "" if i % 50 else "\n   Reason=Not responding [slurm@2026-11-20T10:00:00]"
    gres_count = (
        f",gres/gpu={sum(int(g.split(':')[2].split('(')[0]) for g in gres.split(','))}"
        if gres != "(null)"
        else ""
    )
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket={cpus // sockets} \n"
        f"   CPUAlloc=0 CPUEfctv={cpus} CPUTot={cpus} CPULoad=0.01\n"
        f"   AvailableFeatures={features}\n"
        f"   ActiveFeatures={features}\n"
        f"   Gres={gres}\n"
        f"   NodeAddr={name} NodeHostName={name} Version=22.05.8\n"
        f"   OS=Linux 5.14.0-362.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Wed Oct 4 12:00:00 UTC 2023 \n"
        f"   RealMemory={mem} AllocMem=0 FreeMem={mem - 1000} Sockets={sockets} Boards=1\n"
        f"   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
        f"   Partitions={','.join(parts)} \n"
        f"   BootTime=2026-11-01T08:00:00 SlurmdStartTime=2026-11-01T08:01:00\n"
        f"   LastBusyTime=2026-11-20T09:00:00\n"
        f"   CfgTRES=cpu={cpus},mem={mem}M,billing={cpus}{gres_count}\n"
        f"   AllocTRES=\n"
        f"   CapWatts=n/a\n"
        f"   CurrentWatts=0 AveWatts=0\n"
        f"   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
        f"{reason}\n"
    )


def generate_scontrol_nodes(n_nodes: int = 10000, n_partitions: int = 100) -> str:
    """``scontrol show nodes`` text for ``n_nodes`` nodes spread over ``n_partitions``."""
    if n_nodes < 0 or n_partitions < 1:
        raise ValueError("need n_nodes >= 0 and n_partitions >= 1")
    return "\n".join(_node(i, n_partitions) for i in range(n_nodes))


def generate_scontrol_partitions(n_nodes: int = 10000, n_partitions: int = 100) -> str:
    """``scontrol show partitions`` text for the nodes of :func:`generate_scontrol_nodes`: every
    tenth partition restricted to an account, one hidden, one DOWN, the others open."""
    members: list[list[str]] = [[] for _ in range(n_partitions)]
    for i in range(n_nodes):
        prefix = _TYPES[i % len(_TYPES)][0]
        name = f"{prefix}-{i:05d}" + (f".rack{i % 7}" if i % 97 == 0 else "")
        members[i % n_partitions].append(name)
        if i % 25 == 0 and n_partitions > 1:
            members[(i + 1) % n_partitions].append(name)
    out = []
    for p in range(n_partitions):
        accounts = "proj1,proj2" if p % 10 == 5 else "ALL"
        hidden = "YES" if p == n_partitions - 1 and p else "NO"
        state = "DOWN" if p == 3 else "UP"
        days = 1 + p % 7
        out.append(
            f"PartitionName=p{p:03d}\n"
            f"   AllowGroups=ALL AllowAccounts={accounts} AllowQos=ALL\n"
            f"   AllocNodes=ALL Default={'YES' if p == 0 else 'NO'} QoS=N/A\n"
            f"   DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden={hidden}\n"
            f"   MaxNodes=UNLIMITED MaxTime={days}-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED\n"
            f"   Nodes={','.join(members[p])}\n"
            f"   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO\n"
            f"   OverTimeLimit=NONE PreemptMode=OFF\n"
            f"   State={state} TotalCPUs=0 TotalNodes={len(members[p])} SelectTypeParameters=NONE\n"
            f"   JobDefaults=(null)\n"
            f"   DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED\n"
        )
    return "\n".join(out)


#: ``sacctmgr -n -P show qos / assoc / user`` of a user with two accounts and five QoS.
SACCTMGR_QOS = (
    "normal|100||||\nhigh|1000|04:00:00||\nlong|10|7-00:00:00||PartitionTimeLimit\n"
    "gpu|500||gres/gpu=1|\nlow|0|||\n"
)
SACCTMGR_ASSOC = (
    "synth|proj1|alice||normal,high,long,gpu,low|normal\nsynth|proj3|alice||normal,low|normal\n"
)
SACCTMGR_USER = "alice|proj3\n"


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    sys.stdout.write(generate_scontrol_nodes(*args))
