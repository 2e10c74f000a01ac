# What the GPU tier stages per vLLM version (sourced by stage.sh, moe_call.sh; bash).
#
#   . tests/gpu/vllm_versions.sh; gpu_version 0.26.0 || exit 2
#
# sets VLLM_WHL, VLLM_SHA (the PyPI wheel), TRIM (wheel members dropped: kernels the H200 does
# not run, binaries the server does not start), DEPS (the dependency wheels the image lacks;
# the image's torch 2.11.0+cu130, transformers, numpy, ... are used as they are), LAYOUT and
# STAGE_SUB (where under .gpu-stage/ the parts go).
#   LAYOUT=split  the trimmed wheel cut into byte parts p1..p3 (reassembled on the GPU machine
#                 before it is unpacked; 0.20.2, as docs/gpu-results.md ran it)
#   LAYOUT=members  the trimmed wheel re-packed by member into zips p1..pN (PARTS: one member
#                 pattern list per part, the first part takes everything no later part names),
#                 each unpacked on arrival, so the first call can already import vLLM's Python
#                 side (tests/gpu/vllm_check.py) before the kernels travel
# Keep one version of each dependency: two stop the install.
gpu_version() {
  VLLM_VERSION=$1
  case $1 in
    0.20.2)
      VLLM_WHL=vllm-0.20.2-cp38-abi3-manylinux_2_35_x86_64.whl
      VLLM_SHA=22a7dd06eb03371298e13d6100f3dedbf307352342aaf08e87c929c60aae9b4d
      TRIM=('vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so')
      LAYOUT=split STAGE_SUB=.
      DEPS=(fastapi==0.128.0 starlette==0.50.0 uvicorn==0.40.0 pydantic==2.12.5 pydantic-core==2.41.5
        annotated-types==0.7.0 typing-inspection==0.4.2 openai==2.54.0 distro==1.9.0 jiter==0.19.0
        sniffio==1.3.1 msgspec==0.23.0 pyzmq==27.3.0 cbor2==6.3.0 pybase64==1.5.1 gguf==0.19.0
        partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==7.1.0 watchfiles==1.3.0
        model-hosting-container-standards==0.1.16 jmespath==1.1.0 openai-harmony==0.0.8
        cachetools==6.2.4 blake3==1.0.11 setproctitle==1.3.8 python-json-logger==4.2.0
        llguidance==1.3.0 xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2 typing_extensions==4.15.0
        annotated-doc==0.0.4)
      ;;
    0.26.0)
      # 303.7 MB; pins torch 2.11.0 (the image's). Dropped: the FA2 kernels (Hopper runs FA3),
      # the Rust frontend binary vllm-rs (only with VLLM_USE_RUST_FRONTEND=1), DeepGEMM's
      # extension for the other Pythons (the image is 3.12), the SM100-only fmha kernels.
      VLLM_WHL=vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl
      VLLM_SHA=adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de
      TRIM=('vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs'
        'vllm/third_party/deep_gemm/_C.cpython-310-*' 'vllm/third_party/deep_gemm/_C.cpython-311-*'
        'vllm/third_party/deep_gemm/_C.cpython-313-*' 'vllm/third_party/deep_gemm/_C.cpython-314-*'
        'vllm/third_party/fmha_sm100/*')
      LAYOUT=members STAGE_SUB=vllm-0.26.0
      # part 1: vLLM's Python side, the small extensions and the dependencies (the first call
      # imports it); then one large kernel library per call
      PARTS=('' 'vllm/_C_stable_libtorch.abi3.so' 'vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so'
        'vllm/_moe_C_stable_libtorch.abi3.so')
      # Requires-Dist of 0.26.0 that the serving path imports and the image lacks (module-level
      # imports from vllm.entrypoints.openai.api_server, the DeepSeek-V3 and EAGLE-3 models, the
      # engine and the GPU worker; tests/gpu/README.md). Not carried, each imported only on a path
      # this tier does not take: flashinfer-python (Hopper picks FA3/FlashAttention-MLA and Triton
      # MoE), nvidia-cutlass-dsl and quack-kernels (the cuteDSL router GEMM falls back to vLLM's
      # own kernel; vLLM logs "cuteDSL (CUTLASS Python) not available"), tilelang,
      # tokenspeed-mla, humming-kernels, torchcodec, PyNvVideoCodec, mistral_common,
      # compressed-tensors, lm-format-enforcer, outlines_core, anthropic, mcp, opentelemetry-*.
      DEPS=(fastapi==0.136.3 starlette==1.0.1 uvicorn==0.40.0 pydantic==2.12.5 pydantic-core==2.41.5
        annotated-types==0.7.0 typing-inspection==0.4.2 openai==2.54.0 distro==1.9.0 jiter==0.19.0
        sniffio==1.3.1 msgspec==0.23.0 pyzmq==27.3.0 cbor2==6.3.0 pybase64==1.5.1
        partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==8.1.0 watchfiles==1.3.0
        model-hosting-container-standards==0.1.16 jmespath==1.1.0 openai-harmony==0.0.8
        cachetools==6.2.4 blake3==1.0.11 setproctitle==1.3.8 python-json-logger==4.2.0
        llguidance==1.7.6 xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2 typing_extensions==4.15.0
        annotated-doc==0.0.4 ijson==3.6.0)
      ;;
    *)
      echo "no GPU-tier staging recipe for vLLM $1 (tests/gpu/vllm_versions.sh knows 0.20.2, 0.26.0)" >&2
      return 2
      ;;
  esac
}
