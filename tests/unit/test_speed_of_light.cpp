// The speed-of-light estimate of `phasebench counters` (speed_of_light.hpp) on
// hand-made counters: DRAM bytes at the bandwidth when enough is in flight, the
// Little's-law share when not, the tail wave, the mma.sync compute bound, reads of
// what an earlier kernel wrote coming from the L2, library calls leaving the op
// without an estimate, and the measured copy used where the spec table has one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "phasebench/speed_of_light.hpp"

using namespace phasebench;
using nlohmann::json;

namespace {

// A GPU of round numbers: 100 SMs at 1 GHz, 1 TB/s, 100 TF dense bf16, 1 us latency
// (so 1 MB must be in flight).
GpuSpec gpu(double measured_copy_gbps = 0) {
  GpuSpec g;
  g.key = "test-gpu";
  g.sm_count = 100;
  g.boost_clock_mhz = 1000;
  g.memory_bandwidth_gbps = 1000;
  g.l2_bytes = 10u << 20;
  g.peak_tflops[DType::bf16] = 100;
  GpuSpec::PerformanceModel pm;
  pm.memory_latency_ns = 1000;
  pm.mma_sync_peak_fraction = 0.5;
  pm.shared_bytes_per_clock_per_sm = 128;
  pm.measured_copy_bandwidth_gbps = measured_copy_gbps;
  g.performance_model = pm;
  return g;
}

json traffic(double requests, double sectors, double ideal, double bytes = 0, double lanes = 0) {
  return {{"requests", requests}, {"sectors", sectors}, {"ideal", ideal}, {"bytes", bytes}, {"lanes", lanes}};
}

// A kernel of `blocks` blocks of 128 threads, `per_sm` of them per SM, reading
// `read` bytes (whole sectors) with `inflight` bytes per thread at its stall points.
json kernel(std::uint64_t blocks, int per_sm, std::uint64_t read, double inflight, double mma = 0) {
  const double sectors = static_cast<double>(read) / 32;
  return {{"kind", "kernel"},
          {"kernel", "k"},
          {"blocks", blocks},
          {"threads_per_block", 128},
          {"occupancy", {{"blocks_per_sm", per_sm}, {"max_warps_per_sm", 64}, {"limiter", "registers"}}},
          {"resources", {{"known", true}, {"registers", 64}}},
          {"sectors_read", read / 32},
          {"sectors_written", 0},
          {"unique_bytes_read", read},
          {"unique_bytes_written", 0},
          {"global", {{"ld", traffic(sectors / 4, sectors, sectors, static_cast<double>(read), sectors / 4 * 32)}}},
          {"shared", json::object()},
          {"inflight", {{"mean_bytes_per_thread", inflight}, {"async_events", 0}}},
          {"mma", mma},
          {"buffers", json::array()}};
}

OpCost bytes_cost(std::uint64_t bytes, std::uint64_t flops = 0) {
  OpCost c;
  c.bytes.weights = bytes;
  c.flops = flops;
  return c;
}

}  // namespace

TEST(SpeedOfLight, EnoughInFlightMovesTheBytesAtTheBandwidth) {
  // 200 blocks at 2 per SM: one full wave; 4 warps x 32 lanes x 64 B = 8 KiB a block,
  // 1.6 MB in flight against the 1 MB Little's law asks for.
  const auto e = estimate_speed_of_light(json::array({kernel(200, 2, 100'000'000, 64)}), bytes_cost(100'000'000),
                                         DType::bf16, gpu());
  EXPECT_NEAR(e.time_s, 100e-6, 1e-12);
  EXPECT_NEAR(e.fraction_of_bandwidth, 1.0, 1e-9);
  EXPECT_EQ(e.bound, "memory");
  EXPECT_DOUBLE_EQ(e.waves, 1.0);
  EXPECT_DOUBLE_EQ(e.inflight_fraction, 1.0);
  EXPECT_TRUE(e.complete);
}

TEST(SpeedOfLight, TooLittleInFlightCapsTheBandwidthByLittlesLaw) {
  // 16 bytes a thread: 200 blocks x 4 warps x 32 lanes x 16 B = 409.6 kB of the 1 MB needed.
  const auto e = estimate_speed_of_light(json::array({kernel(200, 2, 100'000'000, 16)}), bytes_cost(100'000'000),
                                         DType::bf16, gpu());
  EXPECT_NEAR(e.inflight_fraction, 0.4096, 1e-9);
  EXPECT_NEAR(e.estimated_fraction, 0.4096, 1e-9);
}

