#!/usr/bin/env bash
# Render the GPU tier's units on the controller with the toolkit's own playbook (Ansible is
# not on the GPU machine), into .gpu-stage/units/<variant>/{vllm.service,vllm.env,expect.json}.
#
#   tests/gpu/render_units.sh [--tensor-parallel-size N] [--pipeline-parallel-size N]
#                             [--set tier|moe|sched] [--vllm-version V]
#
# Only the paths (model, drafter, caches), the served name, the port, TP/PP, the speculative
# switch (and, for --set moe, num_speculative_tokens and one load-format flag) and the
# attention backend are overridden; everything else is the role defaults.
#   --set tier (default): .gpu-stage/units/{spec-fa,nospec-fa,nospec-triton,spec-triton-forced}
#   --set moe: .gpu-stage/units-moe/ for the speed-up sweep and the load-time table on the
#     moe-big target (docs/speedup-gpu.md, docs/load-times.md): nospec, spec-k1..spec-k5, and
#     nospec-<loader> for each load format measured. All share one compile-cache directory so
#     the target's torch.compile artifacts are reused across k (the sweep measures serving,
#     not compilation).
#   --set sched: .gpu-stage/units-sched/ for the k schedule against static k (docs/k-schedule-gpu.md)
#     on the moe256 target: nospec, spec-k1, spec-k3 and two schedules through the toolkit's
#     specdeploy_speculative_schedule (an explicit list, validated by the preflight's input check
#     against the version's keys, rendered into --speculative-config with
#     num_speculative_tokens = its largest k): sched-table, off below 16 running requests and k=3
#     from 16 (what the 0.20.2 moe256 medians imply, docs/speedup-moe256-gpu.md), and
#     sched-auto, the list `python -m specdeploy.controller.schedule` derives from that sweep's
#     k=3 run (the derivation and its output: docs/k-schedule-gpu.md). --max-model-len 4096
#     (starts in about half the time; docs/speedup-moe256-gpu.md). Give --vllm-version 0.26.0:
#     the first version the GPU image runs that has the schedule key.
# --vllm-version V: the version the units are planned and checked for (specdeploy_vllm_version;
#   the role default otherwise).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TP=1; PP=1; SET=tier; VERSION=""
while [ $# -gt 0 ]; do
  case $1 in
    --tensor-parallel-size) TP=$2; shift 2 ;;
    --pipeline-parallel-size) PP=$2; shift 2 ;;
    --set) SET=$2; shift 2 ;;
    --vllm-version) VERSION=$2; shift 2 ;;
    *) echo "usage: $0 [--tensor-parallel-size N] [--pipeline-parallel-size N] [--set tier|moe|sched] [--vllm-version V]" >&2; exit 2 ;;
  esac
done
case $SET in
  tier) OUTU=$REPO/.gpu-stage/units; NAME=tiny-dsv3 ;;
  moe) OUTU=$REPO/.gpu-stage/units-moe; NAME=moe-dsv3 ;;
  sched) OUTU=$REPO/.gpu-stage/units-sched; NAME=moe-dsv3 ;;
  *) echo "$0: --set $SET: expected tier, moe or sched" >&2; exit 2 ;;
esac
W=/tmp/gpu-tier                       # where the GPU machine keeps models and caches
PLAYBOOK=$REPO/playbooks/render-unit.yml
[ -f "$PLAYBOOK" ] || { PLAYBOOK=$REPO/tests/gpu/render-fallback.yml; echo "NOTE: $REPO/playbooks/render-unit.yml missing, using $PLAYBOOK" >&2; }
EXTRA=""; [ "$PLAYBOOK" = "$REPO/tests/gpu/render-fallback.yml" ] && EXTRA="-e specdeploy_toolkit_dir=$REPO"
# render-unit.yml writes the release layout under specdeploy_root first: keep it in a scratch
# folder here (the program path it puts in ExecStart is replaced on the GPU machine anyway)
ROOT=$REPO/.gpu-stage/render-root; rm -rf "$ROOT"; mkdir -p "$ROOT/etc"
AP=${ANSIBLE_PLAYBOOK:-$REPO/.venv/bin/ansible-playbook}
rm -rf "$OUTU"; mkdir -p "$OUTU"

