#!/usr/bin/env bash
# make demo: record baselines of three torchvision models, check them, then catch an injected slowdown.
# Baselines go to a temporary directory, so the committed ones in baselines/ stay as they are.
set -uo pipefail
BIN=${BIN:-.venv/bin}
WORK=$(mktemp -d)
DIR="$WORK/baselines"
PYTEST=("$BIN/pytest" examples -p no:cacheprovider -q --fxprof-baseline-dir "$DIR")
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/3 Record baselines: each test profiled in this process and 4 fresh ones (pytest --fxprof-update)"
"${PYTEST[@]}" --fxprof-update || exit 1
ls "$DIR"

step "2/3 Check the unchanged models against them (pytest --fxprof): expect a pass"
"${PYTEST[@]}" --fxprof
checked=$?
if [ $checked -ne 0 ]; then
    printf '\033[33mnote: the unchanged check failed (exit %s): a false alarm of the gate on this machine;\n' "$checked"
    printf 'see the fxprof summary above, and BENCHMARKS.md for the measured false-alarm rate.\033[0m\n'
fi

step "3/3 Make ResNet18's layer3.0.conv1 50% slower (FXPROF_DEMO_SLOWDOWN): expect a failure naming that node"
FXPROF_DEMO_SLOWDOWN=layer3.0.conv1=0.5 "${PYTEST[@]}" --fxprof --fxprof-report "$WORK/report.json"
caught=$?
if [ $caught -ne 1 ] || ! grep -q '"name": "layer3_0_conv1"' "$WORK/report.json"; then
    echo "demo: the injected slowdown was not reported as expected (exit $caught)" >&2
    exit 1
fi
python3 - "$WORK/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for profile in report["profiles"]:
    flagged = profile.get("flagged", [])
    print(f"{profile['test_id']}: {profile['status']}" + "".join(
        f"\n    {f['kind']} {f['name']}" + (f" in {f['module']}" if f["kind"] == "node" else "")
        + f": x{f['ratio']:.2f}" for f in flagged))
PY
printf '\nThe gate caught it. JSON report: %s\n' "$WORK/report.json"
