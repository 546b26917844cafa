"""What one record and one check of the example models cost, and how often the default gate errs.

    .venv/bin/python bench/gate_cost.py --checks 10

Through the real command line, each step a fresh ``pytest`` process as in CI: one ``--fxprof-update``
of ``examples/test_models.py`` into a temporary directory, then ``--checks`` unchanged ``--fxprof`` runs
(false alarms: any failing test), then ``--checks`` runs with one node per model made ``--slowdown``
slower by ``FXPROF_DEMO_SLOWDOWN`` (detections: the slowed node named in the report). Prints a table
and writes the numbers as JSON (``--out``). Wall times are of whole pytest processes, torch import
included.
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

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "examples/test_models.py", "-q", "-p", "no:cacheprovider"]
# one node of about 2-5 % of each model's time
SLOWED = {
    "test_resnet18": ("layer3.0.conv1", "layer3_0_conv1"),
    "test_mobilenet_v3_small": ("features.0.0", "features_0_0"),
    "test_vision_transformer": ("encoder.layers.encoder_layer_1.mlp.0", "encoder_layers_encoder_layer_1_mlp_0"),
}


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, float]:
    start = time.perf_counter()
    proc = subprocess.run([*PYTEST, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=10, help="unchanged and slowed checks each (default 10)")
    parser.add_argument("--slowdown", type=float, default=0.5, help="relative slowdown of the chosen node")
    parser.add_argument("--out", type=Path, default=Path("bench/gate_cost.json"))
    ns = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fxprof-bench-") as tmp:
        baselines = ["--fxprof-baseline-dir", str(Path(tmp) / "baselines")]
        code, record_s = run(["--fxprof-update", *baselines])
        if code != 0:
            raise SystemExit(f"recording failed with exit {code}")
        false_alarms = dict.fromkeys(SLOWED, 0)
        detected = dict.fromkeys(SLOWED, 0)
        check_s: list[float] = []
        report = Path(tmp) / "report.json"
        for _ in range(ns.checks):
            _, seconds = run(["--fxprof", *baselines, f"--fxprof-report={report}"])
            check_s.append(seconds)
            for profile in json.loads(report.read_text())["profiles"]:
                test = profile["test_id"].split("::")[1]
                if profile["status"] == "regression":
                    false_alarms[test] += 1
                    flagged = [f"{n['name']} {n['reason']}" for n in profile["nodes"] if n.get("verdict") == "slower"]
                    print(f"false alarm in {test}: total {profile['total'].get('reason')}; nodes: {flagged}")
        spec = ",".join(f"{path}={ns.slowdown}" for path, _ in SLOWED.values())
        env = {**os.environ, "FXPROF_DEMO_SLOWDOWN": spec}
        for _ in range(ns.checks):
            run(["--fxprof", *baselines, f"--fxprof-report={report}"], env=env)
            for profile in json.loads(report.read_text())["profiles"]:
                test = profile["test_id"].split("::")[1]
                slowed = {n["name"] for n in profile["nodes"] if n.get("verdict") == "slower"}
                detected[test] += SLOWED[test][1] in slowed
        overhead = {p["test_id"].split("::")[1]: p["overhead"] for p in json.loads(report.read_text())["profiles"]}

    results = {
        "checks": ns.checks,
        "slowdown": ns.slowdown,
        "record_seconds_all_three": round(record_s, 1),
        "check_seconds_median_all_three": round(sorted(check_s)[len(check_s) // 2], 1),
        "models": {
            test: {
                "slowed_node": SLOWED[test][0],
                "false_alarms": false_alarms[test],
                "detected": detected[test],
                "overhead": overhead.get(test),
            }
            for test in SLOWED
        },
    }
    print(f"record (3 models, 5 processes each): {results['record_seconds_all_three']} s")
    print(f"check  (3 models, median of {ns.checks}): {results['check_seconds_median_all_three']} s")
    print(f"{'model':26} {'false alarms':>13} {'detected +' + format(ns.slowdown, '.0%'):>15} {'overhead':>9}  node")
    for test, row in results["models"].items():
        print(
            f"{test:26} {row['false_alarms']:>6}/{ns.checks:<6} {row['detected']:>8}/{ns.checks:<6}"
            f" {row['overhead'] or 0:>8.2f}x  {row['slowed_node']}"
        )
    ns.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
