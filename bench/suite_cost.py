"""What a check of a whole suite against a revision costs, against one plain profiling run of the suite, and
what it catches.

    .venv/bin/python bench/suite_cost.py --suite 5 --runs 3 --out bench/suite_cost_5.jsonl
    .venv/bin/python bench/suite_cost.py --suite 5 --runs 6 --condition mixed --out q.jsonl
    .venv/bin/python bench/suite_cost.py --suite 5 --runs 1 --code ../old-checkout --out old.jsonl
    .venv/bin/python bench/suite_cost.py --out q.jsonl --summary
    .venv/bin/python bench/suite_cost.py --by-spread bench/suite_cost_5_*.jsonl

Builds a throw-away git repository holding one parametrized test over a suite of ``bench/suite_models.py``
(``--suite 1``, ``5`` or ``20`` models; 2 x 3 x 160 x 160 images, tokens 2 x 64) and a ``conftest.py`` that
installs the slowdowns (``pytest_fxprof.slow_down``) that a ``plan.json`` beside it lists. The base commit's plan
is empty. The head commit adds a comment to the test module and, with ``--condition mixed``, a plan that slows
some models: in run ``r``, model ``i`` (of those symbolic tracing captures, whose leaf modules the graph calls
whole) gets, by ``(r + i) % 3``, ``node+10`` (the leaf module of 1 ms or more whose share of the model is
closest to 5 %, 10 % slower), ``total+5`` (every leaf module 5 % slower) or nothing. With ``--condition none``
nothing that matters changed: every failure is a false alarm. ``--condition one`` is a pull request that changes
one model (``node+10`` on model ``r % n`` of the symbolic ones), ``--condition third`` one that changes a block
a third of them share (``total+5`` on every third symbolic model, from model ``r % 3``): the rest are unchanged,
and a check that proves them so measures only the changed ones.

Each run times, one after the other in one loop, ``pytest --fxprof-update --fxprof-processes 1`` into a
throw-away directory (one plain profiling run: each test measured once, in this one process) and
``pytest --fxprof-against HEAD~1 --fxprof-report R`` (the check), each a fresh process as a user starts it, and
writes one JSON line: both wall times and their ratio, the check's exit status, each test's verdict, what its
failure named and whether that is the slowed thing, where the check's time went (the report's ``time``) and
``own_calls_s``, the seconds the check's own process spent in its tests' calls (pytest's ``--durations``).
``--record`` also times a recording of the suite at the defaults (``pytest --fxprof-update``, 5 processes);
``--no-check`` then leaves the check out.
``--keep DIR`` copies each check's whole JSON report into ``DIR`` (every item's ratio pair by pair, which
``bench/item_replay.py`` replays).
``--code DIR`` runs the package of another checkout (its directory first on ``PYTHONPATH``), to compare with an
earlier version side by side. ``--start fork`` or ``--start fresh`` passes ``--fxprof-against-start`` to the
check: its side processes forked from one parent that imported the tests' libraries (the default), or each
started fresh. The runs before 2026-11-29 03:40 UTC that say ``"fork_sides": true`` forked them with
``bench/fork_sides.py`` (commit 17c3111), which became the plugin's ``measure.forking``.
``--leak both`` puts a test before the suite's (at both commits) that replaces ``torch.nn.functional.relu`` and
sets the default dtype to float64 and never restores them: a check of unchanged code in which every failure is a
false alarm that one test's leak caused; ``--leak head`` has the head commit add that test (a pull request that
adds a leaking test), where every suite test not judged ``pass`` is a wrong answer.
``--by-spread FILE ...`` groups the checks of unchanged code that those files hold by how widely their tests' totals
spread pair by pair (each check's median over its tests of the standard deviation of the log of the total's ratio)
and prints, per suite and group, the pairs a test took and the check's time against a plain run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import suite_models  # noqa: E402 (this script's folder, put on sys.path above)

CONFTEST = """
import json
from pathlib import Path

import pytest