TEST(SpeedOfLight, ExcessBytesAndATailWaveLowerTheEstimate) {
  // 20% more bytes than the formula: at most 1 / 1.2 of the bandwidth. 300 blocks at 1
  // per SM are three whole waves; 150 are a wave and a half, the half at half the share.
  const auto e = estimate_speed_of_light(json::array({kernel(300, 1, 120'000'000, 64)}), bytes_cost(100'000'000),
                                         DType::bf16, gpu());
  EXPECT_NEAR(e.excess, 0.2, 1e-9);
  EXPECT_NEAR(e.waves, 3.0, 1e-9);
  EXPECT_NEAR(e.last_wave_fill, 1.0, 1e-9);
  const auto t = estimate_speed_of_light(json::array({kernel(150, 1, 120'000'000, 64)}), bytes_cost(100'000'000),
                                         DType::bf16, gpu());
  // A wave of 100 blocks (8192 B a block in flight: 819.2 kB of the 1 MB), then 50 (409.6 kB).
  const double full = 80e6 / (1e12 * 0.8192), tail = 40e6 / (1e12 * 0.4096);
  EXPECT_NEAR(t.time_s, full + tail, 1e-12);
  EXPECT_NEAR(t.last_wave_fill, 0.5, 1e-9);
}

TEST(SpeedOfLight, MmaFlopsAreBoundAtTheShareOfThePeakMmaSyncReaches) {
  // 1e6 warp-level mma.sync = 4.096 GFLOP at 50 TF (half of 100): 81.92 us, above
  // the 1 us its 1 MB takes.
  const auto e = estimate_speed_of_light(json::array({kernel(200, 2, 1'000'000, 64, 1e6)}),
                                         bytes_cost(1'000'000, 4'096'000'000), DType::bf16, gpu());
  EXPECT_NEAR(e.time_s, 4.096e9 / 50e12, 1e-12);
  EXPECT_EQ(e.launches[0].bound, "compute");
  EXPECT_EQ(e.bound, "compute");  // intensity 4096 above the ridge of 100
  EXPECT_NEAR(e.estimated_fraction, 0.5, 1e-9);
}

TEST(SpeedOfLight, ReadsOfWhatAnEarlierKernelWroteComeFromTheL2) {
  json writer = kernel(200, 2, 50'000'000, 64);
  writer["sectors_written"] = 1'000'000 / 32;
  writer["buffers"] = json::array({{{"id", 7}, {"size", 1'000'000}, {"sectors_written", 1'000'000 / 32}}});
  json reader = kernel(200, 2, 1'000'000, 64);
  reader["buffers"] = json::array({{{"id", 7}, {"size", 1'000'000}, {"sectors_read", 1'000'000 / 32}}});
  const auto e = estimate_speed_of_light(json::array({writer, reader}), bytes_cost(50'000'000), DType::bf16, gpu());
  EXPECT_EQ(e.l2_read_bytes, 1'000'000u);
  EXPECT_EQ(e.dram_bytes, 51'000'000u);  // the writer's reads and writes; the reader's read is the L2's
}

TEST(SpeedOfLight, ALibraryCallLeavesTheOpWithoutAnEstimate) {
  const auto e = estimate_speed_of_light(json::array({kernel(200, 2, 1000, 64), {{"kind", "library"}, {"kernel", "gemm"}}}),
                                         bytes_cost(1000), DType::bf16, gpu());
  EXPECT_FALSE(e.complete);
  EXPECT_TRUE(to_json(e).at("estimated_fraction").is_null());
}

TEST(SpeedOfLight, AMeasuredCopyIsTheBandwidthWhereTheTableHasOne) {
  const auto e = estimate_speed_of_light(json::array({kernel(200, 2, 100'000'000, 64)}), bytes_cost(100'000'000),
                                         DType::bf16, gpu(800));
  EXPECT_EQ(e.bandwidth_source, "measured copy");
  EXPECT_NEAR(e.time_s, 100e6 / 800e9, 1e-12);
  EXPECT_NEAR(e.fraction_of_bandwidth, 0.8, 1e-9);           // of the datasheet
  EXPECT_NEAR(e.fraction_of_measured_bandwidth, 1.0, 1e-9);  // of the copy
}

TEST(SpeedOfLight, ZeroOccupancyIsNotBoundedAndSaysSo) {
  const auto e = estimate_speed_of_light(json::array({kernel(200, 0, 1000, 64)}), bytes_cost(1000), DType::bf16, gpu());
  ASSERT_FALSE(e.notes.empty());
  EXPECT_NE(e.notes[0].find("occupancy 0"), std::string::npos);
}
