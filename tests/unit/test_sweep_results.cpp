// Sweeps (size lists, names, bad configs), the results file (on disk from its first point,
// valid from then on, bad files refused), the summary, and the decode linear crossings a run records.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "backend.hpp"
#include "phasebench/ops/linear.hpp"
#include "standing.hpp"
#include "phasebench/error.hpp"
#include "results.hpp"
#include "summary.hpp"
#include "sweep.hpp"

using namespace phasebench;
namespace fs = std::filesystem;

TEST(Sweep, SizeLists) {
  EXPECT_EQ(parse_size_list("1,2,4", "--x"), (std::vector<std::uint64_t>{1, 2, 4}));
  EXPECT_EQ(parse_size_list("1..16", "--x"), (std::vector<std::uint64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(parse_size_list("64-256,3", "--x"), (std::vector<std::uint64_t>{3, 64, 128, 256}));
  EXPECT_THROW(parse_size_list("", "--x"), InputError);
  EXPECT_THROW(parse_size_list("0", "--x"), InputError);
  EXPECT_THROW(parse_size_list("-4", "--x"), InputError);
  EXPECT_THROW(parse_size_list("16..1", "--x"), InputError);
  EXPECT_THROW(parse_size_list("abc", "--x"), InputError);
  EXPECT_THROW(parse_size_list("99999999999999999999999", "--x"), InputError);
  EXPECT_EQ(parse_shape("1,2,3").N, 2u);
  EXPECT_EQ(parse_shape("4096x8192x128").K, 128u);
  EXPECT_THROW(parse_shape("1,2"), InputError);
  EXPECT_THROW(parse_shape("1,2,3,4"), InputError);
}

TEST(Sweep, NamesReadAsPathsAndCarryStructuredParameters) {
  auto b = make_cpu_backend();
  SweepConfig c;
  c.axes["decode_linear"].sizes["batch"] = {1, 32};
  c.groups = {"decode_linear", "decode_attention"};
  apply_defaults(c, *b);
  const auto pts = build_sweep(c, *b);
  bool saw_own = false, saw_blas32 = false, saw_own32 = false, saw_paged = false;
  for (const auto& p : pts) {
    if (p.name == "decode/linear/llama-3.1-8b.down_proj/fp32/batch:1/impl:own") {
      saw_own = true;
      EXPECT_EQ(p.phase, "decode");
      EXPECT_EQ(p.target, "down_proj");
      EXPECT_EQ(p.args.at("batch"), 1u);
      EXPECT_EQ(p.request.shape["N"], 4096u);
      EXPECT_EQ(p.request.shape["K"], 14336u);
    }
    if (p.name == "decode/linear/llama-3.1-8b.down_proj/fp32/batch:32/impl:blas") saw_blas32 = true;
    if (p.name == "decode/linear/llama-3.1-8b.down_proj/fp32/batch:32/impl:own") saw_own32 = true;
    if (p.op == "decode_attention_paged") {
      saw_paged = true;
      EXPECT_EQ(p.args.at("page_size"), 16u);
      EXPECT_NE(p.name.find("/page:16"), std::string::npos);
    }
  }
  EXPECT_TRUE(saw_own);
  EXPECT_TRUE(saw_blas32);
  EXPECT_FALSE(saw_own32);  // the own GEMV is for batch <= 16
  EXPECT_TRUE(saw_paged);
}

TEST(Sweep, BadConfig) {
  auto b = make_cpu_backend();
  SweepConfig c;
  c.groups = {"decode_everything"};
  apply_defaults(c, *b);
  EXPECT_THROW(build_sweep(c, *b), InputError);
  c.groups.clear();
  SweepConfig odd_page;
  odd_page.axes["kv_append"].sizes["page_size"] = {10};  // not a multiple of 16
  EXPECT_THROW(apply_defaults(odd_page, *b), InputError);
  c.models = {"no-such-model"};
  EXPECT_THROW(build_sweep(c, *b), InputError);
}

TEST(Results, FileAppearsWithItsFirstPointAndTheOldOneStaysUntilThen) {
  const auto dir = fs::temp_directory_path() / "phasebench-results-test";
  fs::remove_all(dir);
  const auto path = (dir / "sub" / "r.json").string();
  ResultsFile f(path, {{"backend", "cpu"}});
  EXPECT_TRUE(fs::is_directory(dir / "sub")) << "the folder is made (and tried) before anything runs";
  f.write();  // the context, before any point: nothing on disk yet
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp")) << "the trial write leaves nothing behind";
  EXPECT_FALSE(f.written());
  f.add({{"name", "x"}, {"real_time", 1.0}});
  f.write();
  EXPECT_TRUE(f.written());
  auto j = load_results(path);
  EXPECT_EQ(j.at("benchmarks").size(), 1u);
  EXPECT_EQ(j.at("context").at("phasebench").at("complete"), false);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // --overwrite: the old file stays whole until the new run's first point.
  const auto old = (dir / "old.json").string();
  std::ofstream(old) << "measured yesterday";
  {
    ResultsFile g(old, {{"backend", "cpu"}}, true);
    g.set_phasebench_field("ceilings", nlohmann::json::object());
    g.write();
    std::ifstream in(old);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "measured yesterday");
    g.add({{"name", "y"}, {"real_time", 2.0}});
    g.write();
  }
  EXPECT_EQ(load_results(old).at("benchmarks").size(), 1u);
  // A run that ends with no point at all still leaves its (complete, empty) file.
  const auto empty = (dir / "empty.json").string();
  {
    ResultsFile e(empty, {{"backend", "cpu"}});
    e.set_complete(true);
    e.write();
  }
  EXPECT_EQ(load_results(empty).at("context").at("phasebench").at("complete"), true);
  fs::remove_all(dir);
}

TEST(Results, UnwritablePathIsReportedBeforeRunning) {
  EXPECT_THROW(ResultsFile("/proc/phasebench/r.json", nlohmann::json::object()), InputError);
  EXPECT_THROW(ResultsFile(fs::temp_directory_path().string(), nlohmann::json::object()), InputError);  // a folder
  const auto missing = (fs::temp_directory_path() / "phasebench-no-such-folder").string();
  fs::remove_all(missing);
  EXPECT_THROW(ResultsFile(missing + "/", nlohmann::json::object()), InputError);  // a folder's path, not a file's
  EXPECT_FALSE(fs::exists(missing)) << "a refused path creates nothing";
  EXPECT_THROW(ResultsFile("", nlohmann::json::object()), InputError);
}

TEST(Results, LoadRejectsBadFiles) {
  const auto dir = fs::temp_directory_path() / "phasebench-bad-results";
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  auto msg = [](const std::string& p) {
    try {
      load_results(p);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(write("trunc.json", "{\"context\": {\"phasebench\": {")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(msg(write("gb.json", R"({"context": {}, "benchmarks": []})")).find("plain Google Benchmark"), std::string::npos);
  EXPECT_NE(msg(write("v9.json", R"({"context": {"phasebench": {"schema_version": 9}}, "benchmarks": []})")).find("schema version 9"),
            std::string::npos);
  EXPECT_NE(msg((dir / "missing.json").string()).find("cannot read"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Summary, BestMedianAndCrossing) {
  // One layer (N=K=1024, fp32) on P=100 GF/s, W=10 GB/s (ridge 10): flat time while memory-bound,
  // then growing with the batch.
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 1}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](std::uint64_t M, double t, double frac) {
    const double flops = 2.0 * M * 1024 * 1024, bytes = 4.0 * (1024 * 1024 + 2 * M * 1024);
    const std::string name = "decode/linear/m.down_proj/fp32/batch:" + std::to_string(M) + "/manual_time";
    doc["benchmarks"].push_back(
        {{"name", name},
         {"run_name", name},
         {"run_type", "iteration"},
         {"phasebench",
          {{"phase", "decode"}, {"op", "gemv"}, {"op_kind", "linear"}, {"model", "m"}, {"target", "down_proj"},
           {"dtype", "fp32"}, {"status", "ok"}, {"shape", {{"M", M}, {"N", 1024}, {"K", 1024}}}, {"flops", flops},
           {"bytes", {{"total", bytes}}}, {"time", {{"median_s", t}}},
           {"roofline", {{"fraction_of_roofline", frac}, {"peak_flops_per_s", 100e9}, {"bandwidth_bytes_per_s", 10e9},
                         {"ridge_flop_per_byte", 10.0}, {"bandwidth_ceiling_source", "measured"}}}}}});
  };
  add(1, 4.2e-4, 0.5);   // ~10 GB/s: the best bandwidth
  add(16, 4.4e-4, 0.7);  // 76 GF/s, ~10 GB/s
  add(64, 1.4e-3, 0.9);  // 96 GF/s (the best FLOP/s), 3.4 GB/s: compute side
  const auto s = summarize(doc);
  EXPECT_NE(s.find("90.0%"), std::string::npos);  // best
  EXPECT_NE(s.find("70.0%"), std::string::npos);  // median
  EXPECT_NE(s.find("m.down_proj fp32"), std::string::npos);
  // P_eff/W_eff = 95.9e9 / 10.0e9 = 9.6 -> first M with 2M*1024^2 / (4*(1024^2 + 2048 M)) >= 9.6 is 20;
  // predicted with the ridge 10: M = 21.
  EXPECT_NE(s.find("20         21"), std::string::npos) << s;
  // The same numbers as the run records them (schema 2).
  const auto rec = decode_linear_crossings(standing_points(doc), run_context(doc));
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].at("layer"), "m.down_proj");
  EXPECT_EQ(rec[0].at("batches"), nlohmann::json({1, 16, 64}));
  EXPECT_EQ(rec[0].at("measured").at("batch"), 20);
  EXPECT_EQ(rec[0].at("measured").at("text"), "20");
  EXPECT_EQ(rec[0].at("predicted").at("measured").at("batch"), 21);
  EXPECT_EQ(rec[0].at("ceiling_used"), "measured");
  // A file that records its crossings is summarised from them, not recomputed.
  auto recorded = doc;
  auto changed = rec;
  changed[0]["measured"]["text"] = "recorded-17";
  recorded["context"]["phasebench"]["decode_linear_crossings"] = changed;
  EXPECT_NE(summarize(recorded).find("recorded-17"), std::string::npos) << summarize(recorded);
  // While the largest batch is still at the bandwidth plateau the crossing is beyond the sweep.
  doc["benchmarks"].erase(doc["benchmarks"].end() - 1);
  EXPECT_NE(summarize(doc).find("> 16"), std::string::npos) << summarize(doc);
  EXPECT_TRUE(decode_linear_crossings(standing_points(doc), run_context(doc))[0].at("measured").at("batch").is_null());
}

TEST(Summary, StandingEntryOfEachPoint) {
  // Iterations stand for their point (the last one); aggregates only when a point
  // has nothing else, and then the median.
  nlohmann::json doc = {{"benchmarks", nlohmann::json::array()}};
  auto entry = [](const std::string& run, const std::string& type, const std::string& agg, int tag) {
    nlohmann::json e = {{"name", run + agg}, {"run_name", run}, {"run_type", type}, {"phasebench", {{"tag", tag}}}};
    if (!agg.empty()) e["aggregate_name"] = agg;
    return e;
  };
  doc["benchmarks"] = {entry("a", "iteration", "", 1), entry("b", "aggregate", "mean", 2), entry("a", "iteration", "", 3),
                       entry("a", "aggregate", "median", 4), entry("b", "aggregate", "median", 5)};
  const auto pts = standing_points(doc);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0]->at("phasebench").at("tag"), 3);
  EXPECT_EQ(pts[1]->at("phasebench").at("tag"), 5);
}

