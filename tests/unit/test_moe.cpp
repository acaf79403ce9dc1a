// The MoE experts operation (ops/moe.hpp): routing (parsing, inclusion chances,
// the seeded draw against its expectation), the cost formula by hand and against
// the analytical model's MoE layer, the CPU op against the reference on
// tail-heavy shapes, the reference catching planted errors, the sweep's points
// and names, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "standing.hpp"
#include "reference/common.hpp"
#include "reference/moe.hpp"
#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/moe.hpp"
#include "summary.hpp"
#include "sweep.hpp"

using namespace phasebench;

namespace {

const Routing kUniform{}, kZipf1{Routing::Kind::zipf, 1.0}, kHalfHot{Routing::Kind::hot, 0.5};

}  // namespace

TEST(Moe, RoutingInclusionSumsToK) {
  for (const Routing& r : {kUniform, kZipf1, kHalfHot, Routing{Routing::Kind::zipf, 3.0}}) {
    const auto pi = routing_inclusion(64, 6, r);
    EXPECT_NEAR(std::accumulate(pi.begin(), pi.end(), 0.0), 6.0, 1e-9) << r.text();
    for (double p : pi) EXPECT_LE(p, 1.0 + 1e-12) << r.text();
  }
  const auto hot = routing_inclusion(8, 2, kHalfHot);
  EXPECT_DOUBLE_EQ(hot[0], 0.5);
  EXPECT_DOUBLE_EQ(hot[1], 1.5 / 7);
  // Every token to every expert: hot:F must leave room for k distinct experts.
  EXPECT_THROW(routing_inclusion(4, 4, kHalfHot), InputError);
  EXPECT_NO_THROW(routing_inclusion(4, 4, Routing{Routing::Kind::hot, 1.0}));
}

TEST(Moe, DrawnRoutingIsSeededDistinctAndMatchesItsExpectation) {
  const auto a = route_tokens(200, 8, 128, kZipf1, 42), b = route_tokens(200, 8, 128, kZipf1, 42);
  EXPECT_EQ(a.expert, b.expert);
  EXPECT_EQ(a.weight, b.weight);
  EXPECT_NE(route_tokens(200, 8, 128, kZipf1, 43).expert, a.expert);
  for (std::uint64_t t = 0; t < 200; ++t) {
    float sum = 0;
    for (std::uint64_t j = 0; j < 8; ++j) {
      if (j) {
        EXPECT_LT(a.expert[t * 8 + j - 1], a.expert[t * 8 + j]);  // distinct, ascending
      }
      EXPECT_GT(a.weight[t * 8 + j], 0.0f);
      sum += a.weight[t * 8 + j];
    }
    EXPECT_NEAR(sum, 1.0f, 1e-5f);
  }
  EXPECT_EQ(std::accumulate(a.per_expert.begin(), a.per_expert.end(), std::uint64_t{0}), 200u * 8);
  // The mean over seeds of the experts touched is the analytical expectation
  // (the draw's inclusion chances are exactly pi_i); hot:F sends F of the tokens to expert 0.
  for (const Routing& r : {kUniform, kZipf1, kHalfHot})
    for (std::uint64_t T : {1u, 4u, 16u, 64u}) {
      double sum = 0;
      const int n = 400;
      for (int s = 0; s < n; ++s) sum += static_cast<double>(route_tokens(T, 6, 64, r, 1000 + s).touched());
      EXPECT_NEAR(sum / n, expected_experts_touched(64, 6, T, r), 0.35) << r.text() << " T=" << T;
    }
  const auto hot = route_tokens(20000, 2, 8, kHalfHot, 7);
  EXPECT_NEAR(static_cast<double>(hot.per_expert[0]) / 20000, 0.5, 0.02);
  // One token always touches exactly k experts.
  for (const Routing& r : {kUniform, kZipf1, kHalfHot}) EXPECT_EQ(route_tokens(1, 6, 64, r, 3).touched(), 6u);
}

