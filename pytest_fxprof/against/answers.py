"""Against a revision: what the side processes answered of a test, read into the records the verdict needs.

Owns the reading of a side process's answer (``calls_of``: each ``fxprof`` call it wrote; ``entries_of``: each
call's measurement as a baseline entry), ``paired_entries`` (a call's entries on both sides, pair by pair, with the
pairs left out for lost lock-step or a disturbed machine), ``merged`` and ``side_profile`` (the new side's
processes as one profile), ``node_facts`` (what a process sends of each node besides its times) and
``first_profile`` (the new side's first process's profile standing for this process's own).

Must not import torch or pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_fxprof.against.rounds import AgainstError, Pairs
from pytest_fxprof.judge.outliers import out_of_line
from pytest_fxprof.judge.paired import MIN_PAIRS
from pytest_fxprof.measure.sampling import Child
from pytest_fxprof.records.measurement import BaselineEntry, NodeStats, capture_difference, iqr_int, median_int
from pytest_fxprof.records.profile import Profile
from pytest_fxprof.store.baseline import entry_from_json


def calls_of(child: Child) -> dict[str, Any]:
    data = child.data or {}
    calls = data.get("calls")
    return calls if isinstance(calls, dict) else {}


def entries_of(children: Sequence[Child], key: str, where: str) -> list[BaselineEntry] | None:
    out = []
    for i, child in enumerate(children, 1):
        raw = calls_of(child).get(key)
        if raw is None:
            return None
        try:
            out.append(entry_from_json(raw.get("entry"), f"{where} process {i}, call {key!r}"))
        except ValueError as exc:
            raise AgainstError(f"the {where} side sent a malformed profile: {exc}") from None
    return out


def _out_of_step(child: Child, key: str) -> bool:
    """Whether the process ran call ``key`` without its twin in passes whose times count (its plain calls, its kept
    passes): the process says so (``Barrier.alone_in_counted``); passes measured again for preemption after them
    may run alone."""
    alone = (calls_of(child).get(key) or {}).get("alone_from")
    return isinstance(alone, int)


@dataclass(frozen=True)
class PairedEntries:
    """The old and new side's entries of one call, pair by pair, as the paired rule judges them."""

    old: list[BaselineEntry]
    new: list[BaselineEntry]
    left_out: int = 0
    """Pairs whose twins lost their lock-step in the call, left out."""
    kept_out_of_step: int = 0
    """Pairs that lost it but were kept: fewer than two held it."""
    out_of_line: int = 0
    """Pairs whose processes met different machines, left out (``judge.outliers.out_of_line``)."""


def paired_entries(got: Pairs, key: str) -> PairedEntries | None:
    """The entries of call ``key`` from the pairs whose twins kept their lock-step in it (all where fewer than
    two did) and whose processes met one machine; None when a side did not make the call."""
    old, new = entries_of(got.old, key, "old"), entries_of(got.new, key, "new")
    if old is None or new is None:
        return None
    kept = [
        (a, b)
        for a, b, child_a, child_b in zip(old, new, got.old, got.new, strict=True)
        if not (_out_of_step(child_a, key) or _out_of_step(child_b, key))
    ]
    if len(kept) < MIN_PAIRS:
        return PairedEntries(old, new, 0, len(old) - len(kept))
    stray = set(out_of_line(merged([a for a, _ in kept]), merged([b for _, b in kept])))
    held = [pair for p, pair in enumerate(kept) if p not in stray]
    return PairedEntries([a for a, _ in held], [b for _, b in held], len(old) - len(kept), 0, len(stray))


def merged(entries: Sequence[BaselineEntry]) -> BaselineEntry:
    """One entry holding each process's run, in pair order (the entries of one side)."""
    first = entries[0]
    for e in entries[1:]:
        if [n.key for n in e.nodes] != [n.key for n in first.nodes]:
            raise AgainstError(
                "one side's processes captured different graphs of the same call; the capture must be "
                "deterministic (a model whose graph depends on state or randomness cannot be compared): "
                + capture_difference(
                    [n.key for n in first.nodes], [n.key for n in e.nodes], ("its first process's capture", "another's")
                )
            )
    # the shapes and bytes come from the processes that ran the counting pass (the first pair's)
    shapes = next((e.shapes for e in entries if e.shapes), first.shapes)
    allocated = next((e.allocated for e in entries if e.allocated), first.allocated)
    return replace(first, runs=tuple(e.runs[0] for e in entries), shapes=shapes, allocated=allocated)


