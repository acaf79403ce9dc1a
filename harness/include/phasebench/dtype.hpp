#pragma once
// Element types and their storage sizes. tf32 is stored as fp32 (it is a math
// mode); fp8 means e4m3.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace phasebench {

enum class DType { fp32, tf32, fp16, bf16, fp8, int8 };

std::string_view to_string(DType t);
// Accepts the names above (and "e4m3" for fp8, "half" for fp16); throws InputError.
DType parse_dtype(std::string_view name);
std::uint64_t element_bytes(DType t);

// The type a linear layer's output is stored in for inputs of type `t`: fp8
// GEMMs write bf16 (8-bit weights keep 16-bit activations; cuBLASLt has no fp8
// output without a scale), tf32 is stored as fp32, the others as themselves.
DType linear_output_type(DType t);

// Element sizes in bytes of one configuration (docs/design.md notation w, a, c).
struct Precision {
  std::uint64_t w = 2;  // weights
  std::uint64_t a = 2;  // activations
  std::uint64_t c = 2;  // KV cache
  // Weights in `weights`, activations in bf16 when the weights are 8-bit
  // (quantised weights, 16-bit activations between operators), KV cache in `kv`.
  static Precision from(DType weights, DType kv);
};

}  // namespace phasebench
