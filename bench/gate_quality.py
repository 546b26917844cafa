"""How often the gate fails an unchanged model, and how often it catches (and names) a slowed one.

    .venv/bin/python bench/gate_quality.py
    .venv/bin/python bench/gate_quality.py --unchanged 20 --slowed 5 --conditions node,none
    .venv/bin/python bench/gate_quality.py -- --fxprof-node-tolerance 0.15   # pytest arguments after --

Through the real command line, each step a fresh ``pytest`` process as in CI. A test module of three
models of different character (``bench/quality_models.py``: ResNet18 and MobileNetV3-small at batch 5,
a transformer encoder of plain torch.nn layers) is written into a temporary directory, one test per
model and condition, ``test_quality.py::test_model[<model>-<condition>]``, each calling ``fxprof``.

Recording: once per model, ``pytest --fxprof-update`` of its ``-none`` test (one process per model, timed).
That one baseline is then copied under every other condition's test id, so that every condition is
judged against the same unchanged recording.

Conditions, chosen from the recorded baseline (a module's time is the median over the recorded
processes of its call_module nodes' times, its share that over the sum of all nodes' times):

* ``none``: nothing changed (its failures are the false alarms).
* ``node{1,3,10}pct+{10,15,25,50}``: the one submodule whose share is closest to 1, 3 or 10 %, slowed by
  10, 15, 25 or 50 %. Where the target share of the model is 1 ms or more, only submodules of 1 ms
  or more are candidates.
* ``group+{15,30}``: every submodule of one module type, each slowed by 15 or 30 %: of the types with at
  least 3 call_module nodes, all under 1 ms each and together under 15 % of the model (a group of small
  nodes, not the bulk of the model), the one with the most nodes.
* ``type+30``: every submodule of the module type that takes the most time (all ``Conv2d``, say), each slowed by
  30 %: a broad slowdown of one operator type, which also moves the speed factors that normalise its nodes.
* ``total+{5,10}``: every submodule slowed by the same fraction, 5 or 10 % of the model's total over the sum
  of its call_module nodes' times, so that the model as a whole is 5 or 10 % slower.

A slowdown is a forward pre-hook and hook pair on the submodule that busy-waits for the fraction of
the submodule's own time in that call: real CPU work, invisible to the model's code. The plan (which
submodules, their type, baseline time and share) is handed to the test processes as a JSON file.

Training steps (``--models resnet18-step,encoder-step``): each test calls ``fxprof.train_step`` (SGD with
momentum) on a model of ``quality_models.build_step``, whose conditions are code changes made when it is built:
``none``; ``backward+25``, one large layer's backward (a custom ``autograd.Function`` whose backward is one
custom op, the same in every condition) doing a quarter more work; ``checkpoint``, one stage under activation
checkpointing, so that the backward recomputes its forward. Their plan reads the layer's and the stage's
backward time from the recording. A failure is named when it flags a node, module (in any direction) or
operator type within the layer or stage.

Load (``--load``): ``neighbours`` runs two neighbour processes for the whole measurement, recording included, each
busy on a core for 1 to 3 s, then idle for 1 to 3 s, again and again (seeded), as other jobs come and go on a shared
runner; ``xdist`` runs every check as ``pytest -n 2`` with ``CPU_TESTS`` ordinary CPU-heavy tests (pure Python work of
1 to 3 s each) beside the profiled ones, as a project's own suite would, the recording alone as usual. Neighbours are
stopped when the measurement ends, whatever ends it.

Checking: ``--unchanged`` processes run the ``-none`` tests of the models; ``--slowed`` processes run
every selected condition of every model (``none`` included when selected, counting as unchanged), in
an order shuffled per process (``--seed``). Each runs ``pytest --fxprof --fxprof-report``; the report
says per test whether it failed ("regression") and what it flagged. A failure is "named" when it
flags the slowed thing: for ``node*``, a node of the slowed submodule, a module that is or contains
it, or the op of its type; for ``group+30``, the op of the group's type or a node or module covering a
member; for ``total+10``, anything. Without ``flagged`` in the report, named is unknown (``?``).

Prints a table per model and condition (runs, failed, 95 % Wilson interval of the failure rate,
named, seconds per ``fxprof`` call) and the recording and check times: whole processes, and less an
empty run's startup (``--co`` of the same module: torch import and collection). Writes everything,
plan, settings, machine and per-process times included, as JSON (``--out``). ``--keep DIR`` keeps the
generated tests, baselines and reports. Exit code of a pytest process: 0 passed, 1 tests failed;
anything else stops the measurement with the output's tail.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_fxprof.records.measurement import BaselineEntry
from pytest_fxprof.store.baseline import BaselineError, BaselineStore, as_file

BENCH = Path(__file__).resolve().parent

MODELS = ("resnet18", "encoder", "mobilenet")  # as in bench/quality_models.py, which imports torch
UNTUNED = ("regnet", "efficientnet")  # quality_models.UNTUNED: chosen on by no default, not run unless named
STEP_MODELS = ("resnet18-step", "encoder-step")  # quality_models.STEP_MODELS: training steps
STEP_CONDITIONS = ("none", "backward+25", "checkpoint")  # quality_models.STEP_CONDITIONS
STEP_KINDS = {"backward+25": "backward", "checkpoint": "checkpoint"}
MODULE = "test_quality.py"
PLAN_ENV = "FXPROF_QUALITY_PLAN"
PLAN = "plan.json"
QUIET = ["-q", "-p", "no:cacheprovider"]
NODE_SHARES = (0.01, 0.03, 0.10)
NODE_FRACTIONS = (0.10, 0.15, 0.25, 0.50)
GROUP_FRACTIONS = (0.15, 0.30)
TYPE_FRACTIONS = (0.30,)
TOTAL_GROWTHS = (0.05, 0.10)
LARGE_NS = 1_000_000  # 1 ms: a node this long is preferred as the slowed one; a group's members are shorter
GROUP_MIN = 3
GROUP_MAX_SHARE = 0.15
TAIL = 6000


def percent(x: float) -> str:
    return f"{round(x * 100)}"


CONDITIONS = (
    "none",
    *(f"node{percent(s)}pct+{percent(f)}" for s in NODE_SHARES for f in NODE_FRACTIONS),
    *(f"group+{percent(f)}" for f in GROUP_FRACTIONS),
    *(f"type+{percent(f)}" for f in TYPE_FRACTIONS),
    *(f"total+{percent(g)}" for g in TOTAL_GROWTHS),
)


def conditions_of(model: str) -> tuple[str, ...]:
    return STEP_CONDITIONS if model in STEP_MODELS else CONDITIONS


CONFTEST = """\
# Generated by bench/gate_quality.py: installs the planned slowdowns of a test's condition.
import json
import os

