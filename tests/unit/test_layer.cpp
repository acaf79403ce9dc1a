// Whole-layer points: the request's cost is layer_ops' sum (one GPU's shard's
// when tensor-parallel), the sweep builds them only where the backend implements
// them (and, sharded, where the model divides), and the results carry measured
// and predicted step times (layer x layers + lm_head) with their sources, a
// sharded point beside the same point on one GPU.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "bench_test_util.hpp"
#include "fixture.hpp"
#include "phasebench/analytical.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/ops/layer.hpp"
#include "summary.hpp"
#include "sweep.hpp"

using namespace phasebench;

namespace {

OpCost sum_of(const std::vector<LayerOp>& ops) {
  OpCost c;
  for (const auto& o : ops) c += o.cost;
  return c;
}

void expect_same(const OpCost& a, const OpCost& b) {
  EXPECT_EQ(a.flops, b.flops);
  EXPECT_EQ(a.bytes.weights, b.bytes.weights);
  EXPECT_EQ(a.bytes.kv_cache, b.bytes.kv_cache);
  EXPECT_EQ(a.bytes.activations, b.bytes.activations);
  EXPECT_EQ(a.bytes.writes, b.bytes.writes);
  EXPECT_EQ(a.bytes.total(), b.bytes.total());
}

}  // namespace

TEST(LayerRequest, CostIsTheSumOfLayerOps) {
  for (const char* name : {"llama-3.1-8b", "llama-3.1-70b"}) {
    const auto m = load_model(name);
    for (DType t : {DType::bf16, DType::fp16}) {
      const auto p = Precision::from(t, t);
      const auto pre = layer_request(m, Phase::prefill, 4, 512, t);
      expect_same(pre.cost(), sum_of(layer_ops(m, {Phase::prefill, 4, 512, 0}, p)));
      const auto dec = layer_request(m, Phase::decode, 8, 4096, t);
      expect_same(dec.cost(), sum_of(layer_ops(m, {Phase::decode, 8, 1, 4096}, p)));
      // The step the request describes, and its op list, are layer_ops' own.
      EXPECT_EQ(layer_step(dec).context, 4096u);
      EXPECT_EQ(layer_step(pre).new_tokens, 512u);
      EXPECT_EQ(layer_request_ops(dec).size(), layer_ops(m, {Phase::decode, 8, 1, 4096}, p).size());
    }
  }
}

TEST(LayerRequest, TensorParallelCostIsOneGpusShard) {
  const auto m = load_model("llama-3.1-70b");
  const auto p = Precision::from(DType::bf16, DType::bf16);
  const auto one = layer_request(m, Phase::decode, 8, 4096, DType::bf16);
  EXPECT_FALSE(one.shape.has("gpus"));  // one GPU's shape is as before
  EXPECT_EQ(layer_gpus(one), 1u);
  const auto r = layer_request(m, Phase::decode, 8, 4096, DType::bf16, 0x5eed, 8);
  EXPECT_EQ(r.shape["gpus"], 8u);
  EXPECT_EQ(layer_model(r).heads, 64u);  // the request describes the whole layer
  const auto shard = layer_shard(r);
  EXPECT_EQ(shard.heads, 8u);
  EXPECT_EQ(shard.kv_heads, 1u);
  EXPECT_EQ(shard.intermediate, m.intermediate / 8);
  expect_same(r.cost(), sum_of(layer_ops(tensor_parallel_shard(m, 8), {Phase::decode, 8, 1, 4096}, p)));
  std::vector<std::string> reduces;
  for (const auto& o : layer_request_ops(r))
    if (o.kind == "all_reduce") reduces.push_back(o.name);
  EXPECT_EQ(reduces, (std::vector<std::string>{"attn_all_reduce", "mlp_all_reduce"}));
  EXPECT_LT(r.cost().bytes.weights, one.cost().bytes.weights / 7);  // each GPU streams an eighth of the weights
  EXPECT_LT(r.footprint_bytes(), one.footprint_bytes() / 4);
}

