// The GPU spec table: every entry has its required parts and dense peaks, lookup by
// driver name, datasheet ceilings carry their source, a malformed table is an input error.
#include <gtest/gtest.h>

#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"

using namespace phasebench;

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
