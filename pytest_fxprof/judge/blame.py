"""Blame: which module a failure leads with.

Owns ``blame``, the rule both gates use once a comparison fails. Pure. Must not import torch, pytest or pandas.

The rule:

1. What an item lost is its time in this run divided by the run's speed factor (against a baseline; against a
   revision, none), less its baseline time: the same factor for every item, so that a module's loss is the sum of
   its parts' (each verdict's own factor comes from peers outside it, and would not add up).
   The extra time to explain is what the candidates below lost in places apart (the smallest first; a module
   that holds smaller ones counts its loss beyond theirs only where it was found slower itself; the modules whose
   code changed and came out faster offset, in the module around them, those that came out slower; two slowdowns
   in two modules count both), or the most one operator type found slower lost, whichever is more. In a training
   step, each direction on its own: the one that lost the most is explained (a change to a module's code slows
   its forward and, most often more, its backward).
2. The candidates are the module-like aggregates (module subtrees, patterns and classes, ``judge.aggregates``)
   found slower beyond their own band, those whose code changed (other operations added than removed, whatever
   their verdict: a change is no noise), and the nodes found slower. A node too small to fail a test alone is a
   candidate too: the test failed already, and a 300 us convolution that took 5 ms more is where the time went.
   Noise in an unchanged module cannot be named.
3. The lead is the *smallest* candidate (by its baseline time) that holds more than ``BLAME_SHARE`` of the extra
   time, of those whose code changed where any of them does (the code that changed explains the slowdown: an
   MLP that now runs its GELU in float64 leads, not the GELU module inside it that got slower): the deepest
   module subtree that explains the slowdown, a node where one node does, a pattern where the instances of a
   repeated block slowed together (no one instance holds most), or a class where instances of one class in
   several places did (a norm written by hand slows ``ln_1``, ``ln_2`` and ``ln_f`` alike). A module not found
   slower whose code changed only in smaller candidates inside it holds what those lost, not its own loss: the
   block around a changed attention does not lead on the noise of its unchanged MLP. Where such a module, not found
   slower itself, would lead, and the places inside it whose code changed that were found slower are one place, or
   the instances of one block, that place (or the block's pattern or class) leads: the test failed there.
4. Where no module or node holds most of it, one operator type slowed across the model (every ``Linear``: a
   kernel got slower): the lead is that operator type's aggregate. Where nothing does (the total alone failed,
   spread over unchanged code; two slowdowns in two places), there is no lead: no module is named. Where the
   losses leave no extra time at all (the instances of a changed block came out faster and slower by their
   medians) but one place whose code changed was found slower, that place leads: the test failed there; where
   several instances of one block were, the block's pattern or class leads.
5. ``chain`` are the lead's enclosing modules and patterns the gate judged, outermost first, as the failure shows
   them on one line.
6. Where the times name nothing and the model's total failed, the allocator may hold what the nodes do not: the
   total is the plain call as the user makes it, the nodes' times the graphs', which free memory at other points
   and need not pay what the call pays for it. The lead is then the smallest module-like aggregate (one whose code
   changed, where any does) that took more than ``BLAME_SHARE`` of the page faults the call gained in the plain
   call (``judge.memory``): the code whose memory the allocator charges for.
7. Where neither names anything and the total failed, the lead is the smallest module-like aggregate that holds every
   operation the change added or removed, where there is one below the whole model: the only code that changed.
   Against a revision nothing else differs between the sides; against a baseline the failure says so too, beside the
   drift the baseline's bands hold. A change whose cost the allocator charges to the plain call alone (a large
   temporary that the graphs, freeing at other points, never fault in) is named this way (BENCHMARKS.md, "The
   allocator: the program users run").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from pytest_fxprof.judge.aggregates import depth_of, parent_path
from pytest_fxprof.records.profile import ROOT
from pytest_fxprof.records.verdicts import (
    MODULE_KINDS,
    AggregateVerdict,
    Blame,
    Kind,
    NodeVerdict,
    TotalVerdict,
    Verdict,
)

BLAME_SHARE = 2 / 3
"""The lead holds more than this share of the extra time: most of it, by a margin that noise in the modules beside it
cannot take away. At one half, one of two places that slowed alike (``ln_1`` of a norm written by hand, beside
``ln_2``) led by a hair over the class that holds both."""


def blame(
    nodes: Sequence[NodeVerdict],
    aggregates: Sequence[AggregateVerdict],
    speed: float = 1.0,
    total: TotalVerdict | None = None,
) -> Blame | None:
    """What a failed comparison leads with (see the module's rule); None where nothing can be named. ``speed`` is the
    run's speed factor (against a baseline; 1 against a revision): what each item lost is its time divided by it,
    less its baseline's, so that the losses of a module and of the modules in it add up. ``total``: the model's
    total, whose memory names the code where the times name none (rule 6)."""
    found = _by_time(nodes, aggregates, speed)
    if found is None and total is not None and total.verdict is Verdict.SLOWER:
        return by_memory(aggregates, total) or by_change(aggregates, total)
    return found


def by_change(aggregates: Sequence[AggregateVerdict], total: TotalVerdict) -> Blame | None:
    """The smallest module-like aggregate below the whole model that holds every operation the change added or
    removed (rule 7), or None where no code changed or only the whole model holds it all."""
    changes = {n.key for a in aggregates if a.kind in MODULE_KINDS for n in (*a.added, *a.removed)}
    if not changes:
        return None
    holders = [a for a in aggregates if a.kind in MODULE_KINDS and a.changed and a.where and changes <= _keys(a)]
    lead = min(holders, key=_size, default=None)
    if lead is None:
        return None
    around = enclosing(_home(lead), lead.direction, aggregates, inclusive=lead.kind is Kind.CLASS)
    extra = total.current_ns - total.baseline_ns
    return Blame(lead, None, around, 1.0, max(extra, 0.0), by_change=True)


def by_memory(aggregates: Sequence[AggregateVerdict], total: TotalVerdict) -> Blame | None:
    """The module-like aggregate that took most of the page faults the plain call gained (rule 6), or None."""
    gained = total.memory.faults_delta if total.memory is not None else None
    if gained is None or gained <= 0:
        return None

    def faults(a: AggregateVerdict) -> float:
        delta = a.memory.faults_delta if a.memory is not None else None
        return delta or 0.0

    held = [a for a in aggregates if a.kind in MODULE_KINDS and faults(a) > BLAME_SHARE * gained]
    changed = [a for a in held if a.changed]
    lead = min(changed or held, key=_size, default=None)
    if lead is None:
        return None
    around = enclosing(_home(lead), lead.direction, aggregates, inclusive=lead.kind is Kind.CLASS)
    extra = total.current_ns - total.baseline_ns
    return Blame(lead, None, around, min(faults(lead) / gained, 1.0), max(extra, 0.0), by_memory=True)


def _by_time(nodes: Sequence[NodeVerdict], aggregates: Sequence[AggregateVerdict], speed: float) -> Blame | None:
    """Rules 1 to 5: the lead by the time items lost."""

    def lost(x: AggregateVerdict | NodeVerdict) -> float:
        return x.current_ns / max(speed, 1e-9) - x.baseline_ns

    slower = [a for a in aggregates if a.verdict is Verdict.SLOWER and lost(a) > 0]
    gating = [v for v in nodes if v.verdict is Verdict.SLOWER and lost(v) > 0]  # small ones too: blame, not gate
    ops = [a for a in slower if a.kind is Kind.OP]
    # where the code changed, its module is named by the time it lost, found slower on its own or not
    found = {id(x) for x in (*slower, *gating)}  # by identity: verdicts are large records
    modules = [a for a in aggregates if a.kind in MODULE_KINDS and lost(a) > 0 and (id(a) in found or a.changed)]
    if not slower and not gating and not modules:  # the total alone, spread over unchanged code
        return None
    step = any(a.direction for a in aggregates)  # a training step's: each direction is explained on its own

    def way(x: AggregateVerdict | NodeVerdict) -> str:
        return x.direction if isinstance(x, AggregateVerdict) else x.node.direction if step else ""

    candidates: list[AggregateVerdict | NodeVerdict] = [*modules, *gating]
    # the modules whose code changed and came out faster count too where they add up, offsetting those that came out
    # slower: the instances of a changed class measured around a small change
    offsets = [a for a in aggregates if a.kind in MODULE_KINDS and a.changed and lost(a) <= 0]
    counted = [*candidates, *offsets]
    credit: dict[int, float] = {}
    apart = [_apart([x for x in counted if way(x) == d], lost, found, credit) for d in {way(x) for x in candidates}]
    extra = max([*apart, *map(lost, ops)], default=0.0)
    if extra <= 0:  # the losses explain nothing: the one changed place found slower leads, if there is one
        return _alone(slower, aggregates, lost)
    held = [a for a in modules if credit.get(id(a), lost(a)) > BLAME_SHARE * extra]
    held_nodes = [v for v in gating if lost(v) > BLAME_SHARE * extra]
    changed = [a for a in held if a.changed]
    if changed:  # the code that changed explains it: named before the unchanged modules inside it that slowed
        held, held_nodes = changed, []
    lead = min(held, key=_size, default=None)
    node = min(held_nodes, key=lambda v: (v.baseline_ns, v.node.key), default=None)
    if node is not None and (lead is None or node.baseline_ns <= lead.baseline_ns):
        direction = next((a.direction for a in aggregates if a.direction == node.node.direction), "")
        chain = enclosing(node.node.module, direction, aggregates, inclusive=node.node.op != "call_module")
        return Blame(None, node, chain, lost(node) / extra, extra)
    if lead is None:  # no module holds most: one operator type does
        op = min((a for a in ops if lost(a) > BLAME_SHARE * extra), key=lambda a: (a.baseline_ns, a.name), default=None)
        return Blame(op, None, (), lost(op) / extra, extra) if op is not None else None
    if lead.kind is Kind.MODULE and lead.verdict is not Verdict.SLOWER:
        # a module not found slower holds the extra time by what the places inside it lost; where the places whose
        # code changed that were found slower there are one, or the instances of one block, the test failed on them
        held_by_lead = _keys(lead)
        inside = [a for a in aggregates if a.verdict is Verdict.SLOWER and _keys(a) < held_by_lead]
        inner = _alone(inside, aggregates, lost)
        if inner is not None and inner.lead is not None:
            return replace(inner, share=min(max(lost(inner.lead), 0.0) / extra, 1.0), extra_ns=extra)
    # a class's instances lie in the module they share: that module is around it too
    around = enclosing(_home(lead), lead.direction, aggregates, inclusive=lead.kind is Kind.CLASS)
    return Blame(lead, None, around, lost(lead) / extra, extra)


_KINDS = (Kind.MODULE, Kind.PATTERN, Kind.CLASS)


def _alone(
    slower: Sequence[AggregateVerdict],
    aggregates: Sequence[AggregateVerdict],
    lost: Callable[[AggregateVerdict | NodeVerdict], float],
) -> Blame | None:
    """Where the losses leave no extra time to explain, the one place whose code changed that was found slower: the
    smallest module-like aggregate found slower with changed code, where every other one found so holds it (one
    chain from it outwards), or else the smallest pattern or class whose code changed that holds them all (the
    instances of one block); None where there is none, or where they lie apart in no one block. The instances of a
    changed attention measured by their medians both ways can sum to nothing while the pairs find one instance's new
    operations slower: the test failed there, and the failure names it."""
    found = sorted((a for a in slower if a.kind in MODULE_KINDS and a.changed), key=_size)
    if not found:
        return None
    lead = found[0]
    if any(not _keys(lead) <= _keys(a) for a in found[1:]):
        places = set().union(*map(_keys, found))
        blocks = [a for a in aggregates if a.kind in (Kind.PATTERN, Kind.CLASS) and a.changed and places <= _keys(a)]
        if not blocks:
            return None
        lead = min(blocks, key=_size)
    around = enclosing(_home(lead), lead.direction, aggregates, inclusive=lead.kind is Kind.CLASS)
    return Blame(lead, None, around, 1.0, lost(lead))


def _size(a: AggregateVerdict) -> tuple[float, int, int, str]:
    """The order in which the smallest candidate leads: its time, then the deepest, modules before patterns before
    classes."""
    return (a.baseline_ns, -_depth(a), _KINDS.index(a.kind), a.name)


def _apart(
    candidates: Sequence[AggregateVerdict | NodeVerdict],
    lost: Callable[[AggregateVerdict | NodeVerdict], float],
    slower: Collection[int],
    credit: dict[int, float] | None = None,
) -> float:
    """The time ``lost`` in places apart, the smallest candidates first (the classes after the modules, patterns and
    nodes): each counts what it lost where it holds none of the nodes of one counted before, and a module that holds
    some counts what it lost beyond them only where it was found slower itself (``slower``: their ids): a large
    module whose code changed only in the small ones inside it counts their loss, not its own noise, which can match
    theirs. A candidate that lost nothing or less counts inside the module that holds it (the instances of a changed
    class that came out faster by noise offset those that came out slower), nothing on its own. Two slowdowns in two
    places make the extra time of both, so that neither leads alone.

    ``credit`` gets, for a module not found slower whose changed operations all lie in the candidates inside it (the
    block around an attention whose ``Linear`` was unfused), what those lost: what it may hold of the extra time when
    the lead is chosen, so that the noise of its unchanged parts (the block's MLP) cannot make it lead."""
    counted: list[tuple[set[str], float]] = []
    # classes last: one spans the tree, and counted first, a small one (every Dropout) would keep the large modules
    # it touches (the attention whose code changed) from counting at all
    for x in sorted(
        candidates, key=lambda x: (isinstance(x, AggregateVerdict) and x.kind is Kind.CLASS, x.baseline_ns)
    ):
        keys = _keys(x)
        inside = [c for c in counted if c[0] <= keys]
        if any(not c[0].isdisjoint(keys) for c in counted if c not in inside):
            continue  # overlaps a counted one without holding it (a class across patterns): counted there
        parts = sum(loss for _, loss in inside)
        within = set().union(*(c[0] for c in inside)) if inside else set()
        counted = [c for c in counted if c not in inside]
        if not inside:
            counted.append((keys, lost(x)))
        else:
            counted.append((keys, max(lost(x), parts) if id(x) in slower else parts))
            changes = {n.key for n in (*x.added, *x.removed)} if isinstance(x, AggregateVerdict) else set()
            if credit is not None and changes and changes <= within and id(x) not in slower:
                credit[id(x)] = parts
    return sum(max(loss, 0.0) for _, loss in counted)


def _keys(x: AggregateVerdict | NodeVerdict) -> set[str]:
    if isinstance(x, NodeVerdict):
        return {x.node.key}
    return {n.key for n in (*x.members, *x.added, *x.removed)}


def _depth(a: AggregateVerdict) -> int:
    return depth_of(_home(a))


def _home(a: AggregateVerdict) -> str:
    """Where an aggregate sits in the module tree: its path or pattern; for a class, the modules its instances
    share (``transformer`` of ``transformer.h.0.ln_1`` and ``transformer.ln_f``)."""
    if a.kind is not Kind.CLASS:
        return a.where
    paths = [p.split(".") for p in a.instances]
    shared: list[str] = []
    for parts in zip(*paths, strict=False):
        if len(set(parts)) != 1:
            break
        shared.append(parts[0])
    return ".".join(shared)


def enclosing(
    path: str, direction: str, aggregates: Sequence[AggregateVerdict], *, inclusive: bool = False
) -> tuple[AggregateVerdict, ...]:
    """The module subtrees and patterns above ``path`` (and ``path`` itself with ``inclusive``) that were judged,
    outermost first, in ``direction``."""
    judged = {
        (a.where, a.direction): a
        for a in aggregates
        if a.kind in (Kind.MODULE, Kind.PATTERN) and a.direction == direction
    }
    out: list[AggregateVerdict] = []
    here = path if inclusive else parent_path(path)
    while here:
        # a list of blocks and nothing else is judged as its pattern (``h.*`` for ``h``: the same nodes)
        found = judged.get((here, direction)) or judged.get((f"{here}.*", direction))
        if found is not None and found not in out:
            out.append(found)
        here = parent_path(here)
    whole = judged.get((ROOT, direction))  # a training step's direction whole, around everything in it
    if whole is not None and whole not in out:
        out.append(whole)
    return tuple(reversed(out))
