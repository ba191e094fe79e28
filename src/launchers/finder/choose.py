"""Choosing inside one Slurm-like group: matching candidates, the best, merging, soundness.

Pure: takes a ``GroupIndex`` and one alternative, returns a ``Selection`` (or ``None``) and,
when asked, explanation lines. docs/design/matching.md §5 and §7.

Merging and soundness depend on the alternative only through which distinct hosts match, so
their result is remembered per group index and match pattern: a search on a 10,000-node
configuration then costs one match per distinct host.
"""

from __future__ import annotations

import attrs

from ..language.values import HostRequirement
from .explain import Explanation
from .hosts import Candidate, GroupIndex, Host, HostRow, node_group_text
from .match import Reason, assign_gpus, fit, gpu_total, kind_bits, problems

#: A soundness step: (what, partition index, node group index); what is one of
#: ``drop_partition``, ``drop_clauses``, ``exclude``, ``unsound``.
Event = tuple[str, int, int, tuple[tuple[str, ...], ...]]


@attrs.frozen(eq=False)
class Merge:
    """The alternative-independent part of a choice: what is merged and what soundness did."""

    chosen: tuple[Candidate, ...]  # merged candidates kept after soundness, candidate order
    partitions: tuple[str, ...]
    clauses: tuple[tuple[str, ...], ...]
    constraint: str | None
    exclude: tuple[str, ...]
    events: tuple[Event, ...]
    hosts: tuple[Host, ...]  # what the job may land on (distinct), for batching's slots=auto
    #: sbatch options already built from this merge (``finder.search``; options are values)
    options: dict[object, object] = attrs.field(factory=dict, init=False, repr=False)


@attrs.frozen(eq=False)
class Selection:
    """What a Slurm-like group offers for one alternative."""

    index: GroupIndex
    alt: HostRequirement
    best: Candidate
    cores: int  # --cpus-per-task
    merge: Merge

    @property
    def chosen(self) -> tuple[Candidate, ...]:
        return self.merge.chosen

    @property
    def partitions(self) -> tuple[str, ...]:
        return self.merge.partitions

    @property
    def clauses(self) -> tuple[tuple[str, ...], ...]:
        return self.merge.clauses

    @property
    def constraint(self) -> str | None:
        return self.merge.constraint

    @property
    def exclude(self) -> tuple[str, ...]:
        return self.merge.exclude

    @property
    def hosts(self) -> tuple[Host, ...]:
        return self.merge.hosts

    @property
    def notes(self) -> tuple[str, ...]:
        """What soundness changed, in words (formatted on demand)."""
        return tuple(_note(self, event) for event in self.merge.events)


def constraint_text(clauses: tuple[tuple[str, ...], ...]) -> str | None:
    """``A&B`` for one clause, ``(A&B)|(C&D)`` for several; ``None`` if a clause is empty."""
    if not clauses or any(not c for c in clauses):
        return None
    if len(clauses) == 1:
        return "&".join(clauses[0])
    return "|".join("(" + "&".join(c) + ")" for c in clauses)


def _why(sel: Selection, pi: int, ni: int) -> str:
    """Why node group ``ni`` of partition ``pi`` is not a merged match."""
    best, cores = sel.best, sel.cores
    cand = sel.index.by_key.get((pi, ni, best.qos_name, best.account))
    if cand is None:
        what = f"QoS {best.qos_name}" if best.qos is not None else "no QoS"
        return f"{what} / account {best.account} is not offered there"
    reasons, needed = problems(sel.alt, cand.host, first_only=False)
    if reasons:
        return "; ".join(str(r) for r in reasons)
    if needed > cores:
        return f"needs --cpus-per-task={needed} there, more than the {cores} asked"
    return str(Reason("cores", (cand.host.cores, cores)))


def _note(sel: Selection, event: Event) -> str:
    what, pi, ni, sat = event
    index = sel.index
    ng = index.node_groups[pi][ni]
    name = index.group.partitions[pi].name
    label = f"node group {ni} ({node_group_text(ng)}) of partition {name}"
    why = _why(sel, pi, ni)
    if what == "drop_partition":
        return f"soundness: dropped partition {name}: Slurm could place the job on {label}, which does not match ({why})"
    if what == "drop_clauses":
        text = ", ".join(constraint_text((k,)) or "(none)" for k in sat)
        return f"soundness: dropped constraint clause(s) {text}: they admit {label}, which does not match ({why})"
    if what == "exclude":
        return f"soundness: --exclude the hosts of {label} ({','.join(ng.hosts)}), which does not match ({why})"
    return (
        f"soundness: WARNING: Slurm could place the job on {label}, which does not match "
        f"({why}), and its hosts are unknown so it cannot be excluded; keeping the best candidate"
    )