from pytest_fxprof import slow_down

PLAN = json.loads((Path(__file__).parent / "plan.json").read_text())


@pytest.fixture
def slowed():
    def apply(model, name):
        for step in PLAN.get(name, []):
            slow_down(model, step["path"], step["fraction"])
        return model

    return apply
"""

TEST_MODULE = """
import pytest

from suite_models import build

NAMES = {names!r}


@pytest.mark.parametrize("name", NAMES)
def test_model(fxprof, slowed, name):
    model, args, kwargs = build(name)
    fxprof(slowed(model, name), *args, **kwargs)
"""


LEAKING_TEST = """
import torch
import torch.nn.functional as F


def test_leaks(fxprof):
    fxprof(torch.nn.Linear(8, 8), torch.randn(2, 8))
    # never restored: every test after it in a process it shares would meet both
    F.relu = lambda input, inplace=False: torch.clamp_(input, min=0) if inplace else torch.clamp(input, min=0)
    torch.set_default_dtype(torch.float64)
"""


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def leaves(name: str) -> tuple[str, list[tuple[str, float, float]]]:
    """The capture method of a model and, for a symbolic capture, each leaf module the graph calls with its
    median time in ms and its share of the nodes' time (one in-process profile)."""
    from pytest_fxprof import profile

    model, args, kwargs = suite_models.build(name)
    p = profile(model, *args, **kwargs)
    method = p.capture.method if p.capture is not None else "?"
    total = sum(n.median_ns for n in p.nodes) or 1
    times: dict[str, int] = {}
    for n in p.nodes:
        if n.info.op == "call_module":  # a module called twice (ResNet's relu) is slowed once, its calls summed
            times[n.info.module] = times.get(n.info.module, 0) + n.median_ns
    return method, [(path, ns / 1e6, ns / total) for path, ns in times.items()]


def plan(
    names: tuple[str, ...],
    run: int,
    found: dict[str, tuple[str, list[tuple[str, float, float]]]],
    condition: str = "mixed",
) -> dict[str, Any]:
    """The slowdowns of run ``run`` (``--condition mixed``, ``one`` or ``third``) per model, and each model's
    condition."""
    slowed: dict[str, list[dict[str, Any]]] = {}
    conditions: dict[str, dict[str, Any]] = {}
    symbolic = [n for n in names if found[n][0].startswith("symbolic") and found[n][1]]
    for i, name in enumerate(symbolic):
        kind = ("node+10", "total+5", "none")[(run + i) % 3]
        if condition == "one":
            kind = "node+10" if i == run % len(symbolic) else "none"
        elif condition == "third":
            kind = "total+5" if (i + run) % 3 == 0 else "none"
        mods = found[name][1]
        if kind == "node+10":
            big = [m for m in mods if m[1] >= 1.0] or sorted(mods, key=lambda m: -m[1])[:1]
            path, ms, share = min(big, key=lambda m: abs(m[2] - 0.05))
            slowed[name] = [{"path": path, "fraction": 0.10}]
            conditions[name] = {"condition": kind, "path": path, "ms": round(ms, 3), "share": round(share, 4)}
        elif kind == "total+5":
            slowed[name] = [{"path": m[0], "fraction": 0.05} for m in mods]
            conditions[name] = {"condition": kind}
    for name in names:
        conditions.setdefault(name, {"condition": "none"})
    return {"slowed": slowed, "conditions": conditions}


