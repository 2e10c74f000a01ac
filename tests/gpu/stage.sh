#!/usr/bin/env bash
# Stage what the GPU tier sends to the lent GPU machine, on this (CPU, PyPI-reachable) machine.
#
#   tests/gpu/stage.sh                       # vLLM 0.20.2 -> .gpu-stage/p1 p2 p3
#   VLLM_VERSION=0.26.0 tests/gpu/stage.sh   # -> .gpu-stage/vllm-0.26.0/p1..p4
#
# Per version (tests/gpu/vllm_versions.sh): the PyPI wheel minus the members the H200 does not
# need, plus the dependency wheels the image lacks (the image's torch 2.11.0+cu130,
# transformers, numpy, ... are used as they are), in parts that each fit one call's 64 MiB
# working tree beside the checkout (about 5 MiB). 0.20.2: the trimmed wheel cut into three byte
# parts, the dependencies with part 3. 0.26.0: four zips by member (part 1: vLLM's Python side,
# its small extensions and the dependencies; then _C, FA3 and _moe_C), each unpacked on arrival.
# Downloads are cached under ${SPECDEPLOY_CACHE:-~/.cache/specdeploy}/gpu-tier and checked by
# sha256; the result is byte-for-byte reproducible (same SHA256SUMS every time).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
. "$REPO/tests/gpu/vllm_versions.sh"
gpu_version "${VLLM_VERSION:-0.20.2}" || exit 2
CACHE=${SPECDEPLOY_CACHE:-$HOME/.cache/specdeploy}/gpu-tier
STAGE=$REPO/.gpu-stage/$STAGE_SUB
PART_BYTES=${PART_BYTES:-57000000}  # split layout: each part plus the checkout under 64 MiB
LIMIT=${LIMIT:-61000000}            # members layout: what one part may weigh (64 MiB = 67.1 MB)
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in 35 34 31 28 27 26 24 17 5; do PLAT+=(--platform "manylinux_2_${p}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)

DEPD=$CACHE/deps-$VLLM_VERSION; [ "$VLLM_VERSION" = 0.20.2 ] && DEPD=$CACHE/deps
mkdir -p "$CACHE/dl" "$DEPD"
[ -f "$CACHE/dl/$VLLM_WHL" ] || [ ! -f "$CACHE/../wheels/$VLLM_WHL" ] || ln "$CACHE/../wheels/$VLLM_WHL" "$CACHE/dl/" 2>/dev/null || cp "$CACHE/../wheels/$VLLM_WHL" "$CACHE/dl/"
[ -f "$CACHE/dl/$VLLM_WHL" ] || python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$CACHE/dl" "vllm==$VLLM_VERSION"
echo "$VLLM_SHA  $CACHE/dl/$VLLM_WHL" | sha256sum -c --quiet
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$DEPD" "${DEPS[@]}" 2>&1 | grep -v "is ignored" || true
# exactly the pinned wheels (a cache folder may hold others from an earlier pin)
WHEELS=()
for d in "${DEPS[@]}"; do
  n=${d%%==*}; v=${d#*==}; n=$(echo "$n" | tr '-' '_' | tr 'A-Z' 'a-z')
  f=$(cd "$DEPD" && ls | grep -i "^${n}-${v}-" | head -1) || true
  [ -n "$f" ] || { echo "dependency wheel $d missing in $DEPD" >&2; exit 2; }
  WHEELS+=("$DEPD/$f")
done

W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cp "$CACHE/dl/$VLLM_WHL" "$W/vllm-trim.zip"
zip -q -d "$W/vllm-trim.zip" "${TRIM[@]}"
if [ "$LAYOUT" = split ]; then
  rm -rf "$STAGE/p1" "$STAGE/p2" "$STAGE/p3"
  mkdir -p "$STAGE/p1" "$STAGE/p2" "$STAGE/p3/deps"
  (cd "$W" && split -b "$PART_BYTES" -a 2 vllm-trim.zip vllm-trim.zip.part- && sha256sum vllm-trim.zip > "$STAGE/p3/SHA256SUMS")
  parts=("$W"/vllm-trim.zip.part-*); [ ${#parts[@]} -eq 3 ] || { echo "expected 3 parts, got ${#parts[@]}" >&2; exit 2; }
  mv "${parts[0]}" "$STAGE/p1/"; mv "${parts[1]}" "$STAGE/p2/"; mv "${parts[2]}" "$STAGE/p3/"
  cp "${WHEELS[@]}" "$STAGE/p3/deps/"
  (cd "$STAGE/p3/deps" && sha256sum *.whl > ../deps.sha256)
  cat "$STAGE/p3/SHA256SUMS"
  du -sb "$STAGE"/p1 "$STAGE"/p2 "$STAGE"/p3
  exit 0
fi
# members: part i > 1 copies its members' compressed entries (zip -U), part 1 is the rest
rm -rf "$STAGE"; mkdir -p "$STAGE/p1/deps"
cp "$W/vllm-trim.zip" "$W/p1.zip"
for i in "${!PARTS[@]}"; do
  [ "$i" -eq 0 ] && continue
  n=$((i + 1)); mkdir -p "$STAGE/p$n"
  # shellcheck disable=SC2086  # a part's patterns are words
  zip -q -U "$W/vllm-trim.zip" ${PARTS[$i]} --out "$STAGE/p$n/vllm-$VLLM_VERSION-p$n.zip"
  # shellcheck disable=SC2086
  zip -q -d "$W/p1.zip" ${PARTS[$i]}
done
mv "$W/p1.zip" "$STAGE/p1/vllm-$VLLM_VERSION-p1.zip"
cp "${WHEELS[@]}" "$STAGE/p1/deps/"
(cd "$STAGE/p1/deps" && sha256sum *.whl > ../deps.sha256)
(cd "$STAGE" && sha256sum p*/vllm-*.zip > p1/SHA256SUMS)
python3 - "$W/vllm-trim.zip" "$STAGE" <<'PY'
import glob, sys, zipfile
# the parts together hold exactly the trimmed wheel's members
whole = {i.filename: i.CRC for i in zipfile.ZipFile(sys.argv[1]).infolist()}
parts = {}
for p in sorted(glob.glob(sys.argv[2] + "/p*/vllm-*.zip")):
    for i in zipfile.ZipFile(p).infolist():
        assert i.filename not in parts, f"{i.filename} twice"
        parts[i.filename] = i.CRC
assert parts == whole, sorted(set(parts) ^ set(whole))[:5]
print(f"{len(whole)} members in {len(glob.glob(sys.argv[2] + '/p*/vllm-*.zip'))} parts")
PY
cat "$STAGE/p1/SHA256SUMS"
for d in "$STAGE"/p*; do
  b=$(du -sb "$d" | cut -f1); echo "$b $d"
  [ "$b" -le "$LIMIT" ] || { echo "$d: $b bytes, over $LIMIT (one call's 64 MiB with the checkout)" >&2; exit 2; }
done
