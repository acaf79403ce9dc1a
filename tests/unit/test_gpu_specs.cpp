// The GPU spec table: every entry has its required parts and dense peaks, lookup by
// driver name, datasheet ceilings carry their source, a malformed table is an input error.
// Each entry of issue 30's part 2 is checked against its source's figures written as the
// source prints them (sparse PFLOPS for a system, dense per GPU, TB/s, GB), so that a
// typo in gpus.json fails here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_test_util.hpp"
#include "phasebench/error.hpp"
#include "phasebench/gpu_specs.hpp"

using namespace phasebench;

namespace {
constexpr std::uint64_t kGiB = 1ull << 30;
constexpr std::uint64_t kMiB = 1ull << 20;
// A system datasheet's sparse PFLOPS for `gpus` GPUs, as dense TFLOP/s per GPU.
double dense_per_gpu_from_sparse(double sparse_pflops, int gpus) { return sparse_pflops * 1000 / 2 / gpus; }
// A dense PFLOPS figure for `gpus` GPUs, per GPU in TFLOP/s.
double per_gpu(double pflops, int gpus) { return pflops * 1000 / gpus; }
double tb_per_s(double tb) { return tb * 1000; }  // TB/s -> GB/s (decimal)

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
                          "rtx-4090", "b200-sxm", "b300-sxm", "gb200", "gb300", "rtx-pro-6000-bse", "h20", "mi300x",
                          "mi325x", "mi355x"})
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
  // --gpu takes a driver name without its vendor prefix, exactly as well.
  EXPECT_EQ(t.get("b200").key, "b200-sxm");
  EXPECT_EQ(t.get("GB300").key, "gb300");
  EXPECT_EQ(t.get("h20").key, "h20");
  EXPECT_FALSE(t.find("h100").has_value());  // "NVIDIA H100" is no driver name
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

// HGX B200 (8 GPUs): FP4 144 | 72 PFLOPS (sparse | dense); FP8/FP6 72, INT8 72 POPS,
// FP16/BF16 36, TF32 18 PFLOPS, all sparse; FP32 600 TFLOPS; 1.4 TB. DGX B200: 1,440 GB,
// 64 TB/s. Blackwell tuning guide: 126 MB L2 (126.50 MB reported). 1000 W.
TEST(GpuSpecs, B200AgainstTheHgxAndDgxB200Datasheets) {
  const auto g = GpuTable::load().get("b200-sxm");
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::nvfp4), per_gpu(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::mxfp4), per_gpu(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), dense_per_gpu_from_sparse(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp6), dense_per_gpu_from_sparse(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::int8), dense_per_gpu_from_sparse(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), dense_per_gpu_from_sparse(36, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp16), dense_per_gpu_from_sparse(36, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::tf32), dense_per_gpu_from_sparse(18, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp32), 600.0 / 8);
  EXPECT_EQ(g.memory_bytes, 1440 / 8 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, tb_per_s(64) / 8);
  EXPECT_EQ(g.l2_bytes, static_cast<std::uint64_t>(126.5 * kMiB));
  EXPECT_EQ(g.sm_count, 148);
  EXPECT_EQ(g.tdp_watts, 1000);
  EXPECT_DOUBLE_EQ(g.interconnect_gbps, tb_per_s(1.8));
  EXPECT_EQ(g.compute_capability, "10.0");
}

// HGX B300 (8 GPUs): FP4 144 | 108 PFLOPS (sparse | dense); FP8/FP6 72, FP16/BF16 36,
// TF32 18 PFLOPS sparse; FP32 600 TFLOPS. Blackwell Ultra blog: 288 GB, 8 TB/s.
// nvidia-smi: 1100 W power cap.
TEST(GpuSpecs, B300AgainstTheHgxB300DatasheetAndTheBlackwellUltraBlog) {
  const auto g = GpuTable::load().get("b300-sxm");
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::nvfp4), per_gpu(108, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::mxfp4), per_gpu(108, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), dense_per_gpu_from_sparse(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp6), dense_per_gpu_from_sparse(72, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), dense_per_gpu_from_sparse(36, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::tf32), dense_per_gpu_from_sparse(18, 8));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp32), 600.0 / 8);
  EXPECT_EQ(g.peak_tflops.count(DType::int8), 0u);  // no current figure found
  EXPECT_EQ(g.memory_bytes, 288 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, tb_per_s(8));
  EXPECT_EQ(g.tdp_watts, 1100);
  EXPECT_EQ(g.sm_count, 148);
  EXPECT_EQ(g.compute_capability, "10.3");
}