TEST(Summary, RepetitionsCountOncePerPoint) {
  // --benchmark_repetitions=3: three iteration entries and a median aggregate of
  // one point, all with the point's fields; the summary counts one point.
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 1}}}}}, {"benchmarks", nlohmann::json::array()}};
  const std::string run = "decode/decode_attention/m/fp32/batch:1/context:64/manual_time";
  const nlohmann::json fields = {{"phase", "decode"}, {"op", "decode_attention"}, {"status", "ok"},
                                 {"roofline", {{"fraction_of_roofline", 0.5}, {"bandwidth_ceiling_source", "measured"}}}};
  for (int i = 0; i < 3; ++i)
    doc["benchmarks"].push_back({{"name", run}, {"run_name", run}, {"run_type", "iteration"}, {"phasebench", fields}});
  doc["benchmarks"].push_back({{"name", run + "_median"}, {"run_name", run}, {"run_type", "aggregate"},
                               {"aggregate_name", "median"}, {"phasebench", fields}});
  doc["benchmarks"].push_back({{"name", run + "_mean"}, {"run_name", run}, {"run_type", "aggregate"}, {"aggregate_name", "mean"}});
  const auto s = summarize(doc);
  EXPECT_NE(s.find("decode_attention   -         1    50.0%    50.0%"), std::string::npos) << s;
}

