#pragma once
// Host-side helpers of the kernels' launchers, shared by every operation's .cu:
// run-time choices to template arguments (a 16-bit dtype to its tag, a bool to
// a constant), and the once-per-kernel opt-in to more than 48 KiB of dynamic
// shared memory. CUDA-only (include from .cu files).
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "attention_util.cuh"
#include "cuda/cuda_common.hpp"
#include "phasebench/dtype.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

template <int N>
using IC = std::integral_constant<int, N>;
template <bool B>
using BC = std::integral_constant<bool, B>;

// f(Bf16Tag{}) or f(Fp16Tag{}); Unsupported ("<what>: dtype ... is not supported;
// use bf16 or fp16") for any other type.
template <class F>
void dispatch_16bit(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::bf16: f(Bf16Tag{}); return;
    case DType::fp16: f(Fp16Tag{}); return;
    default:
      throw Unsupported(std::string(what) + ": dtype " + std::string(to_string(dtype)) +
                        " is not supported; use bf16 or fp16");
  }
}

// f(BC<true>{}) or f(BC<false>{}).
template <class F>
void dispatch_bool(bool b, F&& f) {
  if (b)
    f(BC<true>{});
  else
    f(BC<false>{});
}

// Lets `Kernel` launch with `bytes` of dynamic shared memory (above 48 KiB a
// kernel must opt in), once per kernel and process: a launcher that runs in a
// timed region pays for the attribute call once.
template <auto Kernel>
void allow_dynamic_smem(std::size_t bytes) {
  static const bool done = [bytes] {
    PB_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    return true;
  }();
  (void)done;
}

}  // namespace phasebench::cuda
