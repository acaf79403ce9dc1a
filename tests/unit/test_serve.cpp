// The serving view: the simulation against hand-computed answers (one request,
// a steady closed loop, M/D/1 queueing, KV exhaustion, disaggregation), the
// step-time model against the analytical model and the hardware's limits, and
// the measured curves' interpolation and coverage.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_file.hpp"
#include "phasebench/serve.hpp"

using namespace phasebench;

namespace {

// A step costs 10 ms plus 1 ms per token, whatever the tokens are.
double affine_step(const StepMix& m) { return 0.010 + 0.001 * static_cast<double>(m.tokens()); }

EngineConfig roomy() {
  EngineConfig e;
  e.kv_capacity_tokens = 1 << 20;
  return e;
}

std::vector<ServeRequest> same(std::size_t n, std::uint64_t input, std::uint64_t output) {
  return std::vector<ServeRequest>(n, ServeRequest{0, input, output});
}

StepTimeModel analytical(const std::string& model, const std::string& gpu, double efficiency) {
  const auto g = GpuTable::load().get(gpu);
  EstimateInputs in;
  return StepTimeModel(load_model(model), in, g.ceilings(), CeilingSource::datasheet, LinkModel::of(g), g.key, efficiency);
}

}  // namespace

TEST(Serve, OneRequestTtftIsItsPrefillStepAndTpotItsDecodeSteps) {
  const auto p = simulate(roomy(), same(1, 100, 5), 1, affine_step, {});
  EXPECT_DOUBLE_EQ(*p.ttft.p50, 0.010 + 0.100);   // one step of the whole prompt
  EXPECT_DOUBLE_EQ(*p.tpot.p50, 0.011);           // four decode steps of one token
  EXPECT_DOUBLE_EQ(*p.e2e.p50, 0.110 + 4 * 0.011);
  EXPECT_NEAR(*p.itl.p99, 0.011, 1e-12);
  EXPECT_EQ(p.steps, 5u);
  EXPECT_EQ(p.completed, 1u);
}

TEST(Serve, OneRequestMatchesTheAnalyticalModelsRequest) {
  // At efficiency 1 the step model is the analytical model: TTFT its prefill,
  // TPOT its mean decode step over contexts P+1 .. P+G-1 (phasebench model --generate).
  auto stm = analytical("llama-3.1-8b", "h200-sxm", 1.0);
  const auto p = simulate(roomy(), same(1, 1024, 64), 1, [&](const StepMix& m) { return stm.step_time(m); }, {});
  EstimateInputs in;
  in.prompt = 1024;
  in.generate = 64;
  const auto e = estimate(load_model("llama-3.1-8b"), GpuTable::load().get("h200-sxm"), in);
  EXPECT_NEAR(*p.ttft.p50, e.request->ttft_s, 1e-12);
  EXPECT_NEAR(*p.tpot.p50, e.request->mean_per_token_s, 1e-12);
}

TEST(Serve, AStepOverheadAddsToEveryStep) {
  auto e = roomy();
  e.step_overhead_s = 0.002;
  const auto p = simulate(e, same(1, 100, 5), 1, affine_step, {});
  EXPECT_NEAR(*p.ttft.p50, 0.110 + 0.002, 1e-12);
  EXPECT_NEAR(*p.tpot.p50, 0.011 + 0.002, 1e-12);
  e.step_overhead_s = -1;
  EXPECT_THROW(simulate(e, same(1, 100, 5), 1, affine_step, {}), InputError);
}

TEST(Serve, ChunkedPrefillSplitsAPromptOverTheTokenBudget) {
  auto e = roomy();
  e.max_num_batched_tokens = 64;
  const auto p = simulate(e, same(1, 100, 2), 1, affine_step, {});
  // Chunks of 64 and 36 tokens, then one decode step.
  EXPECT_DOUBLE_EQ(*p.ttft.p50, (0.010 + 0.064) + (0.010 + 0.036));
  EXPECT_EQ(p.steps, 3u);
}

