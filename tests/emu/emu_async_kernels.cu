// Kernels for the emulation's ldmatrix and cp.async (see emu_async_kernels.hpp).
// Plain CUDA, rewritten by cu2emu.py like kernels/cuda/*.cu. Every instruction
// sits in its own helper, one per asm, as kernels/cuda/README.md asks.
#include "emu_async_kernels.hpp"

#include <cstdint>

namespace pb_emu_test {

namespace {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldm_x1(unsigned (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
}
__device__ __forceinline__ void ldm_x2(unsigned (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
__device__ __forceinline__ void ldm_x4(unsigned (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldm_x1_trans(unsigned (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
}
__device__ __forceinline__ void ldm_x2_trans(unsigned (&r)[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
// A 64-bit .shared operand ("l"), which PTX allows as well.
__device__ __forceinline__ void ldm_x4_trans(unsigned (&r)[4], unsigned long long a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "l"(a));
}

__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_16_src_size(unsigned dst, const void* src, int src_size) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

constexpr int kLd = 24;  // 16-bit elements per shared row: 48 bytes, rows stay 16-byte aligned

__global__ void ldmatrix_kernel(const std::uint16_t* tile, int num, bool trans, unsigned* out) {
  __shared__ __align__(16) std::uint16_t s[16 * kLd];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 256; i += 32) s[(i / 16) * kLd + i % 16] = tile[i];
  __syncwarp();
  const int m = lane / 8, j = lane % 8;
  const unsigned row = smem_addr(&s[((m & 1) * 8 + j) * kLd + (m >> 1) * 8]);
  unsigned r[4] = {0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu};
  if (num == 1) {
    if (trans) ldm_x1_trans(r, row); else ldm_x1(r, row);
  } else if (num == 2) {
    if (trans) ldm_x2_trans(r, row); else ldm_x2(r, row);
  } else {
    if (trans) ldm_x4_trans(r, __cvta_generic_to_shared(&s[((m & 1) * 8 + j) * kLd + (m >> 1) * 8]));
    else ldm_x4(r, row);
  }
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

__global__ void ldmatrix_misaligned_kernel(unsigned* sink) {
  __shared__ __align__(16) std::uint16_t s[32 * 8 + 8];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 32 * 8 + 8; i += 32) s[i] = static_cast<std::uint16_t>(i);
  __syncwarp();
  unsigned r[4];
  ldm_x4(r, smem_addr(&s[lane * 8 + (lane == 9 ? 4 : 0)]));
  sink[lane] = r[0];
}

__global__ void ldmatrix_generic_kernel(unsigned* sink) {
  __shared__ __align__(16) std::uint16_t s[32 * 8];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 32 * 8; i += 32) s[i] = static_cast<std::uint16_t>(i);
  __syncwarp();
  unsigned r[4];
  // Wrong on purpose: the generic address, truncated, instead of __cvta_generic_to_shared.
  ldm_x4(r, static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(&s[lane * 8])));
  sink[lane] = r[0];
}

__global__ void cp_async_groups_kernel(const uint4* src, uint4* out) {
  __shared__ __align__(16) uint4 s[3][32];
  const int lane = static_cast<int>(threadIdx.x);
  for (int c = 0; c < 3; ++c) s[c][lane] = make_uint4(0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u);
  __syncwarp();
  cp_async_16(smem_addr(&s[0][lane]), &src[lane]);
  cp_async_commit();
  cp_async_16_src_size(smem_addr(&s[1][lane]), &src[32 + lane], 5);
  cp_async_commit();
  cp_async_16(smem_addr(&s[2][lane]), &src[64 + lane]);
  cp_async_wait<1>();
  out[0 * 32 + lane] = s[0][lane];
  out[1 * 32 + lane] = s[1][lane];
  cp_async_wait<0>();
  out[2 * 32 + lane] = s[1][lane];
  out[3 * 32 + lane] = s[2][lane];
  cp_async_wait_all();
  out[4 * 32 + lane] = s[2][lane];
}

__global__ void cp_async_bad_kernel(const uint4* src, uint4* gdst, int mode, uint4* sink) {
  __shared__ __align__(16) uint4 s[33];
  const int lane = static_cast<int>(threadIdx.x);
  const auto* src_bytes = reinterpret_cast<const unsigned char*>(&src[lane]);
  switch (mode) {
    case 0: cp_async_16(smem_addr(&s[lane]) + 8u, &src[lane]); break;
    case 1: cp_async_16(smem_addr(&s[lane]), src_bytes + 8); break;
    case 2: cp_async_16_src_size(smem_addr(&s[lane]), &src[lane], 17); break;
    case 3: cp_async_16(static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(&gdst[lane])), &src[lane]); break;
    default: cp_async_16(smem_addr(&s[lane]), &src[lane + 33]); break;  // lane 31 reads src[64]: one past the end
  }
  cp_async_wait_all();
  sink[lane] = s[lane];
}

struct Scratch {
  void* p = nullptr;
  explicit Scratch(std::size_t bytes) { cudaMalloc(&p, bytes); }
  ~Scratch() { cudaFree(p); }
};

void cp_async_bad(const uint4* src, uint4* gdst, int mode, cudaStream_t s) {
  Scratch sink(32 * sizeof(uint4));
  cp_async_bad_kernel<<<1, 32, 0, s>>>(src, gdst, mode, static_cast<uint4*>(sink.p));
  cudaStreamSynchronize(s);
}

}  // namespace

void ldmatrix(const std::uint16_t* tile, int num, bool trans, unsigned* out, cudaStream_t s) {
  ldmatrix_kernel<<<1, 32, 0, s>>>(tile, num, trans, out);
}
void ldmatrix_misaligned(cudaStream_t s) {
  Scratch sink(32 * sizeof(unsigned));
  ldmatrix_misaligned_kernel<<<1, 32, 0, s>>>(static_cast<unsigned*>(sink.p));
  cudaStreamSynchronize(s);
}
void ldmatrix_generic_address(cudaStream_t s) {
  Scratch sink(32 * sizeof(unsigned));
  ldmatrix_generic_kernel<<<1, 32, 0, s>>>(static_cast<unsigned*>(sink.p));
  cudaStreamSynchronize(s);
}
void cp_async_groups(const uint4* src, uint4* out, cudaStream_t s) { cp_async_groups_kernel<<<1, 32, 0, s>>>(src, out); }
void cp_async_misaligned_dst(const uint4* src, cudaStream_t s) { cp_async_bad(src, nullptr, 0, s); }
void cp_async_misaligned_src(const uint4* src, cudaStream_t s) { cp_async_bad(src, nullptr, 1, s); }
void cp_async_src_size_too_large(const uint4* src, cudaStream_t s) { cp_async_bad(src, nullptr, 2, s); }
void cp_async_global_dst(const uint4* src, uint4* dst, cudaStream_t s) { cp_async_bad(src, dst, 3, s); }
void cp_async_past_the_end(const uint4* src, cudaStream_t s) { cp_async_bad(src, nullptr, 4, s); }

}  // namespace pb_emu_test
