#pragma once
// What an op that spans several GPUs of this process needs for each of them
// beyond the backend's device (collectives.cpp, layer_tp.cpp): a scope that makes
// a device current, and a Context of its own on another device (stream,
// cuBLAS(Lt) handles, workspace), made and released like the backend's.
#include <cstddef>
#include <vector>

#include "cuda/cuda_common.hpp"

namespace phasebench::cuda {

// The cuBLASLt workspace of a Context (the backend's and every rank's alike, so
// cuBLASLt's heuristic sees the same limit on each GPU).
inline constexpr std::size_t kCublasLtWorkspaceBytes = 64ull << 20;

// A Context's stream (non-blocking), cuBLAS and cuBLASLt handles bound to it and
// its workspace, made on the current device (the backend's and every rank's alike);
// and released (never throws; what is null is skipped).
void open_handles(Context& ctx);
void close_handles(Context& ctx) noexcept;

// The GPUs this process sees (0 where CUDA says none).
int device_count();

// This process's ranks of an op over `gpus` GPUs, with their devices: in one
// process every rank, on the backend's device and the next ones (wrapping); under
// mpirun (phasebench/processes.hpp) its own rank, on the backend's device.
struct LocalRanks {
  std::vector<int> ranks, devices;
};
LocalRanks local_ranks(int gpus, int backend_device);

// Makes `device` current for a scope, then the previous device again.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// A Context on `device`: a non-blocking stream of its own, cuBLAS and cuBLASLt
// handles bound to it, a workspace, the device's facts; released with it.
class RankContext {
 public:
  explicit RankContext(int device);
  ~RankContext();
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;
  Context& get() { return ctx_; }

 private:
  Context ctx_;
};

}  // namespace phasebench::cuda