TEST(Serve, SteadyClosedLoopOfEqualRequests) {
  // C users of equal requests move in waves: one step prefills all C prompts, then
  // G - 1 decode steps of batch C; each finishes together and the next wave starts.
  const std::uint64_t C = 8, P = 100, G = 10, waves = 5;
  const auto p = simulate(roomy(), same(C * waves, P, G), C, affine_step, {});
  const double prefill = 0.010 + 0.001 * C * P, decode = 0.010 + 0.001 * C;
  EXPECT_DOUBLE_EQ(*p.ttft.p50, prefill);
  EXPECT_DOUBLE_EQ(*p.ttft.p99, prefill);
  EXPECT_NEAR(*p.tpot.p50, decode, 1e-12);
  const double wave = prefill + (G - 1) * decode;
  EXPECT_NEAR(p.duration_s, waves * wave, 1e-9);
  EXPECT_NEAR(p.output_tokens_per_s, C * G / wave, 1e-6);
  EXPECT_NEAR(p.output_tokens_per_s_per_user, 1 / decode, 1e-6);
  EXPECT_NEAR(p.mean_batch, C, 1e-12);
}

TEST(Serve, PoissonArrivalsOfConstantServiceQueueAsMD1) {
  // One sequence at a time, one output token: each request is one step of D
  // seconds, so the engine is an M/D/1 queue: mean wait rho*D / (2(1 - rho)).
  auto e = roomy();
  e.max_num_seqs = 1;
  const double D = 0.5, lambda = 1.2, rho = lambda * D;
  Workload w;
  w.kind = Workload::Kind::rate;
  w.rate = lambda;
  w.requests = 60000;
  w.input = LengthDist::parse("32", "--input-len");
  w.output = LengthDist::parse("1", "--output-len");
  w.seed = 7;
  const auto p = simulate(e, draw_requests(w), std::nullopt, [&](const StepMix&) { return D; }, {});
  const double wait = rho * D / (2 * (1 - rho));
  EXPECT_NEAR(*p.ttft.mean, wait + D, 0.03 * (wait + D));
  EXPECT_FALSE(p.tpot.mean);  // one output token: no TPOT
  EXPECT_NEAR(p.request_rate, lambda, 0.02 * lambda);
}

TEST(Serve, KvExhaustionPreemptsAndStillFinishesEveryRequest) {
  auto e = roomy();
  e.block_size = 16;
  e.kv_capacity_tokens = 128;  // 8 blocks; each request grows to 16 + 96 = 112 tokens (7 blocks)
  const auto tight = simulate(e, same(6, 16, 96), 3, affine_step, {});
  EXPECT_GT(tight.preemptions, 0u);
  EXPECT_EQ(tight.completed, 6u);
  EXPECT_LE(tight.peak_kv_tokens, 128u);
  e.kv_capacity_tokens = 1024;
  const auto roomy_run = simulate(e, same(6, 16, 96), 3, affine_step, {});
  EXPECT_EQ(roomy_run.preemptions, 0u);
  EXPECT_LT(*roomy_run.e2e.p99, *tight.e2e.p99);  // recomputation costs time
  // A request that can never fit is refused before anything runs.
  e.kv_capacity_tokens = 64;
  EXPECT_THROW(simulate(e, same(1, 60, 10), 1, affine_step, {}), InputError);
  e.kv_capacity_tokens = 1 << 20;
  e.prefill_replicas = 1;  // and no decode replica
  EXPECT_THROW(simulate(e, same(1, 60, 10), 1, affine_step, {}), InputError);
}

TEST(Serve, DisaggregatedRequestWaitsForItsKvTransfer) {
  auto e = roomy();
  e.prefill_replicas = 1;
  e.decode_replicas = 1;
  e.kv_bytes_per_token = 1000;
  e.kv_transfer_bytes_per_s = 1e6;  // 100 tokens: 0.1 s over the link
  const auto p = simulate(e, same(1, 100, 5), 1, affine_step, {});
  EXPECT_DOUBLE_EQ(*p.ttft.p50, 0.110);  // the first token comes from the prefill replica
  EXPECT_NEAR(*p.e2e.p50, 0.110 + 0.1 + 4 * 0.011, 1e-12);
  EXPECT_NEAR(*p.tpot.p50, (0.1 + 4 * 0.011) / 4, 1e-12);
  EXPECT_EQ(p.gpus, 2u);
  EXPECT_EQ(p.kv_transfers, 1u);
}

