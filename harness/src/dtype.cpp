// Element types (dtype.hpp): names, sizes, parsing, and the output type of a linear layer.
#include "phasebench/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
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
    case DType::nvfp4: return "nvfp4";
    case DType::mxfp4: return "mxfp4";
    case DType::fp6: return "fp6";
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
  if (n == "nvfp4") return DType::nvfp4;
  if (n == "mxfp4") return DType::mxfp4;
  if (n == "fp6") return DType::fp6;
  throw InputError("unknown dtype '" + std::string(name) + "'; use one of fp32, tf32, fp16, bf16, fp8, int8, nvfp4, mxfp4");
}

DType parse_run_dtype(std::string_view name) {
  const DType t = parse_dtype(name);
  if (t == DType::nvfp4 || t == DType::mxfp4)
    throw InputError("--dtype " + std::string(name) +
                     ": a block-scaled 4-bit format is chosen per operation, not for the whole run: "
                     "--axis prefill_linear.dtype=" + std::string(to_string(t)) + " (GEMMs), --ops linear_fp4 "
                     "(weight-only GEMVs) or `phasebench model --weight-dtype " + std::string(to_string(t)) + "`");
  if (t == DType::fp6) throw InputError("--dtype fp6: fp6 is a ceiling of the spec table only; use fp32, tf32, fp16, bf16 or fp8");
  return t;
}

std::uint64_t element_bits(DType t) {
  switch (t) {
    case DType::nvfp4:
    case DType::mxfp4: return 4;
    case DType::fp6: return 6;
    default: return 8 * element_bytes(t);
  }
}

bool sub_byte(DType t) { return t == DType::nvfp4 || t == DType::mxfp4 || t == DType::fp6; }

std::optional<BlockScaling> block_scaling(DType t) {
  if (t == DType::nvfp4) return BlockScaling{16, 8, 32, "e4m3"};
  if (t == DType::mxfp4) return BlockScaling{32, 8, 0, "e8m0"};
  return std::nullopt;
}

std::uint64_t matrix_bytes(DType t, std::uint64_t rows, std::uint64_t cols) {
  const auto elements = mul(rows, cols, "matrix elements");
  if (!sub_byte(t)) return mul(elements, element_bytes(t), "matrix bytes");
  std::uint64_t bits = mul(elements, element_bits(t), "matrix bits");
  if (auto s = block_scaling(t)) {
    const auto blocks = mul(rows, cols / s->block + (cols % s->block ? 1 : 0), "scale blocks");
    bits = add(add(bits, mul(blocks, s->scale_bits, "scale bits"), "matrix bits"), s->tensor_bits, "matrix bits");
  }
  return bits / 8 + (bits % 8 ? 1 : 0);
}

std::uint64_t element_bytes(DType t) {
  switch (t) {
    case DType::fp32:
    case DType::tf32: return 4;
    case DType::fp16:
    case DType::bf16: return 2;
    case DType::fp8:
    case DType::int8: return 1;
    case DType::nvfp4:
    case DType::mxfp4:
    case DType::fp6: break;
  }
  throw std::logic_error("element_bytes(" + std::string(to_string(t)) +
                         "): a sub-byte type has no whole bytes per element; size it with matrix_bytes");
}

DType linear_output_type(DType t) {
  if (t == DType::fp8 || t == DType::nvfp4 || t == DType::mxfp4) return DType::bf16;
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
  const auto bits_total = add(add(add(mul(elements, bits, "weight bits"), mul(groups, group_bits, "scale bits"), "weight bits"),
                                  mul(cols, col_bits, "index bits"), "weight bits"),
                              matrix_bits, "weight bits");
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
  // The block-scaled formats take their blocks and scales from block_scaling(), the one place they are defined.
  if (name == "mxfp4" || name == "nvfp4") {
    const DType t = name == "mxfp4" ? DType::mxfp4 : DType::nvfp4;
    const BlockScaling b = *block_scaling(t);
    WeightFormat f{std::string(name) + " (groups of " + std::to_string(b.block) + ", " + b.scale + " scale" +
                       (b.tensor_bits ? ", fp32 tensor scale)" : ")"),
                   element_bits(t), b.block, 0, 0, b.scale_bits, 0, t, b.tensor_bits};
    return f;
  }
  if (name == "fp8") return {"fp8 e4m3 (128x128 blocks, fp32 scale)", 8, 0, 128, 128, 32, 0, DType::fp8};
  if (name == "bf16" || name == "fp16" || name == "fp32") return plain(parse_dtype(name));
  throw InputError("unknown weight format '" + std::string(name) + "'; use bf16, fp16, fp32, fp8, int4, mxfp4 or nvfp4");
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
      f.compute = linear.compute == DType::fp8 || sub_byte(linear.compute) ? DType::bf16 : linear.compute;
      return f;
    }
  return linear;
}

}  // namespace phasebench
