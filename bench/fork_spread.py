"""Whether processes forked from one that imported torch sample the spread between processes as fresh ones do.

    .venv/bin/python bench/fork_spread.py --checks 10 --pairs 4 --out bench/fork_spread.jsonl
    .venv/bin/python bench/fork_spread.py --summary bench/fork_spread.jsonl

A check against a revision pays a fresh process per side and pair: the interpreter, ``import torch``, the tests'
imports and collection, before any test runs (``bench/suite_cost.py``). Processes forked from one process per
side that already imported them would pay that once per check. What the paired rule needs of its pairs is that
they sample the variance between processes; a forked process inherits its parent's state (the addresses it
mapped, its heap), so whatever of that state sets a model's speed is shared by every pair of a check and
differs between checks: the pairs would not see it, and the check's interval would be too narrow.

This bench runs A/A checks (both sides the same code, side B from a copy of this file at a fresh temporary
path, as the old side runs from an exported revision) in up to five ways, interleaved check by check:

- ``exec``: every process of every pair a fresh interpreter (what the plugin does);
- ``fork``: per check and side, one process imports torch and torchvision, then forks one child per pair;
- ``fork+pad``: as ``fork``, and each child first maps a random number of pages and allocates random small
  objects, so that its later allocations land elsewhere than its siblings';
- ``shared``: per check, one process imports torch and torchvision and forks both sides' children of every pair,
  so that whatever its state does to a model's speed it does to both sides of each pair alike;
- ``shared+pad``: as ``shared``, each child padded as in ``fork+pad``.

In the shared ways both children run the bench's code as their zygote imported it (side A's file); the models
measured are torchvision's on both sides in every way.

Each process builds MobileNetV3-small and ResNet18 (torchvision, random weights from seed 0, one thread, inputs
2 x 3 x 160 x 160), runs ``--warmup`` passes and ``--passes`` timed passes, and reports the median of each model's
forward and of each of its top-level modules, or of their children where one is a ``Sequential`` (``features.1``,
``layer1.0``; forward hooks). A pair's two processes run at once, pass by pass in lock-step and trading the two
cores, as the plugin's duets do (``pytest_fxprof.measure.lockstep``). Side A's process is started (or forked)
first in every pair, or with ``--alternate`` in the even pairs and side B's in the odd ones, as the plugin
alternates the order of a pair's sides where they run one after the other. One JSON line per check: the mode,
each item's ratio B / A per pair, each process's wall time (for forks: from the request to the child's end) and
which side started first in each pair.

``--summary`` prints, per mode: the seconds a process took, the spread of the pairs' log ratios within a check,
the total's mean ratio (over all pairs, and over the even and the odd ones apart), the variance between the
checks' mean log ratios against the variance their pairs predict (``across / within``, as in
``bench/check_spread.py``: about 1 where pairs sample all the noise), and how many items are past 2.5.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from check_spread import across_within

from pytest_fxprof.measure.lockstep import exited_mark

MODES = ("exec", "fork", "fork+pad", "shared", "shared+pad")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def measure(warmup: int, passes: int, duet: dict[str, Any]) -> dict[str, float]:
    """This process's median seconds per item: each model's forward and each of its top-level modules (or their
    children). ``duet``: the pair's lock-step (``measure.lockstep``): each pass run with the twin's, the two
    trading the cores pass by pass, as the plugin's duets do."""
    import torch
    import torchvision

    from pytest_fxprof.measure.lockstep import DONE, lockstep_barrier

    torch.set_num_threads(1)
    out: dict[str, float] = {}
    for name in ("mobilenet_v3_small", "resnet18"):
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)().eval()
        x = torch.randn(2, 3, 160, 160)
        spent: dict[str, list[float]] = {}
        for child_name, child in model.named_children():
            if isinstance(child, torch.nn.Sequential):  # features.0, layer1.1, ...
                for inner, module in child.named_children():
                    _time_module(module, spent.setdefault(f"{child_name}.{inner}", []))
            else:
                _time_module(child, spent.setdefault(child_name, []))
        barrier = lockstep_barrier(duet, name)
        assert barrier is not None
        with torch.inference_mode():
            for _ in range(warmup):
                model(x)
            for seconds in spent.values():
                seconds.clear()
            totals = []
            for i in range(passes):
                barrier(i)
                t0 = time.perf_counter()
                model(x)
                totals.append(time.perf_counter() - t0)
            barrier(DONE)
        out[f"{name}:total"] = statistics.median(totals)
        out.update({f"{name}:{n}": statistics.median(v) for n, v in spent.items()})
    return out


def _time_module(module: Any, into: list[float]) -> None:
    """Append each of ``module``'s forward calls' seconds to ``into``."""
    began = [0.0]

    def start(*_: Any) -> None:
        began[0] = time.perf_counter()

    def stop(*_: Any) -> None:
        into.append(time.perf_counter() - began[0])

    module.register_forward_pre_hook(start)
    module.register_forward_hook(stop)


