#!/usr/bin/env bash
# One device call of the drafter proof (issue 17.4), run in the repo root on the GPU machine:
#   bash .gpu-stage/drafter-code/tests/gpu/drafter_proof.sh N
# (the code travels as a carried copy, .gpu-stage/drafter-code, with its rendered units in
# .gpu-stage/drafter-code/units: tests/gpu/drafter_units.sh). Calls run back to back while the
# machine stays warm; /tmp/gpu-tier survives between them.
#   1  stage vLLM part 1; train targets A and B (train_target.py, about 4 min)
#   2  stage vLLM part 2
#   3  stage part 3, unpack vLLM 0.20.2 into /tmp/site (tests/gpu/call.sh 3, no runs); the
#      drafter pipeline for A (generation through the rendered no-spec unit)
#   4  the drafter pipeline for B (A's responses, B's hidden states)
#   5  serve A with A's drafter, B's drafter and A's drafter with shifted aux layer ids through
#      the rendered EAGLE-3 unit; the drafter check and the gates for each
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEP=${1:?step}
CODE=$(cd "$(dirname "$0")/../.." && pwd)
W=/tmp/gpu-tier
OUTD=${OUT:-/tmp/gpu-tier-out}
mkdir -p "$W/stage" "$OUTD"
case $STEP in
1)
  cp .gpu-stage/p1/vllm-trim.zip.part-* "$W/stage/" && echo "part 1 staged"
  nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
  python3 "$CODE/tests/gpu/drafter_proof.py" targets --out "$OUTD" \
    --seconds-a "${SECONDS_A:-100}" --seconds-b "${SECONDS_B:-70}"
  ;;
2)
  cp .gpu-stage/p2/vllm-trim.zip.part-* "$W/stage/" && echo "part 2 staged"
  ;;
3)
  mkdir -p "$W/models" && { [ -f "$W/models/models.json" ] || echo '{}' > "$W/models/models.json"; }
  RUNS3="" bash tests/gpu/call.sh 3 2>&1 | grep -v "^usage:\|error: the following" | tail -5
  [ -d /tmp/site/vllm ] || { echo "vLLM not unpacked"; exit 13; }
  rm -f "$OUTD/driver.log" "$OUTD/models.json"
  PYTHONPATH=/tmp/site python3 "$CODE/tests/gpu/drafter_proof.py" pipeline --only A --out "$OUTD" --deadline-s $((570 - SECONDS))
  ;;
4|5)
  [ -d /tmp/site/vllm ] || { echo "/tmp/site/vllm missing: the machine was not kept warm since call 3"; exit 14; }
  if [ "$STEP" = 4 ]; then
    PYTHONPATH=/tmp/site python3 "$CODE/tests/gpu/drafter_proof.py" pipeline --only B --out "$OUTD" --deadline-s $((570 - SECONDS))
  else
    PYTHONPATH=/tmp/site python3 "$CODE/tests/gpu/drafter_proof.py" serve --out "$OUTD" --deadline-s $((570 - SECONDS))
  fi
  ;;
c3)
  # the short plan (device time for 17.3 only): stage part 3, unpack, the convention proof
  mkdir -p "$W/models" && { [ -f "$W/models/models.json" ] || echo '{}' > "$W/models/models.json"; }
  RUNS3="" bash tests/gpu/call.sh 3 2>&1 | grep -v "^usage:\|error: the following" | tail -5
  [ -d /tmp/site/vllm ] || { echo "vLLM not unpacked"; exit 13; }
  rm -f "$OUTD/driver.log" "$OUTD/models.json"
  PYTHONPATH=/tmp/site python3 "$CODE/tests/gpu/drafter_proof.py" convention --out "$OUTD" --deadline-s $((${C3_DEADLINE:-570} - SECONDS))
  ;;
*) echo "unknown step $STEP"; exit 2 ;;
esac
