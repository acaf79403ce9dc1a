// Element types (dtype.hpp): names, sizes, parsing, and the output type of a linear layer.
#include "phasebench/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "phasebench/checked.hpp"
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

std::uint64_t WeightFormat::bytes(std::uint64_t rows, std::uint64_t cols) const {
  const auto elements = mul(rows, cols, "weight elements");
  auto ceil_div = [](std::uint64_t a, std::uint64_t b) { return a / b + (a % b ? 1 : 0); };
  std::uint64_t groups = 0;
  if (block_rows && block_cols)
    groups = mul(ceil_div(rows, block_rows), ceil_div(cols, block_cols), "weight blocks");
  else if (group)
    groups = mul(rows, ceil_div(cols, group), "weight groups");
  const auto bits_total = add(add(mul(elements, bits, "weight bits"), mul(groups, group_bits, "scale bits"), "weight bits"),
                              mul(cols, col_bits, "index bits"), "weight bits");
  return bits_total / 8 + (bits_total % 8 ? 1 : 0);
}

WeightFormat WeightFormat::plain(DType t) {
  WeightFormat f;
  f.name = std::string(to_string(t));
  f.bits = 8 * element_bytes(t);
  f.compute = t;
  return f;
}

WeightFormat WeightFormat::parse(std::string_view name) {
  if (name == "int4") return {"int4 (groups of 128, fp16 scale + 4-bit zero)", 4, 128, 0, 0, 16 + 4, 0, DType::bf16};
  if (name == "mxfp4") return {"mxfp4 (groups of 32, e8m0 scale)", 4, 32, 0, 0, 8, 0, DType::bf16};
  if (name == "fp8") return {"fp8 e4m3 (128x128 blocks, fp32 scale)", 8, 0, 128, 128, 32, 0, DType::fp8};
  if (name == "bf16" || name == "fp16" || name == "fp32") return plain(parse_dtype(name));
  throw InputError("unknown weight format '" + std::string(name) + "'; use bf16, fp16, fp32, fp8, int4 or mxfp4");
}

Precision Precision::from(DType weights, DType kv) {
  Precision p;
  p.w = element_bytes(weights);
  p.a = element_bytes(weights) == 1 ? 2 : element_bytes(weights);
  p.c = element_bytes(kv);
  p.linear = WeightFormat::plain(weights);
  return p;
}

WeightFormat Precision::format_of(std::string_view module) const {
  for (const auto& m : plain_modules)
    if (m == module) {
      WeightFormat f;
      f.name = "plain " + std::to_string(8 * w) + "-bit (left unquantized)";
      f.bits = 8 * w;
      f.compute = linear.compute == DType::fp8 ? DType::bf16 : linear.compute;
      return f;
    }
  return linear;
}

}  // namespace phasebench
