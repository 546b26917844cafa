"""False alarms against detection for other settings, re-decided from what ``gate_quality.py`` measured.

    .venv/bin/python bench/gate_quality.py --keep /tmp/gq -- --fxprof-node-tolerance 0.07 \
        --fxprof-total-tolerance 0.08                               # measure once, keep the reports
    .venv/bin/python bench/gate_tradeoff.py /tmp/gq [/tmp/gq2 ...]  # then sweep the decision's knobs

(``make gate-quality`` runs both.)

Every check report holds each profile's measurements (``runs``) and, per node, aggregate and total,
the ratios against the baseline and the deviation its band came from (``sigma``). The band of any
other setting follows from those: the largest of the tolerance, ``k`` deviations and the floor. So
the same measurements are judged again under each combination of ``--k``, ``--node-tolerance`` and
``--total-tolerance``, without measuring anything twice. Rules that change the ratios themselves
(``--variant FLOOR_SHARE:DRIFT_DOUBT:FASTER_CREDIT``, see ``decision.Policy``) are judged afresh,
one variant at a time.

Three rates per setting and condition:

* *replayed*: each check judged again on every measurement it recorded, its real confirmation
  included, as the plugin would have judged it under this setting: it fails if its first measurement
  fails and so does the confirmation. Exact where the run recorded a confirmation whenever this setting
  asks for one; a check whose first measurement now fails but which recorded none (the run's own
  settings did not ask) is *unknown* and counted apart. Measure with tolerances at least as strict as
  every row to be replayed (``gate_quality.py -- --fxprof-node-tolerance 0.07 ...``) and none is at
  k 3 or more; k is not a command-line setting, so rows at a smaller k can have unknowns.
* *single*: a failure on one measurement (no confirmation).
* *paired*: a failure on both of two measurements from consecutive check processes of the same test,
  standing in for a confirmation where none was recorded. Both come from processes that ran the
  whole check session, while a real confirmation runs the one test in a fresh process like the
  baseline's, so this overstates false alarms that a process's history causes.

Conditions are summed into classes: unchanged, a slowed node of 1 ms or more by each amount, a smaller
node, the group and the whole model. Prints one table per variant (replayed, with single and paired
beside it) and writes all of it as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_fxprof.judge.band import band_for
from pytest_fxprof.judge.decision import NOISY_BAND, Policy, compare
from pytest_fxprof.judge.noise import GATING_NS
from pytest_fxprof.records.measurement import BaselineEntry, Run
from pytest_fxprof.records.verdicts import BandSource, Comparison, Judgement, Status
from pytest_fxprof.store.baseline import BaselineStore
from pytest_fxprof.store.validation import run_from_json

BENCH = Path(__file__).resolve().parent
CASE = re.compile(r"\[(?P<model>[^-\]]+)-(?P<condition>[^\]]+)\]$")


def slower(j: Judgement, tolerance: float, k: float) -> bool:
    band, source = band_for(tolerance, j.sigma, k=k, floor=j.floor)
    noisy = band > NOISY_BAND and source is BandSource.SPREAD
    return not noisy and min(j.ratios) > 1.0 + band


def fails(c: Comparison, node_tolerance: float, total_tolerance: float, k: float) -> bool:
    """Whether the comparison's measurements fail under these knobs (the rules of ``judge.decision.compare``)."""
    if c.status is Status.MISMATCH:
        return False
    if c.total is not None and slower(c.total.judgement, total_tolerance, k):
        return True
    if any(v.gates and slower(v.judgement, node_tolerance, k) for v in c.nodes):
        return True
    return any(slower(a.judgement, node_tolerance, k) for a in c.aggregates)


def load(keep: Path) -> dict[tuple[str, str], list[tuple[BaselineEntry, list[Run]]]]:
    """Per (model, condition): each check's baseline entry and first measurement, in check order."""
    store = BaselineStore(keep / "baselines")
    found: dict[tuple[str, str], list[tuple[int, BaselineEntry, list[Run]]]] = defaultdict(list)
    baselines: dict[str, BaselineEntry] = {}
    for path in sorted(keep.glob("report-*.json")):
        order = int(path.stem.rsplit("-", 1)[1]) + (10_000 if "-slowed-" in path.name else 0)
        for profile in json.loads(path.read_text(encoding="utf-8"))["profiles"]:
            match = CASE.search(profile["test_id"])
            if match is None or "runs" not in profile:
                continue
            test_id = profile["test_id"]
            if test_id not in baselines:
                recorded = store.load(test_id)
                if recorded is None:
                    continue
                baselines[test_id] = recorded.entries[profile["key"]]
            entry = baselines[test_id]
            runs = [run_from_json(r, test_id, len(entry.nodes)) for r in profile["runs"]]
            found[(match["model"], match["condition"])].append((order, entry, runs))
    return {case: [(e, r) for _, e, r in sorted(items, key=lambda t: t[0])] for case, items in found.items()}


def classes(keep: Path) -> dict[tuple[str, str], str]:
    """Each (model, condition) of a kept run in its class: none, big+25 (a node of 1 ms or more), small+25, ..."""
    plan = json.loads((keep / "plan.json").read_text(encoding="utf-8"))
    out = {}
    for model, planned in plan.get("models", {}).items():
        for condition, spec in planned.get("conditions", {}).items():
            if condition.startswith("node") and spec.get("slowed"):
                # the targets are for nodes of 1 ms or more; a smaller one may still gate by its share
                size = "big" if spec["slowed"][0]["baseline_ns"] >= GATING_NS else "small"
                out[(model, condition)] = size + "+" + condition.rsplit("+", 1)[1]
            else:
                out[(model, condition)] = condition
    return out


