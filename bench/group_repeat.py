"""One suite checked again and again against a revision with nothing changed, the side processes forked and fresh
in turn, and what each check measured of the aggregates of one name: whether an aggregate that failed one check
reads slower in every check of a way (a bias that stays within a check), or in none.

    .venv/bin/python bench/group_repeat.py --models timm_ghostnet_050 --name torch.cat --runs 4 \
        --out bench/group_repeat_ghostnet.jsonl

Builds the throw-away repository of ``bench/suite_cost.py`` (nothing slowed) and runs ``pytest --fxprof-against
HEAD~1`` on it ``--runs`` times for each of ``--fxprof-against-start fork`` and ``fresh``, alternating; writes one
JSON line per check: the way, its wall time, and per test the total's and each aggregate named ``--name``'s ratio,
pair ratios and verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import suite_cost  # noqa: E402 (this script's folder, put on sys.path above)


def check(work: Path, report: Path, start: str) -> tuple[float, int]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "test_suite.py",
        "--fxprof-against",
        "HEAD~1",
        "--fxprof-report",
        str(report),
        f"--fxprof-against-start={start}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    return time.monotonic() - began, done.returncode


def read(report: Path, name: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in json.loads(report.read_text()).get("profiles", []):
        total = p.get("total") or {}
        groups = [
            {k: a.get(k) for k in ("kind", "name", "ratio", "ratios", "verdict", "band")}
            for a in p.get("aggregates", [])
            if a.get("name") == name
        ]
        out[p["test_id"].rsplit("[", 1)[-1].rstrip("]")] = {
            "status": p.get("status"),
            "pairs": p.get("pairs"),
            "total": {"ratio": total.get("ratio"), "ratios": total.get("ratios")},
            "groups": groups,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", required=True, help="comma-separated models of bench/suite_models.py")
    parser.add_argument("--name", required=True, help="the aggregates' name (an operator type, a module path)")
    parser.add_argument("--runs", type=int, default=4, help="checks per way")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    names = tuple(args.models.split(","))
    with tempfile.TemporaryDirectory(prefix="fxprof-repeat-") as tmp:
        work = Path(tmp) / "repo"
        suite_cost.make_repo(work, names, {})
        for run in range(args.runs):
            for start in ("fork", "fresh") if run % 2 == 0 else ("fresh", "fork"):
                report = Path(tmp) / f"{start}{run}.json"
                seconds, rc = check(work, report, start)
                row: dict[str, object] = {"run": run, "start": start, "check_s": round(seconds, 1), "rc": rc}
                row["tests"] = read(report, args.name) if report.is_file() else {}
                with args.out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
