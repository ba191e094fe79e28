"""Every key of ``launchers.yaml``: its type, default and meaning, in one table.

The loader (``config/loader.py``) reads files with these tables, the JSON Schema
(``config/schema.py``) is generated from them, and ``docs/configuration.md`` mirrors them, so
the three cannot drift apart. Pure data, no I/O.
"""

from __future__ import annotations

from typing import Any

import attrs

#: Kinds of value a key may hold (see ``Key.kind``).
KINDS = (
    "int",  # an integer (not a boolean), at least ``minimum`` when set
    "bool",
    "str",
    "size",  # "16G": bytes (docs/design/matching.md §1 units)
    "duration",  # "4 days": seconds
    "seconds",  # a timing setting: a duration ("30s", "2m") or a bare number of seconds
    "ratio",  # a number in [0, 1], kept exact
    "strings",  # a list of strings
    "paths",  # a string or a list of strings
    "regexes",  # a list of regular expressions
    "enum",  # one of ``choices``
    "tokens",  # {NAME: positive integer}
    "env",  # {NAME: string or number}
    "sbatch",  # {long-option: value or true}
    "slots",  # a positive integer or "auto"
    "section",  # a nested mapping described by ``section``
    "map",  # {name: mapping described by ``section``}
    "list",  # [mapping described by ``section``, ...]
    "any",  # any data, validated elsewhere
)


@attrs.frozen
class Key:
    """One key of a mapping: what it holds, its default and what it means."""

    kind: str
    doc: str
    default: Any = None
    required: bool = False
    choices: tuple[str, ...] = ()
    section: str = ""
    minimum: int | None = None
    #: an ``enum`` value may carry this prefix (``SIGUSR1`` for ``USR1``), as Python's API allows
    prefix: str = ""


def _k(kind: str, doc: str, default: Any = None, **kw: Any) -> Key:
    return Key(kind, doc, default, **kw)


#: ``find_launcher(strategy=...)`` and the top-level ``strategy:`` (docs/finder.md, "Strategies").
STRATEGIES = ("order", "earliest_start")

_CONFIGURATION_CPU: dict[str, Key] = {
    "cores": _k("int", "CPU cores of one node", minimum=0),
    "memory": _k("size", "memory of one node (e.g. 256G)"),
    "mem_per_cpu": _k("size", "memory Slurm gives per allocated core (DefMemPerCPU)"),
    "cpu_per_gpu": _k("int", "cores Slurm gives per allocated GPU (DefCpuPerGPU)", minimum=0),
}

#: Kinds of accelerator a host declares; requests: cuda() takes cuda, mps() takes mps, gpu() any.
GPU_KINDS = ("cuda", "mps", "other")
_KIND_DOC = (
    "accelerator kind: cuda (NVIDIA), mps (an Apple GPU, sharing the machine's memory) or "
    "other (AMD, Intel...: only gpu() asks for it)"
)

_CONFIGURATION_GPU: dict[str, Key] = {
    "count": _k("int", "GPUs per node", minimum=0),
    "kind": _k("enum", _KIND_DOC + "; default cuda", choices=GPU_KINDS),
    "memory": _k("size", "memory of one GPU (e.g. 40G)"),
    "model": _k("str", "GPU model name (informative)"),
    "min_memory": _k("size", "smallest GPU memory request this GPU accepts"),
    "min_mem_ratio": _k(
        "ratio", "smallest accepted request as a fraction of the GPU memory (0 to 1), exact"
    ),
}

_CONFIGURATION: dict[str, Key] = {
    "max_duration": _k("duration", "longest job allowed (e.g. 2 days)"),
    "cpu": _k("section", "CPU description", section="configuration_cpu"),
    "gpu": _k("section", "GPU description", section="configuration_gpu"),
}

_NODES: dict[str, Key] = {
    "hosts": _k("strings", "host names of this node group", ()),
    "features": _k("strings", "Slurm features every node of the group has", ()),
    "count": _k("int", "number of nodes when hosts are not listed", minimum=0),
    "configuration": _k("section", "node-group configuration", section="configuration"),
    "environment": _k(
        "section",
        "environment of jobs on these nodes (over the partition's)",
        section="environment",
    ),
}

_PARTITION: dict[str, Key] = {
    "nodes": _k("list", "node groups of the partition", (), section="nodes"),
    "configuration": _k("section", "partition configuration", section="configuration"),
    "environment": _k(
        "section", "environment of jobs on this partition (over the group's)", section="environment"
    ),
    "priority": _k("int", "higher is preferred", 0),
    "disabled": _k("bool", "skip this partition", False),
    "qos": _k("strings", "QoS names usable on this partition (declared in the group's qos)", ()),
    "accounts": _k("strings", "accounts usable on this partition", ()),
}

