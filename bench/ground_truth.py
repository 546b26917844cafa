"""The ground truth of bench/code_changes.py's changes: what each really costs the program a user runs.

    .venv/bin/python bench/ground_truth.py --out bench/ground_truth.jsonl                 # every change, both designs
    .venv/bin/python bench/ground_truth.py --out q.jsonl --families vit-pytorch \\
        --changes cait-talking-heads-broadcast,cait-comment --processes 2 --pairs 2 --repeats 10
    .venv/bin/python bench/ground_truth.py --out q.jsonl --allocator glibc-tuned --designs interleaved
    .venv/bin/python bench/ground_truth.py --out q.jsonl --allocator jemalloc   # apt-get install -y libjemalloc2
    .venv/bin/python bench/ground_truth.py --out q.jsonl --families vit-pytorch --control   # what no edit reads
    .venv/bin/python bench/ground_truth.py --summary bench/ground_truth.jsonl            # the truth per change
    .venv/bin/python bench/ground_truth.py --truth bench/ground_truth.jsonl --compare bench/code_changes.jsonl \\
        --compare-json q.json                                                           # the gate against it

What the gate's checks should find: each change (and each neutral edit) of ``code_changes.CHANGES``, selected by
``--families`` and ``--changes`` as there, timed as a user's program runs it: the model called eagerly
(``model(x)``, no profiler, no pytest, no plugin), ``torch.no_grad()``, ``torch.set_num_threads(1)``, in ordinary
``python`` processes (the interpreter running this script, ``sys.executable``) that import torch and the model's
source and nothing of this project. The base source is the installed package's, copied as code_changes.py copies
it (``code_changes.installed_source``), the change's the same text with its edits made (``code_changes.apply``);
both are written into a ``tempfile`` directory as two files, loaded as two separately named modules; no git. Each
model is built by the bench's builder (``code_changes.BUILD``: random weights from seed 0, eval mode, CPU, its
input). Each call is timed by ``time.thread_time_ns()`` (the CPU time of the calling thread, the only one that
computes) and counts its minor page faults (``resource.getrusage(RUSAGE_THREAD).ru_minflt``): a change whose
cost is memory (large temporaries, float64 round trips, broadcasts instead of contractions) shows it in its faults
as much as in its time, and how much it costs depends on the allocator's state, so each process is one sample of
that state.

Designs (``--designs``, both by default):

* ``interleaved``: ``--processes`` fresh processes (5), each building both models (the old from the base's
  module, the new from the change's, the same input: the old side's), ``--warmup`` calls of each (5), then
  ``--repeats`` rounds (30) in ABBA order (old then new, new then old, ...). A process's ratio is the median over
  its rounds of new over old; its ms and faults per side the medians over its calls.
* ``separate``: ``--pairs`` pairs (5) of fresh processes, each holding one side (its model alone, as a user's
  program holds one version), the pair's two run one after the other, old first in even pairs, new first in odd
  ones; each process ``--warmup`` calls then ``--repeats`` timed ones. A pair's ratio is the new process's median
  over the old one's. The input is the old side's, drawn once per change by a process of its own and loaded by
  every process of the pairs (the builder draws it after the weights, so a change that adds weights would draw
  another).

Environment (``--allocator``): each measuring process inherits this one's environment less ``MALLOC_*``,
``GLIBC_TUNABLES`` and ``LD_PRELOAD``, then

* ``glibc`` (default): nothing more, glibc's malloc as a user's process has it.
* ``glibc-tuned``: ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 MALLOC_TOP_PAD_=67108864``: no large
  block mapped or given back, so that the temporaries reuse the heap's pages.
* ``jemalloc``, ``tcmalloc``: ``LD_PRELOAD`` of Debian's ``libjemalloc.so.2`` (libjemalloc2) or
  ``libtcmalloc_minimal.so.4`` (libtcmalloc-minimal4), found with ``dpkg -L``: ``apt-get install -y libjemalloc2
  libtcmalloc-minimal4`` where missing. Each process reports the allocator libraries mapped into it
  (``preloaded``) so that a preload that did not take shows.

Each change and design appends one JSON line to ``--out`` (``type`` ``truth``); a change already there for the same
design and allocator is skipped, so that a stopped run goes on where it ended. Fields:

* ``family``, ``model``, ``change``, ``kind`` (change or neutral), ``module``, ``class``: as code_changes.py's;
  with ``--control``, per family also ``<model>-identical`` of the kind ``control``: the base against an identical
  copy of its text (another file, another module name), what the design reads where nothing changed: processes
  of the same program land in one of a few allocator states (their faults per call repeat call for call), and a
  process of one side in another state than its partner reads a slowdown or a speed-up that no code made.
* ``design``, ``allocator``, ``allocator_env`` (the variables set for it), ``processes`` (interleaved) or
  ``pairs`` (separate), ``repeats``, ``warmup``.
* ``ratios``: new over old per process (interleaved: the median of its rounds' ratios) or per pair (separate: the
  ratio of the two processes' medians).
* ``old_ms``, ``new_ms``: per process (or pair) each side's median milliseconds per call; ``old_faults``,
  ``new_faults``: each side's median minor page faults per call.
* ``runs``: what each process printed (interleaved) or each pair's two processes (``order``, ``old``, ``new``):
  per side the median, every call's ms and faults, the pid, ``preloaded``, ``malloc_env``.
* ``date``, ``machine`` (``cpu``: the model name of /proc/cpuinfo, ``cores``), ``torch``, ``python``,
  ``source`` (where the family's source came from).

``--summary FILE`` prints per allocator, design and change (lines of the same three merged): the ratios' min,
median and max over processes (or pairs); ``direction``: ``slower`` where every ratio is above x1.02, ``faster``
where every one is below x0.98, ``unchanged`` where every one lies within, ``mixed`` otherwise; ``>=10%``: the
share of processes slower by 10 % or more; ``must fail``: slower by 5 % in the median process (x1.05), or by 10 %
in at least a third of the processes; each side's median ms and faults per call, the faults per process
(old/new).

``--compare CHECKS.jsonl`` (the check lines of code_changes.py, ``type`` ``check``) with ``--truth FILE`` (the
lines of this script; ``--out`` where not given) joins each check with its change's truth (same model and change,
the allocator of ``--allocator``; each design of the truth on its own) and prints per change and mode (``compiled``
checks apart: the truth is eager): the truth's range and direction, whether it must fail, the checks' total
ratios (the report's total: ``total_ratio`` of the line, else the geometric mean of its total's ratios per pair in
``items``, else the total's ratio where it was flagged) and statuses. Then per design and mode the figures:

* ``direction``: of the checks of changes whose truth agrees in direction (slower, faster or unchanged, not
  mixed) and whose status is pass or regression, those whose verdict agrees: a regression where the truth is
  slower, a pass where it is faster or unchanged.
* ``total within 5 %``: of the checks with a total, those within 5 % of the truth's range
  (``truth_min / 1.05 <= total <= truth_max * 1.05``).
* ``must-fail failed``: of the checks of changes the truth says must fail, those that failed (regression); and
  the must-fail changes every check of which failed.
* ``neutral failed``: of the checks of neutral edits, those that failed (false alarms).

``--compare-json PATH`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import code_changes as cc

DESIGNS = ("interleaved", "separate")
ALLOCATORS = ("glibc", "glibc-tuned", "jemalloc", "tcmalloc")
TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "2147483647", "MALLOC_TOP_PAD_": "67108864"}
PRELOADS = {
    "jemalloc": ("libjemalloc2", "libjemalloc.so.2"),
    "tcmalloc": ("libtcmalloc-minimal4", "libtcmalloc_minimal.so.4"),
}
APT = "apt-get install -y libjemalloc2 libtcmalloc-minimal4"
CLEARED = ("GLIBC_TUNABLES", "LD_PRELOAD")  # and every MALLOC_*

SLOWER = 1.02  # a process slower beyond this, or faster beyond FASTER, says a direction
FASTER = 0.98
MUST_MEDIAN = 1.05  # must fail: the median process slower by 5 % ...
MUST_RATIO = 1.10  # ... or at least MUST_SHARE of the processes slower by 10 %
MUST_SHARE = 1 / 3
MARGIN = 1.05  # a total within 5 % of the truth's range
CHILD_TIMEOUT_S = 900


# The measuring process -------------------------------------------------------------------------------

CHILD = '''\
"""One measuring process of bench/ground_truth.py: builds its models, times their calls, prints one JSON line."""
import importlib.util
import json
import os
import resource
import statistics
import sys
import time

import torch


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def call(model, x):
    """One call, its output dropped as a user's loop drops it: thread CPU ns and minor page faults."""
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    start = time.thread_time_ns()
    model(x)
    ns = time.thread_time_ns() - start
    return ns, resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults


def side(calls):
    return {
        "ms": statistics.median(ns for ns, _ in calls) / 1e6,
        "faults": statistics.median(f for _, f in calls),
        "calls_ms": [round(ns / 1e6, 4) for ns, _ in calls],
        "calls_faults": [f for _, f in calls],
    }


def preloaded():
    with open("/proc/self/maps", encoding="utf-8") as f:
        names = {line.split()[-1].rsplit("/", 1)[-1] for line in f if "malloc" in line.rsplit("/", 1)[-1]}
    return sorted(names)


def main():
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    torch.set_num_threads(1)
    make = load(spec["builder"], "ground_truth_build").make
    built = {s: make(spec["model"], load(spec["sources"][s], f"ground_truth_{s}_source")) for s in spec["sides"]}
    x = built[spec["sides"][0]][1]
    if spec.get("save_input"):
        torch.save(x, spec["save_input"])
        print(json.dumps({"saved": spec["save_input"]}))
        return
    if spec.get("input"):
        x = torch.load(spec["input"])
    models = {s: m for s, (m, _) in built.items()}
    calls = {s: [] for s in spec["sides"]}
    with torch.no_grad():
        for _ in range(spec["warmup"]):
            for s in spec["sides"]:
                models[s](x)
        for i in range(spec["repeats"]):  # ABBA: old new, new old, ...
            for s in spec["sides"] if i % 2 == 0 else spec["sides"][::-1]:
                calls[s].append(call(models[s], x))
    out = {"pid": os.getpid(), "torch": torch.__version__, "sides": {s: side(c) for s, c in calls.items()}}
    if len(spec["sides"]) == 2:
        old, new = spec["sides"]
        paired = [b / max(a, 1) for (a, _), (b, _) in zip(calls[old], calls[new])]
        out["ratio"] = statistics.median(paired)
        out["ratio_of_medians"] = out["sides"][new]["ms"] / out["sides"][old]["ms"]
    out["preloaded"] = preloaded()
    out["malloc_env"] = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k in {cleared!r}}
    print(json.dumps(out))