def side_profile(base: Profile, entry: BaselineEntry) -> Profile:
    """``base`` (this process's unmeasured profile of the call, or the new side's first process's: ``first_profile``)
    with the times the new side's processes measured: per node the median over processes, its samples one per
    process."""
    keys = [n.info.key for n in base.nodes]
    if keys != [n.key for n in entry.nodes]:
        raise AgainstError(
            "the new side's processes captured another graph than this process did; the capture must be "
            "deterministic (a model whose graph depends on state or randomness cannot be compared): "
            + capture_difference(keys, [n.key for n in entry.nodes], ("this process's capture", "the new side's"))
        )
    per_node = [tuple(r.node_ns[i] for r in entry.runs) for i in range(len(keys))]
    medians = [median_int(s) for s in per_node]
    busy = sum(medians) or 1
    faulted = [r.node_faults for r in entry.runs if r.node_faults]
    faults = [median_int([f[i] for f in faulted]) if faulted else n.faults for i, n in enumerate(base.nodes)]
    nodes = tuple(
        replace(n, median_ns=m, spread_ns=iqr_int(s), share=m / busy, samples_ns=s, info=info, faults=f)
        for n, m, s, info, f in zip(base.nodes, medians, per_node, entry.nodes, faults, strict=True)
    )
    return replace(
        base,
        nodes=nodes,
        total_samples_ns=tuple(r.total_ns for r in entry.runs if r.total_ns),  # 0: the process timed none
        instrumented_samples_ns=tuple(r.instrumented_ns for r in entry.runs),
        reference_samples_ns=tuple(r.reference_ns for r in entry.runs),
        environment=entry.environment,
        protocol=entry.protocol,
        measured=True,
        fault_samples=tuple(r.faults for r in entry.runs if r.faults is not None),
        module_faults=median_faults([r.module_faults for r in entry.runs if r.module_faults]),
    )


def median_faults(per_process: Sequence[Sequence[tuple[str, int]]]) -> tuple[tuple[str, int], ...]:
    """Each module's page faults in a call, the median over the processes that read them (a process that did not
    call a module counts it as 0)."""
    read = [dict(p) for p in per_process]
    paths = sorted({path for p in read for path in p})
    return tuple((path, median_int([p.get(path, 0) for p in read])) for path in paths)


NODE_FACTS = (
    "flops",
    "layout",
    "inputs",
    "training",
    "returned",
    "host_ns",
    "memory_bytes",
    "peak_bytes",
    "allocated",
    "faults",
)
"""What a side's first process sends of each node besides its times and output shape (``node_facts``): what the
report and the hints read of a node (``records.measurement.NodeStats``)."""


def node_facts(nodes: Sequence[NodeStats]) -> dict[str, list[Any]]:
    """Each of ``NODE_FACTS`` of ``nodes``, one list per fact, aligned with the nodes."""
    return {
        fact: [list(value) if isinstance(value, tuple) else value for value in (getattr(n, fact) for n in nodes)]
        for fact in NODE_FACTS
    }


def _facts_from_json(raw: Any, count: int) -> list[dict[str, Any]] | None:
    """``node_facts`` read back, node by node; None where any list is missing, of another length, or holds a value
    of the wrong type (the call is then captured in this process, as without them)."""
    if not isinstance(raw, dict):
        return None
    kinds: dict[str, Callable[[Any], bool]] = {
        "flops": lambda v: v is None or isinstance(v, int),
        "layout": lambda v: isinstance(v, str),
        "inputs": lambda v: isinstance(v, list) and all(isinstance(i, int) for i in v),
        "training": lambda v: v is None or isinstance(v, bool),
        "returned": lambda v: isinstance(v, bool),
        "host_ns": lambda v: v is None or isinstance(v, int),
        "memory_bytes": lambda v: v is None or isinstance(v, int),
        "peak_bytes": lambda v: v is None or isinstance(v, int),
        "allocated": lambda v: v is None or isinstance(v, int),
        "faults": lambda v: v is None or isinstance(v, int),
    }
    columns: dict[str, list[Any]] = {}
    for fact in NODE_FACTS:
        column = raw.get(fact)
        if not isinstance(column, list) or len(column) != count or not all(map(kinds[fact], column)):
            return None
        columns[fact] = column
    return [{f: tuple(c[i]) if f == "inputs" else c[i] for f, c in columns.items()} for i in range(count)]


def first_profile(got: Pairs, key: str) -> Profile | None:
    """Call ``key`` as the new side's first process profiled it (the working tree's code, as in this process), to
    stand for this process's own unmeasured profile of the call: its nodes, their facts and output shapes, the
    capture and setup, and that process's times. None where no pair measured the test to the end, or that process
    sent no facts of the call (then this process captures the call itself)."""
    if got.failed is not None or got.error or got.ended is not None or not got.new:
        return None
    raw = calls_of(got.new[0]).get(key)
    if not isinstance(raw, dict):
        return None
    try:
        entry = entry_from_json(raw.get("entry"), f"new process 1, call {key!r}")
    except ValueError:
        return None
    facts = _facts_from_json(raw.get("facts"), len(entry.nodes))
    if facts is None or not entry.runs:
        return None
    run = entry.runs[0]
    busy = sum(run.node_ns) or 1
    nodes = tuple(
        NodeStats(
            info=info,
            median_ns=ns,
            spread_ns=spread,
            share=ns / busy,
            samples_ns=(ns,),
            shape=entry.shapes[i] if entry.shapes else "",
            **facts[i],
        )
        for i, (info, ns, spread) in enumerate(zip(entry.nodes, run.node_ns, run.node_spread_ns, strict=True))
    )
    return Profile(
        name=key,
        nodes=nodes,
        total_samples_ns=(run.total_ns,) if run.total_ns else (),
        instrumented_samples_ns=(run.instrumented_ns,),
        reference_samples_ns=(run.reference_ns,),
        environment=entry.environment,
        protocol=entry.protocol,
        capture=entry.capture,
        measured=False,
        setup=entry.setup,
        fault_samples=(run.faults,) if run.faults is not None else (),
        module_faults=run.module_faults,
    )