# variant  speculative  attention_backend  expect.json  [more override YAML]
render() {
  local name=$1 spec=$2 backend=$3 expect=$4 more=${5:-}
  local d=$OUTU/$name; mkdir -p "$d"
  local cache=$W/cache/$name; [ "$SET" = tier ] || cache=$W/cache/moe
  cat > "$d/overrides.yml" <<YML
---
specdeploy_model_path: $W/models/target
specdeploy_drafter_path: $W/models/drafter
specdeploy_served_model_name: $NAME
specdeploy_port: 8011
specdeploy_host: 127.0.0.1
specdeploy_cache_dir: $cache
specdeploy_root: $ROOT/root
specdeploy_config_dir: $ROOT/etc
specdeploy_tensor_parallel_size: $TP
specdeploy_pipeline_parallel_size: $PP
specdeploy_speculative_enabled: $spec
specdeploy_attention_backend: "$backend"
YML
  [ -z "$VERSION" ] || echo "specdeploy_vllm_version: \"$VERSION\"" >> "$d/overrides.yml"
  [ -z "$more" ] || echo "$more" >> "$d/overrides.yml"
  (cd "$REPO" && "$AP" "$PLAYBOOK" -e "render_dir=$d" -e "@$d/overrides.yml" $EXTRA > "$d/render.log" 2>&1) \
    || { echo "render of $name failed:"; tail -20 "$d/render.log"; return 1; }
  echo "$expect" > "$d/expect.json"
  echo "== $name: $(grep '^ExecStart=' "$d/vllm.service")"
}
if [ "$SET" = sched ]; then
  NOSPEC='{"spec": false, "target_backend": "FLASH_ATTN_MLA", "served_model_name": "moe-dsv3"}'
  SPEC='{"spec": true, "target_backend": "FLASH_ATTN_MLA", "drafter_backend": "FLASH_ATTN", "aux_layers": [1, 2, 3], "served_model_name": "moe-dsv3"}'
  LEN='specdeploy_max_model_len: 4096'
  render nospec false "" "$NOSPEC" "$LEN"
  for k in 1 3; do
    render spec-k$k true "" "$SPEC" "$LEN
specdeploy_speculative_config: {method: eagle3, model: $W/models/drafter, num_speculative_tokens: $k}"
  done
  # num_speculative_tokens below is what a deploy's group_vars would say; the schedule's
  # largest k replaces it (roles/specdeploy/vars/main.yml)
  render sched-table true "" "$SPEC" "$LEN
specdeploy_speculative_config: {method: eagle3, model: $W/models/drafter, num_speculative_tokens: 3}
specdeploy_speculative_schedule: [[1, 15, 0], [16, 1024, 3]]"
  # python -m specdeploy.controller.schedule (the k=3 run of docs/speedup-moe256-gpu.json,
  # --experts 256 --top-k 8 --k-max 5 --max-num-seqs 1024); docs/k-schedule-gpu.md
  render sched-auto true "" "$SPEC" "$LEN
specdeploy_speculative_config: {method: eagle3, model: $W/models/drafter, num_speculative_tokens: 3}
specdeploy_speculative_schedule: [[1, 13, 0], [14, 31, 2], [32, 1024, 3]]"
  exit 0
fi
if [ "$SET" = moe ]; then
  render nospec false "" '{"spec": false, "target_backend": "FLASH_ATTN_MLA", "served_model_name": "moe-dsv3"}'
  for k in 1 2 3 4 5; do
    render spec-k$k true "" '{"spec": true, "target_backend": "FLASH_ATTN_MLA", "drafter_backend": "FLASH_ATTN", "aux_layers": [1, 2, 3], "served_model_name": "moe-dsv3"}' \
      "specdeploy_speculative_config: {method: eagle3, model: $W/models/drafter, num_speculative_tokens: $k}"
  done
  # the load formats of vLLM 0.20.2 that run from a local disk without a server of their own
  # (vllm/config/load.py, model_loader/default_loader.py); docs/load-times.md
  NOSPEC='{"spec": false, "target_backend": "FLASH_ATTN_MLA", "served_model_name": "moe-dsv3"}'
  render nospec-prefetch false "" "$NOSPEC" 'specdeploy_extra_args: ["--safetensors-load-strategy", "prefetch"]'
  render nospec-eager false "" "$NOSPEC" 'specdeploy_extra_args: ["--safetensors-load-strategy", "eager"]'
  render nospec-multithread false "" "$NOSPEC" \
    'specdeploy_extra_args: ["--model-loader-extra-config", "{\"enable_multithread_load\": true, \"num_threads\": 8}"]'
  render nospec-fastsafetensors false "" "$NOSPEC" 'specdeploy_extra_args: ["--load-format", "fastsafetensors"]'
  render nospec-runai false "" "$NOSPEC" 'specdeploy_extra_args: ["--load-format", "runai_streamer"]'
  exit 0
fi
render spec-fa true "" '{"spec": true, "target_backend": "FLASH_ATTN_MLA", "drafter_backend": "FLASH_ATTN", "aux_layers": [1, 2, 3], "served_model_name": "tiny-dsv3"}'
render nospec-fa false "" '{"spec": false, "target_backend": "FLASH_ATTN_MLA", "served_model_name": "tiny-dsv3"}'
render nospec-triton false TRITON_MLA '{"spec": false, "target_backend": "TRITON_MLA", "served_model_name": "tiny-dsv3"}'
render spec-triton-forced true TRITON_MLA '{"spec": true, "expect_refusal": "non-MLA not supported", "served_model_name": "tiny-dsv3"}' \
  || echo "spec-triton-forced not rendered (the toolkit may refuse it at render time: fine)"