// GB200 NVL72: NVFP4 40 | 20 PFLOPS per superchip (2 GPUs, sparse | dense); the brief's
// per-GPU sparse FP8/FP6 10, INT8 10 POPS, FP16/BF16 5, TF32 2.5 PFLOPS; 720 PFLOPS FP8
// (sparse) for 72 GPUs; 13.4 TB (186 GB per GPU); 8 TB/s; 1200 W.
TEST(GpuSpecs, GB200AgainstTheNvl72PageAndTheBlackwellBrief) {
  const auto g = GpuTable::load().get("gb200");
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::nvfp4), per_gpu(20, 2));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::mxfp4), per_gpu(20, 2));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), dense_per_gpu_from_sparse(10, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), dense_per_gpu_from_sparse(720, 72));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp6), dense_per_gpu_from_sparse(10, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::int8), dense_per_gpu_from_sparse(10, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), dense_per_gpu_from_sparse(5, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::tf32), dense_per_gpu_from_sparse(2.5, 1));
  EXPECT_EQ(g.memory_bytes, 186 * kGiB);
  EXPECT_NEAR(186.0 * 72 / 1000, 13.4, 0.05);  // the rack's 13.4 TB
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, tb_per_s(8));
  EXPECT_EQ(g.tdp_watts, 1200);
  EXPECT_EQ(g.compute_capability, "10.0");
}

// GB300 NVL72 (72 GPUs, sparse unless noted): FP4 1,440 PFLOPS, 1,080 without sparsity;
// FP8/FP6 720, FP16/BF16 360, TF32 180 PFLOPS, INT8 24 POPS; 576 TB/s. Blackwell Ultra
// blog: 288 GB per GPU, up to 1,400 W.
TEST(GpuSpecs, GB300AgainstTheNvl72Page) {
  const auto g = GpuTable::load().get("gb300");
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::nvfp4), per_gpu(1080, 72));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::mxfp4), per_gpu(1080, 72));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), dense_per_gpu_from_sparse(720, 72));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp6), dense_per_gpu_from_sparse(720, 72));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), dense_per_gpu_from_sparse(360, 72));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::tf32), dense_per_gpu_from_sparse(180, 72));
  EXPECT_NEAR(g.peak_tflops.at(DType::int8), dense_per_gpu_from_sparse(24, 72), 0.05);
  EXPECT_EQ(g.memory_bytes, 288 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, tb_per_s(576) / 72);
  EXPECT_EQ(g.tdp_watts, 1400);
  EXPECT_EQ(g.compute_capability, "10.3");
}

// RTX PRO 6000 Blackwell Server Edition page (no sparse/dense label; halved, see the
// entry's notes): FP4 4, FP8 2, FP16/BF16 1 PFLOPS; datasheet: FP32 120 TFLOPS, 96 GB
// GDDR7, 1597 GB/s, up to 600 W; PCIe Gen5, no NVLink.
TEST(GpuSpecs, RtxPro6000ServerEditionAgainstItsPageAndDatasheet) {
  const auto g = GpuTable::load().get("rtx-pro-6000-bse");
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::nvfp4), dense_per_gpu_from_sparse(4, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::mxfp4), dense_per_gpu_from_sparse(4, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), dense_per_gpu_from_sparse(2, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), dense_per_gpu_from_sparse(1, 1));
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp32), 120);
  EXPECT_EQ(g.peak_tflops.count(DType::tf32), 0u);  // the page's 234 may be dense or sparse
  EXPECT_EQ(g.memory_bytes, 96 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, 1597);
  EXPECT_EQ(g.tdp_watts, 600);
  EXPECT_EQ(g.sm_count, 188);
  EXPECT_NE(g.interconnect.find("PCIe Gen5"), std::string::npos);
  EXPECT_EQ(g.compute_capability, "12.0");
}

