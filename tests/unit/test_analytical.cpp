// The analytical model: the simple-model figures of docs/design.md to the printed digits,
// and the full model's totals equal to the workload formulas.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "phasebench/analytical.hpp"
#include "phasebench/error.hpp"

using namespace phasebench;

TEST(Analytical, SimpleModelReproducesDesignFigures) {
  const auto s = simple_estimate(4096, 32, 4, 1024, DType::fp16);
  EXPECT_EQ(fmt::format("{:.2f}", s.params_per_layer / 1e6), "201.33");
  EXPECT_EQ(fmt::format("{:.2f}", s.prefill_flops / 1e9), "52776.56");
  EXPECT_EQ(fmt::format("{:.3f}", s.weight_bytes / 1e9), "12.885");
  EXPECT_EQ(fmt::format("{:.2f}", s.prefill_intensity), "4096.00");
  EXPECT_EQ(fmt::format("{:.2f}", s.decode_flops / 1e9), "51.54");
  EXPECT_EQ(fmt::format("{:.2f}", s.decode_intensity), "4.00");
  const auto text = to_text(s, nullptr);
  for (const char* fig : {"201.33 M", "52776.56 GFLOPs", "12.885 GB", "4096.00 FLOP/byte", "51.54 GFLOPs", "4.00 FLOP/byte"})
    EXPECT_NE(text.find(fig), std::string::npos) << fig;
}

TEST(Analytical, FullModelTotalsFollowTheFormulas) {
  const auto m = load_model("llama-3.1-8b");
  const auto gpu = GpuTable::load().get("h200-sxm");
  EstimateInputs in;
  in.batch = 4;
  in.prompt = 1024;
  in.context = 2048;
  const auto e = estimate(m, gpu, in);
  EXPECT_EQ(e.params, 8030261248ull);
  EXPECT_EQ(e.weight_bytes, 2 * 8030261248ull);
  EXPECT_EQ(e.kv_cache_bytes, kv_cache_bytes(32, 8, 128, 2048, 4, 2));
  // Per-op times sum to the phase time; TTFT is the prefill step.
  double t = 0;
  for (const auto& o : e.prefill.ops) t += o.time_s * static_cast<double>(o.op.count);
  EXPECT_DOUBLE_EQ(t, e.prefill.time_s);
  EXPECT_DOUBLE_EQ(e.ttft_s, e.prefill.time_s);
  // Decode at batch 4 is memory-bound: the step time is at least all bytes / bandwidth.
  EXPECT_GE(e.per_token_s, static_cast<double>(e.decode.total.bytes.total()) / 4.8e12 * (1 - 1e-12));
  for (const auto& o : e.decode.ops) {
    if (o.op.kind == "linear") {
      EXPECT_EQ(o.bound, Bound::memory) << o.op.name;
    }
  }
  // Prefill GEMMs at 4096 tokens are compute-bound.
  for (const auto& o : e.prefill.ops) {
    if (o.op.kind == "linear" && o.op.name != "lm_head") {
      EXPECT_EQ(o.bound, Bound::compute) << o.op.name;
    }
  }
  // Largest batch: (memory - weights) / (KV bytes per sequence).
  EXPECT_EQ(e.max_batch, (gpu.memory_bytes - e.weight_bytes) / (131072ull * 2048));
  const auto j = to_json(e);
  EXPECT_EQ(j.at("max_batch").get<std::uint64_t>(), e.max_batch);
  EXPECT_EQ(j.at("phases").at("decode").at("flops").get<std::uint64_t>(), e.decode.total.flops);
}

TEST(Analytical, WeightsThatDoNotFitGiveNoBatch) {
  const auto e = estimate(load_model("llama-3.1-70b"), GpuTable::load().get("l4"), EstimateInputs{});
  EXPECT_EQ(e.max_batch, 0u);
}