TEST(LayerRequest, FootprintCoversWeightsActivationsAndCache) {
  const auto m = load_model("llama-3.1-8b");
  const auto r = layer_request(m, Phase::decode, 8, 4096, DType::bf16);
  const std::uint64_t weights = 2 * layer_parameter_count(m);  // bf16, no biases
  const std::uint64_t cache = 2ull * 2 * 8 * m.kv_heads * 4096 * m.head_dim;
  EXPECT_GT(r.footprint_bytes(), weights + cache);
  EXPECT_LT(r.footprint_bytes(), weights + cache + (64ull << 20));  // activations of 8 tokens are small
}

TEST(LayerSweep, TheCpuBackendHasNoLayerPoints) {
  auto cpu = make_cpu_backend();
  EXPECT_FALSE(cpu->implements(kLayer, DType::fp32, Impl::own));
  SweepConfig c;
  apply_defaults(c, *cpu);
  EXPECT_TRUE(build_sweep(c, *cpu).size() > 0);
  for (const auto& p : build_sweep(c, *cpu)) EXPECT_NE(p.op, "layer") << p.name;
  c.groups = {"layer"};
  EXPECT_TRUE(build_sweep(c, *cpu).empty());
}

namespace {

class FakeOp : public PreparedOp {
 public:
  void run() override {}
  void verify() override {}
};

// Implements everything; times a layer at 1 ms and anything else at 0.2 ms.
class FakeBackend : public Backend {
 public:
  explicit FakeBackend(std::optional<GpuSpec> spec) {
    info_.backend = "fake";
    info_.name = "fake";
    info_.slug = "fake";
    info_.spec = std::move(spec);
    ceilings_.add_compute(DType::bf16, {1e15, CeilingSource::measured, "fake"});
    ceilings_.add_bandwidth({3e12, CeilingSource::measured, "fake"});
  }
  const DeviceInfo& device() const override { return info_; }
  Ceilings ceilings() const override { return ceilings_; }
  void measure_ceilings(const std::vector<DType>&) override {}
  bool implements(std::string_view, DType, Impl) const override { return true; }
  bool applies(const OpRequest&) const override { return true; }
  std::optional<std::string> cannot_run(const OpRequest&) const override { return std::nullopt; }
  std::unique_ptr<PreparedOp> prepare(const OpRequest& r) override {
    kinds_[r.kind]++;
    auto op = std::make_unique<FakeOp>();
    kind_of_[op.get()] = r.kind;
    gpus_of_[op.get()] = r.kind == kLayer ? layer_gpus(r) : 1;
    return op;
  }
  // A layer sharded over N GPUs: 1 ms x (0.5 + 0.5 / N), as if half of it scaled.
  Sample time(PreparedOp& op, const TimingOptions&) override {
    Sample s;
    s.seconds = kind_of_[&op] == kLayer ? 1e-3 * (0.5 + 0.5 / static_cast<double>(gpus_of_[&op])) : 2e-4;
    return s;
  }
  void synchronize() override {}
  void profile(PreparedOp&, const std::string&) override {}

 private:
  DeviceInfo info_;
  Ceilings ceilings_;
  std::map<std::string, int> kinds_;
  std::map<const PreparedOp*, std::string> kind_of_;
  std::map<const PreparedOp*, std::uint64_t> gpus_of_;
};

void run_points(BenchContext& ctx, const std::vector<Point>& pts) { test::run_points_quietly(ctx, pts); }

SweepConfig small_config() {
  SweepConfig c;
  c.dtypes = {DType::bf16};
  c.axes["layer"].sizes = {{"prefill_batch", {1}}, {"prompt", {512}}, {"decode_batch", {8}}, {"context", {4096}}, {"gpus", {1}}};
  c.axes["decode_linear"].sizes = {{"batch", {8}}};
  return c;
}

// The analytical prediction of one layer and of lm_head for the step.
std::pair<double, double> predicted(const ModelConfig& m, const GpuSpec& gpu, Phase ph, std::uint64_t B,
                                    std::uint64_t n, std::uint64_t tp = 1) {
  EstimateInputs in;
  in.tp = tp;
  in.batch = B;
  in.prompt = ph == Phase::prefill ? n : 1;
  in.context = ph == Phase::decode ? n : 1;
  in.dtype = in.kv_dtype = DType::bf16;
  in.ceiling = CeilingSource::datasheet;
  const auto e = estimate(m, gpu, in);
  double layer = 0, lm = 0;
  for (const auto& o : (ph == Phase::prefill ? e.prefill : e.decode).ops) {
    if (o.op.name == "lm_head" || o.op.name == "logits_all_gather")
      lm += o.time_s;
    else if (o.op.name != "embed" && o.op.name != "final_norm" && o.op.name != "embed_all_reduce")
      layer += o.time_s;
  }
  return {layer, lm};
}

}  // namespace

