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
