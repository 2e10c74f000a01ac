#!/usr/bin/env bash
# Stage the drafter proof's code for device calls: every call sends the main checkout, so this
# worktree's toolkit (specdeploy/, tests/gpu/, the role defaults the gates come from) and the
# two rendered units go to DEST (git-ignored; name it in `carry`). Small: about 1 MB.
#   tests/gpu/drafter_stage.sh [DEST]     (default: /work/main/.gpu-stage/drafter-code)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-/work/main/.gpu-stage/drafter-code}
rm -rf "$DEST"; mkdir -p "$DEST/tests" "$DEST/roles/specdeploy"
cp -r "$REPO/specdeploy" "$DEST/"
cp -r "$REPO/tests/gpu" "$DEST/tests/"
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
cp -r "$REPO/roles/specdeploy/defaults" "$DEST/roles/specdeploy/"
mkdir -p "$DEST/patches/vllm"; cp "$REPO/patches/vllm/manifest.yml" "$DEST/patches/vllm/"  # the drafter check reads it
"$REPO/tests/gpu/drafter_units.sh" "$DEST/units" >/dev/null
du -sh "$DEST"
