// Kernels that exercise the functional CUDA emulation (see emu_kernels.hpp):
// each intrinsic used correctly, and each misuse the emulation must report.
// Plain CUDA, rewritten by cu2emu.py like kernels/cuda/*.cu.
#include "emu_kernels.hpp"

#include <cstdint>

namespace pb_emu_test {

namespace {

__global__ void shuffle_kernel(int mode, int src, int width, int* out) {
  const int lane = threadIdx.x;
  int v = 100 + lane;
  switch (mode) {
    case 0: v = __shfl_sync(0xffffffffu, v, src, width); break;
    case 1: v = __shfl_xor_sync(0xffffffffu, v, src, width); break;
    case 2: v = __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(src), width); break;
    default: v = __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(src), width); break;
  }
  out[lane] = v;
}

__global__ void votes_kernel(unsigned mask, unsigned* out) {
  const int lane = threadIdx.x;
  if (!(mask >> lane & 1u)) return;
  const int pred = lane % 3 == 0;
  const unsigned b = __ballot_sync(mask, pred);
  const int any = __any_sync(mask, pred);
  const int all = __all_sync(mask, pred);
  if (lane == __ffs(mask) - 1) {
    out[0] = b;
    out[1] = static_cast<unsigned>(any);
    out[2] = static_cast<unsigned>(all);
  }
}

__global__ void votes_after_returns_kernel(unsigned* out) {
  const int lane = threadIdx.x;
  if (lane >= 20) return;
  const int pred = lane % 3 == 0;
  const unsigned b = __ballot_sync(0xffffffffu, pred);
  const int any = __any_sync(0xffffffffu, pred);
  const int all = __all_sync(0xffffffffu, pred);
  if (lane == 0) {
    out[0] = b;
    out[1] = static_cast<unsigned>(any);
    out[2] = static_cast<unsigned>(all);
  }
}

__global__ void partial_masks_kernel(int* out) {
  const int lane = threadIdx.x;
  out[lane] = __shfl_xor_sync(0x10001u << (lane & 15), lane, 16);
  int v = lane;
  if (lane == 1 || lane == 2) v = __shfl_xor_sync(0x6u, v, 3);  // 1 <-> 2
  if (lane == 0 || lane == 1) v = __shfl_xor_sync(0x3u, v, 1);  // 0 <-> 1
  if (lane < 3) out[32 + lane] = v;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Fragments as the PTX ISA lays them out for m16n8k16 (groupID g = lane / 4,
// threadID_in_group t = lane % 4); the element of lower index is the low half.
__global__ void mma_kernel(const std::uint16_t* A, const std::uint16_t* B, float* D, bool bf16) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  unsigned a[4], b[2];
  for (int j = 0; j < 4; ++j) {
    unsigned w = 0;
    for (int h = 0; h < 2; ++h) {
      const int i = 2 * j + h;
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      w |= static_cast<unsigned>(A[row * 16 + col]) << (16 * h);
    }
    a[j] = w;
  }
  for (int j = 0; j < 2; ++j) {
    unsigned w = 0;
    for (int h = 0; h < 2; ++h) {
      const int i = 2 * j + h;
      const int k = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      w |= static_cast<unsigned>(B[k * 8 + g]) << (16 * h);
    }
    b[j] = w;
  }
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  if (bf16)
    mma_bf16(d, a, b);
  else
    mma_f16(d, a, b);
  for (int i = 0; i < 4; ++i) D[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = d[i];
}

__global__ void block_sum_kernel(int* out) {
  __shared__ int partial[1024];
  __shared__ int total;
  partial[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) s += partial[i];
    total = s;
  }
  __syncthreads();
  if (threadIdx.x == blockDim.x - 1) out[blockIdx.x] = total;
}

__global__ void copy_kernel(const int* in, int* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

__global__ void read_unwritten_shared_kernel(unsigned* out) {
  __shared__ unsigned never_written[4];
  out[0] = never_written[threadIdx.x];
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x % 2)
    __syncthreads();
  else
    __syncthreads();
}

__global__ void lane_returns_kernel(int* sink) {
  if (threadIdx.x == 5) return;
  const int v = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  sink[threadIdx.x] = v;
}

__global__ void lane_skips_shuffle_kernel(int* sink) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x != 7) v = __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  sink[threadIdx.x] = v;
}

__global__ void mask_without_self_kernel(int* sink) {
  const unsigned mask = threadIdx.x == 0 ? 0xfffffffeu : 0xffffffffu;
  sink[threadIdx.x] = __shfl_sync(mask, static_cast<int>(threadIdx.x), 3);
}

__global__ void misaligned_kernel(const unsigned char* base, unsigned* sink) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(base + 8));
  sink[0] = v.x;
}