TEST(Serve, GoodputCountsRequestsMeetingBothSlos) {
  // 8 users: TTFT 0.81 s, TPOT 18 ms: inside an SLO of 1 s and 20 ms, outside 0.5 s.
  const auto p = simulate(roomy(), same(16, 100, 4), 8, affine_step, Slo{1.0, 0.020, 0.9});
  EXPECT_TRUE(p.meets_slo);
  EXPECT_NEAR(p.goodput_rps, p.request_rate, 1e-12);
  const auto q = simulate(roomy(), same(16, 100, 4), 8, affine_step, Slo{0.5, 0.020, 0.9});
  EXPECT_FALSE(q.meets_slo);
  EXPECT_EQ(q.goodput_rps, 0.0);
}

TEST(Serve, ParetoKeepsThePointsNothingBeatsOnBothAxes) {
  std::vector<ServePoint> v(3);
  v[0].output_tokens_per_s_per_user = 100, v[0].output_tokens_per_s_per_gpu = 100;
  v[1].output_tokens_per_s_per_user = 50, v[1].output_tokens_per_s_per_gpu = 400;
  v[2].output_tokens_per_s_per_user = 40, v[2].output_tokens_per_s_per_gpu = 300;  // beaten by v[1]
  mark_pareto(v);
  EXPECT_TRUE(v[0].pareto);
  EXPECT_TRUE(v[1].pareto);
  EXPECT_FALSE(v[2].pareto);
}

TEST(Serve, PercentilesInterpolateLikeNumpy) {
  const auto p = percentiles({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(*p.p50, 2.5);
  EXPECT_DOUBLE_EQ(*p.p90, 3.7);
  EXPECT_DOUBLE_EQ(*p.mean, 2.5);
  EXPECT_FALSE(percentiles({}).p50);
}

TEST(Serve, LengthsAndTracesAreCheckedAsTheyAreRead) {
  std::mt19937_64 rng(1);
  const auto u = LengthDist::parse("uniform:10:20", "--input-len");
  for (int i = 0; i < 100; ++i) {
    const auto x = u.draw(rng);
    EXPECT_GE(x, 10u);
    EXPECT_LE(x, 20u);
  }
  for (const char* bad : {"0", "1.5", "uniform:20:10", "lognormal:100", "zipf:1:2", "abc", ""})
    EXPECT_THROW(LengthDist::parse(bad, "--input-len"), InputError) << bad;
  const auto dir = std::filesystem::temp_directory_path() / "phasebench-serve-test";
  std::filesystem::create_directories(dir);
  const auto csv = (dir / "t.csv").string(), jsonl = (dir / "t.jsonl").string(), bad = (dir / "bad.csv").string();
  std::ofstream(csv) << "input_tokens,arrival_s,output_tokens\n100,0.5,8\n200,1.5,4\n";
  std::ofstream(jsonl) << "{\"arrival_s\": 0, \"input_tokens\": 10, \"output_tokens\": 2}\n\n"
                          "{\"arrival_s\": 2, \"input_tokens\": 20, \"output_tokens\": 3}\n";
  std::ofstream(bad) << "arrival_s,input_tokens,output_tokens\n1,100,8\n0.5,100,8\n";
  const auto t = read_trace(csv);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].input, 200u);
  EXPECT_DOUBLE_EQ(t[1].arrival_s, 1.5);
  EXPECT_EQ(read_trace(jsonl).size(), 2u);
  EXPECT_THROW(read_trace(bad), InputError);  // arrivals going back in time
  const auto p = simulate(roomy(), t, std::nullopt, affine_step, {});
  EXPECT_DOUBLE_EQ(*p.ttft.p50 + 0, 0.5 * (0.110 + 0.210));  // each alone: its prefill step
  std::filesystem::remove_all(dir);
}

TEST(StepTime, DecodeAndPrefillStepsEqualTheAnalyticalModelAtFullEfficiency) {
  auto stm = analytical("llama-3.1-8b", "h200-sxm", 1.0);
  EstimateInputs in;
  in.batch = 16;
  in.prompt = 512;
  in.context = 3000;
  const auto e = estimate(load_model("llama-3.1-8b"), GpuTable::load().get("h200-sxm"), in);
  StepMix decode;
  decode.decode_contexts.assign(16, 3000);
  decode.logits = 16;
  EXPECT_NEAR(stm.step_time(decode), e.decode.time_s, 1e-12);
  // A ragged batch at the same mean context reads the same KV bytes.
  StepMix ragged = decode;
  for (std::size_t i = 0; i < 16; ++i) ragged.decode_contexts[i] = i % 2 ? 2000 : 4000;
  EXPECT_NEAR(stm.step_time(ragged), e.decode.time_s, 1e-12);
  in.batch = 1;
  const auto e1 = estimate(load_model("llama-3.1-8b"), GpuTable::load().get("h200-sxm"), in);
  StepMix prefill;
  prefill.prefill = {{512, 0}};
  prefill.logits = 1;
  EXPECT_NEAR(stm.step_time(prefill), e1.prefill.time_s, 1e-12);
}

