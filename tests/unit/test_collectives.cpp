// The collectives' declaration (harness/src/ops/collectives.cpp and _report.cpp):
// cost and nccl-tests' bus factors, the sweep points of both groups (the model's
// sharding sizes, the power-of-two sizes rounded to whole elements a rank), that
// neither runs without --ops naming it, the point report's bandwidths and the
// model's time, and that measured points and the model's --tp ops meet on one curve.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/model.hpp"
#include "phasebench/ops/collectives.hpp"
#include "phasebench/report.hpp"
#include "phasebench/step_time.hpp"
#include "summary.hpp"
#include "sweep.hpp"

namespace phasebench {
namespace {

// A backend that implements only NCCL's rows (as the CUDA backend does), never run.
class NcclOnlyBackend : public Backend {
 public:
  NcclOnlyBackend() {
    info_.backend = "cuda";
    info_.name = "fake";
    info_.slug = "fake";
  }
  const DeviceInfo& device() const override { return info_; }
  Ceilings ceilings() const override { return {}; }
  void measure_ceilings(const std::vector<DType>&) override {}
  bool implements(std::string_view kind, DType, Impl i) const override { return is_collective(kind) && i == Impl::nccl; }
  bool applies(const OpRequest&) const override { return true; }
  std::optional<std::string> cannot_run(const OpRequest&) const override { return std::nullopt; }
  std::unique_ptr<PreparedOp> prepare(const OpRequest&) override { return nullptr; }
  Sample time(PreparedOp&, const TimingOptions&) override { return {}; }
  void synchronize() override {}
  void profile(PreparedOp&, const std::string&) override {}