// H20 as the press reports NVIDIA's sheet (dense): FP8/INT8 296, BF16/FP16 148, TF32 74,
// FP32 44 TFLOPS; 96 GB HBM3, 4.0 TB/s, 400 W, NVLink 900 GB/s.
TEST(GpuSpecs, H20AgainstItsReportedSpecificationSheet) {
  const auto g = GpuTable::load().get("h20");
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), 296);
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::int8), 296);
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), 148);
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::tf32), 74);
  EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp32), 44);
  EXPECT_EQ(g.peak_tflops.count(DType::nvfp4), 0u);  // Hopper: no FP4
  EXPECT_EQ(g.memory_bytes, 96 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, tb_per_s(4.0));
  EXPECT_EQ(g.tdp_watts, 400);
  EXPECT_EQ(g.sm_count, 78);
  EXPECT_DOUBLE_EQ(g.interconnect_gbps, 900);
}

// AMD prints dense peaks beside the sparse ones. MI300X: FP16/BF16 1307.4, FP8/INT8
// 2614.9, TF32 653.7, FP32 163.4 TFLOPS; 192 GB HBM3, 5.3 TB/s, 750 W. MI325X: the same
// compute; 256 GB HBM3E, 6 TB/s, 1000 W. ROCm table: 304 CUs, 256 MiB Infinity Cache.
TEST(GpuSpecs, MI300XAndMI325XAgainstAmdsDatasheets) {
  const auto t = GpuTable::load();
  for (const char* key : {"mi300x", "mi325x"}) {
    const auto g = t.get(key);
    EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::bf16), 1307.4) << key;
    EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp16), 1307.4) << key;
    EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp8), 2614.9) << key;
    EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::int8), 2614.9) << key;
    EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::tf32), 653.7) << key;
    EXPECT_DOUBLE_EQ(g.peak_tflops.at(DType::fp32), 163.4) << key;
    EXPECT_EQ(g.peak_tflops.count(DType::mxfp4), 0u) << key;  // CDNA3: no FP4
    EXPECT_EQ(g.sm_count, 304) << key;
    EXPECT_EQ(g.l2_bytes, 256 * kMiB) << key;
    EXPECT_EQ(g.architecture, "cdna3") << key;
    EXPECT_TRUE(g.compute_capability.empty()) << key;
  }
  const auto mi300x = t.get("mi300x"), mi325x = t.get("mi325x");
  EXPECT_EQ(mi300x.memory_bytes, 192 * kGiB);
  EXPECT_DOUBLE_EQ(mi300x.memory_bandwidth_gbps, tb_per_s(5.3));
  EXPECT_EQ(mi300x.tdp_watts, 750);
  EXPECT_EQ(mi325x.memory_bytes, 256 * kGiB);
  EXPECT_DOUBLE_EQ(mi325x.memory_bandwidth_gbps, tb_per_s(6));
  EXPECT_EQ(mi325x.tdp_watts, 1000);
}

// MI355X brochure (dense): FP16/BF16 2.5166, OCP-FP8 5.0332, INT8 5.0332 POPS, MXFP6
// 10.0663, MXFP4 10.0663 PFLOPS; 288 GB HBM3E, 8 TB/s, 1400 W; 256 CUs.
TEST(GpuSpecs, MI355XAgainstAmdsBrochure) {
  const auto g = GpuTable::load().get("mi355x");
  EXPECT_NEAR(g.peak_tflops.at(DType::bf16), 2.5166 * 1000, 1e-9);
  EXPECT_NEAR(g.peak_tflops.at(DType::fp8), 5.0332 * 1000, 1e-9);
  EXPECT_NEAR(g.peak_tflops.at(DType::int8), 5.0332 * 1000, 1e-9);
  EXPECT_NEAR(g.peak_tflops.at(DType::fp6), 10.0663 * 1000, 1e-9);
  EXPECT_NEAR(g.peak_tflops.at(DType::mxfp4), 10.0663 * 1000, 1e-9);
  EXPECT_EQ(g.peak_tflops.count(DType::nvfp4), 0u);  // CDNA4 has no NVFP4 path
  EXPECT_EQ(g.memory_bytes, 288 * kGiB);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth_gbps, tb_per_s(8));
  EXPECT_EQ(g.tdp_watts, 1400);
  EXPECT_EQ(g.sm_count, 256);
  EXPECT_EQ(g.architecture, "cdna4");
}