TEST(Moe, CostByHand) {
  const MoeShape s{5, 2, 8, 64, 48};  // T k E h I
  const auto f = WeightFormat::plain(DType::bf16);
  const auto c = moe_cost(s, 3.0, f, f, 2);
  const std::uint64_t rows = 10;
  EXPECT_EQ(c.total().flops, 2 * rows * 3 * 64 * 48);
  EXPECT_EQ(c.gate_up.bytes.weights, 3u * 2 * 96 * 64);
  EXPECT_EQ(c.down.bytes.weights, 3u * 2 * 64 * 48);
  EXPECT_EQ(c.permute.bytes.activations, 2u * 5 * 64);
  EXPECT_EQ(c.permute.bytes.writes, 2u * rows * 64);
  EXPECT_EQ(c.combine.bytes.activations, 2u * rows * 64 + 4 * rows);
  EXPECT_EQ(c.permute.bytes.block_table + c.combine.bytes.block_table, 8u * rows);
  EXPECT_EQ(c.combine.bytes.writes, 2u * 5 * 64);
  EXPECT_EQ(c.act.bytes.total(), 2u * rows * 3 * 48);
  const auto total = c.total().bytes.total();
  EXPECT_EQ(total, 3u * 2 * 3 * 64 * 48                      // the experts touched
                       + 2 * 5 * 64 * 2                      // X read, Y written
                       + 2 * rows * 64 * 2                   // permuted rows written, expert outputs read
                       + 2 * rows * (64 + 96) + 2 * rows * (96 + 48) + 2 * rows * (48 + 64)  // GEMM and act rows
                       + 12 * rows);                         // the routing's maps and weights
  // The op counts the experts its drawn routing touched.
  const auto r = moe_request(s, kUniform, DType::bf16, Impl::blas, Phase::decode);
  const auto touched = moe_routed(r).touched();
  EXPECT_EQ(r.cost().bytes.weights, touched * 2 * 3 * 64 * 48);
  EXPECT_EQ(r.cost().flops, c.total().flops);
}

TEST(Moe, AnalyticalLayerAndTheOpAgree) {
  // The same shape and routing: the analytical model's experts_* ops of a MoE
  // layer sum to the op's cost (FLOPs and every byte class) where the drawn
  // routing touches the expected number of experts: one token (exactly k) and
  // a prefill that touches every expert.
  for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"}) {
    const auto m = load_model(name);
    for (const auto& [phase, B, S] : {std::tuple{Phase::decode, 1u, 1u}, std::tuple{Phase::prefill, 1u, 2048u}}) {
      const StepShape step{phase, B, S, phase == Phase::decode ? 1024u : 0u};
      OpCost model;
      for (const auto& op : layer_ops(m, step, Precision::from(DType::bf16, DType::bf16), LayerKind{0, 0, true}))
        if (op.name.rfind("experts_", 0) == 0) model += op.cost;
      const MoeShape s{B * S, m.experts_per_token, m.experts, m.hidden, m.expert_intermediate};
      const auto r = moe_request(s, kUniform, DType::bf16, Impl::blas, phase);
      ASSERT_EQ(moe_routed(r).touched(), phase == Phase::decode ? m.experts_per_token : m.experts) << name;
      const auto op = r.cost();
      EXPECT_EQ(op.flops, model.flops) << name;
      EXPECT_EQ(op.bytes.weights, model.bytes.weights) << name;
      EXPECT_EQ(op.bytes.activations, model.bytes.activations) << name;
      EXPECT_EQ(op.bytes.block_table, model.bytes.block_table) << name;
      EXPECT_EQ(op.bytes.writes, model.bytes.writes) << name;
    }
  }
}

TEST(Moe, CpuOpMatchesReferenceOnTailHeavyShapes) {
  auto b = make_cpu_backend();
  // h and I not multiples of 8 or 16, odd token counts, an expert count that
  // leaves experts without tokens, k = 1 and k = E - 1.
  struct Case {
    MoeShape s;
    Routing r;
  };
  for (const auto& c : std::vector<Case>{{{1, 2, 6, 40, 24}, kUniform},
                                         {{3, 2, 6, 40, 24}, kZipf1},
                                         {{17, 3, 5, 33, 19}, kHalfHot},
                                         {{9, 1, 7, 24, 40}, Routing{Routing::Kind::hot, 1.0}},
                                         {{5, 4, 5, 16, 8}, kUniform}})
    for (DType t : {DType::fp32, DType::bf16}) {
      const auto r = moe_request(c.s, c.r, t, Impl::blas, Phase::decode, 11 + c.s.T);
      if (!b->implements(kMoe, t, Impl::blas)) continue;  // bf16 needs OpenBLAS's sbgemm
      auto op = b->prepare(r);
      EXPECT_NO_THROW(op->verify()) << to_string(t) << " T=" << c.s.T << " " << c.r.text();
    }
  // Model-sized experts (Qwen3-30B-A3B's width and k, 16 of its 128 experts, so
  // that the unit tests fill 150 MB of weights, not 2.4 GB), every one touched.
  const auto q = load_model("qwen3-30b-a3b");
  auto op = b->prepare(moe_request({24, q.experts_per_token, 16, q.hidden, q.expert_intermediate}, kUniform,
                                   DType::fp32, Impl::blas, Phase::prefill));
  EXPECT_NO_THROW(op->verify());
}

