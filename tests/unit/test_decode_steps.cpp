// Multi-token and ragged decode steps (ops/decode_attention.hpp, context_dist.hpp): the
// context distributions (parsing, the seeded draw), the cost formula by hand,
// the CPU op against the reference on tail-heavy shapes (S new tokens causal
// among themselves, ragged contexts, contiguous and paged, 16-bit and fp8
// caches), the sweep group's points and names, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "cpu/decode_attention.hpp"
#include "phasebench/context_dist.hpp"
#include "phasebench/error.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/decode_attention.hpp"
#include "sweep.hpp"

using namespace phasebench;

namespace {

OpRequest steps(const AttentionShape& s, DType t, bool paged, std::uint64_t S, const std::string& dist,
                bool fp8 = false, std::uint64_t page = 16) {
  auto r = decode_attention_request(s, t, paged, page, 0, 0x5eed, fp8);
  set_decode_steps(r, S, parse_context_dist(dist));
  return r;
}

}  // namespace

TEST(ContextDist, ParsesWhatItPrintsAndRefusesTheRest) {
  for (const std::string t : {"fixed", "uniform:0.5", "uniform:1", "lognormal:1", "lognormal:0.25"})
    EXPECT_EQ(parse_context_dist(t).text(), t);
  for (const std::string t : {"", "uniform", "uniform:1.5", "lognormal:-1", "lognormal:4", "zipf:1", "fixed:2",
                              "uniform:0.5x"})
    EXPECT_THROW(parse_context_dist(t), InputError) << t;
  try {
    parse_context_dist("gauss");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--context-dist 'gauss'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lognormal:SIG"), std::string::npos) << e.what();
  }
}

TEST(ContextDist, DrawsAreSeededBoundedAndCentredOnTheContext) {
  EXPECT_EQ(draw_context_lengths(5, 100, {}, 1), std::vector<std::uint64_t>(5, 100));
  const ContextDist uni{ContextDist::Kind::uniform, 0.5}, logn{ContextDist::Kind::lognormal, 1.0};
  for (const auto& d : {uni, logn}) {
    const auto a = draw_context_lengths(20000, 1000, d, 7, 4), b = draw_context_lengths(20000, 1000, d, 7, 4);
    EXPECT_EQ(a, b) << d.text();
    EXPECT_NE(a, draw_context_lengths(20000, 1000, d, 8, 4)) << d.text();
    const double mean = std::accumulate(a.begin(), a.end(), 0.0) / static_cast<double>(a.size());
    EXPECT_NEAR(mean, 1000.0, 30.0) << d.text();
    EXPECT_GE(*std::min_element(a.begin(), a.end()), 4u);
    EXPECT_LE(*std::max_element(a.begin(), a.end()), 16000u);
    EXPECT_GT(*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end()), 500u) << d.text();
  }
  const auto u = draw_context_lengths(1000, 1000, uni, 3);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 500u);
  EXPECT_LE(*std::max_element(u.begin(), u.end()), 1500u);
  // A long tail: the longest of a lognormal:1 batch is several times the mean.
  const auto l = draw_context_lengths(1000, 1000, logn, 3);
  EXPECT_GT(*std::max_element(l.begin(), l.end()), 4000u);
  // The contexts must hold the step's new tokens.
  EXPECT_THROW(draw_context_lengths(4, 3, {}, 1, 4), InputError);
}

