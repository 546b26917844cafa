"""What the decision costs: ``compare`` (against a baseline) and ``compare_pairs`` (against a revision) on large
graphs, this checkout's code against another revision's, side by side in one run.

    .venv/bin/python bench/decision_cost.py --against 9a77b95 --out bench/decision_cost.json
    .venv/bin/python bench/decision_cost.py --against HEAD~3 --repeats 3 --graphs gpt-48,blocks-12

Each graph is synthetic (no torch), shaped as models are: ``blocks-N`` is four stages of ``N`` transformer blocks
(8 submodules of 4 nodes each, times from four sizes, so thousands of nodes share a size: the worst case for the
speed factors' peers), ``gpt-N`` is ``N`` GPT blocks of 14 nodes of varied sizes, with classes; every graph has a
baseline of 5 processes, a check with its confirmation (2 runs) and 8 pairs of runs against a revision, with
log-normal noise (seeded). Per graph and code, the median of ``--repeats`` timings in a fresh interpreter each
(the other revision's ``pytest_fxprof`` exported with ``git archive`` to a temporary directory and put first on
the path; removed at the end), alternating the two codes. Prints a table and writes it as JSON (``--out``) with
the number of aggregates each code judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIMER = r"""
import json, math, random, sys, time
from pytest_fxprof.records.measurement import BaselineEntry, Capture, Environment, NodeInfo, Protocol, Run, Tolerances
from pytest_fxprof.judge.decision import Policy, compare
from pytest_fxprof.judge.paired import PairedPolicy, compare_pairs

kind, size = sys.argv[1].rsplit("-", 1)
size = int(size)
rng = random.Random(0)
nodes, times, classes, seen = [], [], {}, {}


def add(module, op, ns):
    k = seen.get((module, op), 0)
    seen[(module, op)] = k + 1
    nodes.append(NodeInfo(f"call_function:{module}:{op}#{k}", f"n{len(nodes)}", "call_function", op, module))
    times.append(ns)


if kind == "blocks":
    for s in range(4):
        for b in range(size):
            for sub in ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc1", "mlp.fc2", "norm1", "norm2"):
                for op in ("aten.linear.default", "aten.add.Tensor", "aten.mul.Tensor", "aten.relu.default"):
                    add(f"stages.{s}.blocks.{b}.{sub}", op, rng.choice([5_000, 20_000, 100_000, 500_000]))
            classes.update({f"stages.{s}.blocks.{b}": "Block", f"stages.{s}.blocks.{b}.attn": "Attention"})
            classes.update({f"stages.{s}.blocks.{b}.mlp": "Mlp"})
else:
    for b in range(size):
        h = f"transformer.h.{b}"
        for module, op, ns in (
            (f"{h}.ln_1", "aten.layer_norm.default", 40_000), (f"{h}.attn.c_attn", "aten.linear.default", 900_000),
            (f"{h}.attn", "aten.split.Tensor", 3_000), (f"{h}.attn", "aten.view.default", 2_000),
            (f"{h}.attn", "aten.transpose.int", 2_000),
            (f"{h}.attn", "aten.scaled_dot_product_attention.default", 600_000),
            (f"{h}.attn.c_proj", "aten.linear.default", 300_000), (f"{h}", "aten.add.Tensor", 30_000),
            (f"{h}.ln_2", "aten.layer_norm.default", 40_000), (f"{h}.mlp.c_fc", "aten.linear.default", 1_200_000),
            (f"{h}.mlp.act", "aten.gelu.default", 150_000), (f"{h}.mlp.c_proj", "aten.linear.default", 1_200_000),
            (f"{h}.mlp.dropout", "aten.dropout.default", 2_000), (f"{h}", "aten.add.Tensor", 30_000),
        ):
            add(module, op, ns * rng.uniform(0.8, 1.25))
        for name, cls in (("", "Block"), (".attn", "CausalSelfAttention"), (".mlp", "MLP"), (".ln_1", "LayerNorm")):
            classes[h + name] = cls
        classes[h + ".ln_2"] = "LayerNorm"
# a revision before classes were recorded takes none
known = tuple(sorted(classes.items()))
capture = Capture("export", classes=known) if hasattr(Capture, "class_map") else Capture("export")
env = Environment("2", "3", "linux", "cpu", 1, "cpu", "glibc")


def runs(k):
    out = []
    for _ in range(k):
        t = tuple(max(1, round(x * math.exp(rng.gauss(0, 0.05)))) for x in times)
        out.append(Run(sum(t), sum(t), 1_000_000, t, tuple(0 for _ in t)))
    return tuple(out)


def entry(r):
    return BaselineEntry(capture, env, Protocol(5, 20, 1, len(r)), Tolerances(0.15, 0.1), tuple(nodes), r)


base, check, old, new = entry(runs(5)), entry(runs(2)), entry(runs(8)), entry(runs(8))
start = time.perf_counter()
c = compare(base, check, Policy())
stored = time.perf_counter() - start
start = time.perf_counter()
p = compare_pairs(old, new, PairedPolicy(), against="base")
paired = time.perf_counter() - start
print(json.dumps({"nodes": len(nodes), "aggregates": len(c.aggregates), "stored_s": stored, "paired_s": paired}))
"""


def timed(graph: str, package: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = str(package)
    proc = subprocess.run(
        [sys.executable, "-c", TIMER, graph],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"timing {graph} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the revision whose decision code to time beside this one")
    parser.add_argument("--graphs", default="gpt-12,gpt-48,blocks-6,blocks-12", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.against, "pytest_fxprof"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        codes = {"this checkout": None, args.against: Path(tmp)}
        rows = []
        for graph in args.graphs.split(","):
            got: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
            for _ in range(args.repeats):
                for name, package in codes.items():  # alternating, so that drift meets both alike
                    got[name].append(timed(graph, package))
            for name, results in got.items():
                row = {
                    "graph": graph,
                    "code": name,
                    "nodes": int(results[0]["nodes"]),
                    "aggregates": int(results[0]["aggregates"]),
                    "stored_s": round(statistics.median(r["stored_s"] for r in results), 3),
                    "paired_s": round(statistics.median(r["paired_s"] for r in results), 3),
                }
                rows.append(row)
                print(
                    f"{graph:10} {name:14} {row['nodes']:5d} nodes {row['aggregates']:4d} aggregates  "
                    f"against a baseline {row['stored_s']:7.3f} s  against a revision {row['paired_s']:6.3f} s"
                )
    if args.out is not None:
        args.out.write_text(
            json.dumps({"against": args.against, "repeats": args.repeats, "rows": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