import pytest

from pytest_fxprof import slow_down


@pytest.fixture
def planned_slowdown():
    plan_path = os.environ.get({env!r})
    plan = json.loads(open(plan_path, encoding="utf-8").read()) if plan_path else {{"models": {{}}}}

    def apply(model, model_name, condition):
        if condition == "none":
            return model
        planned = plan["models"].get(model_name, {{}}).get("conditions", {{}}).get(condition)
        if not planned or not planned.get("slowed"):
            pytest.fail(f"no slowdown planned for {{model_name}}-{{condition}} in {{plan_path}}", pytrace=False)
        for item in planned["slowed"]:
            slow_down(model, item["path"], item["fraction"])
        return model

    return apply
"""

TEST_MODULE = """\
# Generated by bench/gate_quality.py: one test per model and condition, each profiled by fxprof.
import sys

import pytest

sys.path.insert(0, {bench!r})
import torch
from quality_models import STEP_MODELS, build, build_step

CASES = {cases!r}


@pytest.mark.parametrize(("model_name", "condition"), CASES, ids=[f"{{m}}-{{c}}" for m, c in CASES])
def test_model(fxprof, planned_slowdown, model_name, condition):
    if model_name in STEP_MODELS:  # a training step, its condition a change to the model's code
        model, x = build_step(model_name, condition)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        result = fxprof.train_step(model, x, optimizer=optimizer)
    else:
        model, x = build(model_name)
        planned_slowdown(model, model_name, condition)
        result = fxprof(model, x)
    assert result.nodes
"""


def test_id(model: str, condition: str) -> str:
    return f"{MODULE}::test_model[{model}-{condition}]"


# The plan ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One submodule to slow down, with what the baseline says of it."""

    path: str
    type: str
    fraction: float
    baseline_ns: int
    share: float
    calls: int