_QOS: dict[str, Key] = {
    "max_duration": _k("duration", "QoS MaxWall"),
    "min_gpu": _k("int", "jobs must ask at least this many GPUs", 0, minimum=0),
    "priority": _k("int", "added to the partition priority", 0),
    "partition_time_limit": _k(
        "bool", "the QoS limit overrides the partition's (Slurm flag PartitionTimeLimit)", False
    ),
}

_FEATURE: dict[str, Key] = {
    "configuration": _k(
        "section", "configuration of nodes having this feature", section="configuration"
    ),
}

_FATAL_REASONS: dict[str, Key] = {
    "add": _k("strings", "pending reasons also treated as fatal", ()),
    "remove": _k("strings", "pending reasons no longer treated as fatal", ()),
}

_BATCH: dict[str, Key] = {
    "slots": _k("slots", "tasks run at once by one pilot, or auto", "auto"),
    "linger": _k("seconds", "how long an idle pilot waits for work", "2m"),
    "walltime": _k("duration", "pilot time limit (default: from the inner launcher)"),
    "task_timeout": _k("duration", "time limit of one task"),
    "max_attempts": _k("int", "attempts of a task whose pilot died", 3, minimum=1),
    "drain_margin": _k("seconds", "no task starts closer than this to the pilot's end", "5m"),
    "max_pilots": _k("int", "pilots per shape", 1, minimum=1),
    "scale_after": _k("seconds", "wait before adding a pilot", "5m"),
    "kill_grace": _k("seconds", "SIGTERM to SIGKILL delay", "30s"),
}

_COMMON: dict[str, Key] = {
    "id": _k("str", "group identifier"),
    "weight": _k("int", "higher is tried first", 0),
    "tags": _k("strings", "tags for find_launcher(tags=...)", ()),
    "connector": _k("str", "local, or the name of an SSH connector", "local"),
    "batch": _k("section", "batch every job of this group (docs/batching.md)", section="batch"),
}

_LOCAL_CPU: dict[str, Key] = {
    "cores": _k("int", "CPU cores", minimum=0),
    "memory": _k("size", "memory (e.g. 64G)"),
}

_LOCAL_GPU: dict[str, Key] = {
    "kind": _k("enum", _KIND_DOC, "cuda", choices=GPU_KINDS),
    "model": _k("str", "GPU model name"),
    "count": _k("int", "number of such GPUs", 1, minimum=1),
    "memory": _k("size", "memory of one GPU"),
    "min_memory": _k("size", "smallest GPU memory request this GPU accepts"),
}

#: Container runtimes an ``environment: container:`` may name (docs/configuration.md, Environment).
CONTAINER_RUNTIMES = ("apptainer", "singularity", "podman", "docker", "pyxis")

_CONTAINER: dict[str, Key] = {
    "image": _k(
        "str", "image to run the command in (a path, a docker:// URI, a name)", required=True
    ),
    "runtime": _k("enum", "container runtime", "apptainer", choices=CONTAINER_RUNTIMES),
    "options": _k("strings", "extra options of the runtime's run/exec command, one word each", ()),
    "bind": _k("strings", "host paths mounted in the container (SRC[:DST[:OPTS]])", ()),
    "env": _k("env", "variables set inside the container", {}),
}

_ENVIRONMENT: dict[str, Key] = {
    "modules": _k("strings", "environment modules loaded on the compute node, in order", ()),
    "purge": _k("bool", "module purge before loading the modules", False),
    "venv": _k("str", "absolute path of a Python virtual environment to activate"),
    "conda": _k("str", "conda environment (name or absolute path) to activate"),
    "container": _k("section", "run the command in a container", section="container"),
    "setup": _k("strings", "shell lines run before the command (after modules and activation)", ()),
    "teardown": _k("strings", "shell lines run after the command, even when it failed", ()),
    "variables": _k("env", "variables exported in the job (env: is the same key)", {}),
}

_RUNTIME: dict[str, Key] = {
    "export": _k("enum", "environment policy of jobs", "ALL", choices=("ALL", "NONE")),
    "env": _k("env", "variables exported in every job", {}),
    "python": _k("str", "Python interpreter running callables"),
    "environment": _k(
        "section", "modules, venv, conda, container, setup commands", section="environment"
    ),
}

