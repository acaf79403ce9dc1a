#pragma once
// What the emulation's own tests share: a device buffer of T, and a fixture with
// a non-blocking stream that leaves the emulation clean after tests that make
// launches fail on purpose.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "pb_emu_testing.hpp"

namespace pb_emu_test {

// A device buffer of T for one test.
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n;
  explicit Dev(std::size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void set(const std::vector<T>& h) { EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
};

class EmuStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess); }
  void TearDown() override {
    pb_emu::reset_after_failure_for_tests();
    cudaStreamDestroy(s_);
    pb_emu::reset_after_failure_for_tests();
  }
  // The launches made so far fail with an error whose message contains `what`.
  void expect_launch_failure(const std::string& what) {
    const cudaError_t e = cudaStreamSynchronize(s_);
    ASSERT_EQ(e, cudaErrorLaunchFailure) << cudaGetErrorName(e);
    const std::string msg = cudaGetErrorString(e);
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  cudaStream_t s_ = nullptr;
};

}  // namespace pb_emu_test
