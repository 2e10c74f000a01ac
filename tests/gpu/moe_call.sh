#!/usr/bin/env bash
# Device calls of the moe-big speed-up sweep and load-time table (docs/speedup-gpu.md,
# docs/load-times.md). Run in the repo root on the GPU machine as
#   bash CODE/tests/gpu/moe_call.sh STEP
# where CODE is a copy of this branch's code (.gpu-stage/code, carried; see tests/gpu/README.md).
#   1     stage vLLM part 1; build the moe-big target + bigram drafter IN THE BACKGROUND
#         (setsid: it outlives the call while the machine stays warm); LAYERS=N or LAYERS=fit
#         (the largest checkpoint the disk holds: the load-time table)
#   2     stage part 2; show the build's progress
#   part3 stage part 3 alone (the checkout, about 5 MiB, plus a part and the dependencies is
#         over one call's 64 MiB; then step 3 carries the dependencies, the code and xwhl)
#   3     stage part 3 (unless step part3 did) + dependencies + the optional loaders' wheels (CODE/../xwhl), unpack
#         vLLM into /tmp/site, wait for the build, start moe_sweep.py with $PLAN in the
#         background, then wait like `wait`
#   wait  wait up to WAIT_S seconds (default 540) for the plan, then pack what it has;
#         STOP=1 first asks the plan to stop after the run in progress
# VLLM_VERSION (default 0.20.2) picks the staging recipe (tests/gpu/vllm_versions.sh). With a
# recipe of the `members` layout (0.26.0: .gpu-stage/vllm-0.26.0/p1..p4) the steps are
#   1     part 1 (vLLM's Python side + the dependency wheels) unpacked into /tmp/site, the
#         model build started in the background, then tests/gpu/vllm_check.py with the kernel
#         libraries stubbed: the version and the serving imports, and vLLM's own parser on the
#         rendered units (UNITS); exits 16 when that fails, so a bad staging costs one call
#   partN unpack part N (2, 3, ...) on arrival
#   3     unpack the last part, vllm_check.py --engine-config (vLLM's whole config post-init on
#         the GPU, with the models built), then start the plan as above
# UNITS (default units-moe) names the folder of rendered units under CODE.
# BUILD_ARGS and SWEEP_ARGS pass more arguments to build_models.py and moe_sweep.py (CPU dry
# runs: BUILD_ARGS="--shape tiny" SWEEP_ARGS="--pythonpath FAKE --no-drop-caches ...").
# Every call packs /tmp/moe-out into $OUT/moe-STEP.tgz (results.json, engine logs, /metrics).
set -u
export PYTHONUNBUFFERED=1
STEP=${1:?step}
CODE=$(cd "$(dirname "$0")/../.." && pwd)
. "$CODE/tests/gpu/vllm_versions.sh"
gpu_version "${VLLM_VERSION:-0.20.2}" || exit 2
STAGE=$PWD/.gpu-stage/$STAGE_SUB
UNITS=${UNITS:-units-moe}
W=${GPU_TIER_DIR:-/tmp/gpu-tier}   # models, caches, the staged parts (dry runs elsewhere)
RES=${RES_DIR:-/tmp/moe-out}
SITE=${SITE:-/tmp/site}            # where vLLM and its dependencies are unpacked
OUTD=${OUT:-/tmp/moe-call-out}
mkdir -p "$W/stage" "$RES" "$OUTD"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
PLAN=${PLAN:-"nospec:sweep spec-k3:sweep spec-k1:sweep spec-k5:sweep nospec:load:drop nospec:load:warm nospec-fastsafetensors:load:drop nospec-prefetch:load:drop spec-k2:sweep spec-k4:sweep nospec-multithread:load:drop nospec-runai:load:drop"}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

pack() {
  cp -f "$W/build.log" "$W/models/models.json" "$RES/" 2>/dev/null
  tar czf "$OUTD/moe-$STEP.tgz" -C "$RES" . && el "packed $(du -h "$OUTD/moe-$STEP.tgz" | cut -f1)"
}

wait_plan() {  # wait_plan SECONDS_FROM_CALL_START
  local until=$1 seen=0
  while [ $(( $(date +%s) - T0 )) -lt "$until" ]; do
    if [ -f "$RES/sweep.log" ]; then
      local n; n=$(wc -l < "$RES/sweep.log")
      [ "$n" -gt "$seen" ] && { sed -n "$((seen + 1)),${n}p" "$RES/sweep.log"; seen=$n; }
    fi
    [ -f "$RES/DONE" ] && { el "plan done"; return 0; }
    sleep 2
  done
  el "plan still running (call deadline)"
}

unpack_part() {  # unpack_part N: members layout, checked against part 1's SHA256SUMS
  local z; z=$(ls "$STAGE"/p"$1"/vllm-*-p"$1".zip 2>/dev/null) || { echo "part $1 not carried"; exit 11; }
  (cd "$STAGE" && grep " p$1/" "$W/SHA256SUMS" | sha256sum -c --quiet) || { echo "part $1 sha256 MISMATCH"; exit 12; }
  python3 -c "import sys,zipfile;zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$z" "$SITE" || exit 13
  echo "$1" >> "$W/parts.done"; el "vllm $VLLM_VERSION part $1 unpacked into $SITE"
}