TEST(DecodeSteps, CostByHand) {
  // B=2, Hq=4, Hkv=2, D=8, S=3 over contexts 5 and 10: new token i of a sequence
  // of L sees L - 3 + 1 + i keys, so (3*5 - 3) + (3*10 - 3) = 39 query-key pairs.
  DecodeQueries q{3, {5, 10}};
  const AttentionShape s{2, 4, 2, 7, 8};
  const auto c = decode_attention_cost(s, 2, 2, q);
  EXPECT_EQ(c.flops, 4u * 4 * 39 * 8);
  EXPECT_EQ(c.bytes.kv_cache, 2u * 2 * 2 * (5 + 10) * 8);
  EXPECT_EQ(c.bytes.activations, 2u * 2 * 3 * 4 * 8);
  EXPECT_EQ(c.bytes.writes, 2u * 2 * 3 * 4 * 8);
  EXPECT_EQ(c.bytes.block_table, 0u);
  // Paged, pages of 4 tokens: 2 + 3 block-table entries.
  EXPECT_EQ(decode_attention_paged_cost(s, 2, 2, 4, q).bytes.block_table, 4u * (2 + 3));
  // fp8 cache: a quarter of fp32's values, plus the per-head scales.
  EXPECT_EQ(decode_attention_cost(s, 1, 2, q).bytes.kv_cache, 1u * 2 * 2 * 15 * 8 + 8 * 2);
  // One token over fixed contexts is the plain formula.
  const auto one = decode_attention_cost(s, 2, 2, DecodeQueries{});
  EXPECT_EQ(one.flops, 4u * 2 * 4 * 7 * 8);
  EXPECT_EQ(one.bytes.kv_cache, 2u * 2 * 2 * 2 * 7 * 8);
  // A context that cannot hold the new tokens.
  EXPECT_THROW(decode_attention_cost(s, 2, 2, DecodeQueries{6, {5, 10}}), InputError);
  // The request's cost uses its drawn contexts.
  const auto r = steps({8, 32, 8, 1000, 128}, DType::bf16, true, 4, "lognormal:1");
  const auto lens = decode_attention_lengths(r);
  ASSERT_EQ(lens.size(), 8u);
  const auto want = decode_attention_paged_cost({8, 32, 8, 1000, 128}, 2, 2, 16, DecodeQueries{4, lens});
  EXPECT_EQ(r.cost().flops, want.flops);
  EXPECT_EQ(r.cost().bytes.total(), want.bytes.total());
  EXPECT_EQ(decode_attention_max_length(r), *std::max_element(lens.begin(), lens.end()));
  // The footprint allocates every sequence at the longest context.
  EXPECT_GE(r.footprint_bytes(), 2u * 2 * 8 * 8 * decode_attention_max_length(r) * 128);
}

TEST(DecodeSteps, TheAnalyticalModelCostsTheStepAsTheBenchmarkDoes) {
  // phasebench model --new-tokens S: the decode step's attention is the
  // decode_attention_multi point over the context plus the S - 1 earlier new
  // tokens (S = 1: the plain decode over the context), and every new token gets
  // logits (lm_head over B*S rows).
  const auto m = load_model("llama-3.1-8b");
  const auto p = Precision::from(DType::bf16, DType::bf16);
  for (std::uint64_t S : {1u, 4u}) {
    const StepShape step{Phase::decode, 8, S, 1024};
    const auto ops = step_ops(m, step, p);
    const auto att = std::find_if(ops.begin(), ops.end(), [](const LayerOp& o) { return o.name == "attention"; });
    ASSERT_NE(att, ops.end());
    auto r = decode_attention_request({8, m.heads, m.kv_heads, 1024 + S - 1, m.head_dim}, DType::bf16, false);
    set_decode_steps(r, S, ContextDist{});
    EXPECT_EQ(att->cost.flops, r.cost().flops) << "S=" << S;
    EXPECT_EQ(att->cost.bytes.kv_cache, r.cost().bytes.kv_cache) << "S=" << S;
    EXPECT_EQ(att->cost.bytes.activations, r.cost().bytes.activations) << "S=" << S;
    EXPECT_EQ(att->cost.bytes.writes, r.cost().bytes.writes) << "S=" << S;
    const auto lm = std::find_if(ops.begin(), ops.end(), [](const LayerOp& o) { return o.name == "lm_head"; });
    ASSERT_NE(lm, ops.end());
    EXPECT_EQ(lm->shape["M"], 8 * S);
  }
  // Not modelled for MLA yet: one clear error.
  EXPECT_THROW(step_ops(load_model("deepseek-v2-lite"), StepShape{Phase::decode, 1, 4, 512}, p), InputError);
  // Through the CLI: S = 4 costs more attention FLOPs than S = 1 at the same context; 0 is refused.
  const auto one = test::run_cli("model --model llama-3.1-8b --batch 8 --context 1024 --json");
  const auto four = test::run_cli("model --model llama-3.1-8b --batch 8 --context 1024 --new-tokens 4 --json");
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(four.status, 0) << four.out;
  const auto j1 = nlohmann::json::parse(one.out), j4 = nlohmann::json::parse(four.out);
  EXPECT_GT(j4.at("phases").at("decode").at("flops").get<double>(), 3.9 * j1.at("phases").at("decode").at("flops").get<double>());
  const auto zero = test::run_cli("model --model llama-3.1-8b --new-tokens 0");
  EXPECT_EQ(zero.status, 2) << zero.out;
  EXPECT_NE(zero.out.find("--new-tokens"), std::string::npos) << zero.out;
}

