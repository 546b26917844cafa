"""Checks of unchanged tests against baselines recorded once, spread over hours: are they all decided unchanged?

    .venv/bin/python bench/stored_unchanged.py --dir /tmp/stored --record            # once: the suite, recorded
    .venv/bin/python bench/stored_unchanged.py --dir /tmp/stored --out bench/stored_unchanged.jsonl   # each check

``--record`` writes, in ``--dir``, the suite of ``bench/suite_models.py`` (``--suite``, 10 models by default) as
one parametrized test and its ``conftest.py`` (as ``bench/suite_cost.py`` builds them, nothing slowed), and records
its baselines at the defaults (``pytest --fxprof-update``: 5 processes). Each later call runs one check of it
(``pytest --fxprof``, a fresh process as a user starts it) and appends one JSON line to ``--out``: the UTC time,
the check's wall seconds and exit status, and each test's status. Nothing in the suite changes between the
recording and the checks, so every test should end ``unchanged`` (decided without measuring), and none fail.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import suite_cost  # noqa: E402 (this script's folder, put on sys.path above)
import suite_models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--suite", choices=sorted(suite_models.SUITES), default="10")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--out", type=Path)
    ns = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
    if ns.record:
        names = suite_models.available(suite_models.SUITES[ns.suite])
        ns.dir.mkdir(parents=True, exist_ok=False)
        shutil.copy(BENCH / "suite_models.py", ns.dir / "suite_models.py")
        shutil.copy(BENCH / "gpt_style.py", ns.dir / "gpt_style.py")
        (ns.dir / "conftest.py").write_text(suite_cost.CONFTEST)
        (ns.dir / "plan.json").write_text("{}\n")
        (ns.dir / "test_suite.py").write_text(suite_cost.TEST_MODULE.format(names=list(names)))
        (ns.dir / "pytest.ini").write_text("[pytest]\n")
        done = subprocess.run(
            [*base, "--fxprof-update"], cwd=ns.dir, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"the recording failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        print(done.stdout.splitlines()[-1])
        return
    if ns.out is None:
        raise SystemExit("--out: where to append the check's line")
    report = ns.dir / "report.json"
    began = time.monotonic()
    done = subprocess.run(
        [*base, "--fxprof", "--fxprof-report", str(report)],
        cwd=ns.dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - began
    profiles = json.loads(report.read_text())["profiles"] if report.is_file() else []
    line = {
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "exit": done.returncode,
        "statuses": {p["test_id"].rsplit("[", 1)[-1].rstrip("]"): p["status"] for p in profiles},
        "differences": {
            p["test_id"].rsplit("[", 1)[-1].rstrip("]"): (p.get("fingerprint") or {}).get("differences", [])
            for p in profiles
            if (p.get("fingerprint") or {}).get("differences")
        },
    }
    with ns.out.open("a") as f:
        f.write(json.dumps(line) + "\n")
    print(json.dumps(line))


if __name__ == "__main__":
    main()
