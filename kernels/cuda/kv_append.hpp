#pragma once
// KV append: copy S new tokens' K and V per sequence into the cache.
//
//   new k, v   [B, S, Hkv, D]   (token-major, as a QKV projection emits them)
//   contiguous cache  [B, Hkv, capacity, D]
//   paged pools       [num_pages, Hkv, P, D], block table int32 [B, pages_per_seq]
// Token s of sequence b goes to cache position pos + s. A pure copy in 16-byte
// vectors (8 elements), one thread per vector of K and the same vector of V.
// Here the params and the launcher; the kernel is kv_append.cuh, the plan
// kv_append_plan.hpp, the operation kv_append.cu.
#include <cuda_runtime.h>

#include <cstdint>

#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

struct KvAppendParams {
  DType dtype = DType::bf16;  // any 16-bit type (bf16, fp16): the copy is bit-exact
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* k_cache = nullptr;  // contiguous cache or page pool
  void* v_cache = nullptr;
  const std::int32_t* block_table = nullptr;  // paged only; nullptr = contiguous
  int B = 0, S = 0, Hkv = 0, D = 0;
  int capacity = 0;       // contiguous: tokens per (sequence, head) row of the cache
  int pos = 0;            // first position written
  int page_size = 0;      // paged only
  int pages_per_seq = 0;  // paged only
};

// The params of appending [B, S, Hkv, D] new tokens at positions pos.. of a
// contiguous cache of `capacity` tokens per (sequence, head) row, or of a paged
// pool (block_table set): what the KV-append op and the whole layer both pass.
KvAppendParams kv_append_params(DType t, const void* k_new, const void* v_new, void* k_cache, void* v_cache, int B, int S,
                                int Hkv, int D, int capacity, int pos, const std::int32_t* block_table = nullptr,
                                int page_size = 0, int pages_per_seq = 0);

void launch_kv_append(const KvAppendParams& p, cudaStream_t stream);

}  // namespace phasebench::cuda
