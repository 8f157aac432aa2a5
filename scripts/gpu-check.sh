#!/usr/bin/env bash
# The GPU check (issue 44): proves specchat's CUDA paths on a machine with a GPU, torch and
# a CUDA compiler but no network, in one call, and writes what it found to one JSON file.
#
#   scripts/gpu-check.sh [--cpu] [--wheels DIR] [--out FILE]
#
#   --cpu         the same steps on the CPU (CI runs this: the steps' logic stays checked
#                 where no GPU is lent)
#   --wheels DIR  a folder of wheels to install specchat's missing pure-Python dependencies
#                 from (no index is asked: there is no network)
#   --out FILE    where the JSON goes (default: gpu-check.json)
#
# Steps, each timed and kept in the JSON with its exit code and the tail of its output:
#   1. set-up: the package importable (pip --no-index --find-links DIR when it is not);
#   2. the `gpu` tests (tests/gpu/): a draft model, sampling's exact law, CUDA-event step
#      times, an EAGLE-3 head drafting trees, a 4-bit NF4 target (bitsandbytes), llama.cpp
#      with every layer offloaded — each one that cannot run here skips with its reason;
#   3. `specchat doctor --smoke` on the default profile;
#   4. `specchat plan` on a tiny random model (the costs c and v(k) on this device);
#   5. `specchat plan --synthetic` for Qwen3-8B + Qwen3-0.6B and Llama-3.1-8B + Llama-3.2-1B
#      as transformers models in bfloat16 with random weights (--cpu: the tiny pair, on both
#      backends), its JSON in the step's output;
#   6. the same pairs with the target in 4-bit NF4 (the qwen3-8b profile's form), where
#      bitsandbytes imports (else the step says so and passes).
# Not yet: building llama-cpp-python with CUDA (the llama.cpp test skips when this one
# was built without GPU offload).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=gpu wheels="" out=gpu-check.json
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu ;;
    --wheels) wheels="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "gpu-check: unknown argument '$1' (use --cpu, --wheels DIR, --out FILE)" >&2; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps="$work/steps.jsonl"
: > "$steps"

step() {  # name, then the command: runs it, records rc, seconds and the output's tail
  local name="$1"; shift
  local start=$(date +%s.%N)
  "$@" > "$work/$name.log" 2>&1
  local rc=$?
  "$PY" - "$name" "$rc" "$start" "$work/$name.log" >> "$steps" <<'PY'
import json, sys, time
name, rc, start, log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
tail = open(log, errors="replace").read()[-4000:]
print(json.dumps({"step": name, "rc": rc, "seconds": round(time.time() - start, 1), "output_tail": tail}))
PY
  echo "gpu-check: $name → exit $rc"
  if [ "$rc" -ne 0 ]; then  # what failed, where a log (CI's) keeps it: the JSON may not outlive the run
    echo "gpu-check: the end of $name's output:"
    tail -n 40 "$work/$name.log" | tr -d '\000-\010\013-\037\177' | sed 's/^/  | /'
  fi
  return $rc
}

setup() {
  "$PY" -c "import specchat, torch" 2>/dev/null && return 0
  [ -n "$wheels" ] || { echo "specchat is not importable and no --wheels DIR was given"; return 1; }
  "$PY" -m pip install --no-index --find-links "$wheels" -e '.[test]'
}

export SPECCHAT_GPU_CHECK="$mode" HF_HUB_OFFLINE=1
step setup setup
step gpu-tests "$PY" -m pytest -v -p no:cacheprovider -m gpu -rs tests/gpu
step doctor "$PY" -m specchat doctor --smoke
step plan "$PY" - <<'PY'
import json, subprocess, sys, tempfile
from pathlib import Path
from tests.support.tiny_models import build_tiny_model, write_tiny_profile
import os
root = Path(tempfile.mkdtemp())
target = build_tiny_model(root / "target", seed=0, hidden=64)
profile = write_tiny_profile(root / "tiny.toml", target, method="ngram")
if os.environ["SPECCHAT_GPU_CHECK"] == "gpu":
    profile.write_text(profile.read_text().replace('device = "cpu"', 'device = "cuda"'))
sys.exit(subprocess.call([sys.executable, "-m", "specchat", "plan", "--profile", str(profile), "--repeats", "3"]))
PY
synthetic() {
  if [ "$mode" = gpu ]; then
    for pair in qwen3-8b llama3.1-8b; do
      "$PY" -m specchat plan --synthetic "$pair" --backend transformers --device cuda --contexts 256,1024,4096 \
        --repeats 5 --json || return 1
    done
  else
    for backend in transformers llama.cpp; do
      "$PY" -m specchat plan --synthetic tiny --backend "$backend" --device cpu --contexts 64 --repeats 2 --json ||
        return 1
    done
  fi
}
step synthetic-plan synthetic
synthetic_nf4() {
  "$PY" -c "import bitsandbytes" 2>/dev/null || { echo "skipped: bitsandbytes is not installed"; return 0; }
  if [ "$mode" = gpu ]; then
    for pair in qwen3-8b llama3.1-8b; do
      "$PY" -m specchat plan --synthetic "$pair" --backend transformers --nf4 --device cuda \
        --contexts 256,1024,4096 --repeats 5 --json || return 1
    done
  else
    "$PY" -m specchat plan --synthetic tiny --backend transformers --nf4 --device cpu --contexts 64 --repeats 2 --json
  fi
}
step synthetic-plan-nf4 synthetic_nf4

"$PY" - "$steps" "$out" "$mode" <<'PY'
import json, platform, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
try:
    import torch
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
except Exception as exc:  # noqa: BLE001 - the JSON says what went wrong instead
    device, versions = f"torch unavailable: {exc}", {}
doc = {"mode": sys.argv[3], "device": device, "python": platform.python_version(), **versions,
       "passed": all(s["rc"] == 0 for s in steps), "steps": steps}
open(sys.argv[2], "w").write(json.dumps(doc, indent=1))
print(f"gpu-check: {'PASS' if doc['passed'] else 'FAIL'} ({sys.argv[3]} on {device}); report: {sys.argv[2]}")
sys.exit(0 if doc["passed"] else 1)
PY