install_deps() {  # install_deps DIR: the dependency wheels into $SITE
  (cd "$1" && sha256sum -c --quiet ../deps.sha256) || { echo "deps sha256 MISMATCH"; exit 12; }
  local WH; WH=$(ls "$1"/*.whl)
  # keep the image's typing_extensions when it is new enough for pydantic (>= 4.14.1)
  python3 -c "import sys,importlib.metadata as m;from packaging.version import Version as V;sys.exit(0 if V(m.version('typing_extensions'))>=V('4.14.1') else 1)" && WH=$(echo "$WH" | grep -v typing_extensions)
  local XW; XW=$(ls "$CODE"/../xwhl/*.whl 2>/dev/null)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" $WH $XW 2>&1 | grep -v "WARNING: Target directory" | tail -5
}

start_build() {
  BUILD_ARGS=${BUILD_ARGS:---shape moe-big}${LAYERS:+ --layers $LAYERS}
  setsid bash -c "python3 '$CODE/tests/gpu/build_models.py' '$W/models' $BUILD_ARGS \
    > '$W/build.log' 2>&1; echo \$? > '$W/build.rc'" < /dev/null > /dev/null 2>&1 &
  el "model build ($BUILD_ARGS) started in the background"
}

start_plan() {
  while [ ! -f "$W/build.rc" ] && [ $(( $(date +%s) - T0 )) -lt 300 ]; do sleep 2; done
  grep -v "Writing model shards" "$W/build.log" | tail -3
  [ "$(cat "$W/build.rc" 2>/dev/null)" = 0 ] || { el "model build failed"; pack; exit 15; }
  du -sh "$W/models/target" "$W/models/drafter"; df -h /tmp | tail -1
  local args=(); for r in $PLAN; do args+=(--run "$r"); done
  setsid bash -c "cd '$CODE' && python3 tests/gpu/moe_sweep.py --units '$CODE/$UNITS' --out '$RES' \
    --pythonpath '$SITE' ${args[*]} ${SWEEP_ARGS:-} > '$RES/sweep.log' 2>&1; touch '$RES/DONE'" < /dev/null > /dev/null 2>&1 &
  el "plan started: $PLAN"
}

if [ "$LAYOUT" = members ]; then
  case $STEP in
    1)
      mkdir -p "$SITE"; rm -f "$W/parts.done"
      cp "$STAGE/p1/SHA256SUMS" "$W/SHA256SUMS" || { echo "part 1 not carried"; exit 11; }
      nvidia-smi -L; df -h /tmp | tail -1; free -g | head -2
      python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
      install_deps "$STAGE/p1/deps"
      unpack_part 1
      start_build
      PYTHONPATH="$SITE" python3 "$CODE/tests/gpu/vllm_check.py" --units "$CODE/$UNITS" \
        --expect-version "$VLLM_VERSION" --json "$RES/vllm-check-1.json" > "$RES/vllm-check-1.log" 2>&1
      rc=$?; tail -c 3000 "$RES/vllm-check-1.log"; pack
      [ $rc = 0 ] || { el "vllm_check failed (rc $rc): stop here"; exit 16; }
      ;;
    part[2-9])
      [ -f "$W/SHA256SUMS" ] || { echo "no part 1 on this machine: it was not kept warm"; exit 14; }
      unpack_part "${STEP#part}"
      grep -v "Writing model shards" "$W/build.log" | tail -2; cat "$W/build.rc" 2>/dev/null
      ;;
    3)
      [ -f "$W/SHA256SUMS" ] || { echo "no part 1 on this machine: it was not kept warm"; exit 14; }
      last=${#PARTS[@]}
      grep -qx "$last" "$W/parts.done" 2>/dev/null || unpack_part "$last"
      for n in $(seq 1 "$last"); do grep -qx "$n" "$W/parts.done" || { echo "part $n missing"; exit 11; }; done
      while [ ! -f "$W/build.rc" ] && [ $(( $(date +%s) - T0 )) -lt 300 ]; do sleep 2; done
      PYTHONPATH="$SITE" timeout 240 python3 "$CODE/tests/gpu/vllm_check.py" --units "$CODE/$UNITS" \
        --expect-version "$VLLM_VERSION" --engine-config --json "$RES/vllm-check-3.json" > "$RES/vllm-check-3.log" 2>&1
      el "vllm_check --engine-config rc $?"; python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(d['stubbed'],d['failed']);[print(u['unit'],u.get('engine_config'),u.get('error'),u.get('warnings')) for u in d['units']]" "$RES/vllm-check-3.json"
      start_plan
      wait_plan "${CALL_S:-560}"
      pack
      ;;
    wait)
      [ -d "$SITE/vllm" ] || { echo "$SITE/vllm missing: the machine was not kept warm"; exit 14; }
      [ -n "${STOP:-}" ] && touch /tmp/moe-stop
      wait_plan "${WAIT_S:-540}"
      pack
      ;;
    *) echo "unknown step $STEP"; exit 2 ;;
  esac
  el "call $STEP done"
  exit 0
fi

case $STEP in
1)
  cp "$STAGE"/p1/vllm-trim.zip.part-* "$W/stage/" && el "part 1 staged"
  nvidia-smi -L; df -h /tmp | tail -1; free -g | head -2
  # LAYERS=fit: as many MoE layers (4.41 GB each; 1.2 GB embeddings and the dense layer) as
  # the disk holds with 16 GB left for vLLM, its dependencies, the caches and the logs
  if [ "${LAYERS:-}" = fit ]; then
    FREE_GB=$(df -B1G --output=avail /tmp | tail -1 | tr -d ' ')
    LAYERS=$(python3 -c "print(max(6, min(14, 1 + int(($FREE_GB - 16 - 1.2) / 4.41))))")
    el "disk: ${FREE_GB} GB free -> $LAYERS layers"
  fi
  BUILD_ARGS=${BUILD_ARGS:---shape moe-big}${LAYERS:+ --layers $LAYERS}
  setsid bash -c "python3 '$CODE/tests/gpu/build_models.py' '$W/models' $BUILD_ARGS \
    > '$W/build.log' 2>&1; echo \$? > '$W/build.rc'" < /dev/null > /dev/null 2>&1 &
  el "moe-big build started in the background"
  ;;
2)
  cp "$STAGE"/p2/vllm-trim.zip.part-* "$W/stage/" && el "part 2 staged"
  grep -v "Writing model shards" "$W/build.log" | tail -5; cat "$W/build.rc" 2>/dev/null
  ls -la "$W/models/target" 2>/dev/null | tail -4; df -h /tmp | tail -1
  ;;
part3)
  cp "$STAGE"/p3/vllm-trim.zip.part-* "$W/stage/" && el "part 3 staged"
  grep -v "Writing model shards" "$W/build.log" | tail -3; cat "$W/build.rc" 2>/dev/null
  ;;
3)
  cp "$STAGE"/p3/vllm-trim.zip.part-* "$W/stage/" 2>/dev/null || ls "$W"/stage/vllm-trim.zip.part-ac
  cat "$W"/stage/vllm-trim.zip.part-aa "$W"/stage/vllm-trim.zip.part-ab "$W"/stage/vllm-trim.zip.part-ac > "$W/stage/vllm-trim.zip" || exit 11
  (cd "$W/stage" && sha256sum -c "$STAGE/p3/SHA256SUMS") || { echo "vllm zip sha256 MISMATCH"; exit 12; }
  (cd "$STAGE/p3/deps" && sha256sum -c --quiet ../deps.sha256) || { echo "deps sha256 MISMATCH"; exit 12; }
  WH=$(ls "$STAGE"/p3/deps/*.whl)
  # keep the image's typing_extensions when it is new enough for pydantic (>= 4.14.1)
  python3 -c "import sys,importlib.metadata as m;from packaging.version import Version as V;sys.exit(0 if V(m.version('typing_extensions'))>=V('4.14.1') else 1)" && WH=$(echo "$WH" | grep -v typing_extensions)
  XW=$(ls "$STAGE"/xwhl/*.whl 2>/dev/null)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $WH $XW 2>&1 | grep -v "WARNING: Target directory" | tail -5
  python3 -c "import zipfile;zipfile.ZipFile('$W/stage/vllm-trim.zip').extractall('/tmp/site')" || exit 13
  rm -f "$W"/stage/vllm-trim.zip*; el "vllm 0.20.2 unpacked into /tmp/site (+ $(echo $XW | wc -w) loader wheels)"
  while [ ! -f "$W/build.rc" ] && [ $(( $(date +%s) - T0 )) -lt 300 ]; do sleep 2; done
  grep -v "Writing model shards" "$W/build.log" | tail -3
  [ "$(cat "$W/build.rc" 2>/dev/null)" = 0 ] || { el "model build failed"; pack; exit 15; }
  du -sh "$W/models/target" "$W/models/drafter"; df -h /tmp | tail -1
  args=(); for r in $PLAN; do args+=(--run "$r"); done
  setsid bash -c "cd '$CODE' && python3 tests/gpu/moe_sweep.py --units '$CODE/$UNITS' --out '$RES' \
    ${args[*]} ${SWEEP_ARGS:-} > '$RES/sweep.log' 2>&1; touch '$RES/DONE'" < /dev/null > /dev/null 2>&1 &
  el "plan started: $PLAN"
  wait_plan "${CALL_S:-560}"
  pack
  ;;
wait)
  [ -d /tmp/site/vllm ] || { echo "/tmp/site/vllm missing: the machine was not kept warm"; exit 14; }
  [ -n "${STOP:-}" ] && touch /tmp/moe-stop
  wait_plan "${WAIT_S:-540}"
  pack
  ;;
*) echo "unknown step $STEP"; exit 2 ;;
esac
el "call $STEP done"