def make_repo(work: Path, names: tuple[str, ...], slowed: dict[str, Any], leak: str = "") -> None:
    work.mkdir(parents=True)
    git(work, "init", "-q")
    git(work, "config", "user.email", "bench@example.com")
    git(work, "config", "user.name", "bench")
    shutil.copy(BENCH / "suite_models.py", work / "suite_models.py")
    shutil.copy(BENCH / "gpt_style.py", work / "gpt_style.py")
    (work / "conftest.py").write_text(CONFTEST)
    (work / "test_suite.py").write_text(
        (LEAKING_TEST if leak == "both" else "") + TEST_MODULE.format(names=list(names))
    )
    (work / "pytest.ini").write_text("[pytest]\n")
    (work / "plan.json").write_text("{}\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "base")
    (work / "plan.json").write_text(json.dumps(slowed, indent=1) + "\n")
    if leak == "head":  # the pull request adds the leaking test, before the suite's
        (work / "test_suite.py").write_text(LEAKING_TEST + (work / "test_suite.py").read_text())
    with (work / "test_suite.py").open("a") as f:
        f.write("# nothing that matters: a comment\n")
    git(work, "commit", "-qam", "head")


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, str]:
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return time.monotonic() - began, proc.returncode, proc.stdout + proc.stderr


def named(record: dict[str, Any], condition: dict[str, Any]) -> bool:
    """Whether a failure flags the slowed thing: for ``node+10`` a node of the slowed module, a module that is or
    holds it, or the op group of its type; for ``total+5`` anything; where nothing was slowed, nothing."""
    if condition["condition"] == "total+5":
        return True
    path = condition.get("path")
    if path is None:
        return False
    for f in record.get("flagged", []):
        where = f.get("module", "") or f.get("name", "")
        if f.get("kind") == "op":
            return True
        if where and (path == where or path.startswith(where + ".")):
            return True
    return False


def verdicts(report: Path) -> dict[str, dict[str, Any]]:
    """Each test's verdict and what its failure flagged, from the JSON report."""
    data = json.loads(report.read_text())
    out = {}
    for p in data.get("profiles", []):
        name = p["test_id"].rsplit("[", 1)[-1].rstrip("]")
        flagged = [{k: f.get(k, "") for k in ("kind", "name", "module", "ratio")} for f in p.get("flagged", [])]
        flagged += [
            {"kind": "node", "name": led.get("name", ""), "module": led.get("module", "")}
            for f in p.get("flagged", [])
            for led in f.get("led_by", [])
        ]
        total = p.get("total") or {}
        out[name] = {
            "status": p.get("status"),
            "flagged": flagged,
            "pairs": p.get("pairs"),
            "total": {"ratio": total.get("ratio"), "ratios": total.get("ratios")},
            "sets": p.get("sets"),
        }
    return out