def pad() -> None:
    """Move this process's later allocations: a random number of mapped pages and of small heap objects."""
    rng = random.Random(os.urandom(16))
    kept: list[Any] = [mmap.mmap(-1, mmap.PAGESIZE * rng.randint(1, 512))]
    kept.append(bytearray(rng.randint(1, 1 << 16)))
    kept.extend(bytes(rng.randint(1, 200)) for _ in range(rng.randint(0, 4000)))
    globals()["_PADDING"] = kept


def zygote(warmup: int, passes: int) -> None:
    """Import torch and torchvision, then per line ``<out> <pad> <duet>`` on stdin fork a child that measures
    into ``<out>``; on a line ``wait``, wait for every child forked since the last and answer one line each
    ``<seconds> <status>`` as they end, marking each child's side as exited for its twin's lock-step."""
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    print("ready", flush=True)
    children: dict[int, tuple[float, dict[str, Any]]] = {}
    for line in sys.stdin:
        if line.strip() == "wait":
            while children:
                pid, status = os.wait()
                t0, duet = children.pop(pid)
                exited_mark(Path(duet["dir"]), duet["side"]).touch()
                print(f"{time.perf_counter() - t0:.3f} {status}", flush=True)
            continue
        out, padded, duet_text = line.split(maxsplit=2)
        duet = json.loads(duet_text)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if padded == "1":
                    pad()
                Path(out).write_text(json.dumps(measure(warmup, passes, duet)), encoding="utf-8")
                code = 0
            finally:
                os._exit(code)
        children[pid] = (t0, duet)