TEST(Summary, SaysWhenTheReadBandwidthMovedDuringTheRun) {
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 1}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto check = [&](double end) {
    doc["context"]["phasebench"]["bandwidth_check"] = {{"start_bytes_per_s", 30e9}, {"end_bytes_per_s", end}};
    return summarize(doc);
  };
  const auto moved = check(24e9);
  EXPECT_NE(moved.find("30.0 GB/s before the sweep and 24.0 GB/s after it (-20%)"), std::string::npos) << moved;
  EXPECT_EQ(check(29e9).find("bandwidth was"), std::string::npos);  // within 10%: nothing to say
}

TEST(Summary, PagedAttentionAgainstContiguousOnTheSameShapes) {
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 1}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](const std::string& op, std::uint64_t B, std::uint64_t L, std::uint64_t page, double t) {
    nlohmann::json args = {{"batch", B}, {"context", L}};
    if (page) args["page_size"] = page;
    const std::string name = "decode/" + op + "/m/fp32/batch:" + std::to_string(B) + "/context:" + std::to_string(L) +
                             (page ? "/page:" + std::to_string(page) : "");
    doc["benchmarks"].push_back(
        {{"name", name},
         {"phasebench",
          {{"phase", "decode"}, {"op", op}, {"model", "m"}, {"dtype", "fp32"}, {"cache", "cold"}, {"status", "ok"},
           {"args", args}, {"shape", {{"B", B}, {"Hq", 32}, {"Hkv", 8}, {"L", L}, {"D", 128}}},
           {"time", {{"median_s", t}}},
           {"roofline", {{"fraction_of_roofline", 0.5}, {"bandwidth_ceiling_source", "measured"}}}}}});
  };
  add("decode_attention", 8, 1024, 0, 1.0e-3);
  add("decode_attention_paged", 8, 1024, 16, 1.25e-3);  // 1.25
  add("decode_attention", 8, 4096, 0, 4.0e-3);
  add("decode_attention_paged", 8, 4096, 16, 4.0e-3);  // 1.00
  add("decode_attention_paged", 8, 4096, 64, 5.0e-3);  // 1.25, its own row
  add("decode_attention_paged", 32, 4096, 16, 1.0);     // no contiguous point: not counted
  const auto s = summarize(doc);
  EXPECT_NE(s.find("paged vs contiguous"), std::string::npos) << s;
  EXPECT_NE(s.find("  16              2     1.12     1.00     1.25"), std::string::npos) << s;
  EXPECT_NE(s.find("  64              1     1.25     1.25     1.25"), std::string::npos) << s;
  // Without contiguous points there is nothing to compare and no section.
  doc["benchmarks"].erase(doc["benchmarks"].begin());
  doc["benchmarks"].erase(doc["benchmarks"].begin() + 1);
  EXPECT_EQ(summarize(doc).find("paged vs contiguous"), std::string::npos) << summarize(doc);
}

