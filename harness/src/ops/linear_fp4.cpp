// The weight-only FP4 linear layer (ops/linear_fp4.hpp): 2MNK FLOPs; bytes: the
// packed e2m1 values, block scales and (nvfp4) tensor scale exactly
// (matrix_bytes, WeightFormat mxfp4/nvfp4), X read and Y written in bf16; its
// roofline uses bf16 compute (the weights are widened: weight-only).
// One sweep group: each projection's decode GEMV at batches of 1 to 16 in each
// format, beside the bf16 GEMV of decode_linear and linear_int4 on the same shapes.
#include "phasebench/ops/linear_fp4.hpp"

#include <algorithm>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {

namespace {

bool is_fp4(DType t) { return t == DType::mxfp4 || t == DType::nvfp4; }

}  // namespace

std::uint64_t Fp4Layout::block() const { return block_scaling(format)->block; }
std::uint64_t Fp4Layout::value_bytes() const { return mul(N, K / 2, "fp4 value bytes"); }
std::uint64_t Fp4Layout::scale_bytes() const { return mul(N, K / block(), "fp4 scale bytes"); }
std::uint64_t Fp4Layout::tensor_scale_bytes() const { return block_scaling(format)->tensor_bits / 8; }

DType parse_fp4_format(std::string_view word) {
  if (word == "mxfp4") return DType::mxfp4;
  if (word == "nvfp4") return DType::nvfp4;
  throw InputError("unknown FP4 weight format '" + std::string(word) + "': use mxfp4 or nvfp4");
}

WeightFormat fp4_weight_format(DType format) {
  if (!is_fp4(format)) throw std::logic_error("fp4_weight_format(" + std::string(to_string(format)) + ")");
  WeightFormat f = WeightFormat::parse(to_string(format));
  f.compute = DType::bf16;  // weight-only: widened to the activations' type
  return f;
}

void check_fp4_shape(const LinearShape& s, DType format) {
  if (!is_fp4(format))
    throw InputError("an FP4 linear layer stores its weights as mxfp4 or nvfp4, not " + std::string(to_string(format)));
  const auto B = block_scaling(format)->block;
  if (s.K % B != 0)
    throw InputError(std::string(to_string(format)) + " scales blocks of " + std::to_string(B) +
                     " weights along K, which must divide K = " + std::to_string(s.K) +
                     " (a partial block is not taken)");
}

OpRequest linear_fp4_request(const LinearShape& s, DType format, Impl impl, std::uint64_t seed) {
  check_fp4_shape(s, format);
  return weight_only_gemv_request(kLinearFp4, s, OpOptions(LinearFp4Options{format}), impl, seed);
}

namespace {

OpCost cost(const OpRequest& r) {
  return linear_cost(LinearShape::of(r.shape), fp4_weight_format(r.options.as<LinearFp4Options>().format), 2, 2);
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(linear_fp4) {
  using namespace phasebench;
  registry.declare(OpDecl{kLinearFp4, {"M", "N", "K"}, cost,
                          [](const OpRequest& r) { return cost(r).bytes.total(); }, {}});
  registry.group(SweepGroup{
      .name = "linear_fp4",
      .help = "weight-only FP4 (mxfp4, nvfp4) decode GEMVs of each projection over batch (bf16 activations; "
              "compare with decode_linear's bf16 rows)",
      .order = 26,
      .axes = {AxisDecl{.name = "batch",
                        .help = "GEMV batch sizes (1 to 16)",
                        .gpu_default = {1, 2, 4, 8, 16},
                        .cpu_default = {1, 4, 16},
                        .check =
                            [](const std::vector<std::uint64_t>& v, const std::string& what) {
                              for (auto b : v)
                                if (b < 1 || b > 16)
                                  throw InputError(what + " takes batches of 1 to 16, got " + std::to_string(b));
                            }},
               AxisDecl{.name = "format",
                        .help = "how the weights are stored: mxfp4 (e8m0 scale per 32) or nvfp4 (e4m3 scale per 16, "
                                "fp32 tensor scale)",
                        .text = true,
                        .gpu_text = {"mxfp4", "nvfp4"},
                        .cpu_text = {"mxfp4", "nvfp4"},
                        .check_text =
                            [](const std::vector<std::string>& v, const std::string&) {
                              for (const auto& w : v) parse_fp4_format(w);
                            }}},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        // Its activations are bf16 whatever --dtype: run once, at bf16 if the run has it, else at its first dtype.
        const bool has_bf16 = std::find(sc.dtypes.begin(), sc.dtypes.end(), DType::bf16) != sc.dtypes.end();
        if (sc.dtype != (has_bf16 || sc.dtypes.empty() ? DType::bf16 : sc.dtypes.front())) return pts;
        const ModelConfig& m = *sc.model;
        for (const auto& word : sc.axes->text("format")) {
          const DType format = parse_fp4_format(word);
          const auto block = block_scaling(format)->block;
          for (auto B : (*sc.axes)["batch"]) {
            for (const auto& lin : linear_ops(m, B, Precision::from(DType::bf16, DType::bf16), m.all_layers_moe())) {
              const auto s = LinearShape::of(lin.shape);
              if (s.K % block != 0) continue;  // a projection the format's blocks do not fit
              OpRequest r = linear_fp4_request(s, format, Impl::own);
              if (!sc.runs(r, Impl::own)) continue;
              pts.push_back(make_point("decode", m.name, lin.name, m.name + "." + lin.name, r,
                                       {{"batch", B, "batch"}, {"format", 0, "format", word}}, true));
            }
          }
        }
        return pts;
      }});
}
