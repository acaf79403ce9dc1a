// What the FlashInfer emulation tests share: device buffers, bf16 data from the
// project's seeded fill, and the comparison with the CPU reference (reference/common.hpp:
// atol scaled by each output row's RMS).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/common.hpp"

namespace fi_emu {

using phasebench::DType;
namespace ref = phasebench::reference;

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device allocation holding a copy of `host` (exactly sized: the emulation poisons and
// bounds it, so an access past the end fails the launch).
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  Dev() = default;
  explicit Dev(const std::vector<T>& host) : n(host.size()) {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(1, n) * sizeof(T)), "cudaMalloc");
    if (n) check_cuda(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  explicit Dev(std::size_t count) : Dev(std::vector<T>(count)) {}
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() {
    if (p) cudaFree(p);
  }
  std::vector<T> read() const {
    std::vector<T> h(n);
    if (n) check_cuda(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy back");
    return h;
  }
};

// n random bf16 values (reference::fill_random) and their float values.
struct Bf16Data {
  std::vector<__nv_bfloat16> bits;
  std::vector<float> values;
  Bf16Data(std::size_t n, std::uint64_t seed) : bits(n) {
    ref::fill_random(bits.data(), DType::bf16, n, seed, 1.0f);
    values = ref::to_float(bits.data(), DType::bf16, n);
  }
};

// Compares a bf16 output with the double reference, row by row (rows of D), with
// the project's bf16 attention tolerance; the gtest failure names the case.
inline void expect_rows_close(const std::vector<__nv_bfloat16>& got, const std::vector<double>& want, std::size_t D,
                              const std::string& what) {
  const std::vector<float> g = ref::to_float(got.data(), DType::bf16, got.size());
  try {
    ref::check_rows_close(g, want, D, ref::tolerance_for(DType::bf16), what);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

}  // namespace fi_emu