TEST(Moe, ReferenceCatchesPlantedErrors) {
  // A small layer computed correctly by the reference itself, then the output
  // changed as a kernel bug would: a wrong expert, a dropped combine weight,
  // one column off by 0.1% (at fp32's tolerance).
  const std::size_t T = 4, k = 2, h = 24, I = 16;
  const auto routed = route_tokens(T, k, 5, kUniform, 9);
  reference::MoeInputs in;
  in.h = h;
  in.I = I;
  in.k = k;
  in.expert = routed.expert.data();
  in.weight = routed.weight.data();
  in.x = [](std::uint64_t t, float* out) { reference::fill_random(out, DType::fp32, h, 100 + t, 1.0f); };
  in.gate_up = [](std::uint64_t e, std::uint64_t row, float* out) {
    reference::fill_random(out, DType::fp32, h, 1000 * e + row, 0.2f);
  };
  in.down = [](std::uint64_t e, std::uint64_t row, float* out) {
    reference::fill_random(out, DType::fp32, I, 500000 + 1000 * e + row, 0.25f);
  };
  // The truth, from the reference's own per-token sums (one expert at a time).
  auto value = [&](const reference::MoeInputs& x, std::uint64_t t, std::uint64_t c) {
    std::vector<float> xv(h), row(h);
    double y = 0;
    x.x(t, xv.data());
    for (std::size_t j = 0; j < k; ++j) {
      const auto e = x.expert[t * k + j];
      double acc = 0;
      for (std::size_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        x.gate_up(e, i, row.data());
        for (std::size_t q = 0; q < h; ++q) g += double(xv[q]) * row[q];
        x.gate_up(e, I + i, row.data());
        for (std::size_t q = 0; q < h; ++q) u += double(xv[q]) * row[q];
        std::vector<float> d(I);
        x.down(e, c, d.data());
        acc += g / (1 + std::exp(-g)) * u * d[i];
      }
      y += x.weight[t * k + j] * acc;
    }
    return static_cast<float>(y);
  };
  const auto tokens = reference::moe_tokens_to_check(routed.expert.data(), T, k);
  EXPECT_NO_THROW(reference::check_moe(in, tokens, DType::fp32, [&](auto t, auto c) { return value(in, t, c); }, "ok"));
  auto wrong_expert = routed.expert;
  wrong_expert[k * (T - 1)] = (wrong_expert[k * (T - 1)] + 1) % 5;
  auto moved = in;
  moved.expert = wrong_expert.data();
  EXPECT_THROW(reference::check_moe(in, tokens, DType::fp32, [&](auto t, auto c) { return value(moved, t, c); }, "expert"),
               VerificationError);
  auto no_weight = routed.weight;
  no_weight[1] = 0;
  auto dropped = in;
  dropped.weight = no_weight.data();
  EXPECT_THROW(reference::check_moe(in, tokens, DType::fp32, [&](auto t, auto c) { return value(dropped, t, c); }, "weight"),
               VerificationError);
  EXPECT_THROW(reference::check_moe(in, tokens, DType::fp32,
                                    [&](auto t, auto c) { return value(in, t, c) * (t == T - 1 && c == 7 ? 1.001f : 1.0f); },
                                    "column"),
               VerificationError);
  // Every expert with tokens is checked through some token.
  std::vector<bool> seen(5, false);
  for (auto t : tokens)
    for (std::size_t j = 0; j < k; ++j) seen[routed.expert[t * k + j]] = true;
  for (std::size_t e = 0; e < 5; ++e) EXPECT_EQ(seen[e], routed.per_expert[e] > 0) << e;
}