def merge(index: GroupIndex, best: Candidate, compat: list[bool], single_partition: bool) -> Merge:
    """Merge every compatible candidate with the best's QoS and account, then make the union
    sound: drop partitions or clauses (never the best's), else ``--exclude``, else warn."""
    group = index.group
    pool = index.by_combo[(best.qos_name, best.account)]
    if single_partition:
        pool = tuple(c for c in pool if c.pindex == best.pindex)
    sel = [c for c in pool if compat[c.hidx]]
    good = {c.pn for c in sel}

    can_exclude = group.use_hosts and group.kind != "unicore"
    events: list[Event] = []
    handled: set[tuple[int, int]] = set()
    pis = list(dict.fromkeys([c.pindex for c in sel]))
    sound = sum(len(index.feature_sets[pi]) for pi in pis) == len(good)  # every node group matches
    while not sound:
        pis = list(dict.fromkeys([c.pindex for c in sel]))
        clauses = list(dict.fromkeys([c.clause for c in sel]))
        csets = [frozenset(k) for k in clauses]
        # which clauses admit each distinct feature set (few, however many node groups)
        admits = [
            [k for k, ks in zip(clauses, csets, strict=True) if ks <= f]
            for f in index.distinct_features
        ]
        bad: tuple[int, int, list[tuple[str, ...]]] | None = None
        for pi in pis:
            for ni, fid in enumerate(index.feature_ids[pi]):
                if admits[fid] and (pi, ni) not in good and (pi, ni) not in handled:
                    bad = (pi, ni, admits[fid])
                    break
            if bad is not None:
                break
        if bad is None:
            break
        pi, ni, sat = bad
        ng = index.node_groups[pi][ni]
        if pi != best.pindex and not (not group.use_features and can_exclude and ng.hosts):
            sel = [c for c in sel if c.pindex != pi]
            events.append(("drop_partition", pi, ni, ()))
            continue
        if best.clause not in sat:
            sel = [c for c in sel if c.clause not in sat]
            events.append(("drop_clauses", pi, ni, tuple(sat)))
            continue
        handled.add((pi, ni))
        events.append(("exclude" if can_exclude and ng.hosts else "unsound", pi, ni, ()))

    listed = dict.fromkeys([c.pindex for c in sel])
    # A partition dropped after some of its node groups were excluded is no longer listed:
    # its hosts must not reach --exclude (they may be good nodes of a listed partition), and
    # its exclude / unsound steps no longer describe the result.
    events = [e for e in events if e[0] not in ("exclude", "unsound") or e[1] in listed]
    exclude: dict[str, None] = {}
    for what, pi, ni, _ in events:
        if what == "exclude":
            exclude.update(dict.fromkeys(index.node_groups[pi][ni].hosts))
    clauses_t = tuple(dict.fromkeys([c.clause for c in sel]))
    return Merge(
        chosen=tuple(sel),
        partitions=tuple(group.partitions[pi].name for pi in listed),
        clauses=clauses_t,
        constraint=constraint_text(clauses_t) if group.use_features else None,
        exclude=tuple(exclude),
        events=tuple(events),
        hosts=tuple(index.hosts[h] for h in sorted({c.hidx for c in sel})),
    )


_MEMO_SIZE = 256


def _remember(memo: dict[object, object], key: object, value: object) -> None:
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[key] = value


#: Above this many rejected candidates, rejections are summarised by reason.
DETAIL_LIMIT = 40


def _explain_rejections(
    index: GroupIndex,
    results: list[tuple[tuple[Reason, ...], int]],
    ok: list[bool],
    explain: Explanation,
) -> None:
    texts = ["; ".join(str(r) for r in res[0]) for res in results]
    rejected = [c for c in index.candidates if not ok[c.hidx]]
    if len(rejected) <= DETAIL_LIMIT:
        for c in rejected:
            explain.add(f"{c.label()}: {texts[c.hidx]}", 2)
        return
    by_reason: dict[str, list[Candidate]] = {}
    for c in rejected:
        by_reason.setdefault(texts[c.hidx], []).append(c)
    explain.add(f"{len(rejected)} candidates rejected, by reason:", 2)
    for text, cands in by_reason.items():
        examples = "; ".join(c.label() for c in cands[:3])
        more = f"; and {len(cands) - 3} more" if len(cands) > 3 else ""
        explain.add(f"{text}: {len(cands)} candidates ({examples}{more})", 3)


def select(
    index: GroupIndex,
    alt: HostRequirement,
    explain: Explanation | None = None,
    single_partition: bool = False,
) -> Selection | None:
    """The launcher choice of one group for one alternative, or ``None`` if nothing matches."""
    return _select(index, alt, [fit(alt, host) for host in index.hosts], explain, single_partition)


