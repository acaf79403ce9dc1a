// The summary's "ours vs the libraries" (bench/versus.cpp) on synthetic points: pairs on the
// key less impl, ratios and fractions per operation, shape class and library, points that did
// not run never paired, and the library points that did not run listed by reason.
#include <gtest/gtest.h>

#include <string>

#include "summary.hpp"
#include "versus.hpp"

using namespace phasebench;

namespace {

// A results document of schema 4 with no points yet.
nlohmann::json empty_doc() {
  return {{"context", {{"phasebench", {{"schema_version", 4}}}}}, {"benchmarks", nlohmann::json::array()}};
}

// One point on a roofline of P = 100 GFLOP/s and W = 10 GB/s: `bytes` sets its size class
// (the time its roofline allows is bytes / W: it is memory-bound, its FLOPs are few).
void add(nlohmann::json& doc, const std::string& op, const std::string& impl, std::uint64_t batch, double bytes,
         double median_s, double frac, const std::string& status = "ok", const std::string& message = "") {
  const std::string name = "decode/" + op + "/m/bf16/batch:" + std::to_string(batch) + (impl == "own" ? "" : "/impl:" + impl);
  nlohmann::json p = {{"phase", "decode"}, {"op", op}, {"op_kind", op}, {"model", "m"}, {"target", ""},
                      {"dtype", "bf16"}, {"impl", impl}, {"args", {{"batch", batch}}}, {"status", status},
                      {"flops", bytes / 100}, {"bytes", {{"total", bytes}}}};
  if (!message.empty()) p["message"] = message;
  if (status == "ok") {
    p["time"] = {{"median_s", median_s}};
    p["roofline"] = {{"fraction_of_roofline", frac}, {"bound", "memory"}, {"peak_flops_per_s", 100e9},
                     {"bandwidth_bytes_per_s", 10e9}, {"bandwidth_ceiling_source", "measured"}};
  }
  doc["benchmarks"].push_back({{"name", name}, {"run_name", name}, {"run_type", "iteration"}, {"phasebench", p}});
}

}  // namespace

TEST(Versus, ShapeClassFromTheTimeTheRooflineAllows) {
  auto point = [](double flops, double bytes) {
    return nlohmann::json{{"flops", flops}, {"bytes", {{"total", bytes}}},
                          {"roofline", {{"bound", flops / bytes > 10 ? "compute" : "memory"}, {"peak_flops_per_s", 100e9},
                                        {"bandwidth_bytes_per_s", 10e9}}}};
  };
  // W = 10 GB/s: the boundaries are at kShapeSmallBelowS * W and kShapeLargeFromS * W bytes.
  const double small_bytes = kShapeSmallBelowS * 10e9, large_bytes = kShapeLargeFromS * 10e9;
  EXPECT_EQ(shape_class(point(1, small_bytes * 0.99)), "memory small");
  EXPECT_EQ(shape_class(point(1, small_bytes)), "memory medium");
  EXPECT_EQ(shape_class(point(1, large_bytes * 0.99)), "memory medium");
  EXPECT_EQ(shape_class(point(1, large_bytes)), "memory large");
  // Compute-bound: the FLOPs over P set the size.
  EXPECT_EQ(shape_class(point(kShapeLargeFromS * 100e9, 1)), "compute large");
  EXPECT_EQ(shape_class(point(kShapeSmallBelowS * 100e9 / 2, 1)), "compute small");
  // No FLOPs (a copy) needs no compute ceiling; no roofline block, no class.
  auto copy = point(0, large_bytes);
  copy["roofline"].erase("peak_flops_per_s");
  EXPECT_EQ(shape_class(copy), "memory large");
  EXPECT_EQ(shape_class(nlohmann::json{{"flops", 1}, {"bytes", {{"total", 1}}}}), std::nullopt);
}