main()
'''.replace("{cleared!r}", repr(CLEARED))


class MeasureError(Exception):
    """A measuring process that failed."""


def child_env(allocator: str, environ: Mapping[str, str], preload: str = "") -> dict[str, str]:
    """The environment of a measuring process: ``environ`` less every ``MALLOC_*``, ``GLIBC_TUNABLES`` and
    ``LD_PRELOAD``, then the allocator's own (``preload``: the library's path, for jemalloc and tcmalloc)."""
    env = {k: v for k, v in environ.items() if not k.startswith("MALLOC_") and k not in CLEARED}
    if allocator == "glibc-tuned":
        env |= TUNED
    elif allocator in PRELOADS:
        if not preload:
            raise ValueError(f"{allocator} needs the library to preload")
        env["LD_PRELOAD"] = preload
    elif allocator != "glibc":
        raise ValueError(f"unknown allocator {allocator!r}")
    return env


def allocator_env(allocator: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What the allocator sets beyond the cleared environment."""
    preload = preload_path(allocator) if allocator in PRELOADS else ""
    env = child_env(allocator, environ, preload)
    return {k: v for k, v in env.items() if k.startswith("MALLOC_") or k in CLEARED}


def preload_path(allocator: str) -> str:
    """The Debian library of ``allocator``, by ``dpkg -L`` of its package; stops with the install command."""
    package, name = PRELOADS[allocator]
    done = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=False)
    found = [p for p in done.stdout.splitlines() if p.endswith("/" + name) and Path(p).exists()]
    if done.returncode != 0 or not found:
        raise SystemExit(f"error: {package} is not installed ({name}); as root: {APT}")
    return found[0]


def run_child(work: Path, spec: dict[str, Any], env: dict[str, str], what: str) -> dict[str, Any]:
    path = work / f"spec-{os.getpid()}-{len(list(work.glob('spec-*')))}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    try:
        done = subprocess.run(
            [sys.executable, str(work / "ground_truth_child.py"), str(path)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise MeasureError(f"{what}: no answer in {CHILD_TIMEOUT_S} s") from exc
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stdout + done.stderr)[-3000:]
        raise MeasureError(f"{what}: the measuring process failed (exit {done.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# Measuring -------------------------------------------------------------------------------------------


def interleaved(work: Path, base: dict[str, Any], env: dict[str, str], processes: int, what: str) -> dict[str, Any]:
    runs = []
    for k in range(processes):
        runs.append(run_child(work, base | {"sides": ["old", "new"]}, env, f"{what}, process {k + 1}"))
        print(f"  {what} process {k + 1}/{processes}: x{runs[-1]['ratio']:.3f}", flush=True)
    return {
        "processes": processes,
        "ratios": [round(r["ratio"], 4) for r in runs],
        "old_ms": [round(r["sides"]["old"]["ms"], 3) for r in runs],
        "new_ms": [round(r["sides"]["new"]["ms"], 3) for r in runs],
        "old_faults": [r["sides"]["old"]["faults"] for r in runs],
        "new_faults": [r["sides"]["new"]["faults"] for r in runs],
        "torch": runs[0]["torch"],
        "runs": runs,
    }


def separate(work: Path, base: dict[str, Any], env: dict[str, str], pairs: int, what: str) -> dict[str, Any]:
    data = work / "input.pt"
    data.unlink(missing_ok=True)
    run_child(work, base | {"sides": ["old"], "save_input": str(data)}, env, f"{what}, the input")
    runs = []
    for k in range(pairs):
        order = ["old", "new"] if k % 2 == 0 else ["new", "old"]
        pair: dict[str, Any] = {"order": "-".join(order)}
        for s in order:
            pair[s] = run_child(work, base | {"sides": [s], "input": str(data)}, env, f"{what}, pair {k + 1} {s}")
        pair["ratio"] = pair["new"]["sides"]["new"]["ms"] / pair["old"]["sides"]["old"]["ms"]
        runs.append(pair)
        print(f"  {what} pair {k + 1}/{pairs} ({pair['order']}): x{pair['ratio']:.3f}", flush=True)
    return {
        "pairs": pairs,
        "ratios": [round(p["ratio"], 4) for p in runs],
        "old_ms": [round(p["old"]["sides"]["old"]["ms"], 3) for p in runs],
        "new_ms": [round(p["new"]["sides"]["new"]["ms"], 3) for p in runs],
        "old_faults": [p["old"]["sides"]["old"]["faults"] for p in runs],
        "new_faults": [p["new"]["sides"]["new"]["faults"] for p in runs],
        "torch": runs[0]["old"]["torch"],
        "runs": runs,
    }


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count()}


def key(line: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return line["model"], line["change"], line["design"], line["allocator"]


def run(ns: argparse.Namespace, changes: list[cc.Change]) -> None:
    done = {key(x) for x in read_lines(ns.out) if x.get("type") == "truth"}
    todo = [
        (c, d)
        for c in changes
        for d in ns.designs
        if (cc.model_of(c), c.name, d, ns.allocator) not in done  # one line per change, design and allocator
    ]
    if not todo:
        print("every selected change is already in", ns.out)
        return
    families = list(dict.fromkeys(c.family for c, _ in todo))
    cc.require(families)
    set_env = allocator_env(ns.allocator, os.environ)
    env = child_env(ns.allocator, os.environ, set_env.get("LD_PRELOAD", ""))
    where = machine()
    work = Path(tempfile.mkdtemp(prefix="fxprof-ground-truth-"))
    try:
        (work / "ground_truth_child.py").write_text(CHILD, encoding="utf-8")
        (work / "build_zoo.py").write_text(cc.BUILD.format(modules={}), encoding="utf-8")
        texts: dict[str, str] = {}
        sources: dict[str, str] = {}
        for name in families:
            texts[name], sources[name] = cc.installed_source(cc.FAMILIES[name])
            (work / f"base_{name.replace('-', '_')}.py").write_text(texts[name], encoding="utf-8")
        for k, (c, design) in enumerate(todo, 1):
            family = cc.FAMILIES[c.family]
            changed = work / f"changed_{c.name.replace('-', '_')}.py"
            changed.write_text(cc.apply(texts[c.family], c.edits, f"{sources[c.family]} ({c.name})"), encoding="utf-8")
            base = {
                "model": family.model,
                "builder": str(work / "build_zoo.py"),
                "sources": {"old": str(work / f"base_{c.family.replace('-', '_')}.py"), "new": str(changed)},
                "warmup": ns.warmup,
                "repeats": ns.repeats,
            }
            what = f"{c.name} {design} {ns.allocator}"
            print(f"{k}/{len(todo)}: {what}", flush=True)
            if design == "interleaved":
                measured = interleaved(work, base, env, ns.processes, what)
            else:
                measured = separate(work, base, env, ns.pairs, what)
            line = {
                "type": "truth",
                "family": c.family,
                "model": family.model,
                "change": c.name,
                "kind": c.kind,
                "module": c.module,
                "class": c.cls,
                "design": design,
                "allocator": ns.allocator,
                "allocator_env": set_env,
                "repeats": ns.repeats,
                "warmup": ns.warmup,
                **measured,
                "date": cc.now(),
                "machine": where,
                "python": platform.python_version(),
                "source": sources[c.family],
            }
            cc.append(ns.out, line)
            s = truth_of(line["ratios"])
            print(
                f"{c.name} {design} {ns.allocator}: x{s['min']:.3f}..x{s['max']:.3f} (median x{s['median']:.3f}), "
                f"{s['direction']}, must fail: {'yes' if s['must_fail'] else 'no'}; faults per call "
                f"{fmt_faults(line['old_faults'], line['new_faults'])}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


# The rules (pure) ------------------------------------------------------------------------------------


def direction(ratios: Iterable[float]) -> str:
    """Whether the processes agree: ``slower`` (every ratio above x1.02), ``faster`` (every one below x0.98),
    ``unchanged`` (every one within), ``mixed`` otherwise (or none at all)."""
    rs = list(ratios)
    if not rs:
        return "mixed"
    if all(r > SLOWER for r in rs):
        return "slower"
    if all(r < FASTER for r in rs):
        return "faster"
    if all(FASTER <= r <= SLOWER for r in rs):
        return "unchanged"
    return "mixed"


def share_slower(ratios: Iterable[float], by: float = MUST_RATIO) -> float:
    """The share of processes at least ``by`` slower (x1.10: slower by 10 % or more)."""
    rs = list(ratios)
    return sum(r >= by for r in rs) / len(rs) if rs else 0.0


def must_fail(ratios: Iterable[float]) -> bool:
    """Whether a gate must fail the change: slower by 5 % in the median process, or by 10 % in at least a third of
    the processes."""
    rs = list(ratios)
    if not rs:
        return False
    return statistics.median(rs) >= MUST_MEDIAN or sum(r >= MUST_RATIO for r in rs) >= len(rs) * MUST_SHARE - 1e-9


def within(total: float, low: float, high: float, margin: float = MARGIN) -> bool:
    """Whether ``total`` lies within ``margin`` of the range ``low..high``: ``low / margin <= total <= high *
    margin``."""
    return low / margin <= total <= high * margin


def truth_of(ratios: Iterable[float]) -> dict[str, Any]:
    """What the processes' ratios say: min, median, max, direction, share slower by 10 %, must fail."""
    rs = [float(r) for r in ratios]
    if not rs:
        return {"n": 0, "min": None, "median": None, "max": None, "direction": "mixed", "share_10": 0.0} | {
            "must_fail": False
        }
    return {
        "n": len(rs),
        "min": min(rs),
        "median": statistics.median(rs),
        "max": max(rs),
        "direction": direction(rs),
        "share_10": share_slower(rs),
        "must_fail": must_fail(rs),
    }


def merged(lines: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """The truth lines by (allocator, design, model, change), the lines of the same four merged (their processes
    or pairs together), in the order first seen."""
    out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for x in lines:
        if x.get("type") != "truth":
            continue
        k = (x["allocator"], x["design"], x["model"], x["change"])
        m = out.setdefault(
            k,
            {f: x.get(f) for f in ("family", "model", "change", "kind", "module", "class", "design", "allocator")}
            | {"ratios": [], "old_ms": [], "new_ms": [], "old_faults": [], "new_faults": [], "lines": 0},
        )
        for f in ("ratios", "old_ms", "new_ms", "old_faults", "new_faults"):
            m[f] += list(x.get(f) or [])
        m["lines"] += 1
    return out


def summarise(lines: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per allocator, design and change: the truth (``truth_of``) with each side's median ms and faults per call
    over processes, and the faults per process."""
    rows = []
    for m in merged(lines).values():
        t = truth_of(m["ratios"])
        rows.append(
            {k: m[k] for k in ("allocator", "design", "family", "model", "change", "kind", "module", "class")}
            | t
            | {
                "ratios": m["ratios"],
                "old_ms": median_or_none(m["old_ms"]),
                "new_ms": median_or_none(m["new_ms"]),
                "old_faults": median_or_none(m["old_faults"]),
                "new_faults": median_or_none(m["new_faults"]),
                "faults": list(zip(m["old_faults"], m["new_faults"], strict=True)),
            }
        )
    return rows


def median_or_none(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def fmt_faults(old: list[float], new: list[float]) -> str:
    return " ".join(f"{a:g}/{b:g}" for a, b in zip(old, new, strict=True)) + " (old/new)"


def summary(path: Path) -> list[dict[str, Any]]:
    rows = summarise(read_lines(path))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["allocator"], r["design"])].append(r)
    for (allocator, design), of in groups.items():
        print(f"\nallocator {allocator}, design {design}")
        print(
            f"{'change':30} {'kind':7} {'n':>2} {'min':>6} {'median':>6} {'max':>6} {'direction':9} {'>=10%':>5} "
            f"{'must':>4} {'ms old':>7} {'ms new':>7} {'faults old':>10} {'faults new':>10}  faults per process"
        )
        for r in of:
            print(
                f"{r['change']:30} {r['kind']:7} {r['n']:>2} {r['min']:>6.3f} {r['median']:>6.3f} {r['max']:>6.3f} "
                f"{r['direction']:9} {r['share_10']:>5.0%} {'yes' if r['must_fail'] else 'no':>4} "
                f"{r['old_ms']:>7.2f} {r['new_ms']:>7.2f} {r['old_faults']:>10g} {r['new_faults']:>10g}  "
                + " ".join(f"{a:g}/{b:g}" for a, b in r["faults"])
            )
    print(
        "\nratios new/old per process (interleaved) or pair (separate); direction: slower where every one is above "
        "x1.02,\nfaster where every one is below x0.98, unchanged where every one is within; >=10%: the share slower "
        "by 10 %\nor more; must: slower by 5 % in the median process or by 10 % in a third of them; ms and faults: "
        "medians\nper call over processes; faults per process: old/new, minor page faults per call"
    )
    return rows


# The gate against the truth --------------------------------------------------------------------------


def check_total(check: Mapping[str, Any]) -> float | None:
    """The report's total ratio of a check: ``total_ratio`` where the line keeps it, else the geometric mean of the
    total's ratios per pair (``items``, against a revision), else the total's ratio where it was flagged."""
    if check.get("total_ratio") is not None:
        return float(check["total_ratio"])
    ratios = check_total_ratios(check)
    if ratios:
        return math.exp(statistics.fmean(math.log(r) for r in ratios))
    for f in check.get("flagged") or []:
        if f.get("kind") == "total" and f.get("ratio") is not None:
            return float(f["ratio"])
    return None


def check_total_ratios(check: Mapping[str, Any]) -> list[float]:
    if check.get("total_ratios"):
        return [float(r) for r in check["total_ratios"]]
    for item in check.get("items") or []:
        if item.get("kind") == "total" and item.get("ratios"):
            return [float(r) for r in item["ratios"]]
    return []


def agrees(truth_direction: str, status: str) -> bool | None:
    """Whether a check's verdict agrees in direction with the truth: a regression where the truth is slower, a pass
    where it is faster or unchanged; None where the truth is mixed or the check has neither verdict."""
    if truth_direction == "mixed" or status not in ("pass", "regression"):
        return None
    return (status == "regression") == (truth_direction == "slower")


def mode_of(check: Mapping[str, Any]) -> str:
    return f"{check['mode']}{' compiled' if check.get('compiled') else ''}"


def compare(
    truth_lines: Iterable[Mapping[str, Any]], checks: Iterable[Mapping[str, Any]], allocator: str
) -> dict[str, Any]:
    """Each check joined with its change's truth (the allocator's, each design apart): per design, change and mode a
    row, per design and mode the figures (see the module's docstring)."""
    truths = {k: m for k, m in merged(truth_lines).items() if k[0] == allocator}
    by_change: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for x in checks:
        if x.get("type") == "check":
            by_change[(x["model"], x["change"], mode_of(x))].append(x)
    rows: list[dict[str, Any]] = []
    for (_, design, model, change), m in truths.items():
        t = truth_of(m["ratios"])
        for (cmodel, cchange, mode), of in by_change.items():
            if (cmodel, cchange) != (model, change):
                continue
            totals = [check_total(x) for x in of]
            statuses = [str(x.get("status")) for x in of]
            rows.append(
                {
                    "design": design,
                    "mode": mode,
                    "family": m["family"],
                    "model": model,
                    "change": change,
                    "kind": m["kind"],
                    "truth": t,
                    "totals": [round(v, 4) if v is not None else None for v in totals],
                    "total_ratios": [check_total_ratios(x) for x in of],
                    "statuses": statuses,
                    "agrees": [agrees(t["direction"], s) for s in statuses],
                    "within": [within(v, t["min"], t["max"]) if v is not None else None for v in totals],
                    "failed": [s == "regression" for s in statuses],
                    # where the check said its processes fell into allocator states (code_changes.py's ``states``)
                    "states": [bool(x.get("states")) for x in of],
                }
            )
    rows.sort(key=lambda r: (DESIGNS.index(r["design"]) if r["design"] in DESIGNS else len(DESIGNS), r["mode"]))
    figures: dict[str, dict[str, Any]] = {}
    for r in rows:
        f = figures.setdefault(f"{r['design']} / {r['mode']}", empty_figures())
        f["checks"] += len(r["statuses"])
        f["direction"] = add(f["direction"], [a for a in r["agrees"] if a is not None])
        f["within"] = add(f["within"], [w for w in r["within"] if w is not None])
        if r["kind"] == "change" and r["truth"]["must_fail"]:
            f["must_fail"] = add(f["must_fail"], r["failed"])
            f["must_fail_changes"] = add(f["must_fail_changes"], [all(r["failed"])])
        if r["kind"] == "neutral":
            f["neutral_failed"] = add(f["neutral_failed"], r["failed"])
            f["neutral_undecided"] = add(f["neutral_undecided"], [s == "undecided" for s in r["statuses"]])
    return {"allocator": allocator, "rows": rows, "figures": figures}


def empty_figures() -> dict[str, Any]:
    return {"checks": 0, "direction": [0, 0], "within": [0, 0], "must_fail": [0, 0], "must_fail_changes": [0, 0]} | {
        "neutral_failed": [0, 0],
        "neutral_undecided": [0, 0],
    }


def add(tally: list[int], flags: Iterable[bool]) -> list[int]:
    """``tally`` (true, of all) with ``flags`` counted in."""
    fs = list(flags)
    return [tally[0] + sum(fs), tally[1] + len(fs)]


def print_compare(result: dict[str, Any]) -> None:
    print(f"allocator {result['allocator']}")
    print(
        f"{'design':11} {'mode':8} {'change':30} {'kind':7} {'truth range':>15} {'direction':9} {'must':>4}  "
        "fxprof totals; statuses"
    )
    for r in result["rows"]:
        t = r["truth"]
        totals = " ".join("-" if v is None else f"x{v:.3f}" for v in r["totals"])
        marks = [
            ("ok" if a else "WRONG" if a is not None else "") + ("" if w is None else " in" if w else " out")
            for a, w in zip(r["agrees"], r["within"], strict=True)
        ]
        said = r.get("states") or [False] * len(marks)
        marks = [m + (" states" if x else "") for m, x in zip(marks, said, strict=True)]
        statuses = ", ".join(
            f"{s} ({m.strip()})" if m.strip() else s for s, m in zip(r["statuses"], marks, strict=True)
        )
        span = f"x{t['min']:.3f}..x{t['max']:.3f}"
        print(
            f"{r['design']:11} {r['mode']:8} {r['change']:30} {r['kind']:7} {span:>15} {t['direction']:9} "
            f"{'yes' if t['must_fail'] else 'no':>4}  {totals}; {statuses}"
        )
    print(
        "\nper check: ok / WRONG: its verdict against the truth's direction (none where the truth is mixed);"
        "\nin / out: its total within 5 % of the truth's range or not; states: it said its processes fell into"
        " allocator states\n"
    )
    print(f"{'design / mode':24} {'checks':>6} {'direction':>10} {'total in 5 %':>12} {'must-fail':>10} {'changes':>8}")
    for name, f in result["figures"].items():
        print(
            f"{name:24} {f['checks']:>6} {frac(f['direction']):>10} {frac(f['within']):>12} "
            f"{frac(f['must_fail']):>10} {frac(f['must_fail_changes']):>8}   "
            f"neutral failed {frac(f['neutral_failed'])}, undecided {frac(f['neutral_undecided'])}"
        )
    print(
        "direction: verdicts agreeing with the truth where its processes agree; total in 5 %: totals within 5 % of "
        "the truth's range;\nmust-fail: checks of must-fail changes that failed; changes: must-fail changes every "
        "check of which failed;\nneutral failed, undecided: checks of neutral edits that failed, that ended undecided"
    )


def frac(t: list[int]) -> str:
    return f"{t[0]}/{t[1]}"


# Main ------------------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    return cc.read_lines(path)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="JSON lines: one per change, design and allocator (appended)")
    parser.add_argument(
        "--families", default=",".join(cc.FAMILIES), help=f"comma-separated, of {', '.join(cc.FAMILIES)}"
    )
    parser.add_argument("--changes", default="", help="comma-separated names of changes and neutral edits (all)")
    parser.add_argument("--designs", default=",".join(DESIGNS), help=f"comma-separated, of {', '.join(DESIGNS)}")
    parser.add_argument("--allocator", default="glibc", choices=ALLOCATORS, help="of the measuring processes (glibc)")
    parser.add_argument("--processes", type=int, default=5, metavar="N", help="interleaved: processes (5)")
    parser.add_argument("--pairs", type=int, default=5, metavar="K", help="separate: pairs of processes (5)")
    parser.add_argument("--repeats", type=int, default=30, metavar="R", help="timed calls per side and process (30)")
    parser.add_argument("--warmup", type=int, default=5, metavar="W", help="untimed calls per side first (5)")
    parser.add_argument(
        "--control",
        action="store_true",
        help="measure each selected family's base against an identical copy too (<model>-identical)",
    )
    parser.add_argument("--summary", type=Path, metavar="FILE", help="print the truth per change of FILE; run nothing")
    parser.add_argument(
        "--compare", type=Path, metavar="CHECKS", help="join code_changes.py's check lines with the truth; run nothing"
    )
    parser.add_argument("--truth", type=Path, metavar="FILE", help="with --compare: the truth's lines (--out)")
    parser.add_argument("--compare-json", type=Path, metavar="PATH", help="with --compare: write it as JSON too")
    ns = parser.parse_args(argv)
    ns.families = [f for f in ns.families.split(",") if f]
    ns.designs = [d for d in ns.designs.split(",") if d]
    names = [c for c in ns.changes.split(",") if c]
    unknown = (
        [f for f in ns.families if f not in cc.FAMILIES]
        + [d for d in ns.designs if d not in DESIGNS]
        + [c for c in names if c not in {x.name for x in cc.CHANGES}]
    )
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}; changes: {', '.join(c.name for c in cc.CHANGES)}")
    if min(ns.processes, ns.pairs, ns.repeats) < 1 or ns.warmup < 0:
        parser.error("--processes, --pairs and --repeats must be at least 1, --warmup at least 0")
    if ns.compare is not None:
        ns.truth = ns.truth or ns.out
        if ns.truth is None:
            parser.error("--compare needs --truth (or --out): the truth's lines")
    elif ns.summary is None and ns.out is None:
        parser.error("--out is required to measure")
    ns.selected = [c for c in cc.CHANGES if c.family in ns.families and (not names or c.name in names)]
    if ns.control:
        ns.selected = controls(list(dict.fromkeys(c.family for c in ns.selected)) or ns.families) + ns.selected
    return ns


def controls(families: list[str]) -> list[cc.Change]:
    """Per family its base against an identical copy of it (no edit), the kind ``control``: what the design reads
    where nothing changed but the file's name and its module's."""
    return [cc.Change(f"{cc.FAMILIES[f].model}-identical", f, "control", ()) for f in families]


def main() -> None:
    ns = parse_args(sys.argv[1:])
    if ns.summary is not None:
        summary(ns.summary)
        return
    if ns.compare is not None:
        result = compare(read_lines(ns.truth), read_lines(ns.compare), ns.allocator)
        print_compare(result)
        if ns.compare_json is not None:
            ns.compare_json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            print(f"\nwrote {ns.compare_json}")
        return
    try:
        run(ns, ns.selected)
    except (cc.EditError, MeasureError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    summary(ns.out)


if __name__ == "__main__":
    main()