TEST(LayerSweep, PointsWhereTheBackendImplementsThem) {
  FakeBackend fake(std::nullopt);
  auto c = small_config();
  c.groups = {"layer"};
  const auto pts = build_sweep(c, fake);
  ASSERT_EQ(pts.size(), 2u);
  std::map<std::string, Point> by_name;
  for (const auto& p : pts) by_name[p.name] = p;
  ASSERT_TRUE(by_name.count("prefill/layer/llama-3.1-8b/bf16/batch:1/prompt:512"));
  ASSERT_TRUE(by_name.count("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096"));
  const auto& d = by_name.at("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096");
  EXPECT_EQ(d.phase, "decode");
  EXPECT_EQ(d.op, "layer");
  EXPECT_EQ(d.args.at("layers"), 32u);
  EXPECT_EQ(d.args.at("vocab"), 128256u);
  EXPECT_EQ(d.request.kind, kLayer);
  EXPECT_EQ(d.request.phase, Phase::decode);
  EXPECT_EQ(d.request.shape["L"], 4096u);
  EXPECT_EQ(layer_model(d.request).hidden, 4096u);
  EXPECT_EQ(d.request.name, d.name);  // the prefix of the per-op NVTX ranges
}

TEST(LayerSweep, TheGpusAxisAddsTensorParallelPointsSkippedWhereTheModelDoesNotDivide) {
  FakeBackend fake(std::nullopt);
  auto c = small_config();
  c.groups = {"layer"};
  c.axes["layer"].sizes["gpus"] = {1, 2, 3};  // 32 heads and 8 KV heads do not split 3 ways
  std::map<std::string, Point> by_name;
  for (const auto& p : build_sweep(c, fake)) {
    EXPECT_EQ(p.request.name, p.name);
    by_name[p.name] = p;
  }
  ASSERT_EQ(by_name.size(), 6u);
  for (const char* n : {"prefill/layer/llama-3.1-8b/bf16/batch:1/prompt:512", "decode/layer/llama-3.1-8b/bf16/batch:8/context:4096",
                        "prefill/layer/llama-3.1-8b/bf16/batch:1/prompt:512/gpus:2",
                        "decode/layer/llama-3.1-8b/bf16/batch:8/context:4096/gpus:2"}) {
    ASSERT_TRUE(by_name.count(n)) << n;
    EXPECT_TRUE(by_name.at(n).invalid.empty()) << n;
  }
  EXPECT_EQ(layer_gpus(by_name.at("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096/gpus:2").request), 2u);
  const auto& three = by_name.at("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096/gpus:3");
  EXPECT_NE(three.invalid.find("num_attention_heads (32) is not divisible by 3"), std::string::npos) << three.invalid;
}