TEST(Versus, PairsOursWithEachLibraryPerClass) {
  auto doc = empty_doc();
  const double medium = 1e6, large = 1e7;  // 100 us and 1 ms at 10 GB/s: medium, large
  add(doc, "gemv", "own", 1, large, 1.0e-3, 0.50);
  add(doc, "gemv", "blas", 1, large, 2.0e-3, 0.25);  // ours 2x faster
  add(doc, "gemv", "own", 2, large, 1.0e-3, 0.60);
  add(doc, "gemv", "blas", 2, large, 0.5e-3, 0.80);  // the library 2x faster
  add(doc, "gemv", "own", 4, large, 1.0e-3, 0.70);
  add(doc, "gemv", "blas", 4, large, 4.0e-3, 0.10);  // ours 4x faster
  add(doc, "gemv", "own", 8, medium * 0.5, 1.0e-4, 0.40);
  add(doc, "gemv", "blas", 8, medium * 0.5, 0.5e-4, 0.80);  // medium class: the library 2x faster
  add(doc, "gemv", "flashinfer", 8, medium * 0.5, 3.0e-4, 0.13);  // a second library on the same key
  const auto s = summarize(doc);
  EXPECT_NE(s.find("ours vs the libraries"), std::string::npos) << s;
  // Large: ratios 2, 0.5 and 4 -> median 2 (range 0.5-4); fractions 60% ours, 25% the library's.
  EXPECT_NE(s.find("  decode   gemv               memory large   blas           3   2.00x     (0.50-4.00)    60.0%    25.0%  ours (2 of 3)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  decode   gemv               memory medium  blas           1   0.50x     (0.50-0.50)    40.0%    80.0%  blas (1 of 1)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("memory medium  flashinfer     1   3.00x     (3.00-3.00)    40.0%    13.0%  ours (1 of 1)"), std::string::npos)
      << s;
}

TEST(Versus, PointsThatDidNotRunAreNeverPairedAndAreListedByReason) {
  auto doc = empty_doc();
  add(doc, "gemv", "own", 1, 1e7, 1.0e-3, 0.5);
  add(doc, "gemv", "blas", 1, 1e7, 2.0e-3, 0.25);
  add(doc, "gemv", "own", 2, 1e7, 1.0e-3, 0.5, "error", "verification failed: x");
  add(doc, "gemv", "blas", 2, 1e7, 9.0e-3, 0.05);  // ours did not run: not paired
  add(doc, "gemv", "own", 4, 1e7, 1.0e-3, 0.5);
  add(doc, "gemv", "blas", 4, 1e7, 0, 0, "skipped", "head_dim 96 not supported");
  add(doc, "gemv", "own", 8, 1e7, 1.0e-3, 0.5);
  add(doc, "gemv", "blas", 8, 1e7, 0, 0, "skipped", "head_dim 96 not supported");
  add(doc, "gemv", "blas", 16, 1e7, 0, 0, "skipped", "batch above 8");
  const auto s = summarize(doc);
  // One pair (batch 1): batch 2's library point is not paired with our failed one.
  EXPECT_NE(s.find("memory large   blas        1   2.00x     (2.00-2.00)"), std::string::npos) << s;
  EXPECT_NE(s.find("note: 1 measured blas point(s) have no measured point of ours on the same key"), std::string::npos) << s;
  EXPECT_NE(s.find("    decode gemv blas: 2 skipped point(s): head_dim 96 not supported\n"
                   "      m bf16 batch:4, m bf16 batch:8\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("    decode gemv blas: 1 skipped point(s): batch above 8\n      m bf16 batch:16\n"), std::string::npos) << s;
}

TEST(Versus, NoSectionWithoutBothSides) {
  auto doc = empty_doc();
  add(doc, "gemv", "own", 1, 1e7, 1.0e-3, 0.5);
  EXPECT_EQ(summarize(doc).find("ours vs the libraries"), std::string::npos);
  doc = empty_doc();
  add(doc, "gemv", "blas", 1, 1e7, 1.0e-3, 0.5);
  EXPECT_EQ(summarize(doc).find("ours vs the libraries"), std::string::npos);
  // A library that only refused still shows, with its reasons.
  add(doc, "gemv", "own", 2, 1e7, 1.0e-3, 0.5);
  add(doc, "gemv", "cudnn", 2, 1e7, 0, 0, "skipped", "no cuDNN");
  EXPECT_NE(summarize(doc).find("decode gemv cudnn: 1 skipped point(s): no cuDNN"), std::string::npos) << summarize(doc);
}
