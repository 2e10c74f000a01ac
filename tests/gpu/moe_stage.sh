#!/usr/bin/env bash
# Stage what the moe-big calls (tests/gpu/moe_call.sh) need beside the vLLM parts of stage.sh,
# into DEST/.gpu-stage/{code,xwhl} (DEST: the checkout the device tool sends; default this one):
#   code/  this branch's node code (specdeploy/node), the drafter trainer, the GPU scripts and the units rendered by
#          render_units.sh --set moe, and those of --set sched where rendered (about 0.5 MB;
#          carried in every call)
#   xwhl/  the wheels of the optional loaders vLLM 0.20.2 names (fastsafetensors, a declared
#          dependency of vllm 0.20.2; runai-model-streamer, its `runai` extra): 3.5 MB, call 3
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$REPO}
CACHE=${SPECDEPLOY_CACHE:-$HOME/.cache/specdeploy}/gpu-tier/xwhl
XWHL=(fastsafetensors==0.5.0 runai-model-streamer==0.17.1)
[ -d "$REPO/.gpu-stage/units-moe" ] || "$REPO/tests/gpu/render_units.sh" --set moe
C=$DEST/.gpu-stage/code
rm -rf "$C"; mkdir -p "$C/specdeploy" "$C/tests/gpu"
cp "$REPO/specdeploy/__init__.py" "$C/specdeploy/"
cp -r "$REPO/specdeploy/node" "$C/specdeploy/"
# the drafter trainer, for tests/gpu/train_rate.py (issue 27 item 5: the rate at Kimi's dimensions)
mkdir -p "$C/specdeploy/controller"
cp "$REPO/specdeploy/controller/__init__.py" "$C/specdeploy/controller/"
cp -r "$REPO/specdeploy/controller/drafter_pipeline" "$C/specdeploy/controller/"
cp "$REPO"/tests/gpu/{driver.py,unitexec.py,build_models.py,moe_sweep.py,moe_call.sh,vllm_check.py,vllm_versions.sh,train_rate.py} "$C/tests/gpu/"
cp -r "$REPO/.gpu-stage/units-moe" "$C/units-moe"
[ ! -d "$REPO/.gpu-stage/units-sched" ] || cp -r "$REPO/.gpu-stage/units-sched" "$C/units-sched"
find "$C" \( -name __pycache__ -o -name overrides.yml -o -name render.log \) -prune -exec rm -rf {} +
mkdir -p "$CACHE"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$CACHE" "${XWHL[@]}" 2>&1 \
  | grep -v "is ignored" || true
rm -rf "$DEST/.gpu-stage/xwhl"; mkdir -p "$DEST/.gpu-stage/xwhl"
cp "$CACHE"/fastsafetensors-0.5.0-*.whl "$CACHE"/runai_model_streamer-0.17.1-*.whl "$DEST/.gpu-stage/xwhl/"
du -sb "$C" "$DEST/.gpu-stage/xwhl"