class Zygote:
    """A process of one side that imported torch and torchvision, forking a child per request."""

    def __init__(self, script: Path, warmup: int, passes: int) -> None:
        cmd = [sys.executable, str(script), "--zygote", "--warmup", str(warmup), "--passes", str(passes)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{script} --zygote did not start")

    def send(self, out: Path, padded: bool, duet: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{out} {int(padded)} {json.dumps(duet)}\n")
        self.proc.stdin.flush()

    def ask(self) -> None:
        """Ask for the children forked since the last ``ask`` to be waited for (every zygote of a pair is asked
        before any is read, so that a side's exit is marked for its twin whichever ends first)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("wait\n")
        self.proc.stdin.flush()

    def receive(self, children: int) -> list[float]:
        """The seconds of each of the ``children`` asked for."""
        assert self.proc.stdout is not None
        ended = [self.proc.stdout.readline().split() for _ in range(children)]
        if any(len(e) != 2 for e in ended):
            raise RuntimeError(f"the zygote ended before its children did (exit status {self.proc.poll()})")
        if any(status != "0" for _, status in ended):
            raise RuntimeError(f"a forked child ended with status {[status for _, status in ended]}")
        return [float(seconds) for seconds, _ in ended]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def duet_spec(directory: Path, side: str) -> dict[str, Any]:
    """Side ``A`` (the plugin's ``old``) or ``B`` (``new``) of a duet in ``directory``, trading the first two
    cores."""
    me, other = ("old", "new") if side == "A" else ("new", "old")
    cores = sorted(os.sched_getaffinity(0))[:2]
    return {"dir": str(directory), "side": me, "other": other, "cores": cores if len(cores) == 2 else []}


def pair(
    mode: str,
    scripts: dict[str, Path],
    zygotes: dict[str, Zygote],
    directory: Path,
    *,
    warmup: int,
    passes: int,
    first: str = "A",
) -> tuple[dict[str, dict[str, float]], list[float]]:
    """One pair: both sides at once, in lock-step, side ``first`` started (or forked) first; what each measured
    and each process's seconds."""
    directory.mkdir()
    order = sorted(scripts, key=lambda side: side != first)
    outs = {side: directory / f"{side}.json" for side in scripts}
    seconds = []
    if mode == "exec":
        t0 = time.perf_counter()
        procs = {}
        for side in order:
            cmd = [sys.executable, str(scripts[side]), "--child", str(outs[side]), "--warmup", str(warmup)]
            cmd += ["--passes", str(passes), "--duet", json.dumps(duet_spec(directory, side))]
            procs[side] = subprocess.Popen(cmd, env=ENV)
        codes = {}
        while procs:  # each side marked exited as soon as it ends, so that a crash does not leave its twin waiting
            for side, proc in list(procs.items()):
                if proc.poll() is not None:
                    exited_mark(directory, duet_spec(directory, side)["side"]).touch()
                    codes[side] = proc.returncode
                    seconds.append(time.perf_counter() - t0)
                    del procs[side]
            time.sleep(0.05)
        failed = {side: code for side, code in codes.items() if code != 0}
        if failed:
            raise RuntimeError(f"side processes ended with status {failed}")
    else:
        shared = mode.startswith("shared")
        for side in order:
            z = zygotes["A" if shared else side]
            z.send(outs[side], mode.endswith("+pad"), duet_spec(directory, side))
        for z in zygotes.values():
            z.ask()
        for z in zygotes.values():
            seconds += z.receive(len(scripts) if shared else 1)
    return {side: json.loads(out.read_text(encoding="utf-8")) for side, out in outs.items()}, seconds


def check(mode: str, pairs: int, warmup: int, passes: int, *, alternate: bool = False) -> dict[str, Any]:
    """One A/A check in ``mode``: side A runs this file, side B a copy at a fresh temporary path; side A started
    first in every pair, or (``alternate``) in every other pair and side B in the others."""
    here = Path(__file__).resolve()
    with tempfile.TemporaryDirectory(prefix="fxprof-fork-spread-") as tmp:
        scripts = {"A": here, "B": Path(tmp, "side", here.name)}
        scripts["B"].parent.mkdir()
        for name in (here.name, "check_spread.py", "pair_spread.py"):
            shutil.copy(here.parent / name, scripts["B"].parent)
        served = {"exec": {}, "shared": {"A": scripts["A"]}}.get(mode.split("+", maxsplit=1)[0], scripts)
        zygotes = {side: Zygote(script, warmup, passes) for side, script in served.items()}
        ratios: dict[str, list[float]] = {}
        seconds: list[float] = []
        try:
            firsts = ["B" if alternate and i % 2 else "A" for i in range(pairs)]
            for i, first in enumerate(firsts):
                got, spent = pair(
                    mode, scripts, zygotes, Path(tmp, f"pair{i}"), warmup=warmup, passes=passes, first=first
                )
                seconds += spent
                for item in got["A"]:
                    ratios.setdefault(item, []).append(got["B"][item] / got["A"][item])
        finally:
            for z in zygotes.values():
                z.close()
    return {"mode": mode, "pairs": pairs, "ratios": ratios, "seconds": seconds, "first": firsts}


def summary(path: Path) -> None:
    """Per mode and model: seconds per process; the total's pairs' spread within a check, its mean ratio over all
    pairs and over the even pairs (0, 2, ...) and the odd ones (with ``--alternate``, those whose side B started
    first); ``across / within`` of the total, its median and largest over the modules, and how many items (the
    total and the modules) are past ``PAST``."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    print(
        "| mode | checks | seconds a process took, median | model | total: pairs' spread (sd of log ratios), "
        "median | total: mean ratio | total: mean ratio, even pairs / odd pairs | total: across / within "
        f"| modules: across / within, median [largest] | items past {PAST} |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        if len(mine) < 2:
            continue
        seconds = statistics.median(s for r in mine for s in r["seconds"])
        for model in ("mobilenet_v3_small", "resnet18"):
            totals = [r["ratios"][f"{model}:total"] for r in mine]
            spread = statistics.median(statistics.stdev(math.log(x) for x in one) for one in totals)
            means = [_mean_ratio(x for one in totals for x in one[parity::2]) for parity in (0, 1)]
            ratio = {
                item: across / within
                for item in mine[0]["ratios"]
                if item.startswith(f"{model}:")
                for across, within in [across_within([r["ratios"][item] for r in mine])]
                if within > 0
            }
            total = ratio[f"{model}:total"]
            modules = sorted(v for item, v in ratio.items() if not item.endswith(":total"))
            past = sum(v > PAST for v in ratio.values())
            print(
                f"| {mode} | {len(mine)} | {seconds:.1f} | {model} | {spread:.1%} "
                f"| x{_mean_ratio(x for one in totals for x in one):.3f} | x{means[0]:.3f} / x{means[1]:.3f} "
                f"| {total:.2f} | {statistics.median(modules):.2f} [{modules[-1]:.2f}] ({len(modules)}) "
                f"| {past} of {len(ratio)} |"
            )


PAST = 2.5
"""An item whose variance between checks is this many times what its pairs predict is counted in the summary."""


def _mean_ratio(ratios: Iterable[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--checks", type=int, default=10, help="checks per mode")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--alternate", action="store_true", help="side B starts first in every other pair")
    parser.add_argument("--summary", type=Path, help="print the table of a run's JSON lines")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--duet", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.child.write_text(json.dumps(measure(args.warmup, args.passes, json.loads(args.duet))), encoding="utf-8")
    elif args.zygote:
        zygote(args.warmup, args.passes)
    elif args.summary:
        summary(args.summary)
    else:
        if args.out is None:
            parser.error("--out is required to measure")
        modes = args.modes.split(",")
        rng = random.Random(0)
        with args.out.open("a", encoding="utf-8") as out:
            for _ in range(args.checks):
                for mode in rng.sample(modes, len(modes)):
                    got = check(mode, args.pairs, args.warmup, args.passes, alternate=args.alternate)
                    out.write(json.dumps(got) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