TEST(StepTime, NoStepIsFasterThanTheHardwareAllows) {
  // Whatever the mix, a step reads every layer weight and lm_head once and does 2
  // FLOPs per layer weight and token: max(those bytes / W, 2 * layer params * tokens / P)
  // is a floor no model may beat (the embedding is a gather of the tokens' rows).
  const auto g = GpuTable::load().get("h200-sxm");
  const auto m = load_model("llama-3.1-8b");
  const double W = g.ceilings().bandwidth_for(CeilingSource::datasheet)->value;
  const double P = g.ceilings().compute_for(DType::bf16, CeilingSource::datasheet)->value;
  const double weights =
      static_cast<double>(weight_bytes(m, Precision::from(DType::bf16, DType::bf16)) - 2 * m.vocab * m.hidden);
  const double params = static_cast<double>(parameter_count(m) - 2 * m.vocab * m.hidden);  // without embedding, lm_head
  for (double eff : {1.0, 0.7}) {
    auto stm = analytical("llama-3.1-8b", "h200-sxm", eff);
    for (std::uint64_t B : {0, 1, 7, 64, 256})
      for (std::uint64_t chunk : {0, 1, 300, 4096}) {
        StepMix mix;
        mix.decode_contexts.assign(B, 1500);
        if (chunk) mix.prefill = {{chunk, 200}};
        mix.logits = B + (chunk ? 1 : 0);
        if (mix.tokens() == 0) continue;
        const double floor = std::max(weights / W, 2 * params * static_cast<double>(mix.tokens()) / P);
        EXPECT_GE(stm.step_time(mix), floor) << "B " << B << " chunk " << chunk << " efficiency " << eff;
      }
  }
}

TEST(StepTime, MeasuredCurvesInterpolateInsideTheirPointsOnly) {
  // Two linear points of one N x K at M = 1 and 4 (efficiency 0.5 and 0.8 of the
  // roofline at P = 1e12 FLOP/s, W = 1e11 B/s), one decode attention point.
  auto point = [](const char* op, nlohmann::json shape, double flops, double bytes, double eff) {
    const double t = std::max(flops / 1e12, bytes / 1e11) / eff;
    return nlohmann::json{{"phasebench",
                           {{"op", op}, {"status", "ok"}, {"dtype", "bf16"}, {"shape", shape}, {"flops", flops},
                            {"bytes", {{"total", bytes}}},
                            {"roofline", {{"peak_flops_per_s", 1e12}, {"bandwidth_bytes_per_s", 1e11}}},
                            {"time", {{"median_s", t}}}}}};
  };
  nlohmann::json r = {{"benchmarks",
                       {point("linear", {{"M", 1}, {"N", 64}, {"K", 32}}, 4096, 4096, 0.5),
                        point("linear", {{"M", 4}, {"N", 64}, {"K", 32}}, 16384, 4608, 0.8),
                        point("decode_attention_paged", {{"B", 1}, {"Hq", 4}, {"Hkv", 1}, {"L", 100}, {"D", 8}}, 1, 1, 0.9)}}};
  const auto c = MeasuredCurves::from_results(r, "test");
  EXPECT_EQ(c.points(), 3u);
  EXPECT_EQ(c.curves(), 2u);
  const auto at2 = c.at({"linear/64x32/bf16", {2}});
  ASSERT_TRUE(at2);
  EXPECT_NEAR(at2->efficiency, 0.5 + 0.3 * std::log(2.0) / std::log(4.0), 1e-12);  // halfway in log M
  EXPECT_NEAR(c.at({"linear/64x32/bf16", {4}})->efficiency, 0.8, 1e-12);
  EXPECT_FALSE(c.at({"linear/64x32/bf16", {8}}));   // beyond the largest M
  EXPECT_FALSE(c.at({"linear/64x32/fp16", {2}}));   // no curve
  EXPECT_TRUE(c.at({"decode_attention/4/1/8/bf16", {1, 100}}));
  EXPECT_FALSE(c.at({"decode_attention/4/1/8/bf16", {2, 100}}));  // no point at B = 2
  EXPECT_THROW(MeasuredCurves::from_results(nlohmann::json::object(), "x.json"), InputError);
}

