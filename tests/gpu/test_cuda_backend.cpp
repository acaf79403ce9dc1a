// The CUDA backend through the seam: device description, cuBLASLt linear
// layers against the CPU reference, refusals, ceilings within sane bounds,
// timing/profile/clock smoke tests. Skips where no GPU is present. Under the
// functional emulation the ceiling and timing tests are left out (they measure
// real hardware) and the backend's refusal to time is tested instead.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>

#include "backend.hpp"
#include "cuda/linear_cublaslt.hpp"
#include "gpu_test_util.hpp"
#if PHASEBENCH_CUDA_EMU
#include "pb_emu_testing.hpp"
#endif
#include "phasebench/error.hpp"
#include "phasebench/ops/linear.hpp"

namespace phasebench {
namespace {

OpRequest linear(DType t, Impl impl, std::uint64_t M, std::uint64_t N, std::uint64_t K) {
  return linear_request({M, N, K}, t, impl);
}

// One backend for the whole suite: creating handles and measuring ceilings is
// done once per process, as in a benchmark run.
class CudaBackendTest : public test::GpuTest {
 protected:
  static Backend& backend() { return test::shared_cuda_backend(); }
  int cc() const {
    const auto s = backend().device().details.at("compute_capability").get<std::string>();
    return std::stoi(s.substr(0, s.find('.'))) * 10 + std::stoi(s.substr(s.find('.') + 1));
  }
};

TEST(CudaBackendFactory, SaysWhyWhenThereIsNoDevice) {
  std::string why;
  auto b = make_cuda_backend(&why);
  EXPECT_FALSE(why.empty());
  if (test::no_gpu_reason()) {
    EXPECT_EQ(b, nullptr);
    EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  } else {
    EXPECT_NE(b, nullptr) << why;
  }
  EXPECT_TRUE(cuda_backend_built());
}

TEST_F(CudaBackendTest, DescribesTheDevice) {
  const auto& d = backend().device();
  EXPECT_EQ(d.backend, "cuda");
  EXPECT_FALSE(d.name.empty());
  EXPECT_FALSE(d.slug.empty());
  for (char c : d.slug) EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c)) || std::islower(static_cast<unsigned char>(c)) || c == '-') << d.slug;
  EXPECT_GT(d.memory_bytes, 0u);
  EXPECT_GT(d.cache_bytes, 0u);
  for (const char* key : {"compute_capability", "sm_count", "sm_clock_max_mhz", "memory_clock_max_mhz",
                          "memory_bus_width_bits", "l2_bytes", "ecc_enabled", "driver_version", "runtime_version",
                          "cublas_version", "cublaslt_version", "spec", "clocks"})
    EXPECT_TRUE(d.details.contains(key)) << key << " missing from " << d.details.dump();
  // Read through cudaDeviceGetAttribute (cudaDeviceProp lost the clock fields in CUDA 13): real values.
  for (const char* key : {"sm_count", "sm_clock_max_mhz", "memory_clock_max_mhz", "memory_bus_width_bits", "l2_bytes"})
    EXPECT_GT(d.details.value(key, 0LL), 0LL) << key << " in " << d.details.dump();
  if (!d.spec) {
    EXPECT_NE(d.details.at("spec").get<std::string>().find("unknown GPU"), std::string::npos);
  }
  EXPECT_TRUE(backend().clocks().is_object());
}

struct LinearCase {
  DType dtype;
  std::uint64_t M, N, K;
};

void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << to_string(c.dtype) << " M=" << c.M << " N=" << c.N << " K=" << c.K;
}

class CublasLtLinear : public CudaBackendTest, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(CublasLtLinear, MatchesReference) {
  const auto c = GetParam();
  if (c.dtype == DType::fp8 && cc() < 89) GTEST_SKIP() << "fp8 needs compute capability 8.9+";
  auto r = linear(c.dtype, Impl::blas, c.M, c.N, c.K);
  ASSERT_FALSE(backend().cannot_run(r).has_value()) << *backend().cannot_run(r);
  auto op = backend().prepare(r);
  EXPECT_NO_THROW(op->verify());
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> v;
  for (DType t : {DType::bf16, DType::fp16, DType::fp32, DType::tf32, DType::fp8}) {
    v.push_back({t, 64, 96, 128});
    v.push_back({t, 1, 4096, 4096});   // the GEMV comparison row
    v.push_back({t, 300, 1024, 2048});  // sampled verification
  }
  v.push_back({DType::bf16, 7, 33, 40});  // odd sizes
  return v;
}