@dataclass(frozen=True)
class Condition:
    """What one condition does to one model; ``skipped`` says why it could not be planned."""

    name: str
    kind: str  # none, node, group, total
    slowed: tuple[Target, ...] = ()
    group_type: str = ""
    skipped: str = ""

    def describe(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.kind == "none":
            return "-"
        if self.kind in ("backward", "checkpoint"):
            t = self.slowed[0]
            what = f"{t.path}'s backward +{t.fraction:.0%}" if self.kind == "backward" else f"{t.path} checkpointed"
            return f"{what} (its backward {t.baseline_ns / 1e6:.2f} ms, {t.share:.1%} of the step)"
        if self.kind == "node":
            t = self.slowed[0]
            return f"{t.path} ({t.type}, {t.baseline_ns / 1e6:.2f} ms, {t.share:.1%})"
        share = sum(t.share for t in self.slowed)
        if self.kind in ("group", "type"):
            return f"{len(self.slowed)} x {self.group_type} (together {share:.1%})"
        return f"all {len(self.slowed)} submodules +{self.slowed[0].fraction:.1%} each (together {share:.1%})"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "slowed": [asdict(t) for t in self.slowed],
            "group_type": self.group_type,
            "skipped": self.skipped,
            "description": self.describe(),
        }

    @classmethod
    def from_json(cls, name: str, raw: dict[str, Any]) -> Condition:
        """The condition ``name`` as ``to_json`` wrote it."""
        slowed = tuple(Target(**t) for t in raw.get("slowed", []))
        return cls(name, str(raw["kind"]), slowed, str(raw.get("group_type", "")), str(raw.get("skipped", "")))


@dataclass(frozen=True)
class ModuleTime:
    path: str
    type: str
    ns: int
    calls: int


def module_times(entry: BaselineEntry) -> tuple[list[ModuleTime], int, int]:
    """Each called submodule's baseline time (summed over its calls), the nodes' sum, and the total."""
    node_ns = [round(statistics.median(r.node_ns[i] for r in entry.runs)) for i in range(len(entry.nodes))]
    summed: dict[str, ModuleTime] = {}
    for info, ns in zip(entry.nodes, node_ns, strict=True):
        if info.op != "call_module":
            continue
        seen = summed.get(info.module)
        calls = seen.calls + 1 if seen else 1
        summed[info.module] = ModuleTime(info.module, info.target, (seen.ns if seen else 0) + ns, calls)
    total_ns = round(statistics.median(r.instrumented_ns or r.total_ns for r in entry.runs))
    return list(summed.values()), sum(node_ns), total_ns


def kind_of(condition: str) -> str:
    if condition in STEP_KINDS:
        return STEP_KINDS[condition]
    return next(k for k in ("none", "node", "group", "type", "total") if condition.startswith(k))


def plan_step(entry: BaselineEntry, model: str, selected: list[str]) -> dict[str, Condition]:
    """A step model's conditions (code changes made when it is built), with the backward time of the layer and
    the stage they change, from its baseline."""
    from quality_models import STEP_TARGETS

    node_ns = [statistics.median(r.node_ns[i] for r in entry.runs) for i in range(len(entry.nodes))]
    whole = sum(node_ns) or 1.0
    layer, stage = STEP_TARGETS[model]

    def target(path: str, kind: str, fraction: float) -> Target:
        inside = [
            (info, ns)
            for info, ns in zip(entry.nodes, node_ns, strict=True)
            if info.direction == "backward" and covers(path, info.module)
        ]
        ns = round(sum(t for _, t in inside))
        return Target(path, kind, fraction, ns, ns / whole, len(inside))

    plan = {"none": Condition("none", "none")}
    if "backward+25" in selected:
        plan["backward+25"] = Condition("backward+25", "backward", (target(layer, "backward", 0.25),))
    if "checkpoint" in selected:
        plan["checkpoint"] = Condition("checkpoint", "checkpoint", (target(stage, "checkpoint", 0.0),))
    return plan