Items = Sequence[tuple[BaselineEntry, list[Run]]]


Judged = tuple[list[Comparison], list[Comparison], list[Comparison | None]]


def judged(items: Items, policy: Policy) -> Judged:
    """Each check's first measurement alone; consecutive checks' first measurements as pairs; and
    each check on all its recorded measurements (None where it recorded only one)."""
    single = [compare(e, replace(e, runs=(runs[0],)), policy) for e, runs in items]
    pairs = [
        compare(a[0], replace(a[0], runs=(a[1][0], b[1][0])), policy)
        for a, b in itertools.pairwise(items)
        if a[0] == b[0]
    ]
    full = [compare(e, replace(e, runs=tuple(runs)), policy) if len(runs) > 1 else None for e, runs in items]
    return single, pairs, full


def replayed(
    single: Comparison, full: Comparison | None, node_tolerance: float, total_tolerance: float, k: float
) -> bool | None:
    """Whether the plugin fails the check under these knobs: its first measurement fails and its
    confirmation agrees. None when the first fails but no confirmation was recorded."""
    if not fails(single, node_tolerance, total_tolerance, k):
        return False
    if full is None:
        return None
    return fails(full, node_tolerance, total_tolerance, k)


def parse_variant(text: str) -> Policy:
    try:
        floor_share, doubt, credit = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write FLOOR_SHARE:DRIFT_DOUBT:FASTER_CREDIT, e.g. 0.002:0.5:0"
        ) from None
    return Policy(floor_share=floor_share, drift_doubt=doubt, faster_credit=credit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("keep", type=Path, nargs="+", help="directories written by gate_quality.py --keep")
    parser.add_argument("--k", type=float, nargs="+", default=[2.5, 3.0, 4.0])
    parser.add_argument("--node-tolerance", type=float, nargs="+", default=[0.07, 0.08, 0.10, 0.12, 0.15])
    parser.add_argument("--total-tolerance", type=float, nargs="+", default=[0.08, 0.10, 0.15])
    default = Policy()
    parser.add_argument(
        "--variant",
        type=parse_variant,
        nargs="+",
        default=[default],
        help="FLOOR_SHARE:DRIFT_DOUBT:FASTER_CREDIT (default: the package's defaults)",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "gate_tradeoff.json")
    ns = parser.parse_args()

    cases: dict[tuple[str, str], list[tuple[BaselineEntry, list[Run]]]] = defaultdict(list)
    kinds: dict[tuple[str, str], str] = {}
    for keep in ns.keep:
        kinds.update(classes(keep))
        for case, items in load(keep).items():
            cases[case].extend(items)
    if not cases:
        raise SystemExit(f"no check reports with measurements in {', '.join(map(str, ns.keep))}")
    order = ["none", *sorted({kinds.get(c, c[1]) for c in cases} - {"none"})]
    results: list[dict[str, Any]] = []
    for variant in ns.variant:
        name = f"{variant.floor_share:g}:{variant.drift_doubt:g}:{variant.faster_credit:g}"
        done = {case: judged(items, variant) for case, items in sorted(cases.items())}
        print(f"variant {name} (floor share, drift doubt, faster credit):")
        for k, node_tol, total_tol in itertools.product(ns.k, ns.node_tolerance, ns.total_tolerance):
            row: dict[str, Any] = {
                "variant": name,
                "k": k,
                "node_tolerance": node_tol,
                "total_tolerance": total_tol,
                "rates": {},
            }
            for model in [*sorted({m for m, _ in cases}), "all"]:
                for kind in order:
                    picked = [
                        v for case, v in done.items() if kinds.get(case, case[1]) == kind and model in (case[0], "all")
                    ]
                    single = [c for s, _, _ in picked for c in s]
                    pairs = [c for _, p, _ in picked for c in p]
                    full = [c for _, _, f in picked for c in f]
                    replays = [replayed(s, f, node_tol, total_tol, k) for s, f in zip(single, full, strict=True)]
                    row["rates"].setdefault(model, {})[kind] = {
                        "replayed_failed": sum(x is True for x in replays),
                        "replayed_unknown": sum(x is None for x in replays),
                        "single": sum(fails(c, node_tol, total_tol, k) for c in single) / max(len(single), 1),
                        "paired": sum(fails(c, node_tol, total_tol, k) for c in pairs) / max(len(pairs), 1),
                        "checks": len(single),
                        "pairs": len(pairs),
                    }
            results.append(row)
        print_table([r for r in results if r.get("variant") == name], order)
    ns.out.write_text(json.dumps({"results": results}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {ns.out}")


def cell(rates: dict[str, Any]) -> str:
    """``failed/checks`` replayed (``+N?`` unknown), then the single and paired rates."""
    unknown = f"+{rates['replayed_unknown']}?" if rates["replayed_unknown"] else ""
    return f"{rates['replayed_failed']}/{rates['checks']}{unknown} {rates['single']:.0%} {rates['paired']:.0%}"


def print_table(results: Sequence[dict[str, Any]], order: Sequence[str]) -> None:
    """One line per setting: per class, replayed failures/checks (+unknown), single and paired rates."""
    width = max(len(c) for c in order) + 12
    print("  k    node  total " + "".join(f"{c:>{width}}" for c in order))
    for row in results:
        cells = "".join(cell(row["rates"]["all"][c]).rjust(width) for c in order)
        print(f"  {row['k']:<4g} {row['node_tolerance']:<5g} {row['total_tolerance']:<5g}{cells}")


if __name__ == "__main__":
    main()
