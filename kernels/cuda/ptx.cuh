#pragma once
// The inline PTX the kernels share, one instruction per helper, each emulated in
// kernels/cuda_emu (under the emulation cu2emu rewrites this header as it does the
// .cu files, into build/cu2emu/cuda/): .shared addresses, ldmatrix, cp.async,
// mma.sync m16n8k16 with fp32 accumulation, and streaming 16-byte loads.
#include <cstdint>
#include <cstring>

#include "attention_util.cuh"

namespace phasebench::cuda {

// A shared-memory pointer as the 32-bit .shared address ldmatrix and cp.async take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements; lane 8i+j gives the address of row j of
// matrix i, register i receives matrix i. "memory": shared stores before it (a
// tile another lane wrote) must not move past it.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row)
               : "memory");
}

// The same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row)
               : "memory");
}

// Two transposed 8x8 matrices (lanes 0-15 give the row addresses).
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned& r0, unsigned& r1, unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_row)
               : "memory");
}

// 16 bytes global -> shared, of which the first src_bytes (16 or 0) are read and the rest zero-filled.
__device__ __forceinline__ void cp_async_16(unsigned smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// c += a b (m16n8k16: A 16x16 row-major in a[0..3], B 16x8 column-major in b0, b1;
// fp32 accumulate). Not volatile: a pure register operation the compiler may schedule.
__device__ __forceinline__ void mma_16816(Bf16Tag, float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_16816(Fp16Tag, float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats to a 16-bit pair (lo in the low half), rounded to nearest even.
__device__ __forceinline__ unsigned pack2(Bf16Tag, float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &h, sizeof u);
  return u;
}
__device__ __forceinline__ unsigned pack2(Fp16Tag, float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  unsigned u;
  memcpy(&u, &h, sizeof u);
  return u;
}

// 16 bytes of data read once (weights, a KV or latent cache): no L1 allocation,
// 256-byte L2 fetches. Not volatile, so the compiler may batch the loads.
__device__ __forceinline__ uint4 load_streaming(const std::uint16_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

}  // namespace phasebench::cuda
