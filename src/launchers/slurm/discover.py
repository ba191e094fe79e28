"""``launchers slurm discover``: a complete ``slurm:`` group for one user, from what a live
cluster says (docs/discover.md). Pure: :class:`Facts` (the commands' texts) -> :func:`discover`
-> :class:`Discovery` -> :func:`render` (a new file) or :func:`update` (refresh an existing
one, keeping what a person wrote). :mod:`launchers.slurm.facts` runs the commands.

What discover owns in a group (``--update`` rewrites these and nothing else):

- ``partitions.P.nodes``, ``.disabled`` (when Slurm's state is not UP; removed again only when
  discover wrote it), ``.qos``, ``.accounts``, ``.configuration.max_duration`` and
  ``.configuration.cpu.mem_per_cpu``, for every partition Slurm lists; a partition Slurm no
  longer lists is removed; one the user may not use is added only if the file names it;
- ``qos.Q.priority``, ``.max_duration``, ``.min_gpu``, ``.partition_time_limit`` for the QoS
  the partitions list (a QoS Slurm no longer knows is removed);
- ``configuration.cpu.mem_per_cpu`` (the cluster's ``DefMemPerCPU``);
- the comment lines starting with ``# discover:`` in the group.
"""

from __future__ import annotations

from .discover_group import MARK, Discovery, Facts, discover, gpu_memory
from .discover_yaml import Update, group_document, render, update

__all__ = [
    "MARK",
    "Discovery",
    "Facts",
    "Update",
    "discover",
    "gpu_memory",
    "group_document",
    "render",
    "update",
]