TEST(Analytical, BadInput) {
  const auto m = load_model("llama-3.1-8b");
  const auto gpu = GpuTable::load().get("a100-sxm4-80gb");
  EstimateInputs in;
  in.batch = 0;
  EXPECT_THROW(estimate(m, gpu, in), InputError);
  in.batch = 1;
  in.dtype = DType::fp8;  // A100 has no fp8 peak
  EXPECT_THROW(estimate(m, gpu, in), InputError);
  in.dtype = DType::bf16;
  in.batch = 1ull << 40;
  in.context = 1ull << 30;
  EXPECT_THROW(estimate(m, gpu, in), InputError);  // KV cache overflows 64 bits
  EXPECT_THROW(simple_estimate(0, 32, 1, 1, DType::fp16), InputError);
}

TEST(Analytical, AWholeRequestIsThePrefillThenItsDecodeSteps) {
  const auto m = load_model("llama-3.1-8b");
  const auto gpu = GpuTable::load().get("h100-sxm");
  EstimateInputs in;
  in.batch = 2;
  in.prompt = 500;
  in.generate = 4;  // the prefill yields token 1, then steps at contexts 501, 502, 503
  const auto e = estimate(m, gpu, in);
  ASSERT_TRUE(e.request.has_value());
  double decode = 0;
  for (std::uint64_t L : {501u, 502u, 503u}) {
    EstimateInputs one = in;
    one.context = L;
    one.generate = 0;
    decode += estimate(m, gpu, one).per_token_s;
  }
  EXPECT_NEAR(e.request->decode_s, decode, 1e-15);
  EXPECT_DOUBLE_EQ(e.request->ttft_s, e.ttft_s);
  EXPECT_DOUBLE_EQ(e.request->total_s, e.ttft_s + decode);
  EXPECT_DOUBLE_EQ(e.request->mean_per_token_s, decode / 3);
  EXPECT_DOUBLE_EQ(e.request->tokens_per_s, 2 * 4 / (e.ttft_s + decode));
  EXPECT_NE(to_text(e).find("request of 500 prompt + 4 generated tokens"), std::string::npos);
  EXPECT_EQ(to_json(e).at("request").at("generate"), 4);
}

TEST(Analytical, ContextsBeyondTheModelAreRefusedOrWarned) {
  const auto m = load_model("phi-3-mini-4k");  // max_position_embeddings 4096
  const auto gpu = GpuTable::load().get("h100-sxm");
  EstimateInputs in;
  in.prompt = 1000;
  in.context = 5000;
  EXPECT_THROW(estimate(m, gpu, in), InputError);
  in.allow_long_context = true;
  const auto e = estimate(m, gpu, in);
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(to_text(e).find("WARNING: a context of 5000 tokens is beyond"), std::string::npos);
  EXPECT_EQ(to_json(e).at("warnings").size(), 1u);
}

TEST(Analytical, QuantizedWeightsSpeedUpTheMemoryBoundDecode) {
  // An AWQ int4 Llama-3.1-8B holds 5.73 GB of weights, not 16.06 GB; a decode
  // step reads all but the embedding table (one row per sequence): 3.1x less,
  // and its memory-bound step is about that much shorter. The GEMMs still compute in bf16.
  const auto gpu = GpuTable::load().get("h100-sxm");
  EstimateInputs in;
  in.batch = 1;
  in.prompt = 512;
  const auto plain = estimate(load_model("llama-3.1-8b"), gpu, in);
  const auto awq = estimate(load_model(std::string(PHASEBENCH_TEST_DATA_DIR) + "/llama-3.1-8b-awq.json"), gpu, in);
  EXPECT_EQ(awq.weight_bytes, 5727854592ull);
  const std::uint64_t embedding = 128256ull * 4096 * 2, row = 4096 * 2;
  EXPECT_EQ(awq.decode.total.bytes.weights, awq.weight_bytes - embedding + row);
  const double ratio = plain.per_token_s / awq.per_token_s;
  EXPECT_GT(ratio, 2.9);
  EXPECT_LT(ratio, 3.3);
  for (const auto& o : awq.decode.ops) {
    if (o.op.kind == "linear") {
      EXPECT_EQ(o.compute_dtype, DType::bf16) << o.op.name;
    }
  }
  // --weight-dtype int4 on the plain config gives the same.
  in.weights = WeightFormat::parse("int4");
  EXPECT_EQ(estimate(load_model("llama-3.1-8b"), gpu, in).weight_bytes, 5727854592ull);
  // fp8 block-scaled weights compute in fp8.
  in.weights = WeightFormat::parse("fp8");
  const auto f8 = estimate(load_model("llama-3.1-8b"), gpu, in);
  for (const auto& o : f8.prefill.ops) {
    if (o.op.kind == "linear" && o.op.name != "lm_head") {
      EXPECT_EQ(o.compute_dtype, DType::fp8) << o.op.name;
    }
  }
}