__global__ void static_shared_kernel(float* sink) {
  __shared__ float big[16384];  // 64 KiB: above the 48 KiB of static shared memory
  big[threadIdx.x] = 1.f;
  sink[0] = big[0];
}

__global__ void dynamic_shared_kernel(float* sink, int n) {
  extern __shared__ float dyn[];
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) dyn[i] = static_cast<float>(i);
  __syncthreads();
  if (threadIdx.x == 0) sink[0] = dyn[n - 1];
}

__global__ void __launch_bounds__(128) bounded_kernel(int* sink) { sink[threadIdx.x] = 1; }

__global__ void empty_kernel() {}

__global__ void read_past_kernel(const int* p, int n, int* out) { out[0] = p[n]; }

// A device scratch of `bytes`, freed with the stream's work done.
struct Scratch {
  void* p = nullptr;
  explicit Scratch(std::size_t bytes) { cudaMalloc(&p, bytes); }
  ~Scratch() { cudaFree(p); }
};

}  // namespace

void shuffle(int mode, int src, int width, int* out, cudaStream_t s) {
  shuffle_kernel<<<1, 32, 0, s>>>(mode, src, width, out);
}
void votes(unsigned mask, unsigned* out, cudaStream_t s) { votes_kernel<<<1, 32, 0, s>>>(mask, out); }
void votes_after_returns(unsigned* out, cudaStream_t s) { votes_after_returns_kernel<<<1, 32, 0, s>>>(out); }
void partial_masks(int* out, cudaStream_t s) { partial_masks_kernel<<<1, 32, 0, s>>>(out); }
void mma_16816(const std::uint16_t* A, const std::uint16_t* B, float* D, bool bf16, cudaStream_t s) {
  mma_kernel<<<1, 32, 0, s>>>(A, B, D, bf16);
}
void block_sum(int blocks, int threads, int* out, cudaStream_t s) {
  block_sum_kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(threads), 0, s>>>(out);
}
void copy(const int* in, int* out, int n, cudaStream_t s) {
  copy_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0, s>>>(in, out, n);
}
void read_unwritten_shared(unsigned* out, cudaStream_t s) { read_unwritten_shared_kernel<<<1, 1, 0, s>>>(out); }
void divergent_barrier(cudaStream_t s) { divergent_barrier_kernel<<<1, 64, 0, s>>>(); }
void lane_returns_before_shuffle(cudaStream_t s) {
  Scratch sink(32 * sizeof(int));
  lane_returns_kernel<<<1, 32, 0, s>>>(static_cast<int*>(sink.p));
  cudaStreamSynchronize(s);
}
void lane_skips_shuffle_at_barrier(cudaStream_t s) {
  Scratch sink(32 * sizeof(int));
  lane_skips_shuffle_kernel<<<1, 32, 0, s>>>(static_cast<int*>(sink.p));
  cudaStreamSynchronize(s);
}
void mask_without_self(cudaStream_t s) {
  Scratch sink(32 * sizeof(int));
  mask_without_self_kernel<<<1, 32, 0, s>>>(static_cast<int*>(sink.p));
  cudaStreamSynchronize(s);
}
void misaligned_vector_load(const void* base, cudaStream_t s) {
  Scratch sink(sizeof(unsigned));
  misaligned_kernel<<<1, 1, 0, s>>>(static_cast<const unsigned char*>(base), static_cast<unsigned*>(sink.p));
  cudaStreamSynchronize(s);
}
void too_much_static_shared(cudaStream_t s) {
  Scratch sink(sizeof(float));
  static_shared_kernel<<<1, 32, 0, s>>>(static_cast<float*>(sink.p));
  cudaStreamSynchronize(s);
}
void dynamic_shared_without_attribute(std::size_t bytes, cudaStream_t s) {
  Scratch sink(sizeof(float));
  dynamic_shared_kernel<<<1, 128, bytes, s>>>(static_cast<float*>(sink.p), static_cast<int>(bytes / sizeof(float)));
  cudaStreamSynchronize(s);
}
void dynamic_shared_with_attribute(std::size_t bytes, cudaStream_t s) {
  cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  dynamic_shared_without_attribute(bytes, s);
}
void over_launch_bounds(cudaStream_t s) {
  Scratch sink(256 * sizeof(int));
  bounded_kernel<<<1, 256, 0, s>>>(static_cast<int*>(sink.p));
  cudaStreamSynchronize(s);
}
void launch_with(dim3 grid, dim3 block, std::size_t smem, cudaStream_t s) { empty_kernel<<<grid, block, smem, s>>>(); }
void read_past_the_end(const int* p, int n, int* out, cudaStream_t s) { read_past_kernel<<<1, 1, 0, s>>>(p, n, out); }

}  // namespace pb_emu_test