_LOCAL: dict[str, Key] = {
    **_COMMON,
    "cpu": _k("section", "CPU of this machine", section="local_cpu"),
    "gpus": _k("list", "GPUs of this machine", (), section="local_gpu"),
    "tokens": _k("tokens", "counter tokens each job holds while it runs", {}),
    "disabled": _k("bool", "skip this group", False),
    "max_jobs": _k("int", "jobs run at once (default: cpu.cores, else the CPU count)", minimum=1),
    "kill_grace": _k("seconds", "time between SIGTERM and SIGKILL when a job is cancelled", 10),
    **_RUNTIME,
}

_MATCHING: dict[str, Key] = {
    "partitions": _k("map", "partitions by name", {}, section="partition"),
    "features_regex": _k(
        "regexes",
        "regexes matched against whole feature names; named groups cuda_count and cuda_memory",
        (),
    ),
    "features": _k("map", "configuration by feature name", {}, section="feature"),
    "configuration": _k("section", "group defaults", section="configuration"),
    "qos": _k("map", "QoS by name", {}, section="qos"),
    "use_features": _k("bool", "emit --constraint from node features", True),
    "use_memory_constraint": _k(
        "bool", "emit --mem (false: ask more cores instead; needs mem_per_cpu)", True
    ),
}

_SLURM: dict[str, Key] = {
    **_COMMON,
    "id": _k("str", "group identifier", required=True),
    **_MATCHING,
    "use_hosts": _k("bool", "emit --exclude for non-matching hosts", True),
    "query_slurm": _k("bool", "read nodes and partitions from scontrol at search time", False),
    "path": _k("str", "directory of the Slurm commands"),
    "gpu_option": _k(
        "enum", "how GPUs are asked", "gpus-per-node", choices=("gpus-per-node", "gres")
    ),
    "sbatch_options": _k("sbatch", "extra sbatch options {long-name: value or true}", {}),
    **_RUNTIME,
    "status_source": _k(
        "enum", "how job states are read", "auto", choices=("auto", "sacct", "squeue")
    ),
    "fatal_pending": _k(
        "enum",
        "what to do with a job pending for a fatal reason",
        "cancel",
        choices=("cancel", "report"),
    ),
    "fatal_reasons": _k("section", "adjust the fatal pending reasons", section="fatal_reasons"),
    "max_requeues": _k(
        "int", "extra attempts of a resumable task after a time limit or preemption", 3, minimum=0
    ),
    "resume_signal": _k(
        "enum",
        "warning signal sent to resumable tasks before the time limit",
        "USR1",
        choices=("USR1", "USR2", "TERM", "INT", "HUP", "ALRM", "CONT", "URG"),
        prefix="SIG",
    ),
    "resume_grace": _k(
        "seconds", "how long before the time limit the warning comes (at most a quarter of it)", 120
    ),
    "lost_after": _k(
        "seconds", "a job with no scheduler record and no exit record is LOST after this", 600
    ),
    "poll_max": _k("seconds", "longest interval between two status queries", 60),
}

_UNICORE_SITE: dict[str, Key] = {
    "url": _k("str", "the site's REST core URL (https://HOST:PORT/SITE/rest/core)", required=True),
    "auth": _k("enum", "authentication", "basic", choices=("basic", "bearer")),
    "username_env": _k("str", "variable holding the user name", "LAUNCHERS_UNICORE_USERNAME"),
    "password_env": _k("str", "variable holding the password", "LAUNCHERS_UNICORE_PASSWORD"),
    "token_env": _k("str", "variable holding the bearer token", "LAUNCHERS_UNICORE_TOKEN"),
    "account": _k("str", "project/budget (UNICORE Project)"),
    "verify_tls": _k("bool", "check the server certificate", True),
    "gpu_resource_name": _k("str", "resource name for GPUs per node", "GPUsPerNode"),
    "user_preferences": _k("str", "X-UNICORE-User-Preferences header (e.g. group:abc)"),
    "batch_storage": _k("str", "storage for batch queues", "HOME"),
}

_FIRECREST_SITE: dict[str, Key] = {
    "api_url": _k("str", "firecREST API URL", required=True),
    "token_url": _k("str", "OIDC token URL", required=True),
    "machine": _k("str", "system name", required=True),
    "client_id_env": _k("str", "variable holding the client id", "LAUNCHERS_FIRECREST_CLIENT_ID"),
    "client_secret_env": _k(
        "str", "variable holding the client secret", "LAUNCHERS_FIRECREST_CLIENT_SECRET"
    ),
    "api_version": _k("int", "firecREST API version (1 or 2)", 2, minimum=1),
    "account": _k("str", "sbatch --account"),
    "workdir": _k("str", "remote base directory ({user} is replaced)"),
    "verify_tls": _k("bool", "check the server certificate", True),
}

