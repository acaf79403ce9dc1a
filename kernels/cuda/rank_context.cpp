// The device scope and the per-device Context of ops that span several GPUs
// (rank_context.hpp).
#include "cuda/rank_context.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

namespace phasebench::cuda {

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
