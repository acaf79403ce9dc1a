# The end-to-end check of the emulated build: phasebench-emu runs
# `run --backend=cuda --verify-only` over every op group on a tiny model (prefill
# linear through cuBLASLt, decode GEMV own and cuBLASLt rows, the FP4 GEMV in both
# formats, decode attention contiguous, paged and split-KV, KV append, prefill attention flash and cuBLAS,
# whole layers in prefill and decode, a free-form shape; then the MoE experts on
# a tiny mixture of experts; MLA decode attention on DeepSeek-V2-Lite's shape; the block-scaled
# 4-bit prefill GEMMs on the emulated B200; the NCCL collectives over 2 and 4 emulated
# GPUs); every point must be
# prepared and verified (none wrong, none skipped but a library row's refusal), and timing
# must be refused.
# Run by CTest: cmake -DPHASEBENCH_EMU_BINARY=... -DMODEL=... -P verify_sweep.cmake
# verify_only(WHAT [ENV <VAR=value>...] ARGS <run arguments> WANTS <patterns>): phasebench-emu's
# `run --backend=cuda --verify-only ARGS` (with ENV set) exits 0 with no point wrong, failed or
# skipped, and for each of WANTS some verified point's line matches it.
function(verify_only what)
  cmake_parse_arguments(V "" "" "ENV;ARGS;WANTS" ${ARGN})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env ${V_ENV} ${PHASEBENCH_EMU_BINARY} run --backend=cuda --verify-only ${V_ARGS}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "phasebench-emu --verify-only (${what}) exited with ${rc}")
  endif()
  # A library's row may refuse a point, saying why (FlashInfer's decode takes no per-head
  # fp8 scales): that is the library's limit, not a failure of the emulation. Our rows may not.
  string(REGEX REPLACE "[^\n]*skipped [^\n]*/impl:(flashinfer|cudnn) \\([^\n]*" "" checked "${out}")
  if(checked MATCHES "WRONG|ERROR|skipped ")
    message(FATAL_ERROR "a point (${what}) was wrong, failed or was skipped")
  endif()
  foreach(want ${V_WANTS})
    if(NOT out MATCHES "${want}")
      message(FATAL_ERROR "no verified point matches '${want}'")
    endif()
  endforeach()
endfunction()

verify_only("every op group"
  ARGS --model ${MODEL} --dtype bf16,fp16
       --ops prefill_linear,decode_linear,linear_fp4,decode_attention,kv_append,prefill_attention,layer,free
       --axis prefill_linear.dtype=run --batches 1,2 --prompts 17,64 --decode-batches 1,3,16,20 --attention-batches 1,3 --contexts 33,1000
       --axis linear_fp4.batch=1,3
       --append-batches 1,5 --append-context 100 --prefill-attention-prompts 65,130 --page-size 16
       --shape 5,40,72
  WANTS
    "ok +prefill/linear/.*impl:blas"
    "ok +decode/linear/.*batch:3/impl:own"
    "ok +decode/linear/.*batch:20/impl:blas"
    "ok +decode/linear_fp4/.*batch:3/format:mxfp4/impl:own"
    "ok +decode/linear_fp4/.*batch:1/format:nvfp4/impl:own"
    "ok +decode/decode_attention/.*context:1000"
    "ok +decode/decode_attention_paged/.*context:33/page:16"
    "ok +decode/kv_append/"
    "ok +decode/kv_append_paged/"
    "ok +prefill/prefill_attention/.*impl:own"
    "ok +prefill/prefill_attention/.*impl:blas"
    "ok +prefill/layer/"
    "ok +decode/layer/"
    "ok +free/linear/5x40x72/.*impl:own")
