#!/usr/bin/env bash
# One device call of the GPU tier: `bash tests/gpu/call.sh N` in the repo root on the GPU
# machine (see tests/gpu/README.md for the carry list of each call). Calls run back to back
# while the machine stays warm; /tmp/gpu-tier survives between them.
#   1  stage part 1 of vLLM; record nvidia-smi (idle) and the image's versions
#   2  stage part 2; build the tiny target + EAGLE-3 drafter (CPU, about 20 s)
#   3  stage part 3 + dependencies, unpack vLLM into /tmp/site; runs of RUNS3
#   4  runs of RUNS4 (machine still warm from call 3)
set -u
export PYTHONUNBUFFERED=1
STEP=${1:?step}
REPO=$PWD
W=/tmp/gpu-tier
OUTD=${OUT:-/tmp/gpu-tier-out}
mkdir -p "$W/stage" "$OUTD"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# run plans (TAG=UNIT[,clear]); the units are rendered on the controller (render_units.sh)
RUNS3=${RUNS3:-"spec-fa-cold=spec-fa,clear spec-fa-warm=spec-fa nospec-fa=nospec-fa,clear"}
RUNS4=${RUNS4:-"nospec-triton=nospec-triton,clear nospec-fa-warm=nospec-fa spec-triton-forced=spec-triton-forced,clear"}
TP=${TP:-1}; PP=${PP:-1}

drive() {  # drive DEADLINE RUNS...
  local deadline=$1; shift
  local args=()
  for r in "$@"; do args+=(--run "$r"); done
  PYTHONPATH=/tmp/site python3 tests/gpu/driver.py --units .gpu-stage/units --out "$OUTD" \
    --python python3 --pythonpath /tmp/site --scratch "$W" --deadline-s "$deadline" \
    --tensor-parallel-size "$TP" --pipeline-parallel-size "$PP" "${args[@]}" 2>&1 | tee "$OUTD/driver.log"
}

case $STEP in
1)
  cp .gpu-stage/p1/vllm-trim.zip.part-* "$W/stage/" && el "part 1 staged"
  d=$OUTD/nvidia-smi-idle; mkdir -p "$d"
  Q=index,name,uuid,pci.bus_id,driver_version,compute_cap,memory.total,memory.used,ecc.errors.uncorrected.volatile.total,retired_pages.pending
  nvidia-smi -L > "$d/L.txt" 2>&1
  nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits > "$d/query-gpu.csv" 2>&1
  nvidia-smi --query-gpu=$Q --format=csv > "$d/query-gpu-header.csv" 2>&1
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits > "$d/query-compute-apps-idle.csv" 2>&1
  nvidia-smi > "$d/nvidia-smi.txt" 2>&1
  nvidia-smi -q 2>&1 | head -80 > "$d/q-head80.txt"
  { date -u +%FT%TZ; uname -r; nproc; free -g | head -2; df -h /tmp | tail -1
    python3 - <<'PY'
import importlib.metadata as m, sys
print(sys.version.split()[0], sys.executable)
for n in ["torch", "triton", "transformers", "tokenizers", "safetensors", "numpy", "typing_extensions"]:
    try: print(n, m.version(n))
    except Exception: print(n, "MISSING")
import torch; print("cuda", torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
PY
  } > "$d/env.txt" 2>&1
  cat "$d/L.txt" "$d/query-gpu-header.csv" "$d/env.txt"
  ;;
2)
  cp .gpu-stage/p2/vllm-trim.zip.part-* "$W/stage/" && el "part 2 staged"
  python3 tests/gpu/build_models.py "$W/models" 2>&1 | grep -v "Writing model shards" | tee "$OUTD/models.log"
  cp "$W/models/models.json" "$OUTD/" 2>/dev/null; el "models built"; ls -la "$W/models/target" "$W/models/drafter"
  ;;
part3)  # part 3 alone: with the dependencies it is over one call's 64 MiB (stage.sh)
  cp .gpu-stage/p3/vllm-trim.zip.part-* "$W/stage/" && echo "part 3 staged"
  ;;
3)
  cp .gpu-stage/p3/vllm-trim.zip.part-* "$W/stage/" 2>/dev/null || ls "$W"/stage/vllm-trim.zip.part-ac
  cat "$W"/stage/vllm-trim.zip.part-aa "$W"/stage/vllm-trim.zip.part-ab "$W"/stage/vllm-trim.zip.part-ac > "$W/stage/vllm-trim.zip" || exit 11
  (cd "$W/stage" && sha256sum -c "$REPO/.gpu-stage/p3/SHA256SUMS") || { echo "vllm zip sha256 MISMATCH"; exit 12; }
  (cd .gpu-stage/p3/deps && sha256sum -c --quiet ../deps.sha256) || { echo "deps sha256 MISMATCH"; exit 12; }
  WH=$(ls .gpu-stage/p3/deps/*.whl)
  # keep the image's typing_extensions when it is new enough for pydantic (>= 4.14.1)
  python3 -c "import sys,importlib.metadata as m;from packaging.version import Version as V;sys.exit(0 if V(m.version('typing_extensions'))>=V('4.14.1') else 1)" && WH=$(echo "$WH" | grep -v typing_extensions)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $WH 2>&1 | grep -v "WARNING: Target directory" | tail -5
  python3 -c "import zipfile;zipfile.ZipFile('$W/stage/vllm-trim.zip').extractall('/tmp/site')" || exit 13
  rm -f "$W"/stage/vllm-trim.zip.part-*; el "vllm 0.20.2 unpacked into /tmp/site"
  [ -f "$W/models/models.json" ] || python3 tests/gpu/build_models.py "$W/models" 2>&1 | grep -v "Writing model shards"
  cp "$W/models/models.json" "$OUTD/"
  drive "${DEADLINE3:-540}" $RUNS3
  ;;
4)
  [ -d /tmp/site/vllm ] || { echo "/tmp/site/vllm missing: the machine was not kept warm since call 3"; exit 14; }
  drive "${DEADLINE4:-420}" $RUNS4
  ;;
*) echo "unknown step $STEP"; exit 2 ;;
esac
el "call $STEP done"