TEST(Moe, SweepPointsNamesAndShapeJson) {
  auto b = make_cpu_backend();
  SweepConfig c;
  c.groups = {"moe"};
  c.axes["moe"].texts["routing"] = {"uniform", "hot:0.5"};
  apply_defaults(c, *b);
  const auto pts = build_sweep(c, *b);
  // CPU defaults: Qwen3-30B-A3B, decode batches 1, 8, 64 and a prefill of 64 tokens, per routing.
  EXPECT_EQ(pts.size(), 2u * (3 + 1));
  bool saw = false;
  for (const auto& p : pts) {
    EXPECT_EQ(p.op, "moe");
    EXPECT_EQ(p.request.kind, kMoe);
    if (p.name == "decode/moe/qwen3-30b-a3b.experts/fp32/batch:8/routing:hot:0.5/impl:blas") {
      saw = true;
      EXPECT_EQ(p.text_args.at("routing"), "hot:0.5");
      EXPECT_EQ(p.args.at("batch"), 8u);
      EXPECT_EQ(p.request.shape["T"], 8u);
      EXPECT_EQ(p.request.shape["E"], 128u);
      const auto j = OpRegistry::get().op(kMoe).shape_json(p.request);
      EXPECT_EQ(j.at("routing"), "hot:0.5");
      const auto counts = j.at("tokens_per_expert").get<std::vector<std::uint64_t>>();
      ASSERT_EQ(counts.size(), 128u);
      EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}), 8u * 8);
      EXPECT_EQ(j.at("experts_touched"), moe_routed(p.request).touched());
    }
  }
  EXPECT_TRUE(saw);
  // Bad input: a routing that does not parse, a dense model.
  SweepConfig bad;
  bad.axes["moe"].texts["routing"] = {"zipf:x"};
  EXPECT_THROW(apply_defaults(bad, *b), InputError);
  // --model given: the moe group runs for the MoE models among them, none for a dense one.
  SweepConfig dense;
  dense.models = {"llama-3.1-8b"};
  dense.models_given = true;
  dense.groups = {"moe"};
  apply_defaults(dense, *b);
  // Asked for by --ops, the group says what it runs for rather than leave the sweep empty.
  try {
    build_sweep(dense, *b);
    ADD_FAILURE() << "a dense model for the moe group";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("it runs for mixture-of-experts models, and the model llama-3.1-8b is not one"), std::string::npos)
        << e.what();
  }
  SweepConfig given;
  given.models = {"llama-3.1-8b", std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-moe.json"};
  given.models_given = true;
  given.groups = {"moe"};
  apply_defaults(given, *b);
  const auto tiny = build_sweep(given, *b);
  ASSERT_EQ(tiny.size(), 4u);
  EXPECT_EQ(tiny.back().name, "prefill/moe/tiny-moe.experts/fp32/prompt:64/routing:uniform/impl:blas");
  EXPECT_EQ(tiny.front().name, "decode/moe/tiny-moe.experts/fp32/batch:1/routing:uniform/impl:blas");
}

TEST(Moe, APointTooBigForMemoryIsSkippedWithItsReason) {
  auto b = make_cpu_backend();
  const auto m = load_model("mixtral-8x7b");
  const auto r = moe_request({1u << 22, m.experts_per_token, m.experts, m.hidden, m.expert_intermediate}, kUniform,
                             DType::fp32, Impl::blas, Phase::prefill);
  const auto why = b->cannot_run(r);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("memory"), std::string::npos) << *why;
}

TEST(Moe, SmallCpuSweepRecordsTheRoutingInTheResults) {
  const auto out = test::cli_tmp("moe.json");
  std::filesystem::remove(out);
  const auto r = test::run_cli("run --backend=cpu --ops moe --model " + std::string(PHASEBENCH_TEST_DATA_DIR) +
                               "/tiny-moe.json --moe-decode-batches 1,5 --moe-prompts 33 --routing uniform,zipf:1.5 "
                               "--no-calibrate --max-time 0.05 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  int points = 0;
  for (const auto& b : j.at("benchmarks")) {
    const auto& p = b.at("phasebench");
    ASSERT_EQ(p.at("status"), "ok") << b.dump();
    EXPECT_EQ(p.at("op"), "moe");
    ++points;
    const auto& sh = p.at("shape");
    const auto counts = sh.at("tokens_per_expert").get<std::vector<std::uint64_t>>();
    ASSERT_EQ(counts.size(), 6u);
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::uint64_t{0}), sh.at("T").get<std::uint64_t>() * 2);
    EXPECT_EQ(sh.at("routing"), p.at("args").at("routing"));
    std::uint64_t touched = 0;
    for (auto c : counts) touched += c > 0;
    EXPECT_EQ(sh.at("experts_touched"), touched);
  }
  EXPECT_EQ(points, 2 * 3);
  std::filesystem::remove(out);
}