def plan_model(entry: BaselineEntry, selected: list[str]) -> dict[str, Condition]:
    """Every selected condition of the model (``none`` always first), planned from its baseline."""
    modules, nodes_ns, total_ns = module_times(entry)
    if not modules or nodes_ns <= 0:
        skipped = {c: Condition(c, kind_of(c), skipped="the graph has no timed call_module nodes") for c in selected}
        return {"none": Condition("none", "none"), **skipped}

    def target(m: ModuleTime, fraction: float) -> Target:
        return Target(m.path, m.type, fraction, m.ns, m.ns / nodes_ns, m.calls)

    plan: dict[str, Condition] = {}
    for share in NODE_SHARES:
        wanted_ns = share * nodes_ns
        large = [m for m in modules if m.ns >= LARGE_NS]
        candidates = large if wanted_ns >= LARGE_NS and large else modules
        best = min(candidates, key=lambda m: (abs(m.ns - wanted_ns), -m.ns))
        for fraction in NODE_FRACTIONS:
            name = f"node{percent(share)}pct+{percent(fraction)}"
            plan[name] = Condition(name, "node", (target(best, fraction),))

    by_type: dict[str, list[ModuleTime]] = {}
    for m in modules:
        by_type.setdefault(m.type, []).append(m)
    calls = {kind: sum(m.calls for m in ms) for kind, ms in by_type.items()}
    small = [
        kind
        for kind, ms in by_type.items()
        if calls[kind] >= GROUP_MIN
        and all(m.ns / m.calls < LARGE_NS for m in ms)
        and sum(m.ns for m in ms) < GROUP_MAX_SHARE * nodes_ns
    ]
    for group_fraction in GROUP_FRACTIONS:
        group_name = f"group+{percent(group_fraction)}"
        if small:
            kind = max(small, key=lambda k: (calls[k], -sum(m.ns for m in by_type[k])))
            members = tuple(target(m, group_fraction) for m in by_type[kind])
            plan[group_name] = Condition(group_name, "group", members, group_type=kind)
        else:
            reason = (
                f"no module type has {GROUP_MIN} or more call_module nodes, all under {LARGE_NS / 1e6:g} ms and "
                f"together under {GROUP_MAX_SHARE:.0%} of the model"
            )
            plan[group_name] = Condition(group_name, "group", skipped=reason)

    heaviest = max(by_type, key=lambda k: (sum(m.ns for m in by_type[k]), k))
    for type_fraction in TYPE_FRACTIONS:
        type_name = f"type+{percent(type_fraction)}"
        members = tuple(target(m, type_fraction) for m in by_type[heaviest])
        plan[type_name] = Condition(type_name, "type", members, group_type=heaviest)

    modules_ns = sum(m.ns for m in modules)
    for growth in TOTAL_GROWTHS:
        total_name = f"total+{percent(growth)}"
        each = growth * total_ns / modules_ns
        plan[total_name] = Condition(total_name, "total", tuple(target(m, each) for m in modules))
    return {"none": Condition("none", "none"), **{c: plan[c] for c in selected if c != "none"}}


# Running pytest ------------------------------------------------------------------------------------


@dataclass
class Process:
    """One timed pytest process."""

    phase: str
    number: int
    seconds: float
    exit_code: int
    failed: list[str] = field(default_factory=list)


class PytestError(Exception):
    """A pytest process that ended with an error rather than a pass or a test failure."""


def tail(text: str) -> str:
    return text if len(text) <= TAIL else "..." + text[-TAIL:]


def run_pytest(args: list[str], cwd: Path, env: dict[str, str], what: str) -> tuple[int, float, str]:
    """Exit code, wall seconds and output of one pytest process; ``PytestError`` unless it passed or failed."""
    cmd = [sys.executable, "-m", "pytest", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise PytestError(
            f"{what}: pytest ended with exit code {proc.returncode} (not a pass or a failed test)\n"
            f"command (in {cwd}): {' '.join(cmd)}\n{tail(proc.stdout + proc.stderr)}"
        )
    return proc.returncode, seconds, proc.stdout + proc.stderr


# Reading the reports -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    kind: str
    name: str
    module: str


@dataclass(frozen=True)
class Observed:
    """One profile of one check's report."""

    status: str
    flagged: tuple[Flag, ...] | None
    seconds: float | None


def read_report(path: Path) -> dict[str, Observed]:
    """The report's profiles by test id (the first ``fxprof`` call of each test)."""
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, Observed] = {}
    for profile in data.get("profiles", []) if isinstance(data, dict) else []:
        if not isinstance(profile, dict) or not isinstance(profile.get("test_id"), str):
            continue
        raw_flags = profile.get("flagged")
        flagged = None
        if isinstance(raw_flags, list):
            flagged = tuple(
                Flag(str(f.get("kind", "")), str(f.get("name", "")), str(f.get("module", "")))
                for f in raw_flags
                if isinstance(f, dict)
            )
        seconds = profile.get("seconds")
        out.setdefault(
            profile["test_id"],
            Observed(
                status=str(profile.get("status", "unknown")),
                flagged=flagged,
                seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
            ),
        )
    return out