def one_run(args: argparse.Namespace, names: tuple[str, ...], run: int, found: dict[str, Any]) -> dict[str, Any]:
    slowing = args.condition != "none"
    planned = plan(names, run, found, args.condition) if slowing else {"slowed": {}, "conditions": {}}
    conditions = planned["conditions"] or {n: {"condition": "none"} for n in names}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if args.code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(args.code.resolve()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    forking = [f"--fxprof-against-start={args.start}"] if args.start else []
    with tempfile.TemporaryDirectory(prefix="fxprof-suite-") as tmp:
        work = Path(tmp) / "repo"
        make_repo(work, names, planned["slowed"], leak=args.leak)
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
        plain = [*base, "--fxprof-update", "--fxprof-processes", "1", "--fxprof-baseline-dir", str(Path(tmp) / "plain")]
        plain_s, plain_rc, plain_out = timed(plain, work, env)
        report = Path(tmp) / "report.json"
        check_cmd = [*base, "--fxprof-against", "HEAD~1", "--fxprof-report", str(report), *forking]
        check_cmd += ["--durations=0", "--durations-min=0", *args.pytest_args]
        check_s, check_rc, check_out = timed(check_cmd, work, env) if not args.no_check else (0.0, 0, "")
        record_s = None
        if args.record:  # a recording at the defaults (5 processes), timed
            record = [*base, "--fxprof-update", "--fxprof-baseline-dir", str(Path(tmp) / "recorded")]
            record_s, record_rc, record_out = timed(record, work, env)
            if record_rc != 0:
                raise SystemExit(f"the recording failed:\n{record_out[-3000:]}")
        tests = verdicts(report) if report.is_file() else {}
        if args.keep is not None and report.is_file():  # the whole report, for bench/item_replay.py
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(report, args.keep / f"{time.strftime('%Y%m%dT%H%M%S')}-run{run}.json")
        time_split = json.loads(report.read_text()).get("time") if report.is_file() else None
    rows = {}
    for name in names:
        got = tests.get(name, {"status": "missing", "flagged": []})
        cond = conditions.get(name, {"condition": "none"})
        failed = got["status"] == "regression"
        rows[name] = {
            **cond,
            "status": got["status"],
            "pairs": got.get("pairs"),
            "failed": failed,
            "named": failed and named(got, cond),
            "flagged": got["flagged"] if failed else [],
            "total": got.get("total"),
            "sets": got.get("sets"),
        }
    return {
        "run": run,
        "suite": args.models or args.suite,
        "models": len(names),
        "plain_s": round(plain_s, 1),
        "check_s": round(check_s, 1),
        "ratio": round(check_s / plain_s, 2) if not args.no_check else None,
        "start": args.start or "default",
        "leak": args.leak or "",
        "record_s": None if record_s is None else round(record_s, 1),
        "plain_rc": plain_rc,
        "check_rc": check_rc,
        "tests": rows,
        "time": time_split,
        "own_calls_s": own_calls(check_out) if not args.no_check else None,
        "tail": "" if check_rc in (0, 1) else check_out[-2000:],
        "plain_tail": "" if plain_rc == 0 else plain_out[-1000:],
    }


def own_calls(output: str) -> float:
    """The seconds the check's own process spent in its tests' call phases (pytest's ``--durations`` lines): building
    each model and inputs, each ``fxprof`` call, and judging it on its pairs; not the pairs, measured before the
    tests ran."""
    return round(sum(float(m.group(1)) for m in re.finditer(r"^([0-9.]+)s call ", output, re.MULTILINE)), 2)


def summary(path: Path) -> None:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    runs = [x for x in lines if "run" in x]
    if not runs:
        print("no runs")
        return
    runs = [r for r in runs if r.get("ratio") is not None]
    if not runs:
        print("no checks")
        return
    ratios = [r["ratio"] for r in runs]
    check = statistics.median(r["check_s"] for r in runs)
    plain = statistics.median(r["plain_s"] for r in runs)
    print(
        f"{len(runs)} runs of {runs[0]['models']} models: check/plain median x{statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}); check median {check:.0f} s, plain median {plain:.1f} s"
    )
    own = [r["own_calls_s"] for r in runs if r.get("own_calls_s") is not None]
    if own:
        print(f"  the check's own process in its tests' calls: {min(own):.1f}-{max(own):.1f} s")
    pairs = [row["pairs"] for r in runs for row in r["tests"].values() if row.get("pairs")]
    starts = [r["time"]["processes_s"] / r["time"]["processes"] for r in runs if (r.get("time") or {}).get("processes")]
    if pairs and starts:
        print(
            f"  pairs a test took: mean {statistics.mean(pairs):.1f}, most {max(pairs)}; "
            f"a process's start (the report's split): {min(starts):.2f}-{max(starts):.2f} s"
        )
    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        for row in r["tests"].values():
            by.setdefault(row["condition"], []).append(row)
    for cond, rows in sorted(by.items()):
        failed = sum(r["failed"] for r in rows)
        named_ = sum(r["named"] for r in rows)
        undecided = sum(r["status"] == "undecided" for r in rows)
        unchanged = sum(r["status"] == "unchanged" for r in rows)
        # where a second set of pairs measured the test: what the first set alone would have said
        first = [r["sets"][0]["status"] if r.get("sets") else r["status"] for r in rows]
        alone = f"; the first set alone: {first.count('regression')} failed, {first.count('undecided')} undecided"
        print(
            f"  {cond:8} {len(rows):3} checks: failed {failed}, named {named_}, undecided {undecided}, "
            f"unchanged (no pairs) {unchanged}{alone}"
        )


SPREAD_GROUPS = ((0.0, 0.015), (0.015, 0.025), (0.025, 0.035), (0.035, math.inf))
"""The groups of ``--by-spread``: a check's spread of the total's ratio pair by pair, from and below."""


def check_spread(run: dict[str, Any]) -> float | None:
    """The median over a check's tests of the standard deviation of the log of the total's ratio pair by pair (tests
    of 3 pairs or more); None where none has them."""
    spreads = [
        statistics.stdev(math.log(x) for x in row["total"]["ratios"])
        for row in run["tests"].values()
        if len((row.get("total") or {}).get("ratios") or ()) > 2
    ]
    return statistics.median(spreads) if spreads else None


def by_spread(paths: list[Path]) -> None:
    """The checks of unchanged code in ``paths``, grouped by suite and by their pairs' spread (``SPREAD_GROUPS``)."""
    checks: list[tuple[int, float, float, float]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            run = json.loads(line) if line.strip() else {}
            if run.get("ratio") is None or any(row["condition"] != "none" for row in run["tests"].values()):
                continue
            spread = check_spread(run)
            if spread is not None:
                pairs = statistics.fmean(row["pairs"] for row in run["tests"].values())
                checks.append((run["models"], spread, pairs, run["ratio"]))
    print(
        "| models | spread of the total's ratio | checks | pairs a test, median "
        "| x plain run, median [range] | within x4 |"
    )
    for models in sorted({c[0] for c in checks}):
        for low, high in SPREAD_GROUPS:
            group = [c for c in checks if c[0] == models and low <= c[1] < high]
            if not group:
                continue
            ratios = [c[3] for c in group]
            print(
                f"| {models} | {100 * low:.1f}-{100 * high:.1f} % | {len(group)} | "
                f"{statistics.median(c[2] for c in group):.1f} | x{statistics.median(ratios):.2f} "
                f"[{min(ratios):.2f}-{max(ratios):.2f}] | {sum(r <= 4 for r in ratios)} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="JSON lines: the setup, then one line per run")
    parser.add_argument("--by-spread", type=Path, nargs="+", help="group these files' checks by spread, run nothing")
    parser.add_argument("--suite", choices=sorted(suite_models.SUITES), default="5")
    parser.add_argument("--models", help="these models (comma-separated) instead of --suite's")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--condition", choices=("none", "mixed", "one", "third"), default="none")
    parser.add_argument("--code", type=Path, help="a checkout whose package runs instead of the installed one")
    parser.add_argument("--summary", action="store_true", help="print the table of what --out holds, run nothing")
    parser.add_argument("--record", action="store_true", help="also time one recording at the defaults")
    parser.add_argument("--no-check", action="store_true", help="leave the check out (with --record)")
    parser.add_argument("--keep", type=Path, help="a folder that keeps each check's whole JSON report")
    parser.add_argument("--start", choices=("fork", "fresh"), help="how the check's side processes start")
    parser.add_argument(
        "--leak",
        choices=("both", "head"),
        help="a first test that leaks F.relu and the default dtype: at both commits, or added by the head",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments of the check")
    args = parser.parse_args()
    if args.by_spread:
        by_spread(args.by_spread)
        return
    if args.out is None:
        parser.error("--out is required unless --by-spread is given")
    if args.summary:
        summary(args.out)
        return
    names = suite_models.available(tuple(args.models.split(",")) if args.models else suite_models.SUITES[args.suite])
    found = {n: leaves(n) for n in names} if args.condition != "none" else {}
    with args.out.open("a") as f:
        f.write(
            json.dumps(
                {
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "machine": f"{platform.node()} {os.cpu_count()} cores",
                    "command": " ".join(sys.argv),
                    "models": names,
                    "methods": {n: found[n][0] for n in found},
                }
            )
            + "\n"
        )
    for run in range(args.runs):
        row = one_run(args, names, run, found)
        print(json.dumps({k: v for k, v in row.items() if k != "tests"}), flush=True)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
    summary(args.out)


if __name__ == "__main__":
    main()