TEST(Summary, PairedReadColumnWhenPointsCarryIt) {
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 1}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](const std::string& name, const std::string& phase, const std::string& op, double frac, double paired) {
    nlohmann::json p = {{"phase", phase}, {"op", op}, {"status", "ok"},
                        {"roofline", {{"fraction_of_roofline", frac}, {"bandwidth_ceiling_source", "measured"}}}};
    if (paired > 0) p["paired_read"] = {{"fraction_median", paired}, {"pairs", 10}};
    doc["benchmarks"].push_back({{"name", name}, {"phasebench", p}});
  };
  add("a", "decode", "decode_attention", 0.6, 0);
  EXPECT_EQ(summarize(doc).find("paired"), std::string::npos) << summarize(doc);
  doc["benchmarks"].clear();
  add("a", "decode", "decode_attention", 0.6, 0.8);
  add("b", "decode", "decode_attention", 0.7, 0.9);
  add("c", "decode", "decode_attention", 0.65, 0);  // below 4x LLC: no pairs
  add("d", "prefill", "linear", 0.9, 0);     // compute-bound: none
  const auto s = summarize(doc);
  EXPECT_NE(s.find("  decode   decode_attention   -         3    70.0%    65.0%        0       0    85.0% (2)"), std::string::npos) << s;
  EXPECT_NE(s.find("  prefill  linear             -         1    90.0%    90.0%        0       0        -"), std::string::npos) << s;
  EXPECT_NE(s.find("paired: median over the memory-bound points"), std::string::npos) << s;
}