TEST(GpuSweepDefaults, AttentionAlsoForLlama70BUnlessModelsAreGiven) {
  // On a GPU backend the default sweep adds Llama-3.1-70B's attention shapes (8
  // query heads per KV head) to 8B's; its linear layers, KV append and layers stay out.
  FakeBackend fake(std::nullopt);
  SweepConfig c;
  apply_defaults(c, fake);
  std::map<std::string, int> ops_70b;
  int attention_8b = 0;
  for (const auto& p : build_sweep(c, fake)) {
    if (p.model == "llama-3.1-70b") ops_70b[p.phase + "/" + p.op]++;
    if (p.model == "llama-3.1-8b" && p.op == "decode_attention" && p.phase == "decode") ++attention_8b;
  }
  EXPECT_EQ(ops_70b["decode/decode_attention"], attention_8b);
  EXPECT_EQ(ops_70b["decode/decode_attention_paged"], attention_8b);
  EXPECT_GT(ops_70b["prefill/prefill_attention"], 0);
  EXPECT_EQ(ops_70b.size(), 3u);
  // The moe group: its three MoE models, nothing else of theirs; the
  // latent_attention group: the two MLA models.
  std::set<std::string> moe_models, mla_models;
  for (const auto& p : build_sweep(c, fake))
    if (p.op == "moe") {
      moe_models.insert(p.model);
    } else if (p.op.rfind("latent_attention", 0) == 0) {
      mla_models.insert(p.model);
    } else {
      EXPECT_TRUE(p.model == "llama-3.1-8b" || p.model == "llama-3.1-70b") << p.name;
    }
  EXPECT_EQ(moe_models, (std::set<std::string>{"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"}));
  EXPECT_EQ(mla_models, (std::set<std::string>{"deepseek-v2-lite", "deepseek-v3"}));
  // Its GPU defaults: a small-batch short-context point (split-KV) and points
  // with at least 256 MiB of latent cache (the 70%-of-read-bandwidth target's size).
  std::uint64_t largest_cache = 0;
  bool small = false;
  for (const auto& p : build_sweep(c, fake))
    if (p.op.rfind("latent_attention", 0) == 0) {
      largest_cache = std::max(largest_cache, p.cost.bytes.kv_cache);
      small = small || (p.args.at("batch") == 1 && p.args.at("context") == 1024);
    }
  EXPECT_GE(largest_cache, 256ull << 20);
  EXPECT_TRUE(small);
  // --model given: exactly those models, for every group.
  SweepConfig given;
  given.models = {"llama-3.1-8b"};
  given.models_given = true;
  apply_defaults(given, fake);
  for (const auto& p : build_sweep(given, fake)) EXPECT_EQ(p.model, "llama-3.1-8b") << p.name;
  // The CPU backend keeps to `models`, but for the moe group's MoE model and the
  // latent_attention group's MLA model.
  auto cpu = make_cpu_backend();
  SweepConfig on_cpu;
  apply_defaults(on_cpu, *cpu);
  for (const auto& p : build_sweep(on_cpu, *cpu))
    EXPECT_EQ(p.model, p.op == "moe"                              ? "qwen3-30b-a3b"
                       : p.op.rfind("latent_attention", 0) == 0 ? "deepseek-v2-lite"
                                                                : "llama-3.1-8b")
        << p.name;
}

