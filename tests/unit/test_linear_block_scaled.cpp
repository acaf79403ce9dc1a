// The block-scaled 4-bit prefill GEMMs (nvfp4, mxfp4) as the harness declares them:
// their cost (X and W with their block scales and nvfp4's tensor scale, exact bytes;
// Y bf16; 2MNK FLOPs), the prefill_linear.dtype axis (its defaults, a bad word), and
// the points it makes (names, requests, each once whatever the run's --dtype).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"
#include "sweep.hpp"

namespace phasebench {
namespace {

// A GPU backend as the sweep sees it: the vendor library's linear layer in every
// type, nothing to run.
class FakeGpu : public Backend {
 public:
  FakeGpu() {
    info_.backend = "cuda";
    info_.name = info_.slug = "fake-gpu";
  }
  const DeviceInfo& device() const override { return info_; }
  Ceilings ceilings() const override { return {}; }
  void measure_ceilings(const std::vector<DType>&) override {}
  bool implements(std::string_view kind, DType, Impl impl) const override { return kind == kLinear && impl == Impl::blas; }
  bool applies(const OpRequest&) const override { return true; }
  std::optional<std::string> cannot_run(const OpRequest&) const override { return std::nullopt; }
  std::unique_ptr<PreparedOp> prepare(const OpRequest&) override { throw std::logic_error("not here"); }
  Sample time(PreparedOp&, const TimingOptions&) override { return {}; }
  void synchronize() override {}
  void profile(PreparedOp&, const std::string&) override {}

