#pragma once
// The CPU backend's KV append (kv_append.cpp): multi-threaded
// (OpenMP) loops written to stream memory; layouts as the CUDA kernels'
// (docs/design.md, kernels/backend.hpp).
#include <cstdint>

namespace phasebench::cpu {

// KV append: new_k, new_v [B, S, Hkv, D] written to positions pos..pos+S-1.
// Contiguous cache [B, Hkv, capacity, D]; paged pools [pages, Hkv, P, D] with
// block_table [B, pages_per_seq] (int32 page ids).
struct KvAppendArgs {
  const void* new_k = nullptr;
  const void* new_v = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const std::int32_t* block_table = nullptr;  // null: contiguous cache
  std::uint64_t B = 0, S = 0, Hkv = 0, D = 0, pos = 0, capacity = 0;
  std::uint64_t page_size = 0, pages_per_seq = 0;
  std::uint64_t element_bytes = 4;
};
void kv_append(const KvAppendArgs& a);

}  // namespace phasebench::cpu