# The MoE experts (cuBLAS's grouped GEMM) on a tiny mixture of experts, every
# routing and 16-bit type, decode and prefill.
verify_only("moe"
  ARGS --model ${MOE_MODEL} --dtype bf16,fp16 --ops moe
       --moe-decode-batches 1,3,16 --moe-prompts 17 --routing uniform,zipf:1.5,hot:0.5
  WANTS
    "ok +decode/moe/tiny-moe.experts/bf16/batch:1/routing:uniform/impl:blas"
    "ok +decode/moe/tiny-moe.experts/fp16/batch:16/routing:hot:0.5/impl:blas"
    "ok +prefill/moe/tiny-moe.experts/bf16/prompt:17/routing:zipf:1.5/impl:blas")
# MLA decode attention (tensor cores, split-KV) on DeepSeek-V2-Lite's shape at
# small sizes: contiguous and paged, bf16 and fp16.
verify_only("latent_attention"
  ARGS --dtype bf16,fp16 --ops latent_attention
       --model deepseek-v2-lite --mla-batches 1,3 --mla-contexts 40 --mla-page-size 16
  WANTS
    "ok +decode/latent_attention/deepseek-v2-lite/bf16/batch:1/context:40"
    "ok +decode/latent_attention_paged/deepseek-v2-lite/fp16/batch:3/context:40/page:16")
# The block-scaled 4-bit prefill GEMMs (cuBLASLt's block-scaled matmul, nvfp4 and mxfp4)
# on the emulated B200: the default target (h200, compute capability 9.0) skips them.
verify_only("block-scaled prefill GEMMs"
  ENV PB_EMU_TARGET=b200
  ARGS --model ${MODEL} --ops prefill_linear --axis prefill_linear.dtype=nvfp4,mxfp4 --batches 1,2 --prompts 17
  WANTS
    "ok +prefill/linear/tiny-llama.qkv_proj/nvfp4/batch:1/prompt:17/impl:blas"
    "ok +prefill/linear/tiny-llama.down_proj/mxfp4/batch:2/prompt:17/impl:blas")
# The collectives (NCCL's stand-in) over 2 and 4 emulated GPUs: the tiny model's
# sharding sizes (layer all-reduce, logits all-gather; MoE dispatch on the tiny MoE)
# and the power-of-two size sweep, every collective, bf16 and fp32; and the tiny
# model's whole layer tensor-parallel over the same GPUs (--gpus sets every group's
# gpus axis; the layer's KV heads replicated over 4), bf16 (the layer takes no fp32).
verify_only("collectives and tensor-parallel layers"
  ENV PB_EMU_DEVICES=4
  ARGS --model ${MODEL},${MOE_MODEL} --dtype bf16,fp32 --ops collectives,collectives_sizes,layer --gpus 2,4
       --axis collectives.batch=1,3 --axis collectives.tokens=17
       --axis collectives_sizes.bytes=4096,100000
       --axis layer.prefill_batch=2 --axis layer.prompt=17 --axis layer.decode_batch=3 --axis layer.context=33
  WANTS
    "ok +prefill/layer/tiny-llama/bf16/batch:2/prompt:17/gpus:2"
    "ok +decode/layer/tiny-llama/bf16/batch:3/context:33/gpus:4"
    "ok +decode/all_reduce/tiny-llama.layer_all_reduce/bf16/gpus:2/batch:3"
    "ok +prefill/all_reduce/tiny-llama.layer_all_reduce/fp32/gpus:4/tokens:17"
    "ok +decode/all_gather/tiny-llama.logits_all_gather/bf16/gpus:4/batch:1"
    "ok +decode/all_to_all/tiny-moe.moe_dispatch/bf16/gpus:2/batch:3"
    "ok +free/reduce_scatter/sizes/fp32/gpus:4/bytes:4096"
    "ok +free/all_to_all/sizes/bf16/gpus:2/bytes:100000")
# The emulated build refuses to time, with a message that says why.
execute_process(
  COMMAND ${PHASEBENCH_EMU_BINARY} run --backend=cuda --model ${MODEL} --ops decode_linear --decode-batches 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "functional CUDA emulation.*never times anything.*--verify-only")
  message(FATAL_ERROR "phasebench-emu should refuse to time (exit 2, saying why); got ${rc}: ${out}${err}")
endif()