 private:
  DeviceInfo info_;
};

std::vector<Point> prefill_points(const Backend& b, const std::vector<std::string>& axes,
                                  std::vector<DType> dtypes = {}) {
  SweepConfig c;
  c.groups = {"prefill_linear"};
  c.dtypes = std::move(dtypes);
  set_axis(c, "prefill_linear.batch=1");
  set_axis(c, "prefill_linear.prompt=128");
  for (const auto& a : axes) set_axis(c, a);
  apply_defaults(c, b);
  return build_sweep(c, b);
}

std::vector<std::string> names(const std::vector<Point>& pts) {
  std::vector<std::string> v;
  for (const auto& p : pts) v.push_back(p.name);
  return v;
}

TEST(BlockScaledLinearCost, CountsValuesBlockScalesAndTheTensorScaleExactly) {
  // N = 200, K = 96, M = 37: nvfp4 has 6 e4m3 scales a row (blocks of 16) and 4
  // bytes of fp32 tensor scale a matrix; mxfp4 3 e8m0 scales a row (blocks of 32).
  const auto nv = linear_request({37, 200, 96}, DType::nvfp4, Impl::blas).cost();
  EXPECT_EQ(nv.flops, 2ull * 37 * 200 * 96);
  EXPECT_EQ(nv.bytes.weights, 200u * 48 + 200 * 6 + 4);
  EXPECT_EQ(nv.bytes.activations, 37u * 48 + 37 * 6 + 4);
  EXPECT_EQ(nv.bytes.writes, 37u * 200 * 2);  // bf16 Y
  EXPECT_EQ(nv.bytes.kv_cache + nv.bytes.block_table, 0u);
  const auto mx = linear_request({37, 200, 96}, DType::mxfp4, Impl::blas).cost();
  EXPECT_EQ(mx.flops, nv.flops);
  EXPECT_EQ(mx.bytes.weights, 200u * 48 + 200 * 3);
  EXPECT_EQ(mx.bytes.activations, 37u * 48 + 37 * 3);
  EXPECT_EQ(mx.bytes.writes, 37u * 200 * 2);
  // A partial block has a scale of its own: K = 40 is one and a quarter blocks of 32.
  EXPECT_EQ(linear_request({3, 8, 40}, DType::mxfp4, Impl::blas).cost().bytes.weights, 8u * 20 + 8 * 2);
  // A Llama-3.1-8B down_proj at 512 tokens, against matrix_bytes.
  const auto down = linear_request({512, 4096, 14336}, DType::nvfp4, Impl::blas);
  EXPECT_EQ(down.cost().bytes.weights, 4096ull * 14336 / 2 + 4096ull * 14336 / 16 + 4);
  EXPECT_EQ(down.cost().bytes.total(), matrix_bytes(DType::nvfp4, 4096, 14336) +
                                           matrix_bytes(DType::nvfp4, 512, 14336) + 512ull * 4096 * 2);
  EXPECT_EQ(down.footprint_bytes(), down.cost().bytes.total());
  EXPECT_THROW(block_scaled_linear_cost({1, 8, 32}, DType::bf16), std::logic_error);
}

TEST(BlockScaledLinearAxis, DefaultsRunNvfp4Mxfp4OnAGpuAndTheRunsTypeOnACpu) {
  const SweepGroup* g = OpRegistry::get().find_group("prefill_linear");
  ASSERT_NE(g, nullptr);
  const AxisDecl* a = g->axis("dtype");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->text);
  EXPECT_EQ(a->gpu_text, (std::vector<std::string>{"run", "nvfp4", "mxfp4"}));
  EXPECT_EQ(a->cpu_text, (std::vector<std::string>{"run"}));
  // Applied: the GPU's, the CPU's.
  FakeGpu gpu;
  SweepConfig c;
  apply_defaults(c, gpu);
  EXPECT_EQ(c.axes["prefill_linear"].texts["dtype"], a->gpu_text);
  auto cpu = make_cpu_backend();
  SweepConfig d;
  apply_defaults(d, *cpu);
  EXPECT_EQ(d.axes["prefill_linear"].texts["dtype"], a->cpu_text);
}

TEST(BlockScaledLinearAxis, ABadWordIsOneLineNamingTheAxisAndTheWords) {
  for (const std::string bad : {"fp4", "bf16", "NVFP4", "run,int4"}) {
    SweepConfig c;
    try {
      set_axis(c, "prefill_linear.dtype=" + bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      const std::string w = e.what();
      EXPECT_EQ(w.rfind("--axis prefill_linear.dtype: unknown element type '", 0), 0u) << w;
      EXPECT_NE(w.find("use run, nvfp4 or mxfp4"), std::string::npos) << w;
      EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    }
  }
  const auto r = test::run_cli("run --backend=cpu --axis prefill_linear.dtype=fp4 --verify-only");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("--axis prefill_linear.dtype: unknown element type 'fp4'; use run, nvfp4 or mxfp4"),
            std::string::npos)
      << r.out;
}

TEST(BlockScaledLinearPoints, NamesRequestsAndCostsOfTheDefaultGpuSweep) {
  FakeGpu gpu;
  const auto pts = prefill_points(gpu, {});
  const std::vector<std::string> projections{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  ASSERT_EQ(pts.size(), 3 * projections.size()) << ::testing::PrintToString(names(pts));
  std::size_t i = 0;
  for (const std::string dtype : {"bf16", "nvfp4", "mxfp4"})  // the run's type first, as before
    for (const auto& proj : projections) {
      const Point& p = pts[i++];
      EXPECT_EQ(p.name, "prefill/linear/llama-3.1-8b." + proj + "/" + dtype + "/batch:1/prompt:128/impl:blas");
      EXPECT_EQ(to_string(p.request.dtype), dtype);
      EXPECT_EQ(p.request.impl, Impl::blas);
      EXPECT_EQ(p.request.phase, Phase::prefill);
      EXPECT_EQ(p.op, "linear");
      EXPECT_EQ(p.args.at("batch"), 1u);
      EXPECT_EQ(p.args.at("prompt"), 128u);
      EXPECT_EQ(p.cost.flops, p.request.cost().flops);
      EXPECT_EQ(p.cost.bytes.total(), p.request.cost().bytes.total());
    }
  // The same shape in every type: Llama-3.1-8B's down_proj, N = 4096, K = 14336.
  const Point& down_nv = pts[4 + 3];
  EXPECT_EQ(down_nv.request.shape["M"], 128u);
  EXPECT_EQ(down_nv.request.shape["N"], 4096u);
  EXPECT_EQ(down_nv.request.shape["K"], 14336u);
  EXPECT_EQ(down_nv.cost.bytes.weights, matrix_bytes(DType::nvfp4, 4096, 14336));
  EXPECT_EQ(down_nv.cost.bytes.writes, 128u * 4096 * 2);
}

TEST(BlockScaledLinearPoints, EachBlockScaledPointOnceWhateverTheRunsDtypes) {
  FakeGpu gpu;
  // Two run dtypes: their own points each, the 4-bit ones once (in the first's scope).
  const auto two = names(prefill_points(gpu, {}, {DType::bf16, DType::fp16}));
  EXPECT_EQ(two.size(), 4u * 4);
  auto sorted = two;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  std::map<std::string, int> by_type;
  for (const auto& n : two)
    for (const std::string t : {"/bf16/", "/fp16/", "/nvfp4/", "/mxfp4/"})
      if (n.find(t) != std::string::npos) ++by_type[t];
  EXPECT_EQ(by_type, (std::map<std::string, int>{{"/bf16/", 4}, {"/fp16/", 4}, {"/nvfp4/", 4}, {"/mxfp4/", 4}}));
  // One word: that type alone; a word twice: once.
  for (const auto& n : names(prefill_points(gpu, {"prefill_linear.dtype=nvfp4,nvfp4"}, {DType::bf16, DType::fp16})))
    EXPECT_NE(n.find("/nvfp4/"), std::string::npos) << n;
  EXPECT_EQ(prefill_points(gpu, {"prefill_linear.dtype=nvfp4,nvfp4"}, {DType::bf16, DType::fp16}).size(), 4u);
  // `run` alone is the sweep as it was.
  for (const auto& n : names(prefill_points(gpu, {"prefill_linear.dtype=run"})))
    EXPECT_NE(n.find("/bf16/"), std::string::npos) << n;
}

TEST(BlockScaledLinearPoints, TheCpuSweepHasNone) {
  // Its default is the run's type; asked for, nvfp4 has no CPU implementation, so no point.
  auto cpu = make_cpu_backend();
  for (const auto& p : prefill_points(*cpu, {})) EXPECT_EQ(p.request.dtype, DType::fp32) << p.name;
  EXPECT_TRUE(prefill_points(*cpu, {"prefill_linear.dtype=run,nvfp4"}).size() ==
              prefill_points(*cpu, {"prefill_linear.dtype=run"}).size());
}

}  // namespace
}  // namespace phasebench