// The driver names (nvidia-smi / cudaDeviceProp::name) resolve to their entries;
// near misses do not.
TEST(GpuSpecs, NewDriverNamesResolve) {
  const auto t = GpuTable::load();
  EXPECT_EQ(t.match_driver_name("NVIDIA B200")->key, "b200-sxm");
  EXPECT_EQ(t.match_driver_name("NVIDIA B300 SXM6 AC")->key, "b300-sxm");
  EXPECT_EQ(t.match_driver_name("NVIDIA GB200")->key, "gb200");
  EXPECT_EQ(t.match_driver_name("NVIDIA GB300")->key, "gb300");
  EXPECT_EQ(t.match_driver_name("NVIDIA RTX PRO 6000 Blackwell Server Edition")->key, "rtx-pro-6000-bse");
  EXPECT_EQ(t.match_driver_name("NVIDIA H20")->key, "h20");
  EXPECT_FALSE(t.match_driver_name("NVIDIA B300").has_value());
  EXPECT_FALSE(t.match_driver_name("NVIDIA RTX PRO 6000 Blackwell Workstation Edition").has_value());
}

// AMD entries serve the analytical model only: found by key or name, never by a run's
// device name, even the name ROCm reports.
TEST(GpuSpecs, AmdEntriesAreAnalyticalOnly) {
  const auto t = GpuTable::load();
  for (const auto& [key, rocm_name] : {std::pair<const char*, const char*>{"mi300x", "AMD Instinct MI300X"},
                                       {"mi325x", "AMD Instinct MI325X"},
                                       {"mi355x", "AMD Instinct MI355X"}}) {
    const auto g = t.get(key);
    EXPECT_TRUE(g.analytical_only) << key;
    EXPECT_EQ(t.get(rocm_name).key, key);
    EXPECT_FALSE(t.match_driver_name(rocm_name).has_value()) << rocm_name;
    EXPECT_FALSE(t.match_driver_name(key).has_value()) << key;
  }
  for (const auto& g : t.gpus())
    EXPECT_TRUE(g.architecture.rfind("cdna", 0) != 0 || g.analytical_only) << g.key;
}

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

// `phasebench gpus` lists every entry with its fp4 and fp6 peaks and keeps to 160 columns.
TEST(GpuSpecs, GpusListingShowsFp4AndFp6Within160Columns) {
  const auto r = phasebench::test::run_cli("gpus");
  ASSERT_EQ(r.status, 0) << r.out;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) EXPECT_LE(line.size(), 160u) << line;
  EXPECT_NE(r.out.find("fp4 TF"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp6 TF"), std::string::npos) << r.out;
  const auto table = GpuTable::load();
  for (const auto& g : table.gpus()) EXPECT_NE(r.out.find(g.key), std::string::npos) << g.key;
  EXPECT_NE(r.out.find("10066m"), std::string::npos) << r.out;  // MI355X: MXFP4 only
  EXPECT_NE(r.out.find("* analytical only"), std::string::npos) << r.out;
}

TEST(GpuSpecs, CollectiveLatencyIsNcclsTuningModelPerLinkKind) {
  // NCCL src/graph/tuning.cc: ring LL base 6.6 us; per step 0.6 us over NVLink, 1.0 us over PCIe.
  // AMD's parts (RCCL, Infinity Fabric) have none: their collectives are timed by bytes alone.
  int nvlink = 0, pcie = 0;
  const auto table = GpuTable::load();
  for (const auto& g : table.gpus()) {
    if (g.analytical_only) {
      EXPECT_TRUE(g.collective_latency_source.empty()) << g.key;
      continue;
    }
    if (g.interconnect.empty()) continue;
    const bool nv = g.interconnect.find("NVLink") != std::string::npos && g.interconnect.find("no NVLink") == std::string::npos;
    EXPECT_DOUBLE_EQ(g.collective_base_us, 6.6) << g.key;
    EXPECT_DOUBLE_EQ(g.collective_step_us, nv ? 0.6 : 1.0) << g.key;
    EXPECT_NE(g.collective_latency_source.find("src/graph/tuning.cc"), std::string::npos) << g.key;
    (nv ? nvlink : pcie)++;
  }
  EXPECT_GE(nvlink, 10);
  EXPECT_GE(pcie, 4);
}
