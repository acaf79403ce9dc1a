#pragma once
// Shared helpers of the GPU tests: skip cleanly, with the reason, where no CUDA
// device is present (ctest reports the test as skipped, not passed or failed).
//
//   TEST(Foo, Bar) { PB_SKIP_IF_NO_GPU(); ... }
//   class FooTest : public phasebench::test::GpuTest { ... };  // skips in SetUp
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "backend.hpp"
#include "cuda/cuda_common.hpp"

namespace phasebench::test {

// Why the GPU tests cannot run here, or nothing when a CUDA device is usable.
inline std::optional<std::string> no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return std::string("no CUDA device: cudaGetDeviceCount failed with ") + cudaGetErrorName(e) + " (" +
           cudaGetErrorString(e) + ")";
  }
  if (n == 0) return std::string("no CUDA device: cudaGetDeviceCount reports 0 devices");
  return std::nullopt;
}

}  // namespace phasebench::test

// GTEST_SKIP returns from the function it is written in, so this is a macro:
// use it at the top of a TEST body (or in a fixture's SetUp).
#define PB_SKIP_IF_NO_GPU()                                                          \
  do {                                                                               \
    if (auto pb_why_ = ::phasebench::test::no_gpu_reason()) GTEST_SKIP() << *pb_why_; \
  } while (0)

namespace phasebench::test {

// The CUDA backend the suites share, as a benchmark run has one: handles made and
// ceilings measured once per process. Deliberately never destroyed: tearing down
// cuBLAS handles from a static destructor, after the CUDA runtime has begun
// unloading, is not safe. Call only after the skip check.
inline Backend& shared_cuda_backend() {
  static Backend* b = [] {
    std::string why;
    auto p = make_cuda_backend(&why);
    if (!p) throw std::runtime_error("make_cuda_backend failed: " + why);
    return p.release();
  }();
  return *b;
}

// A fixture that skips every test of the suite where there is no device.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override { PB_SKIP_IF_NO_GPU(); }
};

}  // namespace phasebench::test

namespace phasebench::test {

// A CUDA context like the backend's (device 0, its own non-blocking stream,
// cuBLAS and cuBLASLt handles bound to it, a 32 MiB cuBLASLt workspace), for
// tests that build prepared ops directly. Construct only after the skip check.
class TestContext {
 public:
  TestContext() {
    PB_CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    PB_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    ctx.device = 0;
    ctx.sm_count = prop.multiProcessorCount;
    ctx.cc_major = prop.major;
    ctx.cc_minor = prop.minor;
    PB_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    PB_CUBLAS_CHECK(cublasCreate(&ctx.cublas));
    PB_CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
    PB_CUBLAS_CHECK(cublasLtCreate(&ctx.cublaslt));
    ctx.workspace = cuda::DeviceBuffer(std::size_t{32} << 20);
  }
  ~TestContext() {
    if (ctx.stream) cudaStreamSynchronize(ctx.stream);
    ctx.workspace = cuda::DeviceBuffer();
    if (ctx.cublaslt) cublasLtDestroy(ctx.cublaslt);
    if (ctx.cublas) cublasDestroy(ctx.cublas);
    if (ctx.stream) cudaStreamDestroy(ctx.stream);
  }
  TestContext(const TestContext&) = delete;
  TestContext& operator=(const TestContext&) = delete;

  cuda::Context ctx;
};

// A fixture with a TestContext, skipped where there is no device.
class CudaContextTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    tc_ = std::make_unique<TestContext>();
  }
  void TearDown() override { tc_.reset(); }
  cuda::Context& ctx() { return tc_->ctx; }
  // The devices this process sees (the emulated builds' tests run with PB_EMU_DEVICES=4).
  int devices() const {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    return n;
  }

  std::unique_ptr<TestContext> tc_;
};

}  // namespace phasebench::test