def covers(module: str, path: str) -> bool:
    """Whether the module ``module`` is ``path`` or contains it."""
    return bool(module) and (module == path or path.startswith(module + "."))


DIRECTION_SUFFIXES = (" forward", " backward", " optimizer")


def undirected(name: str) -> str:
    """A training step's aggregate without its direction: ``layer3 backward`` -> ``layer3``."""
    for suffix in DIRECTION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def named(flags: tuple[Flag, ...], condition: Condition) -> bool:
    """Whether the failure names what the condition slowed."""
    if condition.kind == "total":
        return bool(flags)
    if condition.kind in ("backward", "checkpoint"):  # a node or aggregate within the layer or stage changed
        (path,) = (t.path for t in condition.slowed)
        for f in flags:
            where = f.module if f.kind == "node" else undirected(f.name) if f.kind == "module" else ""
            if where and covers(path, where):
                return True
        return False
    paths = [t.path for t in condition.slowed]
    types = {t.type for t in condition.slowed}
    for f in flags:
        if f.kind == "node" and f.module in paths:
            return True
        if f.kind == "module" and any(covers(f.name, p) for p in paths):
            return True
        if f.kind == "op" and f.name in types:
            return True
    return False


@dataclass
class Tally:
    """What the checks observed of one model under one condition."""

    runs: int = 0
    failed: int = 0
    named: int = 0
    named_unknown: int = 0
    absent: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)

    def add(self, seen: Observed | None, condition: Condition) -> None:
        if seen is None:
            self.absent += 1
            return
        self.runs += 1
        self.statuses[seen.status] += 1
        if seen.seconds is not None:
            self.seconds.append(seen.seconds)
        if seen.status != "regression":
            return
        self.failed += 1
        if seen.flagged is None:
            self.named_unknown += 1
        elif named(seen.flagged, condition):
            self.named += 1


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of the rate ``k / n`` (95 % for the default ``z``)."""
    if n == 0:
        return None
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> float | None:
    return k / n if n else None


def tally_json(t: Tally, condition: Condition) -> dict[str, object]:
    interval = wilson(t.failed, t.runs)
    # named is unknown for the unchanged model, and where a failure's report did not say what it flagged
    known = condition.kind != "none" and not t.named_unknown
    named_interval = wilson(t.named, t.runs) if known else None
    return {
        "runs": t.runs,
        "failed": t.failed,
        "rate_name": "false_alarm_rate" if condition.kind == "none" else "detection_rate",
        "rate": rate(t.failed, t.runs),
        "wilson95": list(interval) if interval else None,
        "named": t.named if known else None,
        "named_rate": rate(t.named, t.runs) if known else None,
        "named_unknown": t.named_unknown,
        "named_wilson95": list(named_interval) if named_interval else None,
        "absent": t.absent,
        "statuses": dict(sorted(t.statuses.items())),
        "seconds": [round(s, 3) for s in t.seconds],
        "seconds_median": round(statistics.median(t.seconds), 3) if t.seconds else None,
    }


# Output --------------------------------------------------------------------------------------------


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def print_table(
    models: list[str], plans: dict[str, dict[str, Condition]], tallies: dict[str, dict[str, Tally]]
) -> None:
    header = f"{'model':14} {'condition':14} {'runs':>5} {'failed':>7} {'95 % interval':>13} {'named':>6}"
    print(f"{header} {'s/call':>7} {'other':8} slowed")
    for model in models:
        for name, condition in plans[model].items():
            if condition.skipped:
                print(f"{model:14} {name:14} {'':>5} {'':>7} {'':>13} {'':>6} {'':>7} {'':8} {condition.describe()}")
                continue
            t = tallies[model][name]
            interval = wilson(t.failed, t.runs)
            span = f"{interval[0]:.0%}-{interval[1]:.0%}" if interval else "-"
            if condition.kind == "none":
                name_rate = "-"
            elif t.named_unknown:
                name_rate = "?"
            else:
                name_rate = pct(rate(t.named, t.runs))
            others = {s: n for s, n in t.statuses.items() if s not in ("pass", "regression")}
            if t.absent:
                others["absent"] = t.absent
            other = ",".join(f"{s}:{n}" for s, n in sorted(others.items())) or "-"
            seconds = f"{statistics.median(t.seconds):.1f}" if t.seconds else "-"
            print(
                f"{model:14} {name:14} {t.runs:>5} {pct(rate(t.failed, t.runs)):>7} {span:>13} {name_rate:>6}"
                f" {seconds:>7} {other:8} {condition.describe()}"
            )


def time_summary(seconds: list[float], startup: float) -> dict[str, float] | None:
    if not seconds:
        return None
    median = statistics.median(seconds)
    return {
        "median": round(median, 2),
        "min": round(min(seconds), 2),
        "max": round(max(seconds), 2),
        "median_less_startup": round(median - startup, 2),
    }


def machine() -> dict[str, object]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


# Main ----------------------------------------------------------------------------------------------


def pytest_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """A bench's own arguments and the pytest arguments after ``--``."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1 :]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, extra = pytest_args(argv)
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] [-- PYTEST_ARGS ...]",
        epilog="Arguments after -- go to every recording and check process, e.g. -- --fxprof-node-tolerance 0.15",
    )
    parser.add_argument("--unchanged", type=int, default=100, metavar="N", help="unchanged check processes (100)")
    parser.add_argument("--slowed", type=int, default=10, metavar="M", help="slowed check processes (10)")
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"comma-separated models (default {','.join(MODELS)}; also {','.join(UNTUNED)}; training steps: "
        f"{','.join(STEP_MODELS)})",
    )
    parser.add_argument(
        "--conditions", default="", help="comma-separated prefixes of the conditions to run, e.g. node,total (all)"
    )
    parser.add_argument("--out", type=Path, default=BENCH / "gate_quality.json", help="JSON results (%(default)s)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="copy the tests, baselines and reports into DIR")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffled test order (0)")
    parser.add_argument(
        "--load",
        choices=("none", "neighbours", "xdist"),
        default="none",
        help="neighbour processes that come and go during the recording and the checks, or the checks under "
        "pytest -n 2 beside CPU-heavy tests (none)",
    )
    ns = parser.parse_args(argv)
    models = [m.strip() for m in ns.models.split(",") if m.strip()]
    known = (*MODELS, *UNTUNED, *STEP_MODELS)
    unknown = [m for m in models if m not in known]
    if unknown or not models:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    prefixes = [p.strip() for p in ns.conditions.split(",") if p.strip()]
    every = tuple(dict.fromkeys((*CONDITIONS, *STEP_CONDITIONS)))
    for p in prefixes:
        if not any(c.startswith(p) for c in every):
            parser.error(f"--conditions: {p!r} starts no condition; conditions: {', '.join(every)}")
    ns.models = models
    ns.conditions = [c for c in every if not prefixes or any(c.startswith(p) for p in prefixes)]
    if ns.unchanged < 0 or ns.slowed < 0:
        parser.error("--unchanged and --slowed cannot be negative")
    return ns, extra