 private:
  DeviceInfo info_;
};

TEST(Collectives, CostAndBusFactors) {
  const auto ar = collective_request(kAllReduce, 1000, 4, DType::bf16, Phase::decode);
  EXPECT_EQ(ar.cost().flops, 750u);  // count (n-1)/n additions on each GPU
  EXPECT_EQ(ar.cost().bytes.reads(), 2000u);
  EXPECT_EQ(ar.cost().bytes.writes, 2000u);
  const auto ag = collective_request(kAllGather, 1024, 4, DType::bf16, Phase::decode);
  EXPECT_EQ(ag.cost().flops, 0u);
  EXPECT_EQ(ag.cost().bytes.reads(), 512u);  // its quarter in, the whole out
  EXPECT_EQ(ag.cost().bytes.writes, 2048u);
  EXPECT_EQ(ag.footprint_bytes(), 2560u);
  EXPECT_DOUBLE_EQ(bus_factor(kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(kAllToAll, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(kAllReduce, 1), 0.0);
}

TEST(Collectives, OnlyWhenOpsNamesThem) {
  NcclOnlyBackend b;
  SweepConfig c;
  apply_defaults(c, b);
  EXPECT_TRUE(build_sweep(c, b).empty()) << "a run without --ops has no collectives";
}

TEST(Collectives, ModelSizesPoints) {
  NcclOnlyBackend b;
  SweepConfig c;
  c.groups = {"collectives"};
  c.models = {"llama-3.1-8b", "mixtral-8x7b"};
  c.models_given = true;
  c.axes["collectives"].sizes["gpus"] = {2, 8};
  c.axes["collectives"].sizes["batch"] = {1, 8};
  c.axes["collectives"].sizes["tokens"] = {2048};
  apply_defaults(c, b);
  std::map<std::string, Point> by;
  for (auto& p : build_sweep(c, b)) by.emplace(p.name, p);
  // Per model and GPU count: 2 batches x (all-reduce, all-gather [, all-to-all]) + 1 prefill all-reduce.
  EXPECT_EQ(by.size(), 2u * 5 + 2u * 7);
  const auto& d = by.at("decode/all_reduce/llama-3.1-8b.layer_all_reduce/bf16/gpus:8/batch:8");
  EXPECT_EQ(d.request.shape["count"], 8u * 4096);
  EXPECT_EQ(d.request.impl, Impl::nccl);
  EXPECT_EQ(by.at("prefill/all_reduce/llama-3.1-8b.layer_all_reduce/bf16/gpus:2/tokens:2048").request.shape["count"],
            2048u * 4096);
  EXPECT_EQ(by.at("decode/all_gather/llama-3.1-8b.logits_all_gather/bf16/gpus:8/batch:1").request.shape["count"],
            128256u);  // divides by 8
  EXPECT_EQ(by.at("decode/all_to_all/mixtral-8x7b.moe_dispatch/bf16/gpus:2/batch:8").request.shape["count"],
            8u * 2 * 4096);  // 2 experts a token
  EXPECT_FALSE(by.count("decode/all_to_all/llama-3.1-8b.moe_dispatch/bf16/gpus:2/batch:8")) << "dense: no dispatch";
}

TEST(Collectives, PowerOfTwoSizesRoundToWholeElementsARank) {
  NcclOnlyBackend b;
  SweepConfig c;
  c.groups = {"collectives_sizes"};
  c.axes["collectives_sizes"].sizes["gpus"] = {3};
  c.axes["collectives_sizes"].sizes["bytes"] = {4096};
  c.axes["collectives_sizes"].texts["collective"] = {"all_reduce", "all_gather"};
  apply_defaults(c, b);
  std::map<std::string, Point> by;
  for (auto& p : build_sweep(c, b)) by.emplace(p.name, p);
  ASSERT_EQ(by.size(), 2u) << (by.empty() ? "" : by.begin()->first);
  EXPECT_EQ(by.at("free/all_reduce/sizes/bf16/gpus:3/bytes:4096").request.shape["count"], 2048u);
  EXPECT_EQ(by.at("free/all_gather/sizes/bf16/gpus:3/bytes:4092").request.shape["count"], 2046u);  // 682 a rank
}

TEST(Collectives, PointReportHasNcclTestsBandwidthsAndTheModelsTime) {
  const auto spec = GpuTable::load().get("h200-sxm");
  RunView run;
  run.spec = &spec;
  const auto* report = OpRegistry::get().point_report(kAllReduce);
  ASSERT_NE(report, nullptr);
  Point p;
  p.request = collective_request(kAllReduce, 524288, 8, DType::bf16, Phase::decode);  // 1 MiB
  const auto j = report->json(p, 100e-6, run);
  const double algbw = 1048576 / 100e-6 / 1e9, one_way = spec.interconnect_gbps / 2;
  EXPECT_NEAR(j.at("algbw_gbs").get<double>(), algbw, 1e-9);
  EXPECT_NEAR(j.at("busbw_gbs").get<double>(), algbw * 1.75, 1e-9);
  EXPECT_NEAR(j.at("busbw_of_link").get<double>(), algbw * 1.75 / one_way, 1e-12);
  // NCCL's ring latency from gpus.json (base + 2(n-1) steps) and the bus bytes over one direction.
  const double want = spec.collective_base_us * 1e-6 + 14 * spec.collective_step_us * 1e-6 + 1048576 * 1.75 / (one_way * 1e9);
  EXPECT_NEAR(j.at("predicted_s").get<double>(), want, 1e-12);
  // Without a spec: the bandwidths, and no link to hold them against.
  const auto bare = report->json(p, 100e-6, RunView{});
  EXPECT_TRUE(bare.at("busbw_of_link").is_null());
}

TEST(Collectives, MeasuredPointsAndTheModelsOpsMeetOnOneCurve) {
  const auto& decl = OpRegistry::get().op(kAllReduce);
  const nlohmann::json point = {{"op_kind", "all_reduce"}, {"dtype", "bf16"}, {"shape", {{"count", 4096}, {"gpus", 8}}}};
  const auto m = decl.match_point(point);
  ASSERT_TRUE(m.has_value());
  const auto model = load_model("llama-3.1-70b");
  const LayerOp op{"attn_all_reduce", "all_reduce", Shape{{"bytes", 8192}, {"gpus", 8}}, {}};
  const Precision prec{};
  const auto s = decl.match_step_op(StepOpView{op, model, prec, 1, DType::bf16, DType::bf16});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(m->key, s->key);
  EXPECT_EQ(m->axes, s->axes);  // bytes: 4096 bf16 elements
  EXPECT_FALSE(decl.match_point({{"op_kind", "all_reduce"}, {"shape", {{"count", 4096}, {"gpus", 8}}}}).has_value())
      << "no dtype: not placed";
}

TEST(Collectives, OnTheCpuBackendTheRunSaysWhereTheyRun) {
  const auto r = test::run_cli("run --backend=cpu --ops collectives --verify-only");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("NCCL's included, run on the CUDA backend only"), std::string::npos) << r.out;
}

TEST(Collectives, TheSummaryHoldsThemAgainstTheLinkNotTheRoofline) {
  // A measured all-reduce whose HBM fraction of roofline is tiny: the fraction table counts
  // it and says "link" where a fraction would be; the collectives' own table has its busbw.
  nlohmann::json p = {{"status", "ok"}, {"phase", "decode"}, {"op", "all_reduce"}, {"op_kind", "all_reduce"},
                      {"impl", "nccl"}, {"dtype", "bf16"}, {"shape", {{"count", 524288}, {"gpus", 8}}},
                      {"time", {{"median_s", 100e-6}}},
                      {"roofline", {{"fraction_of_roofline", 0.004}, {"bandwidth_ceiling_source", "datasheet"}}},
                      {"collective", {{"algbw_gbs", 10.49}, {"busbw_gbs", 18.35}, {"busbw_of_link", 0.0408},
                                      {"predicted_s", 19.1e-6}}}};
  const std::string name = "decode/all_reduce/m.layer_all_reduce/bf16/gpus:8/batch:64";
  const nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 2}}}}},
                              {"benchmarks", {{{"name", name}, {"run_name", name}, {"run_type", "iteration"},
                                               {"phasebench", p}}}}};
  const auto s = summarize(doc);
  EXPECT_EQ(s.find("0.4%"), std::string::npos) << s;
  EXPECT_NE(s.find("link: an operation a link bounds"), std::string::npos) << s;
  EXPECT_NE(s.find("collectives (NCCL)"), std::string::npos) << s;
  EXPECT_NE(s.find("18.4"), std::string::npos) << "busbw in the collectives' table\n" << s;
}