INSTANTIATE_TEST_SUITE_P(Types, CublasLtLinear, ::testing::ValuesIn(linear_cases()),
                         [](const ::testing::TestParamInfo<LinearCase>& i) {
                           return std::string(to_string(i.param.dtype)) + "_" + std::to_string(i.param.M) + "x" +
                                  std::to_string(i.param.N) + "x" + std::to_string(i.param.K);
                         });

TEST_F(CudaBackendTest, RefusesWithReasons) {
  // Far more memory than any device has.
  auto huge = linear(DType::bf16, Impl::blas, 1 << 20, 1 << 20, 1 << 16);
  auto why = backend().cannot_run(huge);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("GiB free"), std::string::npos) << *why;
  EXPECT_THROW(backend().prepare(huge), Unsupported);
  // fp8 below compute capability 8.9, or with N not a multiple of 16.
  if (cc() < 89) {
    auto fp8 = linear(DType::fp8, Impl::blas, 16, 64, 64);
    ASSERT_TRUE(backend().cannot_run(fp8).has_value());
    EXPECT_NE(backend().cannot_run(fp8)->find("8.9"), std::string::npos);
  } else {
    auto fp8 = linear(DType::fp8, Impl::blas, 16, 60, 64);
    ASSERT_TRUE(backend().cannot_run(fp8).has_value());
  }
  EXPECT_FALSE(backend().implements("no_such_op", DType::bf16, Impl::own));
}

#if !PHASEBENCH_CUDA_EMU  // these two measure the hardware: a real GPU only
TEST_F(CudaBackendTest, MeasuredCeilingsAreSane) {
  backend().measure_ceilings({DType::bf16});
  const Ceilings c = backend().ceilings();
  auto read = c.bandwidth_for(CeilingSource::measured);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->source, CeilingSource::measured);
  EXPECT_NE(read->method.find("read kernel"), std::string::npos) << read->method;  // the roofline uses the read
  auto gemm = c.compute_for(DType::bf16, CeilingSource::measured);
  ASSERT_TRUE(gemm.has_value());
  EXPECT_EQ(gemm->source, CeilingSource::measured);
  const auto& spec = backend().device().spec;
  if (spec) {
    auto sheet_bw = c.bandwidth_for(CeilingSource::datasheet);
    auto sheet_bf16 = c.compute_for(DType::bf16, CeilingSource::datasheet);
    ASSERT_TRUE(sheet_bw && sheet_bf16);
    EXPECT_LT(read->value, sheet_bw->value) << read->method;
    EXPECT_GT(read->value, 0.5 * sheet_bw->value) << read->method;
    EXPECT_LT(gemm->value, sheet_bf16->value) << gemm->method;
    EXPECT_GT(gemm->value, sheet_bf16->value / 3) << gemm->method;
  } else {
    EXPECT_GT(read->value, 1e10);
    EXPECT_GT(gemm->value, 1e12);
  }
  // Theoretical ceilings for the architectures the table of per-SM rates knows.
  if (cc() == 80 || cc() == 86 || cc() == 89 || cc() == 90) {
    auto th = c.compute_for(DType::bf16, CeilingSource::theoretical);
    ASSERT_TRUE(th.has_value());
    EXPECT_EQ(th->source, CeilingSource::theoretical);
    EXPECT_GT(th->value, gemm->value);
  }
  auto th_bw = c.bandwidth_for(CeilingSource::theoretical);
  ASSERT_TRUE(th_bw.has_value());
  EXPECT_EQ(th_bw->source, CeilingSource::theoretical);
  // The L2 read ceiling (hot data) is above the memory's.
  ASSERT_EQ(c.cache_bandwidth().size(), 1u);
  EXPECT_EQ(c.cache_bandwidth()[0].level, "L2");
  EXPECT_GT(c.cache_bandwidth()[0].ceiling.value, read->value) << c.cache_bandwidth()[0].ceiling.method;
  // Measuring again changes nothing (once per process).
  const auto before = backend().ceilings().bandwidth().size();
  backend().measure_ceilings({DType::bf16});
  EXPECT_EQ(backend().ceilings().bandwidth().size(), before);
}

