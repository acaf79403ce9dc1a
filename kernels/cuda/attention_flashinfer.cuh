#pragma once
// What FlashInfer's rows (<op>_flashinfer.cu) share: the workspaces FlashInfer's Python
// wrappers allocate (the engine's), the pinned host buffer its plans stage their arrays in,
// its error codes as exceptions, and the run-time dtype and head_dim as its template
// arguments. Included only by those .cu files (nvcc, and the emulated build).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "cuda/cuda_common.hpp"
#include "dispatch.cuh"  // a sibling device header: the emulated build rewrites it beside this one
#include "phasebench/dtype.hpp"
#include "phasebench/error.hpp"

#ifndef PHASEBENCH_FLASHINFER_VERSION
#define PHASEBENCH_FLASHINFER_VERSION "unknown"
#endif

namespace phasebench::cuda::flashinfer_rows {

// FlashInfer's default workspaces: 128 MiB of float partials (split-KV), 8 MiB of int32
// plan arrays; declared as the rows' scratch.
inline constexpr std::size_t kFloatWorkspaceBytes = std::size_t{128} << 20;
inline constexpr std::size_t kIntWorkspaceBytes = std::size_t{8} << 20;

// A FlashInfer call's cudaError_t as an exception naming the call.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("FlashInfer ") + what + ": " + cudaGetErrorString(e));
}

// The pinned host copy of the int workspace its plans fill and copy to the device.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) { PB_CUDA_CHECK(cudaMallocHost(&p_, bytes)); }
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// The plan's array at `offset` bytes into a workspace.
template <class T>
T* at(void* base, long long offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// Calls f(T{}, IC<D>{}) for the element type (__nv_bfloat16 or __half) and head_dim
// (64, 128, 256) instantiated here; Unsupported naming `what` otherwise.
template <class F>
void dispatch(DType t, int D, const char* what, F&& f) {
  auto by_d = [&](auto tag) {
    switch (D) {
      case 64: f(tag, IC<64>{}); return;
      case 128: f(tag, IC<128>{}); return;
      case 256: f(tag, IC<256>{}); return;
      default: throw Unsupported(std::string(what) + ": head_dim " + std::to_string(D) + " is not instantiated here");
    }
  };
  if (t == DType::bf16)
    by_d(__nv_bfloat16{});
  else if (t == DType::fp16)
    by_d(__half{});
  else
    throw Unsupported(std::string(what) + ": dtype " + std::string(to_string(t)) + " is not built here");
}

}  // namespace phasebench::cuda::flashinfer_rows
