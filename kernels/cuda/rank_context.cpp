// The device scope and the per-device Context of ops that span several GPUs
// (rank_context.hpp).
#include "cuda/rank_context.hpp"

#include <algorithm>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "phasebench/processes.hpp"

namespace phasebench::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

LocalRanks local_ranks(int gpus, int backend_device) {
  LocalRanks mine;
  if (processes().size() > 1) {
    mine.ranks.push_back(processes().rank());
    mine.devices.push_back(backend_device);
    return mine;
  }
  const int have = std::max(1, device_count());
  for (int i = 0; i < gpus; ++i) {
    mine.ranks.push_back(i);
    mine.devices.push_back((backend_device + i) % have);
  }
  return mine;
}

DeviceScope::DeviceScope(int device) {
  PB_CUDA_CHECK(cudaGetDevice(&previous_));
  PB_CUDA_CHECK(cudaSetDevice(device));
}

DeviceScope::~DeviceScope() { cudaSetDevice(previous_); }

void open_handles(Context& ctx) {
  PB_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
  PB_CUBLAS_CHECK(cublasCreate(&ctx.cublas));
  PB_CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
  PB_CUBLAS_CHECK(cublasLtCreate(&ctx.cublaslt));
  ctx.workspace = DeviceBuffer(kCublasLtWorkspaceBytes);
  PB_CUBLAS_CHECK(cublasSetWorkspace(ctx.cublas, ctx.workspace.get(), ctx.workspace.bytes()));
}

void close_handles(Context& ctx) noexcept {
  // Nothing here may throw; errors on teardown have no remedy.
  if (ctx.stream) cudaStreamSynchronize(ctx.stream);
  if (ctx.cublaslt) cublasLtDestroy(ctx.cublaslt);
  if (ctx.cublas) cublasDestroy(ctx.cublas);
  ctx.workspace = DeviceBuffer();
  if (ctx.stream) cudaStreamDestroy(ctx.stream);
  ctx.cublaslt = nullptr;
  ctx.cublas = nullptr;
  ctx.stream = nullptr;
}

RankContext::RankContext(int device) {
  DeviceScope on(device);
  try {
    ctx_.device = device;
    PB_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.sm_count, cudaDevAttrMultiProcessorCount, device));
    PB_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    PB_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    open_handles(ctx_);
  } catch (...) {
    close_handles(ctx_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

RankContext::~RankContext() {
  DeviceScope on(ctx_.device);
  close_handles(ctx_);
}

}  // namespace phasebench::cuda