TEST(DecodeSteps, CpuOpMatchesReferenceOnTailHeavyShapes) {
  auto b = make_cpu_backend();
  struct Case {
    AttentionShape s;
    std::uint64_t S;
    const char* dist;
  };
  // Groups of 1, 4, 7 and 3 heads times S rows (tiles of 4+2+1); contexts off the
  // 16-token block and as short as the step itself (the first new token sees one key).
  for (const auto& c : std::vector<Case>{{{1, 4, 4, 17, 64}, 2, "fixed"},
                                         {{3, 32, 8, 100, 128}, 4, "fixed"},
                                         {{2, 28, 4, 77, 128}, 8, "uniform:0.9"},
                                         {{1, 6, 2, 19, 20}, 3, "lognormal:1"},
                                         {{3, 32, 8, 4, 128}, 4, "fixed"},
                                         {{5, 16, 8, 40, 96}, 1, "lognormal:1.5"},
                                         {{4, 8, 2, 30, 64}, 5, "uniform:1"}})
    for (DType t : {DType::fp32, DType::bf16, DType::fp16})
      for (bool paged : {false, true}) {
        auto op = b->prepare(steps(c.s, t, paged, c.S, c.dist));
        EXPECT_NO_THROW(op->verify()) << "L=" << c.s.L << " S=" << c.S << " " << c.dist << " paged=" << paged << " "
                                      << to_string(t);
      }
  // An fp8 cache, and pages of 48 tokens.
  for (bool paged : {false, true}) {
    auto op = b->prepare(steps({3, 32, 8, 300, 128}, DType::bf16, paged, 4, "lognormal:1", true, 48));
    EXPECT_NO_THROW(op->verify()) << "fp8 paged=" << paged;
  }
  // Paged and contiguous read the same values.
  auto c = b->prepare(steps({4, 16, 4, 200, 128}, DType::bf16, false, 4, "uniform:0.8"));
  auto p = b->prepare(steps({4, 16, 4, 200, 128}, DType::bf16, true, 4, "uniform:0.8"));
  c->run();
  p->run();
  EXPECT_EQ(c->output_values(), p->output_values());
}

TEST(DecodeSteps, EachNewTokenSeesExactlyTheKeysBeforeItsPosition) {
  // The kernel itself, with the same query for all S new tokens: token i's output
  // must be a one-token decode over the first len - S + 1 + i keys, so a causal
  // limit off by one, or a token that sees the later ones, changes it.
  const std::uint64_t Hq = 4, Hkv = 2, D = 64, S = 4, L = 37;
  const std::vector<std::uint64_t> lens{37, 9};  // a ragged pair; the cache stride is 37
  std::vector<float> q(2 * S * Hq * D), k(2 * Hkv * L * D), v(2 * Hkv * L * D), out(q.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.37f * static_cast<float>(i));
    v[i] = std::cos(0.11f * static_cast<float>(i));
  }
  for (std::uint64_t b = 0; b < 2; ++b)
    for (std::uint64_t i = 0; i < S; ++i)
      for (std::uint64_t j = 0; j < Hq * D; ++j)
        q[(b * S + i) * Hq * D + j] = std::sin(0.05f * static_cast<float>(j + 1000 * b));
  cpu::DecodeAttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  a.B = 2;
  a.Hq = Hq;
  a.Hkv = Hkv;
  a.L = L;
  a.D = D;
  a.S = S;
  a.lengths = lens.data();
  a.t = DType::fp32;
  cpu::decode_attention(a);
  for (std::uint64_t b = 0; b < 2; ++b)
    for (std::uint64_t i = 0; i < S; ++i) {
      // A one-token decode of sequence b alone over the keys token i may see.
      const std::uint64_t seen = lens[b] - S + 1 + i;
      std::vector<float> one(Hq * D);
      cpu::DecodeAttentionArgs p = a;
      p.q = q.data() + (b * S + i) * Hq * D;
      p.k = k.data() + b * Hkv * L * D;
      p.v = v.data() + b * Hkv * L * D;
      p.out = one.data();
      p.B = 1;
      p.S = 1;
      p.lengths = &seen;
      cpu::decode_attention(p);
      for (std::uint64_t j = 0; j < Hq * D; ++j)
        ASSERT_NEAR(out[(b * S + i) * Hq * D + j], one[j], 1e-6f) << "sequence " << b << " new token " << i;
    }
}

