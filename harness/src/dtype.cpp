// Element types (dtype.hpp): names, sizes, parsing, and the output type of a linear layer.
#include "phasebench/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "phasebench/error.hpp"

namespace phasebench {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::fp32: return "fp32";
    case DType::tf32: return "tf32";
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp8: return "fp8";
    case DType::int8: return "int8";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (n == "fp32" || n == "float32" || n == "float") return DType::fp32;
  if (n == "tf32") return DType::tf32;
  if (n == "fp16" || n == "float16" || n == "half") return DType::fp16;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "fp8" || n == "e4m3" || n == "fp8_e4m3") return DType::fp8;
  if (n == "int8") return DType::int8;
  throw InputError("unknown dtype '" + std::string(name) + "'; use one of fp32, tf32, fp16, bf16, fp8, int8");
}

std::uint64_t element_bytes(DType t) {
  switch (t) {
    case DType::fp32:
    case DType::tf32: return 4;
    case DType::fp16:
    case DType::bf16: return 2;
    case DType::fp8:
    case DType::int8: return 1;
  }
  return 0;
}

DType linear_output_type(DType t) {
  if (t == DType::fp8) return DType::bf16;
  if (t == DType::tf32) return DType::fp32;
  return t;
}

Precision Precision::from(DType weights, DType kv) {
  Precision p;
  p.w = element_bytes(weights);
  p.a = element_bytes(weights) == 1 ? 2 : element_bytes(weights);
  p.c = element_bytes(kv);
  return p;
}

}  // namespace phasebench