TEST(Analytical, MixtureOfExpertsDecodeMovesWithTheBatch) {
  // More sequences touch more experts: per sequence, the weight bytes of a step
  // fall as the batch grows, until every expert is read.
  const auto m = load_model("mixtral-8x7b");
  const auto gpu = GpuTable::load().get("h100-sxm");
  EstimateInputs in;
  in.prompt = 1024;
  double prev = 1e30;
  for (std::uint64_t B : {1u, 4u, 16u, 64u}) {
    in.batch = B;
    const auto e = estimate(m, gpu, in);
    const double per_seq = static_cast<double>(e.decode.total.bytes.weights) / static_cast<double>(B);
    EXPECT_LT(per_seq, prev) << B;
    prev = per_seq;
  }
  const auto e = estimate(m, gpu, in);
  EXPECT_GT(e.weight_bytes, 2 * 46000000000ull);  // memory holds every expert
  EXPECT_NE(to_text(e).find("mixture of experts: 8 experts of width 14336, 2 per token"), std::string::npos);
}

TEST(Analytical, TensorParallelShardsAndAddsTheAllReduces) {
  // Llama-3.1-70B over 8 GPUs: 8 q heads and 1 KV head per GPU, MLP 28672/8,
  // vocabulary 128256/8; per GPU weights summed by hand.
  const auto m = load_model("llama-3.1-70b");
  const auto s = tensor_parallel_shard(m, 8);
  EXPECT_EQ(s.heads, 8u);
  EXPECT_EQ(s.kv_heads, 1u);
  EXPECT_EQ(s.intermediate, 3584u);
  EXPECT_EQ(s.vocab, 16032u);
  const std::uint64_t h = 8192, layer = (8 + 2) * 128 * h + h * 8 * 128 + 2 * 3584 * h + h * 3584 + 2 * h;
  const auto gpu = GpuTable::load().get("h100-sxm");
  EstimateInputs in;
  in.batch = 1;
  in.prompt = 1024;
  in.tp = 8;
  const auto e = estimate(m, gpu, in);
  EXPECT_EQ(e.weight_bytes, 2 * (80 * layer + 2 * 16032 * h + h));
  EXPECT_EQ(e.params, parameter_count(m));  // the model's count stays whole
  EXPECT_EQ(e.kv_bytes_per_token, 2ull * 80 * 1 * 128 * 2);
  // Prefill: two all-reduces per layer of M x h activations, ring: 2 (n-1)/n of
  // them on the link, timed at half the 900 GB/s bidirectional NVLink figure.
  const std::uint64_t payload = 1024 * h * 2, link = 2 * 7 * payload / 8;
  int seen = 0;
  for (const auto& o : e.prefill.ops)
    if (o.op.name == "attn_all_reduce" || o.op.name == "mlp_all_reduce") {
      ++seen;
      EXPECT_EQ(o.op.count, 80u);
      EXPECT_EQ(o.op.link_bytes, link);
      EXPECT_EQ(o.bound, Bound::link);
      // NCCL's ring LL latency (gpus.json): 6.6 us + 2 x 7 steps x 0.6 us, then the bytes.
      EXPECT_NEAR(o.latency_s, 15.0e-6, 1e-12);
      EXPECT_DOUBLE_EQ(o.time_s, o.latency_s + static_cast<double>(link) / 450e9);
    }
  EXPECT_EQ(seen, 2);
  // Decode at batch 1: each all-reduce is 16 KB, the latency is nearly all of its time.
  for (const auto& o : e.decode.ops) {
    if (o.op.name == "attn_all_reduce") {
      EXPECT_GT(o.latency_s / o.time_s, 0.9);
    }
  }
  const auto text = to_text(e);
  EXPECT_NE(text.find("collective latency: 6.6 us + 0.6 us per step, 15.0 us before an all-reduce over 8 GPUs"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("src/graph/tuning.cc"), std::string::npos);
  EXPECT_EQ(to_json(e)["tensor_parallel"]["collective_latency"]["per_step_s"], 0.6e-6);
  // Per GPU the decode step reads an eighth of the linear weights: faster than one GPU,
  // though 160 all-reduces of 15 us latency (2.4 ms) keep it well short of 8x.
  in.tp = 1;
  const auto one = estimate(m, gpu, in);
  EXPECT_LT(e.decode.time_s, one.decode.time_s / 5);
  EXPECT_GT(e.decode.time_s, one.decode.time_s / 8 + 160 * 15e-6);
  EXPECT_NE(to_text(e).find("tensor parallel over 8 GPUs"), std::string::npos);
  EXPECT_EQ(to_json(e).at("tensor_parallel").at("kv_heads_replicated"), false);  // 8 KV heads, one each
  // Llama-3.1-8B over 16 GPUs: 8 KV heads, so each is kept by two GPUs.
  in.tp = 16;
  const auto e16 = estimate(load_model("llama-3.1-8b"), gpu, in);
  EXPECT_EQ(to_json(e16).at("tensor_parallel").at("kv_heads_replicated"), true);
  EXPECT_EQ(e16.kv_bytes_per_token, 2ull * 32 * 1 * 128 * 2);
  // MLA: the latent cache is the same on every GPU.
  const auto d = load_model("deepseek-v2-lite");
  EXPECT_EQ(kv_bytes_per_token(tensor_parallel_shard(d, 4), 2), kv_bytes_per_token(d, 2));
  // Widths that do not split, and a degree that does not replicate KV heads evenly.
  EXPECT_THROW(tensor_parallel_shard(m, 3), InputError);
  EXPECT_THROW(tensor_parallel_shard(m, 0), InputError);
  auto odd = m;
  odd.heads = 24;
  try {
    tensor_parallel_shard(odd, 12);
    FAIL() << "expected InputError";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("8 KV heads neither divide by 12 nor divide it"), std::string::npos) << err.what();
  }
  // A quantized group that no longer divides a shard's K: gpt-oss's MXFP4 experts (2880 / 8 = 360).
  in.tp = 8;
  try {
    estimate(load_model("gpt-oss-20b"), gpu, in);
    FAIL() << "expected InputError";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("does not divide the 360 inputs of experts_down"), std::string::npos) << err.what();
  }
}