def record(
    model: str, work: Path, env: dict[str, str], extra: list[str], conditions: list[str]
) -> tuple[float, BaselineEntry, dict[str, Condition]]:
    """Record the model's unchanged test once, plan its conditions and copy the baseline to each."""
    baselines = work / "baselines"
    args = [test_id(model, "none"), *QUIET, "--fxprof-update"]
    code, seconds, output = run_pytest(
        [*args, "--fxprof-baseline-dir", str(baselines), *extra], work, env, f"recording {model}"
    )
    if code != 0:
        raise PytestError(f"recording {model}: the test failed (exit 1)\n{tail(output)}")
    store = BaselineStore(baselines)
    recorded = store.load(test_id(model, "none"))
    if recorded is None or not recorded.entries:
        found = [tid or str(path) for path, tid in store.recorded_tests()]
        raise PytestError(f"recording {model}: no baseline for {test_id(model, 'none')} in {baselines}; found {found}")
    entry = recorded.entries.get("call0") or next(iter(recorded.entries.values()))
    if model in STEP_MODELS:
        plan = plan_step(entry, model, conditions)
    else:
        plan = plan_model(entry, [c for c in conditions if c in CONDITIONS])
    for name, condition in plan.items():
        if name != "none" and not condition.skipped:
            store.write(as_file(test_id(model, name), recorded.entries))
    return seconds, entry, plan