TEST(StepTime, ARealCpuResultsFileCoversTheDecodeLinearLayers) {
  // The committed CPU results of the default sweep (phasebench run --backend=cpu).
  const auto path = std::string(PHASEBENCH_SOURCE_DIR) + "/results/cpu-amd-epyc/20261204T184605Z.json";
  const auto r = read_json_file(path, "results");
  const auto curves = MeasuredCurves::from_results(r, path);
  EXPECT_GT(curves.points(), 100u);
  EstimateInputs in;
  in.dtype = DType::fp32;
  in.kv_dtype = DType::fp32;
  Ceilings ceil;
  ceil.add_bandwidth({2e10, CeilingSource::measured, ""});
  ceil.add_compute(DType::fp32, {5e10, CeilingSource::measured, ""});
  StepTimeModel stm(load_model("llama-3.1-8b"), in, ceil, CeilingSource::measured, {}, "cpu", 0.7);
  stm.use_measured(curves);
  StepMix mix;
  mix.decode_contexts = {1024};
  mix.logits = 1;
  const double t = stm.step_time(mix);
  // The measured decode GEMVs at M = 1 (our kernel, the faster row), 32 layers, and lm_head.
  double gemv = 0;
  for (const auto& b : r["benchmarks"]) {
    const auto& p = b["phasebench"];
    if (p["op"] == "linear" && p["shape"]["M"] == 1 && p["impl"] == "own")
      gemv += p["time"]["median_s"].get<double>() * (p["target"] == "lm_head" ? 1 : 32);
  }
  EXPECT_GT(t, gemv);
  EXPECT_LT(t, gemv * 1.05);  // the rest of the step is small beside the weights
  for (const auto& u : stm.uses())
    if (u.op == "qkv_proj" || u.op == "lm_head" || u.op == "attention") {
      EXPECT_EQ(u.measured, u.lookups) << u.op;
    }
}

TEST(StepTime, ResultsFilesBeforeSchema4AreReadByTheirOpKind) {
  // In the first results files "op" was the model's op name ("gemv", "attention"); "op_kind" the kind.
  const auto path = std::string(PHASEBENCH_SOURCE_DIR) + "/results/cpu-amd-epyc/20261130T043455Z.json";
  const auto c = MeasuredCurves::from_results(read_json_file(path, "results"), path);
  EXPECT_GE(c.points(), 80u);  // the decode GEMVs and the decode attention among them
  EXPECT_TRUE(c.at({"linear/6144x4096/fp32", {1}}));
  EXPECT_TRUE(c.at({"decode_attention/32/8/128/fp32", {1, 1024}}));
}

TEST(StepTime, AChunkAfterAPrefixSeesAtMostTheWindowOfIt) {
  // Every layer of a mistral-style config slides a 128-token window: a chunk's
  // attention is the same after a prefix of 1000 tokens or 5000 (each query sees
  // 128 keys, the cache is read up to the window), at any efficiency.
  const auto dir = std::filesystem::temp_directory_path() / "phasebench-serve-window";
  std::filesystem::create_directories(dir);
  const auto cfg = (dir / "config.json").string();
  std::ofstream(cfg) << R"({"model_type": "mistral", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
    "sliding_window": 128, "max_position_embeddings": 32768})";
  const auto g = GpuTable::load().get("h200-sxm");
  StepTimeModel stm(load_model(cfg), EstimateInputs{}, g.ceilings(), CeilingSource::datasheet, {}, g.key, 1.0);
  auto chunk = [&](std::uint64_t prior) {
    StepMix m;
    m.prefill = {{2048, prior}};
    m.logits = 1;
    return stm.step_time(m);
  };
  EXPECT_NEAR(chunk(1000), chunk(5000), 1e-15);
  // 2048 queries of 128 keys each after a prefix, as without one (within the 128 x 2048
  // more KV bytes read); the multi-token decode formula alone would count ~9x the pairs.
  EXPECT_LT(chunk(5000), 1.05 * chunk(0));
  EXPECT_GT(chunk(5000), chunk(0));
  std::filesystem::remove_all(dir);
}