TEST(Summary, PointsAboveTheirRooflineAreExplained) {
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 2}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](const std::string& name, double frac, const char* cause) {
    nlohmann::json p = {{"phase", "decode"}, {"op", "decode_attention"}, {"status", "ok"},
                        {"roofline", {{"fraction_of_roofline", frac}, {"bandwidth_ceiling_source", "measured"}}}};
    if (cause) p["above_roofline"] = {{"fraction", frac}, {"likely_cause", cause}};
    doc["benchmarks"].push_back({{"name", name}, {"phasebench", p}});
  };
  add("a", 0.9, nullptr);
  EXPECT_EQ(summarize(doc).find("above 100%"), std::string::npos);
  add("b", 1.3, "data cached: x");
  add("c", 1.2, "data cached: x");
  add("d", 1.1, "ceiling low: y");
  const auto s = summarize(doc);
  EXPECT_NE(s.find("note: 3 point(s) above 100% of their roofline"), std::string::npos) << s;
  EXPECT_NE(s.find("2 x data cached: x"), std::string::npos) << s;
  EXPECT_NE(s.find("1 x ceiling low: y"), std::string::npos) << s;
}

TEST(Summary, Int4AgainstBf16OnTheSameShapes) {
  // Our bf16 and int4 GEMVs on one projection at batches 1 and 8; a blas row and
  // an int4 point without a bf16 twin are left out.
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 2}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](const std::string& op, const std::string& impl, std::uint64_t B, double t, const std::string& target) {
    const std::string name = "decode/" + op + "/m." + target + "/bf16/batch:" + std::to_string(B) + "/impl:" + impl;
    doc["benchmarks"].push_back({{"name", name},
                                 {"run_name", name},
                                 {"run_type", "iteration"},
                                 {"phasebench",
                                  {{"phase", "decode"}, {"op", op}, {"model", "m"}, {"target", target}, {"impl", impl},
                                   {"dtype", "bf16"}, {"status", "ok"}, {"args", {{"batch", B}}},
                                   {"time", {{"median_s", t}}}}}});
  };
  add("linear", "own", 1, 400e-6, "down_proj");
  add("linear", "blas", 1, 900e-6, "down_proj");
  add("linear_int4", "own", 1, 125e-6, "down_proj");
  add("linear", "own", 8, 420e-6, "down_proj");
  add("linear_int4", "own", 8, 210e-6, "down_proj");
  add("linear_int4", "own", 1, 50e-6, "o_proj");
  const auto s = summarize(doc);
  EXPECT_NE(s.find("int4 weights vs bf16"), std::string::npos) << s;
  EXPECT_NE(s.find("m.down_proj                               1     400.0 us     125.0 us     3.20x"), std::string::npos) << s;
  EXPECT_NE(s.find("m.down_proj                               8     420.0 us     210.0 us     2.00x"), std::string::npos) << s;
  EXPECT_EQ(s.find("m.o_proj"), std::string::npos) << s;
}

