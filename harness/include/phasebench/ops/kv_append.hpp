#pragma once
// The KV-append operation (harness/src/ops/kv_append.cpp): S new tokens' K and V
// per sequence written into a contiguous or paged cache of `capacity` tokens,
// at its end.
#include <cstdint>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kKvAppend = "kv_append";
inline constexpr const char* kKvAppendPaged = "kv_append_paged";

// A KV append request's options (OpRequest::options).
struct KvAppendOptions {
  std::uint64_t capacity = 0;   // the cache's tokens per sequence (the new ones go at its end)
  std::uint64_t page_size = 0;  // tokens per page (the paged kind)
};

OpRequest kv_append_request(const KvAppendShape& s, DType dtype, std::uint64_t capacity, bool paged,
                            std::uint64_t page_size = 16, std::uint64_t seed = 0x5eed);

}  // namespace phasebench