TEST_F(CudaBackendTest, TimesProfilesAndReadsClocks) {
  auto op = backend().prepare(linear(DType::bf16, Impl::blas, 512, 512, 512));
  op->verify();
  for (bool cold : {true, false}) {
    const Sample s = backend().time(*op, TimingOptions{cold, "test/linear"});
    EXPECT_GT(s.seconds, 0.0);
    EXPECT_TRUE(std::isfinite(s.seconds));
    // A 512^3 GEMM lasts a few microseconds and moves 1.5 MiB: cold samples
    // replay a graph over rotating copies (together >= 2x L2), hot ones a graph
    // of many launches of the op (1 here would mean the capture failed).
    EXPECT_GT(s.runs, 1u) << s.method << ": " << s.why_single;
    EXPECT_EQ(s.method, cold ? "rotating_graph" : "graph");
    if (cold) {
      EXPECT_GE(s.rotating_bytes, 2 * backend().device().cache_bytes);
    }
  }
  // Single cold launches stay available for comparison.
  TimingOptions single{true, "test/linear"};
  single.cold_timing = ColdTiming::single;
  const Sample one = backend().time(*op, single);
  EXPECT_EQ(one.runs, 1u);
  EXPECT_EQ(one.method, "single");
  EXPECT_EQ(one.why_single, "--cold-timing single");
  EXPECT_NO_THROW(op->verify());  // still right after the graph replays
  EXPECT_NO_THROW(backend().profile(*op, "test/linear/profile"));
  const auto clocks = backend().clocks();
  EXPECT_TRUE(clocks.contains("sm_mhz") || clocks.contains("error")) << clocks.dump();
  // A group of samples: how long the limiters held the clocks (not asserted:
  // whether this GPU throttles is not the test's business), and a window.
  backend().begin_sample_group();
  (void)backend().time(*op, TimingOptions{true, "test/linear"});
  if (const auto w = backend().end_sample_group()) {
    EXPECT_GT(w->window_s, 0.0);
    EXPECT_TRUE(w->sm_mhz_min.has_value()) << "no clock seen during the group";
  } else {
    EXPECT_TRUE(backend().clocks_unavailable().has_value());
  }
  // With NVML each sample carries its SM clock (the clock-ratio check), and the
  // board's energy counter moves while the GPU works.
  if (!backend().clocks_unavailable()) {
    const Sample s = backend().time(*op, TimingOptions{true, "test/linear"});
    ASSERT_TRUE(s.sm_mhz.has_value());
    EXPECT_GT(*s.sm_mhz, 100.0);
  }
  const auto e0 = backend().energy();
  if (e0.ok) {
    for (int i = 0; i < 2000; ++i) op->run();
    backend().synchronize();
    const auto e1 = backend().energy();
    ASSERT_TRUE(e1.ok) << e1.error;
    EXPECT_GE(e1.joules, e0.joules);
  } else {
    EXPECT_EQ(e0.error.rfind("not available", 0), 0u) << e0.error;
  }
}
#else
TEST_F(CudaBackendTest, TheEmulationVerifiesButNeverTimes) {
  auto op = backend().prepare(linear(DType::bf16, Impl::blas, 64, 64, 64));
  EXPECT_NO_THROW(op->verify());
  ASSERT_TRUE(backend().cannot_time().has_value());
  EXPECT_NE(backend().cannot_time()->find("never times"), std::string::npos) << *backend().cannot_time();
  EXPECT_THROW(backend().time(*op, TimingOptions{true, "test/linear"}), std::logic_error);
  EXPECT_THROW(backend().measure_ceilings({DType::bf16}), std::logic_error);
  EXPECT_FALSE(backend().remeasure_read_bandwidth().has_value());
  // No NVML under the emulation, and the device says what it is: no clocks for
  // the clock-ratio check, no energy counter, each with the reason.
  EXPECT_TRUE(backend().clocks().contains("error")) << backend().clocks().dump();
  ASSERT_TRUE(backend().clocks_unavailable().has_value());
  EXPECT_NE(backend().clocks_unavailable()->find("emulation has no NVML device"), std::string::npos)
      << *backend().clocks_unavailable();
  const auto energy = backend().energy();
  EXPECT_FALSE(energy.ok);
  EXPECT_EQ(energy.error.rfind("not available: ", 0), 0u) << energy.error;
  EXPECT_NE(energy.error.find("emulation has no NVML device"), std::string::npos) << energy.error;
  EXPECT_NE(backend().device().name.find("emulation"), std::string::npos) << backend().device().name;
  EXPECT_TRUE(backend().device().details.contains("functional_emulation"));
  // cudaEventElapsedTime has no time to give.
  cudaEvent_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  float ms = 1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorNotSupported);
  cudaGetLastError();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

// synchronize() waits for what run() enqueued (`phasebench overhead` times a bare
// loop of runs up to it). The emulation's streams are lazy: the work stays queued
// until something waits for it.
TEST_F(CudaBackendTest, SynchronizeWaitsForTheEnqueuedWork) {
  auto op = backend().prepare(linear(DType::bf16, Impl::blas, 64, 64, 64));
  backend().synchronize();
  ASSERT_EQ(pb_emu::queued_work_for_tests(), 0u);
  op->run();
  op->run();
  EXPECT_GT(pb_emu::queued_work_for_tests(), 0u);
  backend().synchronize();
  EXPECT_EQ(pb_emu::queued_work_for_tests(), 0u);
}
#endif

}  // namespace
}  // namespace phasebench