TEST(Summary, Fp4AgainstBf16OnTheSameShapesPerFormat) {
  // Our bf16 GEMV and FP4 GEMV in both formats on one projection at batch 1; an FP4
  // point without a bf16 twin is left out.
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 2}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](const std::string& op, const std::string& format, double t, const std::string& target) {
    const std::string name = "decode/" + op + "/m." + target + "/bf16/batch:1" +
                             (format.empty() ? "" : "/format:" + format) + "/impl:own";
    nlohmann::json args = {{"batch", 1}};
    if (!format.empty()) args["format"] = format;
    doc["benchmarks"].push_back({{"name", name},
                                 {"run_name", name},
                                 {"run_type", "iteration"},
                                 {"phasebench",
                                  {{"phase", "decode"}, {"op", op}, {"model", "m"}, {"target", target}, {"impl", "own"},
                                   {"dtype", "bf16"}, {"status", "ok"}, {"args", args},
                                   {"time", {{"median_s", t}}}}}});
  };
  add("linear", "", 400e-6, "down_proj");
  add("linear_fp4", "mxfp4", 125e-6, "down_proj");
  add("linear_fp4", "nvfp4", 160e-6, "down_proj");
  add("linear_fp4", "mxfp4", 50e-6, "o_proj");
  const auto s = summarize(doc);
  EXPECT_NE(s.find("FP4 weights vs bf16"), std::string::npos) << s;
  EXPECT_NE(s.find("m.down_proj                               1   mxfp4     400.0 us     125.0 us     3.20x"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("m.down_proj                               1   nvfp4     400.0 us     160.0 us     2.50x"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("m.o_proj"), std::string::npos) << s;
}

TEST(Summary, EachImplementationHasItsOwnRow) {
  // Our GEMV at 30% and the BLAS row at 90% on the same layers: one median over
  // both (60%) would describe neither (issue 27).
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](const std::string& impl, std::uint64_t B, double frac, double paired) {
    const std::string name = "decode/gemv/m.o_proj/fp32/batch:" + std::to_string(B) + "/impl:" + impl;
    nlohmann::json p = {{"phase", "decode"}, {"op", "gemv"}, {"impl", impl}, {"status", "ok"},
                        {"roofline", {{"fraction_of_roofline", frac}, {"bandwidth_ceiling_source", "measured"}}}};
    if (paired > 0) p["paired_read"] = {{"fraction_median", paired}, {"pairs", 5}};
    doc["benchmarks"].push_back({{"name", name}, {"run_name", name}, {"run_type", "iteration"}, {"phasebench", p}});
  };
  add("own", 1, 0.3, 0.31);
  add("own", 8, 0.3, 0.29);
  add("blas", 1, 0.9, 0.91);
  add("blas", 8, 0.9, 0.89);
  const auto s = summarize(doc);
  EXPECT_NE(s.find("  decode   gemv               own       2    30.0%    30.0%        0       0    30.0% (2)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  decode   gemv               blas      2    90.0%    90.0%        0       0    90.0% (2)"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("60.0%"), std::string::npos) << s;
}

TEST(Summary, Fp8CacheLineStatesTheBytesOfTheRunsDtype) {
  // fp32 run: the fp8 cache is 4x narrower than the fp32 one (not "about half").
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 4}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](std::uint64_t kv_bits, double bytes, double t) {
    nlohmann::json args = {{"batch", 8}, {"context", 1024}};
    if (kv_bits) args["kv_bits"] = kv_bits;
    const std::string name = "decode/decode_attention/m/fp32/batch:8/context:1024" + std::string(kv_bits ? "/kv:fp8" : "");
    doc["benchmarks"].push_back(
        {{"name", name},
         {"phasebench",
          {{"phase", "decode"}, {"op", "decode_attention"}, {"op_kind", "decode_attention"}, {"model", "m"},
           {"dtype", "fp32"}, {"cache", "cold"}, {"status", "ok"}, {"args", args}, {"shape", {{"B", 8}, {"Hq", 32}, {"Hkv", 8}, {"L", 1024}, {"D", 128}}},
           {"bytes", {{"total", bytes}}}, {"time", {{"median_s", t}}},
           {"roofline", {{"fraction_of_roofline", 0.5}, {"bandwidth_ceiling_source", "measured"}}}}}});
  };
  add(0, 4.0e8, 4.0e-3);
  add(8, 1.0e8, 1.6e-3);
  const auto s = summarize(doc);
  EXPECT_NE(s.find("fp8 cache vs the run's dtype"), std::string::npos) << s;
  EXPECT_EQ(s.find("about half"), std::string::npos) << s;
  EXPECT_NE(s.find("  fp32   contiguous        1    2.50x    2.50x    2.50x    4.00x"), std::string::npos) << s;
}

