#!/usr/bin/env bash
# make demo: record baselines of three torchvision models, check them, then catch an injected slowdown.
# Baselines go to a temporary directory, so the committed ones in baselines/ stay as they are.
set -uo pipefail
BIN=${BIN:-.venv/bin}
WORK=$(mktemp -d)
DIR="$WORK/baselines"
PYTEST=("$BIN/pytest" examples -p no:cacheprovider -q --fxprof-baseline-dir "$DIR")
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/5 Record baselines: each test profiled in this process and 4 fresh ones (pytest --fxprof-update)"
"${PYTEST[@]}" --fxprof-update || exit 1
ls "$DIR"

step "2/5 Check the unchanged models against them (pytest --fxprof): expect a pass"
"${PYTEST[@]}" --fxprof
checked=$?
if [ $checked -ne 0 ]; then
    printf '\033[33mnote: the unchanged check failed (exit %s): a false alarm of the gate on this machine;\n' "$checked"
    printf 'see the fxprof summary above, and BENCHMARKS.md for the measured false-alarm rate.\033[0m\n'
fi

step "3/5 Make ResNet18's layer3.0.conv2 50% slower (FXPROF_DEMO_SLOWDOWN): expect a failure naming that node"
VIEWS=(--fxprof-report "$WORK/report.json" --fxprof-html "$WORK/report.html" --fxprof-trace "$WORK/traces"
       --fxprof-markdown "$WORK/summary.md" --fxprof-benchmark-json "$WORK/benchmark.json" --junitxml "$WORK/junit.xml")
FXPROF_DEMO_SLOWDOWN=layer3.0.conv2=0.5 "${PYTEST[@]}" --fxprof "${VIEWS[@]}"
caught=$?
# the claim: ResNet18 failed, and what failed it names layer3.0.conv2 (the node, or an aggregate led by it)
python3 - "$WORK/report.json" "$caught" <<'PY' || exit 1
import json, sys
report, caught = json.load(open(sys.argv[1])), int(sys.argv[2])
named = False
for profile in report["profiles"]:
    print(f"{profile['test_id']}: {profile['status']}")
    for f in profile.get("flagged", []):
        where = f" in {f['module']}" if f["kind"] == "node" else ""
        led = ", ".join(f"{n['name']} {n['baseline_ns'] / 1e3:.0f} -> {n['current_ns'] / 1e3:.0f} us" for n in f.get("led_by", []))
        print(f"    {f['kind']} {f['name']}{where}: x{f['ratio']:.2f}" + (f" (most of it: {led})" if led else ""))
        if "resnet18" in profile["test_id"] and profile["status"] == "regression":
            modules = [f["module"]] + [n["module"] for n in f.get("led_by", [])]
            named = named or "layer3.0.conv2" in modules
if caught != 1 or not named:
    sys.exit(f"demo: the injected slowdown was not caught and named as expected (pytest exit {caught})")
PY
printf '\nThe gate caught it.\n'

step "4/5 The same verdicts, as reports"
printf 'HTML (open in a browser): %s\nChrome traces (open in Perfetto or chrome://tracing): %s\n' \
    "$WORK/report.html" "$(ls "$WORK"/traces/*resnet18* | head -1)"
printf 'pytest-benchmark JSON: %s\nJSON report: %s\n' "$WORK/benchmark.json" "$WORK/report.json"
printf 'verdicts on the test reports (junitxml properties):\n'
grep -o '<property name="fxprof[^>]*/>' "$WORK/junit.xml" | head -6
printf '\nThe Markdown summary for a pull request (also appended to $GITHUB_STEP_SUMMARY in GitHub Actions):\n\n'
cat "$WORK/summary.md"

step "5/5 The fxprof command: show a baseline, diff it against the report, prune baselines of deleted tests"
RESNET=$(grep -l '"test_id": "examples/test_models.py::test_resnet18"' "$DIR"/*.json)
"$BIN/fxprof" show "$RESNET" --limit 8 || exit 1
printf '\n'
"$BIN/fxprof" diff "$RESNET" "$WORK/report.json" --limit 5
[ $? -eq 1 ] || { echo "demo: fxprof diff should have found the regression (exit 1)"; exit 1; }
# a baseline whose test was deleted: prune shows it, then removes it with --yes
"$BIN/python" - "$RESNET" "$DIR" <<'PY' || exit 1
import json, sys
from pathlib import Path
from pytest_fxprof.store.baseline import file_name
data = json.loads(Path(sys.argv[1]).read_text())
data["test_id"] = "examples/test_models.py::test_deleted_model"
Path(sys.argv[2], file_name(data["test_id"])).write_text(json.dumps(data))
PY
printf '\n'
"$BIN/fxprof" prune --baseline-dir "$DIR" -- examples || exit 1
"$BIN/fxprof" prune --baseline-dir "$DIR" --yes -- examples || exit 1
printf '\nDone. Everything this demo wrote is in %s\n' "$WORK"
