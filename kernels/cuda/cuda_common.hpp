#pragma once
// Shared CUDA plumbing for the CUDA backend's operations: error checking that
// names the failing call, RAII device buffers, the deterministic random fill
// (same values as the host's reference::fill_random), and the context every
// prepared op runs on (stream, cuBLAS/cuBLASLt handles bound to it, workspace).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "phasebench/dtype.hpp"

namespace phasebench::cuda {

// True in the build over the functional CUDA emulation (kernels/cuda_emu, the
// emulated GPU tests and phasebench-emu): kernels run on the CPU for
// correctness, and nothing may be timed or calibrated.
bool functional_emulation();
inline constexpr const char* kEmulationCannotTime =
    "this program runs the CUDA kernels on the functional CUDA emulation (pb_emu): it checks their results on the "
    "CPU and never times anything";

// Throws std::runtime_error("<call> failed at file:line: <error string>").
void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line);

#define PB_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t pb_err_ = (call);                                                            \
    if (pb_err_ != cudaSuccess) ::phasebench::cuda::throw_cuda_error(pb_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define PB_CUBLAS_CHECK(call)                                                                \
  do {                                                                                       \
    cublasStatus_t pb_st_ = (call);                                                          \
    if (pb_st_ != CUBLAS_STATUS_SUCCESS) ::phasebench::cuda::throw_cublas_error(pb_st_, #call, __FILE__, __LINE__); \
  } while (0)

// Checks the last kernel launch (configuration errors) without synchronising;
// the error names the kernel.
#define PB_CUDA_CHECK_LAUNCH(name)                                                           \
  do {                                                                                       \
    cudaError_t pb_err_ = cudaGetLastError();                                                \
    if (pb_err_ != cudaSuccess)                                                              \
      ::phasebench::cuda::throw_cuda_error(pb_err_, (std::string("launch of ") + (name)).c_str(), __FILE__, __LINE__); \
  } while (0)

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Fill `n` elements of type `t` with numeric::random_value(seed, i, scale),
// bit-identical to reference::fill_random on the host.
void fill_random(void* data, DType t, std::size_t n, std::uint64_t seed, float scale, cudaStream_t stream);
// Copy `n` elements of type `t` from the device and decode them to floats.
std::vector<float> download_as_float(const void* data, DType t, std::size_t n, cudaStream_t stream);
void upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
// Copy `n` 16-bit elements from the device, raw.
std::vector<std::uint16_t> download_u16(const void* src, std::size_t n, cudaStream_t stream);

// Pointer to element `elem_offset` of a buffer of `es`-byte elements.
inline const unsigned char* byte_ptr(const void* p, std::size_t elem_offset, std::size_t es) {
  return static_cast<const unsigned char*>(p) + elem_offset * es;
}
inline unsigned char* byte_ptr(void* p, std::size_t elem_offset, std::size_t es) {
  return static_cast<unsigned char*>(p) + elem_offset * es;
}

// A seed for buffer `tag` of a request seeded `seed`: distinct per buffer.
std::uint64_t buffer_seed(std::uint64_t seed, std::uint64_t tag);
// `v` as an int for the kernels' 32-bit indexing; Unsupported naming `what` when it does not fit.
int to_int32(std::uint64_t v, const std::string& what);

// Everything a prepared op needs to run: the backend's stream, the cuBLAS and
// cuBLASLt handles bound to it, a cuBLASLt workspace, and device facts.
struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  DeviceBuffer workspace;  // cuBLASLt workspace
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  std::size_t free_bytes() const;  // device memory free now
  int smem_per_block_optin() const;  // bytes of shared memory a block may opt in to
};

// Captures the work `enqueue` puts on `stream` into an instantiated graph (*exec):
// empty when it worked, else why not. The capture is always ended, so the stream
// is usable whatever happened.
std::string capture_graph(cudaStream_t stream, const std::function<void()>& enqueue, cudaGraphExec_t* exec);

// Why a kernel needing `bytes` of shared memory per block cannot run on a device
// that allows `optin_bytes` (compute capability cc_major.cc_minor), or nothing:
// binaries built for sm_80/sm_90 also run on 8.6/8.9/12.x, which allow ~99 KiB.
std::optional<std::string> shared_memory_unsupported(const std::string& what, std::size_t bytes, int optin_bytes,
                                                     int cc_major, int cc_minor);
inline std::optional<std::string> shared_memory_unsupported(const std::string& what, std::size_t bytes,
                                                            const Context& ctx) {
  return shared_memory_unsupported(what, bytes, ctx.smem_per_block_optin(), ctx.cc_major, ctx.cc_minor);
}

// Test hook of verify(): after the op ran, zero `bytes` at `p` when `corrupt` is
// set, so a test can check that verification catches a wrong output.
void corrupt_for_test(bool corrupt, void* p, std::size_t bytes, cudaStream_t stream);

}  // namespace phasebench::cuda