TEST(Moe, DecodeCrossingIsFarLaterThanADenseLayers) {
  // Qwen3-30B-A3B bf16 on the H100's datasheet ridge (989e12 / 3.35e12 = 295 FLOP/B).
  const auto q = load_model("qwen3-30b-a3b");
  const MoeShape s{0, q.experts_per_token, q.experts, q.hidden, q.expert_intermediate};
  const double ridge = 989e12 / 3.35e12;
  const auto B = moe_batch_at_intensity(s, kUniform, DType::bf16, ridge);
  ASSERT_TRUE(B.has_value());
  auto intensity = [&](std::uint64_t b) {
    MoeShape x = s;
    x.T = b;
    const auto f = WeightFormat::plain(DType::bf16);
    return moe_cost(x, expected_experts_touched(s.E, s.k, b, kUniform), f, f, 2).total().intensity();
  };
  EXPECT_GE(intensity(*B), ridge);
  EXPECT_LT(intensity(*B - 1), ridge);
  const auto dense = linear_batch_at_intensity(2 * s.I, s.h, DType::bf16, ridge);
  ASSERT_TRUE(dense.has_value());
  // Every token reads k of E experts: about E/k = 16 times the dense layer's batch (the
  // permutation's traffic pushes it further).
  EXPECT_GT(*B, 16 * *dense) << *B << " vs dense " << *dense;
  // A skewed router touches fewer experts at a small batch: it crosses a low ridge earlier.
  EXPECT_LT(*moe_batch_at_intensity(s, Routing{Routing::Kind::zipf, 2.0}, DType::bf16, 2.0),
            *moe_batch_at_intensity(s, kUniform, DType::bf16, 2.0));
}

TEST(Moe, SummaryShowsTheMeasuredAndPredictedDecodeCrossing) {
  // Qwen3's experts on P = 600 TF/s, W = 3 TB/s: each point's time is the
  // slower of its FLOPs at P and its bytes at W (the drawn routing's bytes).
  const auto q = load_model("qwen3-30b-a3b");
  const double P = 600e12, W = 3e12;
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}, {"ceiling_used", "datasheet"}}}}},
                        {"benchmarks", nlohmann::json::array()}};
  auto add = [&](std::uint64_t B) {
    const auto r = moe_request({B, q.experts_per_token, q.experts, q.hidden, q.expert_intermediate}, kUniform,
                               DType::bf16, Impl::blas, Phase::decode);
    const auto c = r.cost();
    const double t = std::max(static_cast<double>(c.flops) / P, static_cast<double>(c.bytes.total()) / W);
    const std::string name = "decode/moe/qwen3-30b-a3b.experts/bf16/batch:" + std::to_string(B) + "/routing:uniform";
    const nlohmann::json roof = {{"ridge_flop_per_byte", 295.0}, {"fraction_of_roofline", 0.5}, {"compute_ceiling_source", "datasheet"},
                                 {"bandwidth_ceiling_source", "datasheet"}};
    doc["benchmarks"].push_back(
        {{"name", name},
         {"run_name", name},
         {"run_type", "iteration"},
         {"phasebench",
          {{"phase", "decode"}, {"op", "moe"}, {"op_kind", kMoe}, {"model", "qwen3-30b-a3b"}, {"target", "experts"},
           {"dtype", "bf16"}, {"status", "ok"}, {"shape", OpRegistry::get().op(kMoe).shape_json(r)},
           {"flops", c.flops}, {"bytes", {{"total", c.bytes.total()}}}, {"time", {{"median_s", t}}},
           {"roofline", roof}, {"roofline_by_source", {{"datasheet", roof}}}}}});
  };
  for (std::uint64_t B : {1u, 16u, 256u, 4096u, 65536u}) add(B);
  const auto rec = decode_moe_crossings(standing_points(doc), run_context(doc));
  ASSERT_EQ(rec.size(), 1u);
  const MoeShape s{0, q.experts_per_token, q.experts, q.hidden, q.expert_intermediate};
  // P_eff is P (the largest batch is compute-bound), W_eff is W.
  const auto measured = moe_batch_at_intensity(s, kUniform, DType::bf16, P / W);
  const auto predicted = moe_batch_at_intensity(s, kUniform, DType::bf16, 295.0);
  const auto dense = linear_batch_at_intensity(2 * s.I, s.h, DType::bf16, 295.0);
  EXPECT_EQ(rec[0].at("measured").at("batch"), *measured) << rec[0].dump();
  EXPECT_EQ(rec[0].at("predicted").at("datasheet").at("batch"), *predicted);
  EXPECT_EQ(rec[0].at("predicted").at("datasheet").at("dense_batch"), *dense);
  EXPECT_EQ(rec[0].at("routing"), "uniform");
  const auto text = summarize(doc);
  EXPECT_NE(text.find("decode MoE experts"), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("{:<36} {:<10} {:>12} {:>10} {:>8}", "qwen3-30b-a3b.experts bf16", "uniform",
                                  *measured, *predicted, *dense)),
            std::string::npos)
      << text;
  // Still streaming at the largest batch: beyond the sweep.
  doc["benchmarks"].erase(doc["benchmarks"].end() - 1);
  EXPECT_EQ(decode_moe_crossings(standing_points(doc), run_context(doc))[0].at("measured").at("text"), "> 4096");
}
