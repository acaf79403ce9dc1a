// MLA decode attention (ops/latent_attention.hpp): the cost by hand, contiguous
// and paged; the benchmark op against the analytical model's absorbed decode
// attention for DeepSeek-V2-Lite and DeepSeek-V3; the reference on a case
// computed by hand; the CPU op against the reference on tail-heavy shapes; the
// sweep group's points and names; bad input; the summary's MLA section.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "reference/latent_attention.hpp"
#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/latent_attention.hpp"
#include "summary.hpp"
#include "sweep.hpp"

using namespace phasebench;

namespace {

OpRequest mla(std::uint64_t B, std::uint64_t H, std::uint64_t L, DType t, bool paged, std::uint64_t page = 64,
              std::uint64_t splits = 0, std::uint64_t R = 512, std::uint64_t P = 64) {
  return latent_attention_request({B, H, L, R, P}, t, paged, 192, page, splits, 77 + B * 5 + L);
}

}  // namespace

TEST(LatentAttention, CostByHand) {
  const auto c = mla(3, 16, 1000, DType::bf16, false).cost();
  EXPECT_EQ(c.flops, 2ull * 3 * 16 * 1000 * (2 * 512 + 64));
  EXPECT_EQ(c.bytes.kv_cache, 2ull * 3 * 1000 * 576);
  EXPECT_EQ(c.bytes.activations, 2ull * 3 * 16 * 576);
  EXPECT_EQ(c.bytes.writes, 2ull * 3 * 16 * 512);
  EXPECT_EQ(c.bytes.block_table, 0u);
  // Paged: the same plus 4 bytes per page per sequence (1000 tokens: 16 pages of 64).
  const auto p = mla(3, 16, 1000, DType::bf16, true).cost();
  EXPECT_EQ(p.flops, c.flops);
  EXPECT_EQ(p.bytes.kv_cache, c.bytes.kv_cache);
  EXPECT_EQ(p.bytes.block_table, 4ull * 3 * 16);
  EXPECT_EQ(p.bytes.total(), c.bytes.total() + 4 * 3 * 16);
  // The footprint of a paged cache holds whole pages and the table.
  EXPECT_EQ(mla(3, 16, 1000, DType::bf16, true).footprint_bytes(),
            2ull * 3 * 16 * 64 * 576 + c.bytes.activations + c.bytes.writes + 4 * 3 * 16);
  // Intensity about 2*H*(2R+P)/(c*(R+P)) (the queries and outputs add a few %):
  // 16 heads ~ 30 FLOP/B in bf16, 128 heads ~ 240.
  EXPECT_NEAR(mla(64, 16, 8192, DType::bf16, false).cost().intensity(), 2.0 * 16 * 1088 / (2 * 576), 0.3);
  EXPECT_NEAR(mla(64, 128, 8192, DType::bf16, false).cost().intensity(), 2.0 * 128 * 1088 / (2 * 576), 8);
  // The softmax scale is the model's 1/sqrt(qk_nope + qk_rope).
  EXPECT_FLOAT_EQ(latent_attention_scale(mla(1, 16, 10, DType::bf16, false)), 1.0f / std::sqrt(192.0f));
}

TEST(LatentAttention, AnalyticalModelAndTheOpAgree) {
  // The analytical model's absorbed decode attention of DeepSeek-V2-Lite and V3
  // costs what the benchmark op of the same shape costs, byte class by byte class.
  for (const char* name : {"deepseek-v2-lite", "deepseek-v3"}) {
    const auto m = load_model(name);
    ASSERT_TRUE(m.uses_mla()) << name;
    for (const auto& [B, L] : {std::pair{1u, 1000u}, std::pair{32u, 8192u}}) {
      const StepShape step{Phase::decode, B, 1, L};
      const auto ops = layer_ops(m, step, Precision::from(DType::bf16, DType::bf16), LayerKind{});
      const LayerOp* att = nullptr;
      for (const auto& op : ops)
        if (op.name == "attention") att = &op;
      ASSERT_NE(att, nullptr) << name;
      const auto r = latent_attention_request({B, m.heads, L, m.mla.kv_lora_rank, m.mla.qk_rope}, DType::bf16, false,
                                              m.mla.qk_nope + m.mla.qk_rope);
      EXPECT_EQ(r.shape.to_json(), att->shape.to_json()) << name;
      const auto op = r.cost();
      EXPECT_EQ(op.flops, att->cost.flops) << name;
      EXPECT_EQ(op.bytes.kv_cache, att->cost.bytes.kv_cache) << name;
      EXPECT_EQ(op.bytes.activations, att->cost.bytes.activations) << name;
      EXPECT_EQ(op.bytes.writes, att->cost.bytes.writes) << name;
      EXPECT_EQ(op.bytes.weights, att->cost.bytes.weights) << name;
      EXPECT_EQ(op.bytes.block_table, att->cost.bytes.block_table) << name;
    }
  }
  EXPECT_EQ(load_model("deepseek-v2-lite").heads, 16u);
  EXPECT_EQ(load_model("deepseek-v3").heads, 128u);
}

