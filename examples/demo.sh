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

step "3/3 Make ResNet18's layer3.0.conv2 50% slower (FXPROF_DEMO_SLOWDOWN): expect a failure naming that node"
FXPROF_DEMO_SLOWDOWN=layer3.0.conv2=0.5 "${PYTEST[@]}" --fxprof --fxprof-report "$WORK/report.json"
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
printf '\nThe gate caught it. JSON report: %s\n' "$WORK/report.json"