def main() -> None:
    ns, extra = parse_args(sys.argv[1:])
    models: list[str] = ns.models
    conditions: list[str] = ns.conditions
    started = dt.datetime.now(dt.UTC)
    print(f"models: {', '.join(models)}; conditions: {', '.join(conditions)}; pytest arguments: {extra or '-'}")

    with tempfile.TemporaryDirectory(prefix="fxprof-quality-") as tmp:
        work = Path(tmp)
        try:
            with neighbours(2 if ns.load == "neighbours" else 0, ns.seed):
                results = measure(ns, extra, models, conditions, work)
        except (PytestError, BaselineError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        finally:
            if ns.keep is not None:
                shutil.copytree(work, ns.keep, dirs_exist_ok=True)
                print(f"kept the tests, baselines and reports in {ns.keep}")
    results["date"] = started.isoformat(timespec="seconds")
    results["machine"] = machine()
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {ns.out}")


CPU_TESTS = 8
CPU_MODULE = "test_cpu_heavy.py"
CPU_TEST_MODULE = """\
# Generated by bench/gate_quality.py: ordinary CPU-heavy tests that run beside the profiled ones under -n 2.
import random
import time

import pytest


@pytest.mark.parametrize("n", range({count}))
def test_cpu(n):
    end = time.process_time() + random.Random(n).uniform(1.0, 3.0)
    acc = 0
    while time.process_time() < end:
        acc += sum(i * i for i in range(1000))
    assert acc > 0
"""

NEIGHBOUR = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.uniform(1.0, 3.0)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(1.0, 3.0))
"""


@contextlib.contextmanager
def neighbours(count: int, seed: int, script: str = NEIGHBOUR) -> Iterator[None]:
    """``count`` neighbour processes running ``script`` (by default they come and go: busy 1 to 3 s, idle 1 to
    3 s), stopped at the end, whatever ends it."""
    procs = [subprocess.Popen([sys.executable, "-c", script, str(seed + k)]) for k in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def write_tests(work: Path) -> dict[str, str]:
    """The generated test module, its conftest and an empty plan; the environment that points to the plan."""
    cases = [(m, c) for m in (*MODELS, *UNTUNED, *STEP_MODELS) for c in conditions_of(m)]
    (work / CPU_MODULE).write_text(CPU_TEST_MODULE.format(count=CPU_TESTS), encoding="utf-8")
    (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (work / "conftest.py").write_text(CONFTEST.format(bench=str(BENCH), env=PLAN_ENV), encoding="utf-8")
    (work / MODULE).write_text(TEST_MODULE.format(bench=str(BENCH), cases=cases), encoding="utf-8")
    (work / PLAN).write_text(json.dumps({"models": {}}), encoding="utf-8")
    return {**os.environ, PLAN_ENV: str(work / PLAN)}


@dataclass(frozen=True)
class Setup:
    """What every check process needs: where, with what, and which test is which model and condition."""

    work: Path
    env: dict[str, str]
    extra: list[str]
    plans: dict[str, dict[str, Condition]]
    owner: dict[str, tuple[str, str]]
    load: str = "none"


def check(phase: str, index: int, ids: list[str], setup: Setup, tallies: dict[str, dict[str, Tally]]) -> Process:
    """One check process of the tests ``ids`` (in that order), its report tallied."""
    report = setup.work / f"report-{phase}-{index}.json"
    args = [*ids, *QUIET, "--fxprof", "--fxprof-baseline-dir", str(setup.work / "baselines")]
    args += ["--fxprof-report", str(report), *setup.extra]
    if setup.load == "xdist":  # beside the project's ordinary CPU-heavy tests, two workers
        args = [*args, CPU_MODULE, "-n", "2"]
    code, seconds, _ = run_pytest(args, setup.work, setup.env, f"{phase} check {index}")
    if not report.is_file():
        raise PytestError(f"{phase} check {index}: pytest exited {code} without writing {report}")
    seen = read_report(report)
    failed = []
    for tid in ids:
        model, name = setup.owner[tid]
        observed = seen.get(tid)
        tallies[model][name].add(observed, setup.plans[model][name])
        if observed is not None and observed.status == "regression":
            flags = ", ".join(f"{f.kind} {f.module or f.name}" for f in observed.flagged or ())
            failed.append(f"{model}-{name} [{flags or '?'}]")
    print(f"{phase} check {index}: {seconds:.1f} s, exit {code}, failed: {', '.join(failed) or '-'}", flush=True)
    return Process(phase, index, round(seconds, 2), code, failed)


def print_times(startup: float, record_s: dict[str, float], checks: dict[str, tuple[int, list[float]]]) -> None:
    print(f"startup (--co): {startup:.1f} s")
    for model, seconds in record_s.items():
        print(f"record {model}: {seconds:.1f} s process, {seconds - startup:.1f} s less startup")
    for phase, (count, wall) in checks.items():
        summary = time_summary(wall, startup)
        if summary:
            print(
                f"check {phase} ({count} tests): median {summary['median']:.1f} s process"
                f" [{summary['min']:.1f}-{summary['max']:.1f}], {summary['median_less_startup']:.1f} s less startup"
            )


def measure(
    ns: argparse.Namespace, extra: list[str], models: list[str], conditions: list[str], work: Path
) -> dict[str, object]:
    env = write_tests(work)

    record_s: dict[str, float] = {}
    plans: dict[str, dict[str, Condition]] = {}
    environment: dict[str, object] = {}
    for model in models:
        record_s[model], entry, plans[model] = record(model, work, env, extra, conditions)
        environment = asdict(entry.environment)
        print(f"recorded {model}: {record_s[model]:.1f} s")
        for name, condition in plans[model].items():
            print(f"  {name:14} {condition.describe()}")
    plan_json = {m: {"conditions": {c: p.to_json() for c, p in plans[m].items()}} for m in models}
    (work / PLAN).write_text(json.dumps({"models": plan_json}, indent=2), encoding="utf-8")
    _, startup, _ = run_pytest([MODULE, "--co", *QUIET, *extra], work, env, "collecting the tests")
    print(f"startup (torch import and collection, --co): {startup:.1f} s")

    owner = {test_id(m, c): (m, c) for m in models for c in conditions_of(m)}
    setup = Setup(work, env, extra, plans, owner, ns.load)
    tallies = {m: {c: Tally() for c in plans[m]} for m in models}
    unchanged_ids = [test_id(m, "none") for m in models]
    slowed_ids = [test_id(m, c) for m in models for c, p in plans[m].items() if not p.skipped and c in conditions]
    rng = random.Random(ns.seed)
    processes = [check("unchanged", i, unchanged_ids, setup, tallies) for i in range(1, ns.unchanged + 1)]
    if slowed_ids:
        processes += [
            check("slowed", i, rng.sample(slowed_ids, len(slowed_ids)), setup, tallies) for i in range(1, ns.slowed + 1)
        ]

    print()
    print_table(models, plans, tallies)
    print()
    wall = {phase: [p.seconds for p in processes if p.phase == phase] for phase in ("unchanged", "slowed")}
    checks = {"unchanged": (len(unchanged_ids), wall["unchanged"]), "slowed": (len(slowed_ids), wall["slowed"])}
    print_times(startup, record_s, checks)
    return {
        "settings": {
            "unchanged": ns.unchanged,
            "slowed": ns.slowed,
            "models": models,
            "conditions": conditions,
            "seed": ns.seed,
            "pytest_args": extra,
            "load": ns.load,
        },
        "baseline_environment": environment,
        "plan": plan_json,
        "results": {m: {c: tally_json(t, plans[m][c]) for c, t in tallies[m].items()} for m in models},
        "times": {
            "startup_seconds": round(startup, 2),
            "record_seconds": {m: round(s, 2) for m, s in record_s.items()},
            "unchanged_check": time_summary(wall["unchanged"], startup),
            "slowed_check": time_summary(wall["slowed"], startup),
            "processes": [asdict(p) for p in processes],
        },
    }


if __name__ == "__main__":
    main()