TEST(DecodeSteps, SweepGroupPointsAndNames) {
  auto b = make_cpu_backend();
  SweepConfig c;
  c.groups = {"decode_attention_multi"};
  apply_defaults(c, *b);
  const auto pts = build_sweep(c, *b);
  // CPU defaults: Llama-3.1-8B, batch 8, context 1024, S in {1, 4} x {fixed,
  // lognormal:1}, contiguous and paged.
  ASSERT_EQ(pts.size(), 2u * 4);
  std::vector<std::string> names;
  for (const auto& p : pts) names.push_back(p.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
  bool saw = false;
  for (const auto& p : pts) {
    if (p.name != "decode/decode_attention_paged/llama-3.1-8b/fp32/batch:8/context:1024/page:16/new_tokens:4/"
                  "context_dist:lognormal:1")
      continue;
    saw = true;
    EXPECT_EQ(p.args.at("new_tokens"), 4u);
    EXPECT_EQ(p.text_args.at("context_dist"), "lognormal:1");
    const auto j = OpRegistry::get().op(kDecodeAttentionPaged).shape_json(p.request);
    EXPECT_EQ(j.at("S"), 4u);
    EXPECT_EQ(j.at("context_dist"), "lognormal:1");
    EXPECT_LE(j.at("L_min").get<std::uint64_t>(), j.at("L_max").get<std::uint64_t>());
    EXPECT_EQ(p.cost.flops, p.request.cost().flops);
  }
  EXPECT_TRUE(saw);
  // Bad input: a distribution that does not parse, too many new tokens.
  SweepConfig bad;
  bad.axes["decode_attention_multi"].texts["context_dist"] = {"normal"};
  EXPECT_THROW(apply_defaults(bad, *b), InputError);
  SweepConfig many;
  many.axes["decode_attention_multi"].sizes["new_tokens"] = {17};
  EXPECT_THROW(apply_defaults(many, *b), InputError);
}

TEST(DecodeSteps, CliRunRecordsTheStepAndItsContexts) {
  const auto out = test::cli_tmp("steps.json");
  std::filesystem::remove(out);
  const auto r = test::run_cli("run --backend=cpu --ops decode_attention_multi --model qwen2.5-7b --multi-batches 3 "
                               "--multi-contexts 70 --new-tokens 2,8 --context-dist uniform:0.5 --no-calibrate "
                               "--max-time 0.05 --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream f(out);
  const auto j = nlohmann::json::parse(f);
  int points = 0, ragged = 0;
  for (const auto& bm : j.at("benchmarks")) {
    const auto& p = bm.at("phasebench");
    ASSERT_EQ(p.at("status"), "ok") << bm.dump();
    ++points;
    const auto& sh = p.at("shape");
    if (p.at("args").at("new_tokens") != 1) {
      EXPECT_EQ(sh.at("S"), p.at("args").at("new_tokens"));
    }
    if (sh.contains("context_dist")) {
      ++ragged;
      EXPECT_EQ(sh.at("context_dist"), "uniform:0.5");
      EXPECT_GE(sh.at("L_min").get<double>(), 35.0);
      EXPECT_LE(sh.at("L_max").get<double>(), 105.0);
    }
  }
  EXPECT_EQ(points, 2 * 3 * 2);
  EXPECT_EQ(ragged, 2 * 3);
  // Bad input is one line and exit status 2.
  const auto bad = test::run_cli("run --backend=cpu --ops decode_attention_multi --context-dist spiky --out " + out);
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--context-dist"), std::string::npos) << bad.out;
  // More new tokens than the context holds: refused before anything runs or is written.
  std::filesystem::remove(out);
  const auto tight = test::run_cli("run --backend=cpu --ops decode_attention_multi --new-tokens 8 --multi-contexts 4 "
                                   "--out " + out);
  EXPECT_EQ(tight.status, 2) << tight.out;
  EXPECT_NE(tight.out.find("--new-tokens 8 does not fit a context of 4"), std::string::npos) << tight.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove(out);
}