TEST(Collectives, ServeReadsMeasuredCollectivesAsTimes) {
  // Two measured all-reduces over 8 GPUs (8 KiB in 20 us, 32 KiB in 30 us): a step's
  // 16 KiB all-reduce lies halfway in log bytes, 25 us, whatever the roofline says.
  auto point = [](std::uint64_t count, double t) {
    return nlohmann::json{{"name", "x"},
                          {"phasebench", {{"status", "ok"}, {"op_kind", "all_reduce"}, {"dtype", "bf16"},
                                          {"shape", {{"count", count}, {"gpus", 8}}}, {"time", {{"median_s", t}}}}}};
  };
  const nlohmann::json results = {{"benchmarks", {point(4096, 20e-6), point(16384, 30e-6), point(16384, 40e-6)}}};
  const auto curves = MeasuredCurves::from_results(results, "test");
  EXPECT_EQ(curves.curves(), 1u);
  const LayerOp op{"attn_all_reduce", "all_reduce", Shape{{"bytes", 16384}, {"gpus", 8}}, {}};
  const auto model = load_model("llama-3.1-70b");
  const Precision prec{};
  const auto m = OpRegistry::get().op(kAllReduce).match_step_op(StepOpView{op, model, prec, 1, DType::bf16, DType::bf16});
  ASSERT_TRUE(m.has_value());
  const auto hit = curves.at(*m);
  ASSERT_TRUE(hit.has_value());
  EXPECT_NEAR(hit->time_s, 25e-6, 1e-12);  // the faster of the two 32 KiB points
  StepMatch outside = *m;
  outside.axes = {65536};
  EXPECT_FALSE(curves.at(outside).has_value()) << "outside the measured sizes: the model's own time";
}

TEST(Collectives, ModelTpTakesMeasuredCollectives) {
  // Llama-3.1-70B over 8 GPUs, batch 1: each decode all-reduce is 1 x 8192 bf16 = 16 KiB,
  // halfway in log bytes between two measured points (8 KiB in 20 us, 32 KiB in 30 us).
  auto point = [](std::uint64_t count, double t) {
    return nlohmann::json{{"name", "x"},
                          {"phasebench", {{"status", "ok"}, {"op_kind", "all_reduce"}, {"dtype", "bf16"},
                                          {"shape", {{"count", count}, {"gpus", 8}}}, {"time", {{"median_s", t}}}}}};
  };
  const auto path = test::cli_tmp("collectives_measured.json");
  {
    std::ofstream f(path);
    f << nlohmann::json{{"benchmarks", {point(4096, 20e-6), point(16384, 30e-6)}}}.dump();
  }
  const auto r = test::run_cli("model --model llama-3.1-70b --tp 8 --gpu h200-sxm --batch 1 --prompt 1024 --json "
                               "--collectives " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("tensor_parallel").at("collectives_measured_from"), path);
  int measured = 0, modelled = 0;
  for (const char* phase : {"prefill", "decode"})
    for (const auto& op : j.at("phases").at(phase).at("ops")) {
      if (!op.contains("link_bytes")) continue;
      if (op.at("measured").get<bool>()) {
        ++measured;
        EXPECT_EQ(std::string(phase), "decode") << op.dump();
        EXPECT_NEAR(op.at("time_s").get<double>(), 25e-6, 1e-12) << op.dump();
        EXPECT_TRUE(op.at("latency_s").is_null());
      } else {
        ++modelled;  // the prefill all-reduces (16 MiB) and the logits all-gather: outside the points
        EXPECT_TRUE(op.at("latency_s").is_number());
      }
    }
  EXPECT_GT(measured, 0);
  EXPECT_GT(modelled, 0);
  const auto text = test::run_cli("model --model llama-3.1-70b --tp 8 --gpu h200-sxm --batch 1 --collectives " + path);
  EXPECT_NE(text.out.find("collectives measured: the ops the points of " + path), std::string::npos) << text.out;
  // Without --tp, or a file with no collectives: one line, exit status 2.
  const auto no_tp = test::run_cli("model --model llama-3.1-70b --collectives " + path);
  EXPECT_EQ(no_tp.status, 2) << no_tp.out;
  EXPECT_NE(no_tp.out.find("give --tp N"), std::string::npos) << no_tp.out;
  const auto empty = test::cli_tmp("collectives_none.json");
  {
    std::ofstream f(empty);
    f << R"({"benchmarks": []})";
  }
  const auto none = test::run_cli("model --model llama-3.1-70b --tp 8 --collectives " + empty);
  EXPECT_EQ(none.status, 2) << none.out;
  EXPECT_NE(none.out.find("no measured point"), std::string::npos) << none.out;
}

}  // namespace
}  // namespace phasebench
