#pragma once
// Element types and their storage sizes. tf32 is stored as fp32 (it is a math
// mode); fp8 means e4m3. nvfp4 and mxfp4 are block-scaled 4-bit floats (e2m1
// values with a scale per block, block_scaling()); fp6 names a ceiling only.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace phasebench {

enum class DType { fp32, tf32, fp16, bf16, fp8, int8, nvfp4, mxfp4, fp6 };

std::string_view to_string(DType t);
// Accepts the names above (and "e4m3" for fp8, "half" for fp16); throws InputError.
DType parse_dtype(std::string_view name);
// A run's --dtype: what parse_dtype takes except the block-scaled and ceiling-only
// types, which are refused with where they are chosen instead.
DType parse_run_dtype(std::string_view name);
// Bits of one element's value (4 for nvfp4/mxfp4, 6 for fp6), without block scales.
std::uint64_t element_bits(DType t);
// Whole bytes of one element; a logic_error for the sub-byte types, whose
// sizes are matrix_bytes' (a sub-byte type sized per element is a bug).
std::uint64_t element_bytes(DType t);
bool sub_byte(DType t);

// How a block-scaled type stores its scales: one `scale` of `scale_bits` per
// `block` consecutive elements along a row (the reduction dimension K), plus
// `tensor_bits` per matrix (nvfp4's fp32 global scale). nvfp4: blocks of 16, e4m3
// scales, an fp32 tensor scale; mxfp4 (OCP MX): blocks of 32, e8m0 scales.
struct BlockScaling {
  std::uint64_t block = 0;
  std::uint64_t scale_bits = 8;
  std::uint64_t tensor_bits = 0;
  const char* scale = "";  // "e4m3" or "e8m0"
};
// The scaling of a block-scaled type; nullopt for the others.
std::optional<BlockScaling> block_scaling(DType t);
// Exact bytes of a rows x cols matrix of `t` (cols the reduction dimension):
// values, block scales (a partial block has a scale of its own) and tensor scale,
// the bits summed and rounded up once.
std::uint64_t matrix_bytes(DType t, std::uint64_t rows, std::uint64_t cols);

// The type a linear layer's output is stored in for inputs of type `t`: fp8,
// nvfp4 and mxfp4 GEMMs write bf16 (8-bit weights keep 16-bit activations; cuBLASLt has no fp8
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
  // int4 weights are widened to bf16 (weight-only), fp8 computes in fp8, nvfp4
  // and mxfp4 in FP4 where the GPU has an FP4 ceiling (the model falls back to
  // the activations' type, weight-only, where it has none).
  DType compute = DType::bf16;
  std::uint64_t matrix_bits = 0;  // bits per matrix (nvfp4's fp32 tensor scale: 32)
  // Bytes of a rows x cols weight matrix (rows = outputs N, cols = inputs K).
  std::uint64_t bytes(std::uint64_t rows, std::uint64_t cols) const;
  bool quantized() const { return group != 0 || block_rows != 0 || bits < 8; }
  // Plain storage of type `t` (no scales).
  static WeightFormat plain(DType t);
  // --weight-dtype: bf16, fp16, fp32, fp8 (e4m3, 128x128 blocks with an fp32
  // scale), int4 (AWQ-style: groups of 128 with an fp16 scale and a 4-bit zero
  // point), mxfp4 (groups of 32 with an 8-bit e8m0 scale), nvfp4 (groups of 16
  // with an e4m3 scale and an fp32 scale per matrix); InputError otherwise.
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