_UNICORE: dict[str, Key] = {
    **{k: v for k, v in _COMMON.items() if k != "connector"},
    "id": _k("str", "group identifier", required=True),
    **_MATCHING,
    "site": _k("section", "how to reach the site", required=True, section="unicore_site"),
    "environment": _k("any", "Compute Backend Config Environment for every job"),
}

_FIRECREST: dict[str, Key] = {
    **_UNICORE,
    "use_hosts": _k("bool", "emit --exclude for non-matching hosts", True),
    "gpu_option": _k(
        "enum", "how GPUs are asked", "gpus-per-node", choices=("gpus-per-node", "gres")
    ),
    "site": _k("section", "how to reach the site", required=True, section="firecrest_site"),
}

_SSH: dict[str, Key] = {
    "hostname": _k("str", "host to connect to", required=True),
    "port": _k("int", "SSH port", 22, minimum=1),
    "username": _k("str", "remote user (default: ssh_config, else local user)"),
    "identity_file": _k("paths", "private key file(s)", ()),
    "passphrase_env": _k("str", "variable holding the key passphrase"),
    "known_hosts": _k("str", "known hosts file", "~/.ssh/known_hosts"),
    "strict_host_key_checking": _k(
        "enum", "host key policy", "yes", choices=("yes", "accept-new", "no")
    ),
    "proxy_jump": _k("str", "jump host ([user@]host[:port])"),
    "ssh_config": _k("bool", "use matching Host entries of ~/.ssh/config", True),
    "keepalive_interval": _k("seconds", "keepalive period", "15s"),
    "keepalive_count_max": _k("int", "unanswered keepalives before disconnect", 3, minimum=1),
    "connect_timeout": _k("seconds", "connection timeout", "20s"),
    "command_timeout": _k("seconds", "timeout of one remote command", "60s"),
    "reconnect_timeout": _k("seconds", "give up reconnecting after", "10m"),
    "max_channels": _k("int", "commands at once on the connection", 8, minimum=1),
    "login_shell": _k("bool", "run commands through bash -lc", False),
    "workdir": _k("str", "remote root of job directories", "~/.local/share/launchers"),
}

_CONNECTORS: dict[str, Key] = {
    "ssh": _k("map", "SSH connectors by name", {}, section="ssh"),
}

_TOP: dict[str, Key] = {
    "local": _k("list", "local machine groups", (), section="local"),
    "slurm": _k("list", "Slurm cluster groups", (), section="slurm"),
    "unicore": _k("list", "UNICORE site groups", (), section="unicore"),
    "firecrest": _k("list", "firecREST site groups", (), section="firecrest"),
    "connectors": _k(
        "section", "connectors (also read from connectors.yaml)", section="connectors"
    ),
    "tokens": _k("tokens", "counter tokens {NAME: COUNT} (also read from tokens.yaml)", {}),
    "strategy": _k(
        "enum",
        "how find_launcher picks among groups: order (weight, then file order) or "
        "earliest_start (where Slurm expects the job to start first; docs/finder.md)",
        "order",
        choices=STRATEGIES,
    ),
    "estimate": _k(
        "section", "start-time estimates of the earliest_start strategy", section="estimate"
    ),
}

_ESTIMATE: dict[str, Key] = {
    "timeout": _k("seconds", "longest wait for one cluster's estimate (sbatch --test-only)", "5s"),
    "cache": _k("seconds", "how long an estimate is reused", "30s"),
}

_TOKENS_FILE: dict[str, Key] = {
    "countertoken": _k("map", "counter tokens by name", {}, section="countertoken"),
}

_COUNTERTOKEN: dict[str, Key] = {
    "tokens": _k("int", "number of units of the token", required=True, minimum=1),
}

#: Every mapping of the file, by section name.
SECTIONS: dict[str, dict[str, Key]] = {
    "top": _TOP,
    "local": _LOCAL,
    "slurm": _SLURM,
    "unicore": _UNICORE,
    "firecrest": _FIRECREST,
    "configuration": _CONFIGURATION,
    "configuration_cpu": _CONFIGURATION_CPU,
    "configuration_gpu": _CONFIGURATION_GPU,
    "partition": _PARTITION,
    "nodes": _NODES,
    "qos": _QOS,
    "feature": _FEATURE,
    "fatal_reasons": _FATAL_REASONS,
    "batch": _BATCH,
    "local_cpu": _LOCAL_CPU,
    "local_gpu": _LOCAL_GPU,
    "unicore_site": _UNICORE_SITE,
    "firecrest_site": _FIRECREST_SITE,
    "ssh": _SSH,
    "connectors": _CONNECTORS,
    "tokens_file": _TOKENS_FILE,
    "countertoken": _COUNTERTOKEN,
    "estimate": _ESTIMATE,
    "environment": _ENVIRONMENT,
    "container": _CONTAINER,
}