def _select(
    index: GroupIndex,
    alt: HostRequirement,
    needed: list[int] | tuple[int, ...],
    explain: Explanation | None,
    single_partition: bool,
) -> Selection | None:
    """``select`` once the cores needed on every host (``fit``) are known."""
    ok = [n >= 0 for n in needed]
    if explain is not None:
        results = [problems(alt, host, first_only=False) for host in index.hosts]
        _explain_rejections(index, results, ok, explain)
        for p in index.disabled:
            explain.add(f"partition {p.name} is disabled", 2)
        if not index.partitions:
            explain.add("no enabled partition", 2)
    best = next((c for c in index.candidates if ok[c.hidx]), None)
    if best is None:
        return None
    cores = needed[best.hidx]
    # merged if it matches, and the best's --cpus-per-task is enough there and fits there
    compat = [
        0 <= needed[h] <= cores and (not host.cores or cores <= host.cores)
        for h, host in enumerate(index.hosts)
    ]
    key = (best.order, tuple(compat), single_partition)
    found = index.memo.get(key)
    if found is None:
        found = merge(index, best, compat, single_partition)
        _remember(index.memo, key, found)
    return Selection(index=index, alt=alt, best=best, cores=cores, merge=found)


def needed_cores(rows: tuple[HostRow, ...], alt: HostRequirement) -> tuple[int, ...]:
    """``fit(alt, host)`` for every host row, inlined (the hot loop of ``find_launcher``)."""
    duration = alt.duration
    cpu = alt.cpu
    want, memory = cpu.cores, cpu.memory
    gpus = alt.cuda_gpus
    n = len(gpus)
    low_req = high_req = need = total = 0
    if n:
        nonzero = [g.memory for g in gpus if g.memory]
        if nonzero:
            low_req, high_req = min(nonzero), max(nonzero)
        need, total = kind_bits(gpus), gpu_total(gpus)
    out: list[int] = []
    append = out.append
    for (
        maxd,
        min_gpu,
        hcores,
        hmem,
        mem_per_cpu,
        cpu_per_gpu,
        as_cores,
        nslots,
        low,
        high,
        uniform,
        slots,
        refused,
        unified,
    ) in rows:
        if (
            (maxd and duration > maxd)
            or n < min_gpu
            or (hmem and memory + (total if unified else 0) > hmem)
        ):
            append(-1)
            continue
        cores = want
        if cpu_per_gpu and n and cpu_per_gpu * n > cores:
            cores = cpu_per_gpu * n
        if as_cores and memory:
            if not mem_per_cpu:
                append(-1)
                continue
            by_memory = -(-memory // mem_per_cpu)
            if by_memory > cores:
                cores = by_memory
        if hcores and cores > hcores:
            append(-1)
            continue
        if n:
            if n > nslots:
                append(-1)
                continue
            if uniform:
                if (need & refused) or (high_req and (low_req < low or high_req > high)):
                    append(-1)
                    continue
            elif not assign_gpus(gpus, slots):
                append(-1)
                continue
        append(cores)
    return tuple(out)


def choice(
    index: GroupIndex, alt: HostRequirement, single_partition: bool = False
) -> tuple[Candidate, int, Merge] | None:
    """(best candidate, --cpus-per-task, merge) of ``select``, or ``None``: the choice depends
    on the alternative only through the cores needed on each host, so it is remembered per
    that vector (the index is immutable)."""
    matcher = index.matcher
    if matcher is None:
        needed = needed_cores(index.rows, alt)
    else:
        gpus = alt.cuda_gpus
        cpu = alt.cpu
        if gpus:
            low_req = high_req = need = total = 0
            for g in gpus:
                r = g.memory
                need |= g.bit
                total += r
                if r:
                    if not low_req or r < low_req:
                        low_req = r
                    if r > high_req:
                        high_req = r
            needed = matcher(
                alt.duration, len(gpus), cpu.cores, cpu.memory, low_req, high_req, gpus, need, total
            )
        else:
            needed = matcher(alt.duration, 0, cpu.cores, cpu.memory, 0, 0, gpus)
    key = (needed, single_partition)
    memo = index.by_needed
    found = memo.get(key, _MISSING)
    if found is _MISSING:
        sel = _select(index, alt, needed, None, single_partition)
        found = None if sel is None else (sel.best, sel.cores, sel.merge)
        if len(memo) >= _NEEDED_SIZE:
            memo.clear()
        memo[key] = found
    return found


def select_cached(
    index: GroupIndex, alt: HostRequirement, single_partition: bool = False
) -> Selection | None:
    """``select`` without explanation, through the memo of ``choice``."""
    found = choice(index, alt, single_partition)
    if found is None:
        return None
    best, cores, merged = found
    return Selection(index=index, alt=alt, best=best, cores=cores, merge=merged)


_MISSING = object()
_NEEDED_SIZE = 4096
