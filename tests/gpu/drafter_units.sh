#!/usr/bin/env bash
# Render the drafter proof's two units on the controller with the toolkit's own playbook
# (playbooks/render-unit.yml), into DIR/{drafter-nospec,drafter-spec}/{vllm.service,vllm.env}:
# target /tmp/gpu-tier/proof/target-A; the spec unit's drafter is the directory
# /tmp/gpu-tier/proof/served-drafter (drafter_proof.py points it at each drafter in turn, as a
# deploy would put another drafter at specdeploy_drafter_path). Everything else: role defaults.
#
#   tests/gpu/drafter_units.sh DIR
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUTU=${1:?output dir}
P=/tmp/gpu-tier/proof
ROOT=$(mktemp -d); mkdir -p "$ROOT/etc"
trap 'rm -rf "$ROOT"' EXIT
AP=${ANSIBLE_PLAYBOOK:-$REPO/.venv/bin/ansible-playbook}
rm -rf "$OUTU"; mkdir -p "$OUTU"
render() {
  local name=$1 spec=$2
  local d=$OUTU/$name; mkdir -p "$d"
  cat > "$d/overrides.yml" <<YML
---
specdeploy_model_path: $P/target-A
specdeploy_drafter_path: $P/served-drafter
specdeploy_served_model_name: tiny-dsv3
specdeploy_port: 8011
specdeploy_host: 127.0.0.1
specdeploy_cache_dir: /tmp/gpu-tier/cache/$name
specdeploy_root: $ROOT/root
specdeploy_config_dir: $ROOT/etc
specdeploy_tensor_parallel_size: 1
specdeploy_pipeline_parallel_size: 1
specdeploy_speculative_enabled: $spec
specdeploy_attention_backend: ""
YML
  (cd "$REPO" && "$AP" playbooks/render-unit.yml -e "render_dir=$d" -e "@$d/overrides.yml" > "$d/render.log" 2>&1) \
    || { echo "render of $name failed:"; tail -20 "$d/render.log"; return 1; }
  echo '{}' > "$d/expect.json"
  echo "== $name: $(grep '^ExecStart=' "$d/vllm.service")"
}
render drafter-nospec false
render drafter-spec true
