#!/usr/bin/env bash
# Stage what the GPU tier sends to the lent GPU machine, on this (CPU, PyPI-reachable) machine.
#
#   tests/gpu/stage.sh            # -> .gpu-stage/p1 p2 p3 (repo root; .gpu-stage/ is gitignored)
#
# vLLM 0.20.2 pins torch 2.11.0 and links CUDA 13: the GPU image's own torch 2.11.0+cu130. Its
# wheel (244 MB) minus the FlashAttention-2 kernels (Hopper uses FA3), split into three parts
# that each fit one call's 64 MiB working tree, plus 31 pure/small dependency wheels the image
# lacks (the image's torch, transformers, numpy, ... are used as they are). Downloads are
# cached under ${SPECDEPLOY_CACHE:-~/.cache/specdeploy}/gpu-tier and checked by sha256.
# The result is byte-for-byte reproducible (same SHA256SUMS every time).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${SPECDEPLOY_CACHE:-$HOME/.cache/specdeploy}/gpu-tier
STAGE=$REPO/.gpu-stage
PART_BYTES=${PART_BYTES:-57000000}  # each part plus the checkout (about 5 MiB) under 64 MiB
VLLM_WHL=vllm-0.20.2-cp38-abi3-manylinux_2_35_x86_64.whl
VLLM_SHA=22a7dd06eb03371298e13d6100f3dedbf307352342aaf08e87c929c60aae9b4d
DEPS=(fastapi==0.128.0 starlette==0.50.0 uvicorn==0.40.0 pydantic==2.12.5 pydantic-core==2.41.5
  annotated-types==0.7.0 typing-inspection==0.4.2 openai==2.54.0 distro==1.9.0 jiter==0.19.0
  sniffio==1.3.1 msgspec==0.23.0 pyzmq==27.3.0 cbor2==6.3.0 pybase64==1.5.1 gguf==0.19.0
  partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==7.1.0 watchfiles==1.3.0
  model-hosting-container-standards==0.1.16 jmespath==1.1.0 openai-harmony==0.0.8
  cachetools==6.2.4 blake3==1.0.11 setproctitle==1.3.8 python-json-logger==4.2.0
  llguidance==1.3.0 xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2 typing_extensions==4.15.0
  annotated-doc==0.0.4)
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in 35 34 31 28 27 26 17 5; do PLAT+=(--platform "manylinux_2_${p}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)

mkdir -p "$CACHE/dl" "$CACHE/deps"
[ -f "$CACHE/dl/$VLLM_WHL" ] || python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$CACHE/dl" vllm==0.20.2
echo "$VLLM_SHA  $CACHE/dl/$VLLM_WHL" | sha256sum -c --quiet
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$CACHE/deps" "${DEPS[@]}" 2>&1 | grep -v "is ignored" || true
n=$(ls "$CACHE"/deps/*.whl | wc -l); [ "$n" -ge 31 ] || { echo "only $n dependency wheels" >&2; exit 2; }

W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
cp "$CACHE/dl/$VLLM_WHL" "$W/vllm-trim.zip"
zip -q -d "$W/vllm-trim.zip" 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so'
rm -rf "$STAGE/p1" "$STAGE/p2" "$STAGE/p3"
mkdir -p "$STAGE/p1" "$STAGE/p2" "$STAGE/p3/deps"
(cd "$W" && split -b "$PART_BYTES" -a 2 vllm-trim.zip vllm-trim.zip.part- && sha256sum vllm-trim.zip > "$STAGE/p3/SHA256SUMS")
parts=("$W"/vllm-trim.zip.part-*); [ ${#parts[@]} -eq 3 ] || { echo "expected 3 parts, got ${#parts[@]}" >&2; exit 2; }
mv "${parts[0]}" "$STAGE/p1/"; mv "${parts[1]}" "$STAGE/p2/"; mv "${parts[2]}" "$STAGE/p3/"
cp "$CACHE"/deps/*.whl "$STAGE/p3/deps/"
(cd "$STAGE/p3/deps" && sha256sum *.whl > ../deps.sha256)
cat "$STAGE/p3/SHA256SUMS"
du -sb "$STAGE"/p1 "$STAGE"/p2 "$STAGE"/p3