TEST(Summary, MeasuredCrossingKeepsToThePointsBoundLabels) {
  // One layer (N=K=1024, fp32) whose points are labelled by the ridge of the
  // ceilings in use (P=100 GF/s, W=10 GB/s: ridge 10, batch 21): memory-bound at
  // batches 1 and 16, compute-bound at 64 and 128. Its own best rates
  // (P_eff/W_eff = 335 / 10.3 GB/s) would put the crossing at 75, saying
  // memory-bound where the points at 64 say compute-bound.
  nlohmann::json doc = {{"context", {{"phasebench", {{"schema_version", 3}}}}}, {"benchmarks", nlohmann::json::array()}};
  auto add = [&](std::uint64_t M, double t) {
    const double flops = 2.0 * M * 1024 * 1024, bytes = 4.0 * (1024 * 1024 + 2 * M * 1024);
    const std::string name = "decode/gemv/m.down_proj/fp32/batch:" + std::to_string(M);
    const double intensity = flops / bytes;
    doc["benchmarks"].push_back(
        {{"name", name},
         {"run_name", name},
         {"run_type", "iteration"},
         {"phasebench",
          {{"phase", "decode"}, {"op", "gemv"}, {"op_kind", "linear"}, {"model", "m"}, {"target", "down_proj"},
           {"dtype", "fp32"}, {"status", "ok"}, {"shape", {{"M", M}, {"N", 1024}, {"K", 1024}}}, {"flops", flops},
           {"bytes", {{"total", bytes}}}, {"time", {{"median_s", t}}},
           {"bound", intensity < 10 ? "memory" : "compute"},
           {"roofline", {{"fraction_of_roofline", 0.5}, {"peak_flops_per_s", 100e9}, {"bandwidth_bytes_per_s", 10e9},
                         {"ridge_flop_per_byte", 10.0}, {"bandwidth_ceiling_source", "measured"},
                         {"bound", intensity < 10 ? "memory" : "compute"}}}}}});
  };
  add(1, 4.2e-4);    // ~10 GB/s
  add(16, 4.4e-4);   // ~10 GB/s
  add(64, 4.6e-4);   // still ~9.7 GB/s: labelled compute-bound all the same
  add(128, 0.8e-3);  // 335 GF/s: the layer's own P_eff
  auto rec = decode_linear_crossings(standing_points(doc), run_context(doc));
  ASSERT_EQ(rec.size(), 1u);
  const auto& m = rec[0].at("measured");
  EXPECT_EQ(m.at("labels").at("last_memory"), 16) << m.dump();
  EXPECT_EQ(m.at("labels").at("first_compute"), 64) << m.dump();
  ASSERT_TRUE(m.at("batch").is_number()) << m.dump();
  EXPECT_GT(m.at("batch").get<int>(), 16) << m.dump();
  EXPECT_LE(m.at("batch").get<int>(), 64) << m.dump();
  EXPECT_TRUE(m.contains("own_ridge")) << m.dump();
  const auto s = summarize(doc);
  EXPECT_NE(s.find("its points are labelled memory-bound up to batch 16 and compute-bound from batch 64"),
            std::string::npos)
      << s;
  // Still streaming at the largest batch while it is labelled compute-bound: not "> 64".
  doc["benchmarks"].erase(doc["benchmarks"].end() - 1);
  rec = decode_linear_crossings(standing_points(doc), run_context(doc));
  EXPECT_EQ(rec[0].at("measured").at("text"), "64") << rec[0].dump();
  EXPECT_EQ(rec[0].at("measured").at("own_ridge").at("text"), "> 64") << rec[0].dump();
  // Where the labels and the layer's ridge agree nothing moves.
  doc["benchmarks"].erase(doc["benchmarks"].end() - 1);
  rec = decode_linear_crossings(standing_points(doc), run_context(doc));
  EXPECT_EQ(rec[0].at("measured").at("text"), "> 16") << rec[0].dump();
  EXPECT_FALSE(rec[0].at("measured").contains("own_ridge")) << rec[0].dump();
}
