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

// How the weights of linear layers are stored: `bits` per weight, plus scales and
// zero points, `group_bits` of them per group of `group` consecutive weights
// along a row (AWQ, GPTQ, MXFP4) or per block_rows x block_cols tile (fp8 with
// block scales). Sizes below a byte are exact: bits are summed and rounded up once.
struct WeightFormat {
  std::string name = "bf16";
  std::uint64_t bits = 16;
  std::uint64_t group = 0;       // weights per group along a row; 0: none
  std::uint64_t block_rows = 0, block_cols = 0;  // a 2D block per scale; 0: none
  std::uint64_t group_bits = 0;  // scale (+ zero point) bits per group or block
  std::uint64_t col_bits = 0;    // bits per input column of each matrix (GPTQ's g_idx: 32)
  // The type a linear layer with these weights computes in (its compute ceiling):
  // int4 and mxfp4 weights are widened to bf16 (weight-only), fp8 computes in fp8.
  DType compute = DType::bf16;
  // Bytes of a rows x cols weight matrix (rows = outputs N, cols = inputs K).
  std::uint64_t bytes(std::uint64_t rows, std::uint64_t cols) const;
  bool quantized() const { return group != 0 || block_rows != 0 || bits < 8; }
  // Plain storage of type `t` (no scales).
  static WeightFormat plain(DType t);
  // --weight-dtype: bf16, fp16, fp32, fp8 (e4m3, 128x128 blocks with an fp32
  // scale), int4 (AWQ-style: groups of 128 with an fp16 scale and a 4-bit zero
  // point), mxfp4 (groups of 32 with an 8-bit e8m0 scale); InputError otherwise.
  static WeightFormat parse(std::string_view name);
};

// Element sizes in bytes of one configuration (docs/design.md notation w, a, c).
struct Precision {
  std::uint64_t w = 2;  // weights that stay plain (norm scales, embeddings, unquantized layers)
  std::uint64_t a = 2;  // activations
  std::uint64_t c = 2;  // KV cache
  WeightFormat linear;  // the linear layers' weights
  std::vector<std::string> plain_modules = {};  // linear layers left unquantized (in `w`): lm_head, ...
  // Weights in `weights`, activations in bf16 when the weights are 8-bit
  // (quantised weights, 16-bit activations between operators), KV cache in `kv`.
  static Precision from(DType weights, DType kv);
  // The format of linear layer `module` (qkv_proj, lm_head, ...).
  WeightFormat format_of(std::string_view module) const;
};

}  // namespace phasebench
