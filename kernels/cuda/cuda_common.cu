// CUDA plumbing shared by the operations (cuda_common.hpp): error messages, device
// buffers, the deterministic fill (the host reference's values), copies.
#include "cuda/cuda_common.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "common/numeric.hpp"
#include "reference/common.hpp"
#include "phasebench/error.hpp"

namespace phasebench::cuda {

bool functional_emulation() {
#if defined(PHASEBENCH_CUDA_EMU)
  return true;
#else
  return false;
#endif
}

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  // A failed runtime call also leaves its error as the thread's last error; clear
  // it (non-sticky errors only; sticky ones stay), or the next launch check
  // (cudaGetLastError) would report this failure against an unrelated kernel.
  cudaGetLastError();
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  cudaGetLastError();  // as above: a CUDA error inside the library must not outlive this report
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  PB_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failure here has no remedy
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

namespace {

template <class T, class Encode>
__global__ void fill_kernel(T* out, std::size_t n, std::uint64_t seed, float scale, Encode encode) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = encode(numeric::random_value(seed, i, scale));
}

struct EncodeF32 {
  __device__ float operator()(float v) const { return v; }
};
struct EncodeBF16 {
  __device__ std::uint16_t operator()(float v) const { return numeric::float_to_bf16(v); }
};
struct EncodeF16 {
  __device__ std::uint16_t operator()(float v) const { return numeric::float_to_fp16(v); }
};
struct EncodeF8 {
  __device__ std::uint8_t operator()(float v) const { return numeric::float_to_fp8e4m3(v); }
};

}  // namespace

void fill_random(void* data, DType t, std::size_t n, std::uint64_t seed, float scale, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 65535u * 4));
  switch (t) {
    case DType::fp32:
    case DType::tf32:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(data), n, seed, scale, EncodeF32{});
      break;
    case DType::bf16:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<std::uint16_t*>(data), n, seed, scale, EncodeBF16{});
      break;
    case DType::fp16:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<std::uint16_t*>(data), n, seed, scale, EncodeF16{});
      break;
    case DType::fp8:
      fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<std::uint8_t*>(data), n, seed, scale, EncodeF8{});
      break;
    case DType::int8: throw std::runtime_error("fill_random: int8 is not supported on the CUDA backend");
    case DType::nvfp4:
    case DType::mxfp4:
    case DType::fp6:
      throw std::logic_error(std::string("fill_random: ") + std::string(to_string(t)) +
                             " is packed with block scales; fill it with its own quantiser");
  }
  PB_CUDA_CHECK_LAUNCH("fill_kernel");
}

std::vector<float> download_as_float(const void* data, DType t, std::size_t n, cudaStream_t stream) {
  std::vector<unsigned char> raw(n * element_bytes(t));
  PB_CUDA_CHECK(cudaMemcpyAsync(raw.data(), data, raw.size(), cudaMemcpyDeviceToHost, stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return reference::to_float(raw.data(), t, n);
}

void upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  PB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<std::uint16_t> download_u16(const void* src, std::size_t n, cudaStream_t stream) {
  std::vector<std::uint16_t> h(n);
  if (n == 0) return h;
  PB_CUDA_CHECK(cudaMemcpyAsync(h.data(), src, n * 2, cudaMemcpyDeviceToHost, stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return h;
}

std::uint64_t buffer_seed(std::uint64_t seed, std::uint64_t tag) {
  return numeric::mix64(seed ^ (0x9e3779b97f4a7c15ull * tag));
}

int to_int32(std::uint64_t v, const std::string& what) {
  if (v > static_cast<std::uint64_t>(INT_MAX))
    throw Unsupported(what + " = " + std::to_string(v) + " exceeds the CUDA kernels' 32-bit limit");
  return static_cast<int>(v);
}

void corrupt_for_test(bool corrupt, void* p, std::size_t bytes, cudaStream_t stream) {
  if (!corrupt) return;
  PB_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
  PB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::string capture_graph(cudaStream_t stream, const std::function<void()>& enqueue, cudaGraphExec_t* exec) {
  *exec = nullptr;
  cudaGraph_t graph = nullptr;
  const cudaError_t begin = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaStreamBeginCapture failed: ") + cudaGetErrorName(begin) + " (" + cudaGetErrorString(begin) + ")";
  }
  std::string problem;
  try {
    enqueue();
  } catch (const std::exception& e) {
    problem = std::string("stream capture failed: ") + e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (problem.empty() && end != cudaSuccess)
    problem = std::string("cudaStreamEndCapture failed: ") + cudaGetErrorName(end) + " (" + cudaGetErrorString(end) + ")";
  if (problem.empty()) {
    const cudaError_t inst = cudaGraphInstantiate(exec, graph, 0);
    if (inst != cudaSuccess) {
      *exec = nullptr;
      problem = std::string("cudaGraphInstantiate failed: ") + cudaGetErrorName(inst) + " (" + cudaGetErrorString(inst) + ")";
    }
  }
  if (graph) cudaGraphDestroy(graph);
  if (!problem.empty()) cudaGetLastError();  // a failed capture leaves a (non-sticky) error behind
  return problem;
}

int Context::smem_per_block_optin() const {
  int v = 0;
  PB_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return v;
}

std::optional<std::string> shared_memory_unsupported(const std::string& what, std::size_t bytes, int optin_bytes,
                                                     int cc_major, int cc_minor) {
  if (bytes <= static_cast<std::size_t>(std::max(optin_bytes, 0))) return std::nullopt;
  auto kib = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
    return std::string(buf);
  };
  return what + " needs " + kib(static_cast<double>(bytes)) + " of shared memory per block; this device (compute capability " +
         std::to_string(cc_major) + "." + std::to_string(cc_minor) + ") allows " + kib(optin_bytes) +
         "; run it on a GPU with more (A100, H100, H200) or choose a smaller head_dim";
}

std::size_t Context::free_bytes() const {
  std::size_t free_b = 0, total_b = 0;
  PB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

}  // namespace phasebench::cuda