TEST(Analytical, PowerGivesEnergyPerTokenAndPerByte) {
  const auto m = load_model("llama-3.1-8b");
  const auto gpu = GpuTable::load().get("h200-sxm");
  EstimateInputs in;
  in.batch = 4;
  in.prompt = 1024;
  in.context = 2048;
  in.generate = 16;
  EXPECT_FALSE(estimate(m, gpu, in).energy.has_value()) << "no --power, no energy";
  in.power_w = 700;
  const auto e = estimate(m, gpu, in);
  ASSERT_TRUE(e.energy.has_value());
  EXPECT_DOUBLE_EQ(e.energy->prefill_j_per_token, 700 * e.ttft_s / (4 * 1024));
  EXPECT_DOUBLE_EQ(e.energy->decode_j_per_token, 700 * e.per_token_s / 4);
  EXPECT_DOUBLE_EQ(e.energy->decode_j_per_byte, 700 * e.per_token_s / static_cast<double>(e.decode.total.bytes.total()));
  ASSERT_TRUE(e.energy->request_j_per_token.has_value());
  EXPECT_DOUBLE_EQ(*e.energy->request_j_per_token, 700 * e.request->total_s / (4 * 16));
  // Decode is memory-bound: its energy per byte is about the power over the bandwidth.
  EXPECT_NEAR(e.energy->decode_j_per_byte, 700 / (gpu.memory_bandwidth_gbps * 1e9), 0.2 * 700 / (gpu.memory_bandwidth_gbps * 1e9));
  const auto j = to_json(e);
  EXPECT_DOUBLE_EQ(j.at("energy").at("decode_j_per_token").get<double>(), e.energy->decode_j_per_token);
  EXPECT_NE(to_text(e).find("energy at 700 W per GPU"), std::string::npos);
  // Two GPUs draw twice the power over the (per GPU) step time.
  in.tp = 2;
  const auto e2 = estimate(m, gpu, in);
  EXPECT_DOUBLE_EQ(e2.energy->decode_j_per_token, 2 * 700 * e2.per_token_s / 4);
  in.power_w = -1;
  EXPECT_THROW(estimate(m, gpu, in), InputError);
}