TEST(LatentAttention, ReferenceByHand) {
  // Two tokens, R = 2, P = 1: scores q.c (nope and rope parts) * scale, values c[:R].
  const float q[3] = {1, 0, 2};
  const float c[2][3] = {{1, 2, 0.5f}, {3, -1, 0}};
  double out[2];
  reference::latent_attention_head(q, 2, 2, 1, 0.5f, [&](std::size_t l) { return c[l]; }, out);
  const double s0 = (1 + 1) * 0.5, s1 = 3 * 0.5;  // token 0: 1*1 + 2*0.5; token 1: 3
  const double w0 = std::exp(s0) / (std::exp(s0) + std::exp(s1)), w1 = 1 - w0;
  EXPECT_NEAR(out[0], w0 * 1 + w1 * 3, 1e-12);
  EXPECT_NEAR(out[1], w0 * 2 + w1 * -1, 1e-12);
}

TEST(LatentAttention, CpuOpMatchesReferenceOnTailHeavyShapes) {
  // Tails: L = 1, L not a multiple of the 16-row block or the page, pages that
  // are not multiples of the block, B = 1 and odd B, H not a multiple of 16,
  // forced and automatic splits; every dtype the CPU backend takes.
  auto b = make_cpu_backend();
  struct Case {
    std::uint64_t B, H, L;
    bool paged;
    std::uint64_t page, splits;
  };
  const std::vector<Case> cases = {{1, 1, 1, false, 64, 0},   {1, 5, 17, true, 64, 0},   {3, 16, 300, false, 64, 0},
                                   {3, 20, 300, true, 48, 0}, {1, 16, 700, false, 64, 3}, {2, 5, 700, true, 5, 4},
                                   {5, 1, 130, true, 64, 7},  {1, 16, 1100, true, 64, 0}};
  for (DType t : {DType::fp32, DType::bf16, DType::fp16})
    for (const auto& c : cases) {
      auto op = b->prepare(mla(c.B, c.H, c.L, t, c.paged, c.page, c.splits));
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " B=" << c.B << " H=" << c.H << " L=" << c.L
                                    << (c.paged ? " paged " + std::to_string(c.page) : std::string(" contiguous"))
                                    << " splits=" << c.splits;
    }
  // Another latent width (the CPU kernel takes any R and P).
  auto op = b->prepare(mla(2, 3, 77, DType::fp32, true, 16, 0, 96, 32));
  EXPECT_NO_THROW(op->verify());
  // Paged and contiguous hold the same cache and give the same outputs (to rounding).
  auto c1 = b->prepare(mla(2, 20, 500, DType::fp32, false));
  auto p1 = b->prepare(mla(2, 20, 500, DType::fp32, true, 48));
  c1->run();
  p1->run();
  const auto x = c1->output_values(), y = p1->output_values();
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5 * (1 + std::abs(y[i]))) << i;
}

