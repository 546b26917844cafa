#!/usr/bin/env bash
# The plugin's CUDA paths on a machine with an NVIDIA GPU, in one go (about 11 minutes on one H100):
#
#   bash bench/device_check.sh OUT_DIR
#
# 1. the tests that hold CUDA paths (the profiler's CUDA test runs only where a GPU is seen; the engine's event
#    clock, out-of-memory handling and the training step), on the machine's own torch;
# 2. bench/device_blame.py: the GPT-style model of bench/gpt_style.py on CUDA, its code changed in process, both
#    rules, both capture methods a model with an `assert` gets (JSON into OUT_DIR);
# 3. the plugin through pytest's command line on CUDA, in a throw-away git repository holding that model as a
#    project's source: record baselines, a check that passes, then the MLP's GELU written by its formula in the
#    source: a check against the baselines and a check against the committed revision (each run's output and
#    JSON report into OUT_DIR);
# 4. (before 3's edit) a check of the unchanged model against the committed revision.
#
# FXPROF_CHECK_STEPS="1 2" runs those steps alone; FXPROF_CHECK_STEPS=3 FXPROF_CHECK_DEVICE=cpu runs step 3 on the
# CPU (a dry run of the script). Needs torch with CUDA, torchvision, pandas, pytest, pytest-xdist,
# pytest-benchmark and filelock installed; the plugin is installed from this checkout (editable, no dependencies).
set -u
OUT=${1:?usage: bash bench/device_check.sh OUT_DIR}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
cd "$ROOT" || exit 1
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
"$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"

STEPS=${FXPROF_CHECK_STEPS:-1 2 3 4}
if [[ " $STEPS " == *" 1 "* ]]; then
echo "== 1. tests with CUDA paths"
timeout 240 "$PY" -m pytest -q -p no:cacheprovider -n 8 tests/test_profiler.py tests/test_engine.py \
    tests/test_small_fixes.py tests/test_train_step.py -rs 2>&1 | tail -15
fi

if [[ " $STEPS " == *" 2 "* ]]; then
echo "== 2. blame on CUDA, in process"
for capture in export dynamo; do
    timeout 120 "$PY" bench/device_blame.py --device cuda --capture "$capture" \
        --out "$OUT/device_blame_cuda_$capture.json" 2>&1 | grep -E "^(gelu|attention|norm|none) "
done
fi

[[ " $STEPS " == *" 3 "* || " $STEPS " == *" 4 "* ]] || exit 0
echo "== 3. the plugin on CUDA, through pytest"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp bench/gpt_style.py "$WORK/model.py"
cat >"$WORK/test_gpt.py" <<'EOF'
import os

import torch

import model

DEVICE = os.environ.get("FXPROF_CHECK_DEVICE", "cuda")


def test_gpt(fxprof):
    torch.manual_seed(0)
    net, idx = model.build()
    result = fxprof(net.to(DEVICE), idx.to(DEVICE))
    assert result.environment.device.startswith(DEVICE)
EOF
printf '[pytest]\naddopts = -p no:cacheprovider\n' >"$WORK/pytest.ini"
(
    cd "$WORK" || exit 1
    git init -q && git add -A && git -c user.name=fxprof -c user.email=fxprof@localhost commit -qm model
    run() {  # name, pytest arguments...
        local name=$1
        shift
        timeout 240 "$PY" -m pytest -q "$@" --fxprof-report "$OUT/$name.json" >"$OUT/$name.log" 2>&1
        echo "$name: exit $? ($(tail -1 "$OUT/$name.log"))"
    }
    if [[ " $STEPS " == *" 4 "* ]]; then  # 4: an unchanged check against the committed revision
        run unchanged_against --fxprof-against HEAD
        grep -h -A3 "fxprof: .*undecided\|too noisy" "$OUT/unchanged_against.log" | head -8
    fi
    [[ " $STEPS " == *" 3 "* ]] || exit 0
    run record --fxprof-update --fxprof-processes 3
    run unchanged --fxprof
    "$PY" - <<'EOF'
import pathlib

p = pathlib.Path("model.py")
s = p.read_text()
old = "        x = self.act(x)\n"
assert old in s, "the MLP's activation line moved: update bench/device_check.sh"
new = "        x = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))\n"
p.write_text(s.replace(old, new))
EOF
    run gelu_baseline --fxprof
    run gelu_against --fxprof-against HEAD
    grep -h -A4 "got slower" "$OUT/gelu_baseline.log" "$OUT/gelu_against.log" | head -20
)
# what a node costs to time on this device: the instrumented pass against the plain forward, per report
"$PY" - "$OUT" <<'EOF2'
import json, pathlib, sys

for report in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    try:
        profiles = json.loads(report.read_text()).get("profiles", [])
    except (ValueError, AttributeError):
        continue  # device_blame's rows, not a report
    for p in profiles:
        total = p.get("total") or {}
        plain, timed = total.get("plain_ns"), total.get("instrumented_ns")
        if plain and timed:
            print(f"{report.stem}: instrumented {timed / 1e6:.2f} ms, plain {plain / 1e6:.2f} ms (x{timed / plain:.1f})")
EOF2
