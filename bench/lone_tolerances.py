"""Would wider tolerances hold a baseline of one process? Unchanged checks judged again at other tolerances.

    .venv/bin/python bench/gate_quality.py --unchanged 4 --slowed 0 --conditions none --keep /tmp/lone1 \
        --models resnet18,encoder,mobilenet,efficientnet -- --fxprof-processes 1      # once per recording
    .venv/bin/python bench/lone_tolerances.py /tmp/lone1 [/tmp/lone2 ...]

Each kept run holds one baseline per model, recorded from one process, and the reports of its unchanged checks,
each with its measurements (the first, and the fresh-process confirmation where the check asked for one). Every
check is judged again by ``judge.decision.compare`` itself at each pair of node and total tolerances: it fails
where its first measurement fails and its confirmation does too, as the plugin decides. A wider setting asks for
no confirmation that a narrower one did not, so the replay is exact for every row at or above the run's own
tolerances (the defaults). Prints the failed checks per model and setting.

``--spread`` reads the baselines of kept runs instead (any number of processes): per model, the share of its raw node
time in nodes whose spread between the recording's processes sets a band beyond ``NOISY_BAND`` (too noisy to decide)
at ``SPREAD_K``, and the page faults each process took.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gate_tradeoff import judged, load

from pytest_fxprof.judge.band import SPREAD_K
from pytest_fxprof.judge.decision import NOISY_BAND, Policy
from pytest_fxprof.records.verdicts import Status

SETTINGS = ((0.15, 0.10), (0.22, 0.14), (0.25, 0.15), (0.30, 0.20), (0.40, 0.30))
"""Node and total tolerances: the defaults, the defaults widened by sqrt(2) on the log scale (one process against
one process, where the defaults hold a process against a centre of several), and wider."""


def spread(kept: Path) -> None:
    """Per baseline of a kept run: the share of node time too noisy to decide, and each process's page faults."""
    limit = math.log(1.0 + NOISY_BAND) / SPREAD_K
    for path in sorted((kept / "baselines").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        entry = next(iter(data["entries"].values()))
        runs = entry["runs"]
        if len(runs) < 2:
            continue
        times = list(zip(*(run["node_ns"] for run in runs), strict=True))
        centres = [statistics.median(t) for t in times]
        noisy = sum(
            c for c, t in zip(centres, times, strict=True) if statistics.stdev(math.log(max(v, 1)) for v in t) > limit
        )
        faults = [run["faults"] for run in runs]
        print(
            f"{kept.name} {data['test_id']}: {noisy / sum(centres):.0%} of the "
            f"node time too noisy to decide; page faults per process {faults}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kept", nargs="+", type=Path, help="directories kept by gate_quality.py --keep")
    parser.add_argument("--spread", action="store_true", help="read the baselines' spread instead")
    ns = parser.parse_args()
    dirs = ns.kept
    if ns.spread:
        for kept in dirs:
            spread(kept)
        return
    failed: dict[tuple[float, float], dict[str, list[int]]] = {s: {} for s in SETTINGS}
    for kept in dirs:
        for (model, condition), items in load(kept).items():
            if condition != "none":
                continue
            for node, total in SETTINGS:
                single, _, full = judged(items, Policy(node_tolerance=node, total_tolerance=total))
                tally = failed[(node, total)].setdefault(model, [0, 0])
                for first, confirmed in zip(single, full, strict=True):
                    tally[1] += 1
                    regressed = first.status is Status.REGRESSION
                    tally[0] += regressed and confirmed is not None and confirmed.status is Status.REGRESSION
    for (node, total), per in failed.items():
        cells = ", ".join(f"{model} {n}/{runs}" for model, (n, runs) in sorted(per.items()))
        print(f"node +{node:.0%}, total +{total:.0%}: {cells}")


if __name__ == "__main__":
    main()