TEST(Analytical, Fp4WeightsAreExactAndComputeInFp4WhereTheGpuHasIt) {
  // gpt-oss-20b ships MXFP4 experts (values, an e8m0 scale per 32) and bf16
  // elsewhere: against the same model in bf16, only the 24 x 32 experts' gate_up
  // [5760, 2880] and down [2880, 2880] matrices shrink, to their exact MXFP4 size.
  const auto m = load_model("gpt-oss-20b");
  const auto b200 = GpuTable::load().get("b200");
  const auto h200 = GpuTable::load().get("h200-sxm");
  EstimateInputs in;
  in.batch = 8;
  in.prompt = 2048;
  const auto mx = estimate(m, b200, in);
  in.weights = WeightFormat::parse("bf16");
  const auto bf = estimate(m, b200, in);
  const std::uint64_t experts = 24 * 32;
  const std::uint64_t bf16_expert = (5760ull * 2880 + 2880ull * 2880) * 2;
  const std::uint64_t mx_expert = matrix_bytes(DType::mxfp4, 5760, 2880) + matrix_bytes(DType::mxfp4, 2880, 2880);
  EXPECT_EQ(mx_expert, (5760ull * 2880 + 2880ull * 2880) / 2 + (5760ull * 90 + 2880ull * 90));
  EXPECT_EQ(bf.weight_bytes - mx.weight_bytes, experts * (bf16_expert - mx_expert));
  // The experts compute in FP4 on a B200 (it has an FP4 ceiling), the attention
  // projections (left in bf16) in bf16; the FP4 prefill is faster than bf16's.
  int fp4_ops = 0;
  for (const auto& o : mx.prefill.ops) {
    if (o.op.kind == "grouped_linear") {
      EXPECT_EQ(o.compute_dtype, DType::mxfp4) << o.op.name;
      ++fp4_ops;
    } else if (o.op.kind == "linear") {
      EXPECT_EQ(o.compute_dtype, DType::bf16) << o.op.name;
    }
  }
  EXPECT_EQ(fp4_ops, 2);
  EXPECT_LT(mx.prefill.time_s, bf.prefill.time_s);
  EXPECT_NE(to_json(mx).dump().find("\"compute_dtype\":\"mxfp4\""), std::string::npos);
  EXPECT_NE(to_text(mx).find("the mxfp4 layers compute in mxfp4 (this GPU's FP4 ceiling)"), std::string::npos);
  // An H200 has no FP4 ceiling: the same weights are widened to bf16 (weight-only).
  in.weights.reset();
  EXPECT_NE(to_text(estimate(m, h200, in)).find("compute in bf16: this GPU has no FP4 ceiling"), std::string::npos);
  for (const auto& o : estimate(m, h200, in).prefill.ops) {
    if (o.op.kind == "grouped_linear") {
      EXPECT_EQ(o.compute_dtype, DType::bf16) << o.op.name;
    }
  }
  // --weight-dtype nvfp4: groups of 16 with an e4m3 scale and an fp32 scale per matrix.
  in.weights = WeightFormat::parse("nvfp4");
  const auto nv = estimate(load_model("llama-3.1-8b"), b200, in);
  bool seen = false;
  for (const auto& o : nv.decode.ops)
    if (o.op.name == "down_proj") {
      EXPECT_EQ(o.op.cost.bytes.weights, matrix_bytes(DType::nvfp4, 4096, 14336));
      EXPECT_EQ(o.compute_dtype, DType::nvfp4);
      seen = true;
    }
  EXPECT_TRUE(seen);
}
