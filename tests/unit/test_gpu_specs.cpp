// The GPU spec table: every entry has its required parts and dense peaks, lookup by
// driver name, datasheet ceilings carry their source, a malformed table is an input error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"

using namespace phasebench;

namespace {
// A GPU table in a temporary file, removed with the object.
struct TempTable {
  std::filesystem::path path;
  explicit TempTable(const std::string& gpus_array) {
    const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           ("phasebench-gpus-" + std::string(t->name()) + "-" + std::to_string(::getpid()) + ".json");
    std::ofstream(path) << R"({"schema_version": 1, "gpus": )" << gpus_array << "}";
  }
  ~TempTable() { std::filesystem::remove(path); }
};
std::string entry(const std::string& key, const std::string& extra, const std::string& peaks) {
  return R"({"key": ")" + key + R"(", "name": ")" + key + R"(", "memory_bytes": 1, "memory_bandwidth_gbps": 1, )" +
         extra + R"("peak_tflops_dense": )" + peaks + "}";
}
}  // namespace

TEST(GpuSpecs, RequiredPartsArePresentWithDensePeaks) {
  const auto t = GpuTable::load();
  for (const char* key : {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm4-80gb", "a100-pcie-40gb", "l40s", "l4", "a10",
                          "rtx-4090"})
    EXPECT_TRUE(t.find(key).has_value()) << key;
  const auto h100 = t.get("h100-sxm");
  EXPECT_NEAR(h100.peak_tflops.at(DType::bf16), 989.5, 1.0);  // dense, not the 1979 sparse figure
  EXPECT_NEAR(h100.peak_tflops.at(DType::fp8), 1979, 1.0);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth_gbps, 3350);
  const auto h200 = t.get("h200-sxm");
  EXPECT_DOUBLE_EQ(h200.memory_bandwidth_gbps, 4800);
  EXPECT_DOUBLE_EQ(h200.peak_tflops.at(DType::bf16), h100.peak_tflops.at(DType::bf16));
  const auto a100 = t.get("a100-sxm4-80gb");
  EXPECT_NEAR(a100.peak_tflops.at(DType::bf16), 312, 0.5);
  EXPECT_EQ(a100.peak_tflops.count(DType::fp8), 0u);  // Ampere has no fp8
  for (const auto& g : t.gpus()) {
    EXPECT_FALSE(g.sources.empty()) << g.key << " has no source document";
    EXPECT_GT(g.memory_bandwidth_gbps, 0) << g.key;
    EXPECT_GT(g.sm_count, 0) << g.key;
  }
}

TEST(GpuSpecs, LookupByDriverName) {
  const auto t = GpuTable::load();
  EXPECT_EQ(t.match_driver_name("NVIDIA H200")->key, "h200-sxm");
  EXPECT_EQ(t.match_driver_name("NVIDIA H100 80GB HBM3")->key, "h100-sxm");
  EXPECT_EQ(t.match_driver_name("  nvidia a100-sxm4-80gb ")->key, "a100-sxm4-80gb");
  // Unknown is unknown, never the closest match.
  EXPECT_FALSE(t.match_driver_name("NVIDIA H300").has_value());
  EXPECT_FALSE(t.match_driver_name("NVIDIA H100").has_value());
  EXPECT_THROW(t.get("NVIDIA H300"), InputError);
}

TEST(GpuSpecs, DatasheetCeilingsCarryTheirSource) {
  const auto c = GpuTable::load().get("h200-sxm").ceilings();
  const auto bw = c.bandwidth_for(CeilingSource::datasheet);
  ASSERT_TRUE(bw.has_value());
  EXPECT_EQ(bw->source, CeilingSource::datasheet);
  EXPECT_DOUBLE_EQ(bw->value, 4.8e12);
  EXPECT_NE(bw->method.find("datasheet"), std::string::npos);
}

TEST(GpuSpecs, MalformedTableIsAnInputError) { EXPECT_THROW(GpuTable::load("/nonexistent/gpus.json"), InputError); }

// An analytical-only entry is skipped by match_driver_name even when it lists driver
// names; an ordinary entry with the same name is still found.
TEST(GpuSpecs, AnalyticalOnlyEntriesAreNeverMatched) {
  const std::string only = entry("only", R"("analytical_only": true, "driver_names": ["Some GPU"], )", R"({"bf16": 1})");
  {
    const TempTable f("[" + only + "]");
    const auto t = GpuTable::load(f.path.string());
    EXPECT_FALSE(t.match_driver_name("Some GPU").has_value());
    EXPECT_EQ(t.get("only").key, "only");
  }
  const TempTable f("[" + only + ", " + entry("real", R"("driver_names": ["Some GPU"], )", R"({"bf16": 1})") + "]");
  EXPECT_EQ(GpuTable::load(f.path.string()).match_driver_name("Some GPU")->key, "real");
}

// "fp4" fills NVFP4 and MXFP4 alike unless a format has its own key; "fp6", "nvfp4"
// and "mxfp4" are their dtypes; "fp64" is skipped; a peak must be positive.
TEST(GpuSpecs, Fp4KeysFillTheScaledFormats) {
  const TempTable f("[" + entry("one", "", R"({"fp4": 100, "fp6": 50, "fp64": 1})") + ", " +
                    entry("two", "", R"({"fp4": 100, "nvfp4": 120})") + ", " +
                    entry("mx", "", R"({"mxfp4": 80, "fp6": 80})") + "]");
  const auto t = GpuTable::load(f.path.string());
  const auto one = t.get("one"), two = t.get("two"), mx = t.get("mx");
  EXPECT_DOUBLE_EQ(one.peak_tflops.at(DType::nvfp4), 100);
  EXPECT_DOUBLE_EQ(one.peak_tflops.at(DType::mxfp4), 100);
  EXPECT_DOUBLE_EQ(one.peak_tflops.at(DType::fp6), 50);
  EXPECT_EQ(one.peak_tflops.size(), 3u);
  EXPECT_DOUBLE_EQ(two.peak_tflops.at(DType::nvfp4), 120);
  EXPECT_DOUBLE_EQ(two.peak_tflops.at(DType::mxfp4), 100);
  EXPECT_EQ(mx.peak_tflops.count(DType::nvfp4), 0u);
  EXPECT_DOUBLE_EQ(mx.peak_tflops.at(DType::mxfp4), 80);
  const auto c = one.ceilings().compute_for(DType::nvfp4, CeilingSource::datasheet);
  ASSERT_TRUE(c.has_value());
  EXPECT_DOUBLE_EQ(c->value, 100e12);
  const TempTable bad("[" + entry("bad", "", R"({"fp4": 0})") + "]");
  EXPECT_THROW(GpuTable::load(bad.path.string()), InputError);
}