TEST(LayerResults, MeasuredAndPredictedStepTimes) {
  const auto gpu = GpuTable::load().find("h100-sxm");
  ASSERT_TRUE(gpu.has_value());
  FakeBackend fake(gpu);
  BenchContext ctx(fake, RunOptions{});
  auto c = small_config();
  c.groups = {"decode_linear", "layer"};
  run_points(ctx, build_sweep(c, fake));
  const auto m = load_model("llama-3.1-8b");

  // Decode: lm_head measured by the decode GEMV point of batch 8 (0.2 ms).
  const auto dj = ctx.point_json("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096");
  ASSERT_EQ(dj.at("status"), "ok");
  ASSERT_TRUE(dj.contains("layer"));
  const auto& dl = dj.at("layer");
  EXPECT_EQ(dl.at("layers"), 32);
  EXPECT_EQ(dl.at("step"), "per_token");
  EXPECT_DOUBLE_EQ(dl.at("measured_layer_s").get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(dl.at("lm_head_s").get<double>(), 2e-4);
  EXPECT_NE(dl.at("lm_head_source").get<std::string>().find("measured: decode/linear/llama-3.1-8b.lm_head/bf16/batch:8"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(dl.at("measured_step_s").get<double>(), 32 * 1e-3 + 2e-4);
  const auto [dlayer, dlm] = predicted(m, *gpu, Phase::decode, 8, 4096);
  EXPECT_DOUBLE_EQ(dl.at("predicted_layer_s").get<double>(), dlayer);
  EXPECT_DOUBLE_EQ(dl.at("predicted_step_s").get<double>(), 32 * dlayer + dlm);
  EXPECT_DOUBLE_EQ(dl.at("ratio").get<double>(), (32 * 1e-3 + 2e-4) / (32 * dlayer + dlm));
  EXPECT_EQ(dl.at("ceiling_source"), "datasheet");
  EXPECT_EQ(dl.at("gpu_spec"), "h100-sxm");
  EXPECT_GT(dl.at("unmodelled_bytes").at("qkv_split").get<std::uint64_t>(), 0u);
  EXPECT_EQ(dj.at("shape").at("L"), 4096);

  // Prefill at batch 1: no GEMV point of batch 1 in this run, so lm_head is predicted.
  const auto pj = ctx.point_json("prefill/layer/llama-3.1-8b/bf16/batch:1/prompt:512");
  ASSERT_EQ(pj.at("status"), "ok");
  const auto& pl = pj.at("layer");
  EXPECT_EQ(pl.at("step"), "ttft");
  const auto [player, plm] = predicted(m, *gpu, Phase::prefill, 1, 512);
  EXPECT_EQ(pl.at("lm_head_source").get<std::string>().rfind("predicted", 0), 0u);
  EXPECT_DOUBLE_EQ(pl.at("lm_head_s").get<double>(), plm);
  EXPECT_DOUBLE_EQ(pl.at("measured_step_s").get<double>(), 32 * 1e-3 + plm);
  EXPECT_DOUBLE_EQ(pl.at("predicted_step_s").get<double>(), 32 * player + plm);
  // The flops of the point are the layer's (causal prefill attention included).
  EXPECT_EQ(pj.at("flops").get<std::uint64_t>(),
            sum_of(layer_ops(m, {Phase::prefill, 1, 512, 0}, Precision::from(DType::bf16, DType::bf16))).flops);
}

TEST(LayerResults, UnknownGpuHasNoPrediction) {
  FakeBackend fake(std::nullopt);
  BenchContext ctx(fake, RunOptions{});
  auto c = small_config();
  c.groups = {"decode_linear", "layer"};
  run_points(ctx, build_sweep(c, fake));
  const auto dj = ctx.point_json("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096");
  const auto& dl = dj.at("layer");
  EXPECT_TRUE(dl.at("predicted_layer_s").is_null());
  EXPECT_TRUE(dl.at("predicted_step_s").is_null());
  EXPECT_TRUE(dl.at("ratio").is_null());
  EXPECT_DOUBLE_EQ(dl.at("measured_step_s").get<double>(), 32 * 1e-3 + 2e-4);  // lm_head still measured
  const auto pj = ctx.point_json("prefill/layer/llama-3.1-8b/bf16/batch:1/prompt:512");
  const auto& pl = pj.at("layer");
  EXPECT_TRUE(pl.at("lm_head_s").is_null());  // neither measured nor predictable
  EXPECT_TRUE(pl.at("measured_step_s").is_null());
}

TEST(LayerResults, SummaryPrintsMeasuredVersusPredicted) {
  const auto gpu = GpuTable::load().find("h100-sxm");
  ASSERT_TRUE(gpu.has_value());
  FakeBackend fake(gpu);
  BenchContext ctx(fake, RunOptions{});
  auto c = small_config();
  c.groups = {"decode_linear", "layer"};
  const auto pts = build_sweep(c, fake);
  run_points(ctx, pts);
  nlohmann::json results;
  for (const auto& p : pts)
    results["benchmarks"].push_back({{"name", p.name}, {"run_type", "iteration"}, {"phasebench", ctx.point_json(p.name)}});
  const auto text = summarize(results);
  EXPECT_NE(text.find("whole layer: measured vs predicted"), std::string::npos) << text;
  EXPECT_NE(text.find("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096"), std::string::npos) << text;
  EXPECT_NE(text.find("32.200 ms"), std::string::npos) << text;  // 32 x 1 ms + 0.2 ms lm_head
}

TEST(LayerResults, TensorParallelBesideOneGpuAndTheModel) {
  const auto gpu = GpuTable::load().find("h100-sxm");
  ASSERT_TRUE(gpu.has_value());
  FakeBackend fake(gpu);
  BenchContext ctx(fake, RunOptions{});
  auto c = small_config();
  c.groups = {"decode_linear", "layer"};
  c.axes["layer"].sizes["gpus"] = {1, 2};
  const auto pts = build_sweep(c, fake);
  run_points(ctx, pts);
  const auto m = load_model("llama-3.1-8b");
  const auto dj = ctx.point_json("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096/gpus:2");
  ASSERT_TRUE(dj.is_object()) << dj;
  ASSERT_EQ(dj.at("status"), "ok") << dj;
  EXPECT_EQ(dj.at("shape").at("gpus"), 2);
  const auto& dl = dj.at("layer");
  EXPECT_EQ(dl.at("gpus"), 2);
  EXPECT_DOUBLE_EQ(dl.at("measured_layer_s").get<double>(), 0.75e-3);
  EXPECT_DOUBLE_EQ(dl.at("one_gpu_layer_s").get<double>(), 1e-3);
  EXPECT_EQ(dl.at("one_gpu_point"), "decode/layer/llama-3.1-8b/bf16/batch:8/context:4096");
  EXPECT_DOUBLE_EQ(dl.at("speedup").get<double>(), 1e-3 / 0.75e-3);
  EXPECT_DOUBLE_EQ(dl.at("scaling_efficiency").get<double>(), 1e-3 / 0.75e-3 / 2);
  // The model's layer over 2 GPUs: the shard's ops and the two all-reduces, latency included.
  const auto [layer, lm] = predicted(m, *gpu, Phase::decode, 8, 4096, 2);
  EXPECT_DOUBLE_EQ(dl.at("predicted_layer_s").get<double>(), layer);
  EXPECT_DOUBLE_EQ(dl.at("predicted_step_s").get<double>(), 32 * layer + lm);
  EXPECT_LT(layer, predicted(m, *gpu, Phase::decode, 8, 4096).first);
  const auto link = LinkModel::of(*gpu);
  const LayerOp ar{"", "all_reduce", Shape{{"gpus", 2}}, {}};
  EXPECT_GT(dl.at("predicted_all_reduce_s").get<double>(), 2 * link.latency_s(ar));
  EXPECT_EQ(dl.at("latency_source"), link.latency_source);
  // lm_head sharded: not the one-GPU GEMV point of the run.
  EXPECT_EQ(dl.at("lm_head_source").get<std::string>().rfind("predicted (sharded", 0), 0u);
  EXPECT_DOUBLE_EQ(dl.at("lm_head_s").get<double>(), lm);
  // One GPU's point has no tensor-parallel fields.
  const auto one = ctx.point_json("decode/layer/llama-3.1-8b/bf16/batch:8/context:4096").at("layer");
  EXPECT_EQ(one.at("gpus"), 1);
  EXPECT_FALSE(one.contains("speedup"));
  EXPECT_FALSE(one.contains("predicted_all_reduce_s"));

  nlohmann::json results;
  for (const auto& p : pts)
    results["benchmarks"].push_back({{"name", p.name}, {"run_type", "iteration"}, {"phasebench", ctx.point_json(p.name)}});
  const auto text = summarize(results);
  EXPECT_NE(text.find("tensor-parallel layers"), std::string::npos) << text;
  EXPECT_NE(text.find("1.33x"), std::string::npos) << text;
}