TEST(LatentAttention, SweepPointsAndNames) {
  auto b = make_cpu_backend();
  SweepConfig c;
  c.groups = {"latent_attention"};
  apply_defaults(c, *b);
  const auto pts = build_sweep(c, *b);
  // CPU defaults: DeepSeek-V2-Lite, batches 1 and 4, context 2048, contiguous and paged (page 64).
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts.front().name, "decode/latent_attention/deepseek-v2-lite/fp32/batch:1/context:2048");
  EXPECT_EQ(pts.back().name, "decode/latent_attention_paged/deepseek-v2-lite/fp32/batch:4/context:2048/page:64");
  for (const auto& p : pts) {
    EXPECT_EQ(p.model, "deepseek-v2-lite");
    EXPECT_EQ(p.request.shape["H"], 16u);
    EXPECT_EQ(p.request.shape["R"], 512u);
    EXPECT_EQ(p.request.shape["P"], 64u);
    EXPECT_EQ(p.request.options.as<LatentAttentionOptions>().qk_dim, 192u);
    EXPECT_EQ(p.cost.flops, p.request.cost().flops);
    EXPECT_FALSE(b->cannot_run(p.request).has_value());
  }
  EXPECT_EQ(pts.back().request.kind, kLatentAttentionPaged);
  EXPECT_EQ(pts.back().args.at("page_size"), 64u);
  // Given models and sizes: V3's 128 heads.
  SweepConfig v3;
  v3.groups = {"latent_attention"};
  v3.models = {"deepseek-v3"};
  v3.models_given = true;
  v3.axes["latent_attention"].sizes["batch"] = {3};
  v3.axes["latent_attention"].sizes["context"] = {100, 200};
  v3.axes["latent_attention"].sizes["page_size"] = {16};
  apply_defaults(v3, *b);
  const auto p3 = build_sweep(v3, *b);
  ASSERT_EQ(p3.size(), 4u);
  EXPECT_EQ(p3[3].name, "decode/latent_attention_paged/deepseek-v3/fp32/batch:3/context:200/page:16");
  EXPECT_EQ(p3[3].request.shape["H"], 128u);
  // The group is in the default sweep (no --ops).
  SweepConfig all;
  apply_defaults(all, *b);
  std::size_t mla_points = 0;
  for (const auto& p : build_sweep(all, *b)) mla_points += p.op.rfind("latent_attention", 0) == 0;
  EXPECT_EQ(mla_points, 4u);
  // --model given: the MLA models among them (none for a dense model).
  SweepConfig given;
  given.models = {"llama-3.1-8b", "deepseek-v3"};
  given.models_given = true;
  given.groups = {"latent_attention"};
  apply_defaults(given, *b);
  const auto g = build_sweep(given, *b);
  ASSERT_EQ(g.size(), 4u);
  for (const auto& p : g) EXPECT_EQ(p.model, "deepseek-v3") << p.name;
  SweepConfig dense;
  dense.models = {"llama-3.1-8b"};
  dense.models_given = true;
  dense.groups = {"latent_attention"};
  apply_defaults(dense, *b);
  EXPECT_TRUE(build_sweep(dense, *b).empty());
}

TEST(LatentAttention, BadInputIsAnInputError) {
  auto b = make_cpu_backend();
  SweepConfig page0;
  page0.axes["latent_attention"].sizes["page_size"] = {0};
  EXPECT_THROW(apply_defaults(page0, *b), InputError);
  EXPECT_THROW(latent_attention_request({1, 16, 10, 512, 64}, DType::bf16, false, 0), InputError);
  // From the command line: one line, exit status 2, nothing run.
  auto r = test::run_cli("run --backend=cpu --ops latent_attention --mla-page-size 0 --verify-only");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--mla-page-size"), std::string::npos) << r.out;
  // A dense model: the group has no point; the run says so.
  r = test::run_cli("run --backend=cpu --ops latent_attention --model llama-3.1-8b --verify-only");
  EXPECT_EQ(r.status, 2) << r.out;
  // A point too big for memory is skipped with its reason.
  const auto why = b->cannot_run(mla(1u << 20, 128, 1u << 20, DType::fp32, false));
  ASSERT_TRUE(why.has_value());
}

TEST(LatentAttention, SmallCpuRunAndSummaryShowTheIntensityAgainstTheRidge) {
  const auto out = test::cli_tmp("mla.json");
  std::filesystem::remove(out);
  const auto r = test::run_cli(
      "run --backend=cpu --ops latent_attention --model deepseek-v2-lite,deepseek-v3 --mla-batches 1 "
      "--mla-contexts 65 --mla-page-size 16 --dtype bf16 --no-calibrate --max-time 0.05 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  int points = 0;
  for (const auto& bm : j.at("benchmarks")) {
    const auto& p = bm.at("phasebench");
    ASSERT_EQ(p.at("status"), "ok") << bm.dump();
    EXPECT_EQ(p.at("op_kind").get<std::string>().rfind("latent_attention", 0), 0u);
    ++points;
  }
  EXPECT_EQ(points, 4);
  const auto s = summarize(j);
  EXPECT_NE(s.find("MLA decode attention (absorbed): intensity against the ridge"), std::string::npos) << s;
  EXPECT_NE(s.find("deepseek-v3"), std::string::npos) << s;
  std::filesystem::remove(out);
}
