"""Whether a test whose code changed makes an unchanged test fail beside it, when one pair of processes serves both.

    .venv/bin/python bench/neighbour_change.py --runs 6 --out bench/neighbour_change.jsonl
    .venv/bin/python bench/neighbour_change.py --out bench/neighbour_change.jsonl --summary

Builds the throw-away repository of ``make demo``'s step 7: ``test_resnet18`` (torchvision's ResNet18 with its
block's forward written out in ``net.py``) and ``test_mobilenet`` (MobileNetV3-small, code the branch never
touches), inputs 1 x 3 x 224 x 224. The branch ``float64`` runs each block's second convolution in float64. Each
run checks the branch with ``pytest --fxprof-against main``, the two tests named in an order that alternates run
by run: ``changed-first`` (ResNet18, then MobileNet, as the demo orders them) and ``unchanged-first``. Every
failure of MobileNet is a false alarm; ResNet18 must fail. ``--change comment`` is the control: the branch adds a
comment to that line instead, so nothing that runs changed.

Writes one JSON line per run: the order, the check's wall time and exit status, and per test its verdict, pairs,
the total's ratio and per-pair ratios, and the three modules of the highest ratio with their per-pair ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NET = """
import torch
from torchvision.models.resnet import BasicBlock, ResNet


class Block(BasicBlock):
    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


def build():
    torch.manual_seed(0)
    return ResNet(Block, [2, 2, 2, 2]).eval(), torch.randn(1, 3, 224, 224)
"""

TESTS = """
import torch
from torchvision.models import mobilenet_v3_small

from net import build


def test_resnet18(fxprof):
    model, x = build()
    fxprof(model, x)


def test_mobilenet(fxprof):
    torch.manual_seed(0)
    fxprof(mobilenet_v3_small().eval(), torch.randn(1, 3, 224, 224))
"""

OLD_LINE = "        out = self.bn2(self.conv2(out))"
NEW_LINE = (
    "        out = self.bn2(torch.nn.functional.conv2d(out.double(), self.conv2.weight.double(), padding=1).float())"
)

ORDERS = {
    "changed-first": ["test_net.py::test_resnet18", "test_net.py::test_mobilenet"],
    "unchanged-first": ["test_net.py::test_mobilenet", "test_net.py::test_resnet18"],
}


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com"}
    env |= {"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


CHANGES = {
    "float64": NET.replace(OLD_LINE, NEW_LINE),
    "comment": NET.replace(OLD_LINE, f"{OLD_LINE}  # the second convolution"),
}


def make_repo(repo: Path, change: str) -> None:
    repo.mkdir(parents=True)
    (repo / "net.py").write_text(NET)
    (repo / "test_net.py").write_text(TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "ResNet18 and MobileNet tests")
    git(repo, "checkout", "-q", "-b", change)
    (repo / "net.py").write_text(CHANGES[change])
    git(repo, "commit", "-qam", f"ResNet18's block: {change}")


def per_test(profile: dict[str, Any]) -> dict[str, Any]:
    total = profile.get("total") or {}
    modules = [a for a in profile.get("aggregates", []) if a.get("kind") == "module" and a.get("ratio")]
    modules.sort(key=lambda a: a["ratio"], reverse=True)
    return {
        "status": profile.get("status"),
        "pairs": profile.get("pairs"),
        "total": total.get("ratio"),
        "total_ratios": [round(r, 4) for r in total.get("ratios", [])],
        "flagged": [f"{f.get('kind')} {f.get('name')} x{f.get('ratio', 0):.3f}" for f in profile.get("flagged", [])],
        "top_modules": [
            {"name": a["name"], "ratio": a["ratio"], "ratios": [round(r, 4) for r in a.get("ratios", [])]}
            for a in modules[:3]
        ],
    }


def one_run(repo: Path, run: int, order: str, report: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ORDERS[order]]
    cmd += ["--fxprof-against", "main", "--fxprof-report", str(report)]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - began
    tests = {}
    if report.is_file():
        for p in json.loads(report.read_text()).get("profiles", []):
            tests[p["test_id"].rpartition("::")[2]] = per_test(p)
        report.unlink()
    return {
        "run": run,
        "order": order,
        "check_s": round(seconds, 1),
        "rc": proc.returncode,
        "tests": tests,
        "tail": "" if proc.returncode in (0, 1) else (proc.stdout + proc.stderr)[-2000:],
    }


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    change = "float64"
    runs = []
    for r in rows:
        if "order" not in r:
            change = r.get("change", "float64")
        else:
            runs.append({**r, "change": change})
    print("| ResNet18's change | order | checks | MobileNet failed | its total, median [range] | ResNet18 failed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for change, order in [(c, o) for c in CHANGES for o in ORDERS]:
        mine = [r for r in runs if r["order"] == order and r["change"] == change]
        if not mine:
            continue
        mobile = [r["tests"].get("test_mobilenet", {}) for r in mine]
        totals = [m["total"] for m in mobile if m.get("total")]
        failed = sum(m.get("status") == "regression" for m in mobile)
        caught = sum(r["tests"].get("test_resnet18", {}).get("status") == "regression" for r in mine)
        spread = f"x{statistics.median(totals):.3f} [x{min(totals):.3f}..x{max(totals):.3f}]" if totals else "-"
        print(f"| {change} | {order} | {len(mine)} | {failed}/{len(mine)} | {spread} | {caught}/{len(mine)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON lines: the setup, then one line per run")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--order", choices=[*ORDERS, "alternate"], default="alternate")
    parser.add_argument("--change", choices=sorted(CHANGES), default="float64", help="comment: the control")
    parser.add_argument("--summary", action="store_true", help="print the table of what --out holds, run nothing")
    args = parser.parse_args()
    if args.summary:
        summary(args.out)
        return
    with args.out.open("a") as f:
        head = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {os.cpu_count()} cores",
            "command": " ".join(sys.argv),
            "change": args.change,
        }
        f.write(json.dumps(head) + "\n")
    with tempfile.TemporaryDirectory(prefix="fxprof-neighbour-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, args.change)
        for run in range(args.runs):
            order = args.order if args.order != "alternate" else list(ORDERS)[run % 2]
            row = one_run(repo, run, order, Path(tmp) / "report.json")
            print(json.dumps({k: v for k, v in row.items() if k != "tests"}), flush=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    summary(args.out)


if __name__ == "__main__":
    main()