#: experimaestro 1.5.7's class for each section it read, for messages saying what it did with
#: a file: every key it did not know made it refuse the whole file ("KEY is not a valid field
#: for CLASS"). Our keys are a superset of its keys, so an unknown key here was unknown there.
XPM_CLASSES: dict[str, str] = {
    "local": "DirectLauncherConfiguration",
    "local_cpu": "CPU",
    "local_gpu": "GPU",
    "slurm": "SlurmConfiguration",
    "configuration": "SlurmNodeConfiguration",
    "configuration_cpu": "CPUConfig",
    "configuration_gpu": "GPUConfig",
    "partition": "SlurmPartition",
    "nodes": "SlurmNodes",
    "qos": "SlurmQOS",
    "feature": "SlurmFeature",
    "ssh": "SshConfiguration",
    "countertoken": "CounterConfiguration",
}

#: Older spellings still accepted: section -> {alias: key}.
ALIASES: dict[str, dict[str, str]] = {
    "local": {"disable": "disabled"},
    "environment": {
        "env": "variables"
    },  # experimaestro 1.5.7's DirectLauncherConfiguration.disable
    "slurm": {"use_memory_contraint": "use_memory_constraint"},
    "unicore": {"use_memory_contraint": "use_memory_constraint"},
    "firecrest": {"use_memory_contraint": "use_memory_constraint"},
}

_REMOTE_ONLY_API = "is not allowed in a {kind} group: the site is reached only through its API"

#: Keys that are errors with a specific explanation: section -> {key: message}.
FORBIDDEN: dict[str, dict[str, str]] = {
    "unicore": {
        "connector": _REMOTE_ONLY_API.format(kind="unicore"),
        "path": _REMOTE_ONLY_API.format(kind="unicore"),
        "query_slurm": _REMOTE_ONLY_API.format(kind="unicore"),
    },
    "firecrest": {
        "connector": _REMOTE_ONLY_API.format(kind="firecrest"),
        "path": _REMOTE_ONLY_API.format(kind="firecrest"),
        "query_slurm": _REMOTE_ONLY_API.format(kind="firecrest"),
    },
    "unicore_site": {
        "password": "no secret in the file: write password_env: NAME (a variable holding it)",
        "token": "no secret in the file: write token_env: NAME (a variable holding it)",
        "client_secret": "no secret in the file: write password_env: NAME (a variable holding it)",
        "username": "write username_env: NAME (a variable holding the user name)",
    },
    "firecrest_site": {
        "client_secret": "no secret in the file: write client_secret_env: NAME (a variable holding it)",
        "password": "no secret in the file: write client_secret_env: NAME (a variable holding it)",
        "token": "no secret in the file: write client_secret_env: NAME (a variable holding it)",
        "client_id": "write client_id_env: NAME (a variable holding the client id)",
    },
    "ssh": {
        "password": "passwords are not supported: use keys or an agent",
        "passphrase": "no secret in the file: write passphrase_env: NAME (a variable holding it)",
    },
}

#: Named groups allowed in ``features_regex``.
REGEX_GROUPS = ("cuda_count", "cuda_memory")

#: sbatch options the launcher writes itself (docs/design/runtime.md §3); refused in sbatch_options.
OWNED_SBATCH_OPTIONS = frozenset(
    {"job-name", "output", "error", "open-mode", "chdir", "export", "array", "parsable",
     "requeue", "no-requeue", "signal"}
)  # fmt: skip

#: sbatch long options (Slurm 22.05 to 24.x), for "did you mean" on sbatch_options.
SBATCH_OPTIONS = frozenset(
    """account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters comment
    constraint container container-id contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu
    cpus-per-task deadline delay-boot dependency distribution error exclude exclusive export
    export-file extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node
    gpus-per-socket gpus-per-task gres gres-flags hint hold ignore-pbs input job-name
    kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu
    mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks
    ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode output overcommit
    oversubscribe parsable partition power prefer priority profile propagate qos quiet reboot
    requeue reservation signal sockets-per-node spread-job switches test-only thread-spec
    threads-per-core time time-min tmp tres-per-task uid use-min-nodes verbose wait wait-all-nodes
    wckey wrap""".split()  # noqa: SIM905
)
