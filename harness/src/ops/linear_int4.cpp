// The weight-only int4 linear layer (ops/linear_int4.hpp): 2MNK FLOPs; bytes: the
// packed weights, scales and zero points exactly (WeightFormat int4), X read and
// Y written in bf16; its roofline uses bf16 compute (the weights are widened).
// One sweep group: each projection's decode GEMV at batches of 1 to 16,
// beside the bf16 GEMV of decode_linear on the same shapes.
#include "phasebench/ops/linear_int4.hpp"

#include <algorithm>

#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {

std::uint64_t Int4Layout::q_bytes() const { return mul(N, K / 2, "int4 weight bytes"); }
std::uint64_t Int4Layout::scale_bytes() const { return mul({N, groups_per_row(), 2}, "int4 scale bytes"); }
std::uint64_t Int4Layout::zero_bytes() const {
  const auto z = mul(N, groups_per_row(), "int4 zero points");
  return z / 2 + z % 2;
}

WeightFormat int4_weight_format(std::uint64_t group) {
  WeightFormat f = WeightFormat::parse("int4");
  f.group = group;
  f.name = "int4 (groups of " + std::to_string(group) + ", bf16 scale + 4-bit zero)";
  return f;
}

void check_int4_shape(const LinearShape& s, std::uint64_t group) {
  if (group != 32 && group != 64 && group != 128 && group != 256)
    throw InputError("int4 group size " + std::to_string(group) + ": use 32, 64, 128 or 256");
  if (s.K % group != 0)
    throw InputError("int4 group size " + std::to_string(group) + " does not divide K = " + std::to_string(s.K));
}

OpRequest linear_int4_request(const LinearShape& s, std::uint64_t group, Impl impl, std::uint64_t seed) {
  check_int4_shape(s, group);
  return weight_only_gemv_request(kLinearInt4, s, OpOptions(LinearInt4Options{group}), impl, seed);
}

namespace {

OpCost cost(const OpRequest& r) {
  return linear_cost(LinearShape::of(r.shape), int4_weight_format(r.options.as<LinearInt4Options>().group), 2, 2);
}

}  // namespace

}  // namespace phasebench

PHASEBENCH_DECLARE_OPS(linear_int4) {
  using namespace phasebench;
  registry.declare(OpDecl{kLinearInt4, {"M", "N", "K"}, cost,
                          [](const OpRequest& r) { return cost(r).bytes.total(); }, {}});
  registry.group(SweepGroup{
      .name = "linear_int4",
      .former_names = {"decode_linear_int4"},
      .help = "weight-only int4 decode GEMVs of each projection over batch (bf16 activations; compare with "
              "decode_linear's bf16 rows)",
      .order = 25,
      .axes = {AxisDecl{.name = "batch",
                        .help = "GEMV batch sizes (1 to 16)",
                        .gpu_default = {1, 2, 4, 8, 16},
                        .cpu_default = {1, 4, 16},
                        .check =
                            [](const std::vector<std::uint64_t>& v, const std::string& what) {
                              for (auto b : v)
                                if (b < 1 || b > 16)
                                  throw InputError(what + " takes batches of 1 to 16, got " + std::to_string(b));
                            },
                        .alias = "--int4-batches"},
               AxisDecl{.name = "group",
                        .help = "weights per scale and zero point (32, 64, 128 or 256)",
                        .single = true,
                        .gpu_default = {128},
                        .cpu_default = {128},
                        .check =
                            [](const std::vector<std::uint64_t>& v, const std::string&) {
                              for (auto g : v) check_int4_shape({1, 1, g}, g);
                            },
                        .alias = "--int4-group"}},
      .points = [](const SweepScope& sc) {
        std::vector<Point> pts;
        // Its activations are bf16 whatever --dtype: run once, at bf16 if the run has it, else at its first dtype.
        const bool has_bf16 = std::find(sc.dtypes.begin(), sc.dtypes.end(), DType::bf16) != sc.dtypes.end();
        if (sc.dtype != (has_bf16 || sc.dtypes.empty() ? DType::bf16 : sc.dtypes.front())) return pts;
        const ModelConfig& m = *sc.model;
        const auto G = sc.axes->one("group");
        for (auto B : (*sc.axes)["batch"]) {
          for (const auto& lin : linear_ops(m, B, Precision::from(DType::bf16, DType::bf16), m.all_layers_moe())) {
            const auto s = LinearShape::of(lin.shape);
            if (s.K % G != 0) continue;  // a projection this group size does not fit
            OpRequest r = linear_int4_request(s, G, Impl::own);
            if (!sc.runs(r, Impl::own)) continue;
            pts.push_back(make_point("decode", m.name, lin.name, m.name + "." + lin.name, r,
                                     {{"batch", B, "batch"}, {"group", G, "group"}}, true));
          }
        }
        return pts;
      }});
}
