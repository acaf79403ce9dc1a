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

RankContext::RankContext(int device) {
  DeviceScope on(device);
  try {
    ctx_.device = device;
    PB_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.sm_count, cudaDevAttrMultiProcessorCount, device));
    PB_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    PB_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    PB_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
    PB_CUBLAS_CHECK(cublasCreate(&ctx_.cublas));
    PB_CUBLAS_CHECK(cublasSetStream(ctx_.cublas, ctx_.stream));
    PB_CUBLAS_CHECK(cublasLtCreate(&ctx_.cublaslt));
    ctx_.workspace = DeviceBuffer(kCublasLtWorkspaceBytes);
    PB_CUBLAS_CHECK(cublasSetWorkspace(ctx_.cublas, ctx_.workspace.get(), ctx_.workspace.bytes()));
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
}

RankContext::~RankContext() {
  DeviceScope on(ctx_.device);
  release();
}

void RankContext::release() noexcept {
  // Nothing here may throw; errors on teardown have no remedy.
  if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);
  if (ctx_.cublaslt) cublasLtDestroy(ctx_.cublaslt);
  if (ctx_.cublas) cublasDestroy(ctx_.cublas);
  ctx_.workspace = DeviceBuffer();
  if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  ctx_.cublaslt = nullptr;
  ctx_.cublas = nullptr;
  ctx_.stream = nullptr;
}

}  // namespace phasebench::cuda
