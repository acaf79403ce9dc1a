// Kernels for the inline PTX the emulation takes for FlashInfer's headers (see
// emu_ptx_forms_kernels.hpp). Plain CUDA, rewritten by cu2emu.py like kernels/cuda/*.cu;
// one instruction per asm, in the operand forms FlashInfer's headers use.
#include "emu_ptx_forms_kernels.hpp"

#include <cstdint>

namespace pb_emu_test {

namespace {

__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_ftz(float x) {
  float y;
  asm volatile("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {
  float y;
  asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rsqrt_ftz(float x) {
  float y;
  asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float tanh_f32(float x) {
  float y;
  asm volatile("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ std::uint16_t ex2_f16(std::uint16_t x) {
  std::uint16_t y;
  asm volatile("ex2.approx.f16 %0, %1;" : "=h"(y) : "h"(x));
  return y;
}
__device__ __forceinline__ std::uint16_t tanh_f16(std::uint16_t x) {
  std::uint16_t y;
  asm volatile("tanh.approx.f16 %0, %1;" : "=h"(y) : "h"(x));
  return y;
}
__device__ __forceinline__ std::uint32_t ex2_f16x2(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ std::uint32_t tanh_f16x2(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

__global__ void approx_f32_kernel(int op, const float* in, float* out, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += 32) {
    const float x = in[i];
    out[i] = op == 0 ? ex2_ftz(x) : op == 1 ? lg2_ftz(x) : op == 2 ? rcp_ftz(x) : op == 3 ? rsqrt_ftz(x) : tanh_f32(x);
  }
}

__global__ void approx_f16_kernel(int op, const std::uint16_t* in, std::uint16_t* out, int n) {
  if (op < 2) {
    for (int i = static_cast<int>(threadIdx.x); i < n; i += 32) out[i] = op == 0 ? ex2_f16(in[i]) : tanh_f16(in[i]);
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < n / 2; i += 32) {
      const std::uint32_t x = in[2 * i] | static_cast<std::uint32_t>(in[2 * i + 1]) << 16;
      const std::uint32_t y = op == 2 ? ex2_f16x2(x) : tanh_f16x2(x);
      out[2 * i] = static_cast<std::uint16_t>(y & 0xffffu);
      out[2 * i + 1] = static_cast<std::uint16_t>(y >> 16);
    }
  }
}

// FlashInfer's form (math.cuh shfl_xor_sync): a float register, c and the member mask
// as literals. The c operand is a literal in the template, so each width is its own helper.
__device__ __forceinline__ float bfly_f_w32(float x, unsigned b) {
  float y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x), "r"(b));
  return y;
}
// An integer register, c and the mask as operands.
__device__ __forceinline__ unsigned bfly_r(unsigned x, unsigned b, unsigned c) {
  unsigned y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, %3, %4;" : "=r"(y) : "r"(x), "r"(b), "r"(c), "r"(0xffffffffu));
  return y;
}

__global__ void shfl_bfly_kernel(unsigned b, unsigned c, float* out) {
  const unsigned lane = threadIdx.x;
  out[lane] = c == 0x1fu ? bfly_f_w32(100.0f + static_cast<float>(lane), b)
                         : static_cast<float>(bfly_r(100u + lane, b, c));
  out[32 + lane] = static_cast<float>(bfly_r(100u + lane, b, c));
}

__device__ __forceinline__ unsigned lane_id_ptx() {
  unsigned l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

__global__ void laneid_kernel(unsigned* out) { out[threadIdx.x] = lane_id_ptx(); }

__device__ __forceinline__ int ld_cs(const int* p) {
  int v;
  asm volatile("ld.global.cs.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ int2 ld_cs_v2(const int2* p) {
  int2 v;
  asm volatile("ld.global.cs.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ void st_cs(int* p, int v) { asm volatile("st.global.cs.b32 [%0], %1;" ::"l"(p), "r"(v)); }
__device__ __forceinline__ void st_cs_v2(int2* p, int2 v) {
  asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y));
}
__device__ __forceinline__ int4 ld_acquire(const int4* p) {
  int4 v;
  asm volatile("ld.acquire.global.sys.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void st_release(const int4& v, int4* p) {
  asm volatile("st.release.global.sys.v4.b32 [%4], {%0, %1, %2, %3};" ::"r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w),
               "l"(p));
}
__device__ __forceinline__ int4 ld_volatile(const int4* p) {
  int4 v;
  asm volatile("ld.volatile.global.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void st_volatile(const int4& v, int4* p) {
  asm volatile("st.volatile.global.v4.b32 [%4], {%0, %1, %2, %3};" ::"r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w),
               "l"(p));
}
template <class T>
__device__ __forceinline__ void prefetch_l2(const T* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }

// Lane l's element: in/out + 4l, shifted by `skew` bytes for lane 3.
__device__ void copy_four(int form, const unsigned* in, unsigned* out, int skew) {
  const unsigned l = threadIdx.x;
  const auto* src = reinterpret_cast<const unsigned char*>(in + 4 * l) + (l == 3 ? skew : 0);
  auto* dst = reinterpret_cast<unsigned char*>(out + 4 * l) + (l == 3 ? skew : 0);
  if (form == 0) {
    for (int i = 0; i < 4; ++i)
      st_cs(reinterpret_cast<int*>(dst) + i, ld_cs(reinterpret_cast<const int*>(src) + i));
  } else if (form == 1) {
    for (int i = 0; i < 2; ++i)
      st_cs_v2(reinterpret_cast<int2*>(dst) + i, ld_cs_v2(reinterpret_cast<const int2*>(src) + i));
  } else if (form == 2) {
    st_release(ld_acquire(reinterpret_cast<const int4*>(src)), reinterpret_cast<int4*>(dst));
  } else {
    st_volatile(ld_volatile(reinterpret_cast<const int4*>(src)), reinterpret_cast<int4*>(dst));
  }
}

__global__ void global_forms_kernel(int form, const unsigned* in, unsigned* out, const void* wild) {
  grid_wait();
  copy_four(form, in, out, 0);
  prefetch_l2(in + 4 * threadIdx.x);
  prefetch_l2(static_cast<const unsigned char*>(wild));
  grid_launch_dependents();
}

__global__ void global_forms_misaligned_kernel(int form, const unsigned* in, unsigned* out) {
  copy_four(form, in, out, 2);
}

__device__ __forceinline__ void mma_f16(unsigned (&d)[2], const unsigned (&a)[4], const unsigned (&b)[2],
                                        const unsigned (&c)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
      "{%0,  %1},"
      "{%2,  %3,  %4,  %5},"
      "{%6,  %7},"
      "{%8,  %9};\n"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}

__device__ __forceinline__ unsigned pack(std::uint16_t lo, std::uint16_t hi) {
  return lo | static_cast<unsigned>(hi) << 16;
}

// The PTX ISA's m16n8k16 fragments, for lane (groupID g = lane / 4, t = lane % 4):
// A: a0,a1 (row g, cols 2t, 2t+1), a2,a3 (row g+8), a4,a5 (row g, cols 2t+8, 2t+9),
// a6,a7 (row g+8, cols 2t+8, 2t+9); B: b0,b1 (rows 2t, 2t+1, col g), b2,b3 (rows 2t+8,
// 2t+9); C/D: c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8).
__device__ void a_fragment(const std::uint16_t* A, unsigned (&a)[4]) {
  const int g = static_cast<int>(threadIdx.x) / 4, t = static_cast<int>(threadIdx.x) % 4;
  a[0] = pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
  a[1] = pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
  a[2] = pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
  a[3] = pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
}

__global__ void mma_f16_acc_kernel(const std::uint16_t* A, const std::uint16_t* B, const std::uint16_t* C,
                                   std::uint16_t* D) {
  const int g = static_cast<int>(threadIdx.x) / 4, t = static_cast<int>(threadIdx.x) % 4;
  unsigned a[4], b[2], c[2], d[2];
  a_fragment(A, a);
  b[0] = pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  b[1] = pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  c[0] = pack(C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1]);
  c[1] = pack(C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]);
  mma_f16(d, a, b, c);
  D[g * 8 + 2 * t] = static_cast<std::uint16_t>(d[0] & 0xffffu);
  D[g * 8 + 2 * t + 1] = static_cast<std::uint16_t>(d[0] >> 16);
  D[(g + 8) * 8 + 2 * t] = static_cast<std::uint16_t>(d[1] & 0xffffu);
  D[(g + 8) * 8 + 2 * t + 1] = static_cast<std::uint16_t>(d[1] >> 16);
}

// FlashInfer's m16k16_rowsum_f16f16f32 (mma.cuh), as written there.
__device__ __forceinline__ void rowsum_bf16(float* d, const unsigned (&s)[4]) {
  asm volatile(
      "{\n"
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,  _,  %1,  _},"
      "{%2,  %3,  %4,  %5},"
      "{%6,  %7},"
      "{%8,  0.,  %9,  0.};\n"
      "}\n"
      : "=f"(d[0]), "=f"(d[1])
      : "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3]), "r"(1065369472), "r"(1065369472), "f"(d[0]), "f"(d[1]));
}
__device__ __forceinline__ void rowsum_f16(float* d, const unsigned (&s)[4]) {
  asm volatile(
      "{\n"
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,  _,  %1,  _},"
      "{%2,  %3,  %4,  %5},"
      "{%6,  %7},"
      "{%8,  0.,  %9,  0.};\n"
      "}\n"
      : "=f"(d[0]), "=f"(d[1])
      : "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3]), "r"(1006648320), "r"(1006648320), "f"(d[0]), "f"(d[1]));
}

__global__ void mma_rowsum_kernel(const std::uint16_t* A, bool bf16, const float* acc, float* out) {
  const int lane = static_cast<int>(threadIdx.x);
  unsigned a[4];
  a_fragment(A, a);
  float d[2] = {acc[lane * 2], acc[lane * 2 + 1]};
  if (bf16)
    rowsum_bf16(d, a);
  else
    rowsum_f16(d, a);
  out[lane * 2] = d[0];
  out[lane * 2 + 1] = d[1];
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// FlashInfer's ldmatrix helpers (mma.cuh), as written there.
__device__ __forceinline__ void ldm_trans_first(unsigned* R, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(R[0]), "=r"(R[1]), "=r"(R[2]), "=r"(R[3])
               : "r"(a));
}
__device__ __forceinline__ void ldm_left_half(unsigned* R, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, _, %1, _}, [%2];\n" : "=r"(R[0]), "=r"(R[1]) : "r"(a));
}
__device__ __forceinline__ void ldm_right_half(unsigned* R, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {_, %0, _, %1}, [%2];\n" : "=r"(R[0]), "=r"(R[1]) : "r"(a));
}
__device__ __forceinline__ void ldm_trans_left_half(unsigned* R, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16 {%0, %1, _, _}, [%2];\n"
               : "=r"(R[0]), "=r"(R[1])
               : "r"(a));
}
__device__ __forceinline__ void ldm_trans_right_half(unsigned* R, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16 {_, _, %0, %1}, [%2];\n"
               : "=r"(R[0]), "=r"(R[1])
               : "r"(a));
}

constexpr int kLd = 24;  // 16-bit elements per shared row: rows stay 16-byte aligned

__global__ void ldmatrix_forms_kernel(const std::uint16_t* tile, int form, unsigned* out) {
  __shared__ __align__(16) std::uint16_t s[16 * kLd];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 256; i += 32) s[(i / 16) * kLd + i % 16] = tile[i];
  __syncwarp();
  const int m = lane / 8, j = lane % 8;
  const unsigned row = smem_addr(&s[((m & 1) * 8 + j) * kLd + (m >> 1) * 8]);
  unsigned r[4] = {0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu};
  unsigned two[2];
  switch (form) {
    case 0: ldm_trans_first(r, row); break;
    case 1: ldm_left_half(two, row); r[0] = two[0]; r[2] = two[1]; break;
    case 2: ldm_right_half(two, row); r[1] = two[0]; r[3] = two[1]; break;
    case 3: ldm_trans_left_half(two, row); r[0] = two[0]; r[1] = two[1]; break;
    default: ldm_trans_right_half(two, row); r[2] = two[0]; r[3] = two[1]; break;
  }
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

// FlashInfer's cp.async forms (cp_async.cuh), as written there.
__device__ __forceinline__ void cp_async_zfill(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(16),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_pred(unsigned dst, const void* src, bool predicate) {
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " setp.ne.b32 p, %0, 0;\n"
      " @p cp.async.cg.shared.global.L2::128B [%1], [%2], %3;\n"
      "}\n" ::"r"((int)predicate),
      "r"(dst), "l"(src), "n"(16));
}
__device__ __forceinline__ void cp_async_8(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(8));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__global__ void cp_async_l2_kernel(const uint4* src, const void* wild, uint4* out) {
  __shared__ __align__(16) uint4 buf[64];
  const int lane = static_cast<int>(threadIdx.x);
  buf[lane] = make_uint4(0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u, 0xa5a5a5a5u);
  buf[32 + lane] = buf[lane];
  const bool even = lane % 2 == 0;
  cp_async_zfill(smem_addr(&buf[lane]), even ? static_cast<const void*>(src + lane) : wild, even ? 16 : 0);
  cp_async_pred(smem_addr(&buf[32 + lane]), src + 32 + lane, lane % 3 != 0);
  cp_async_wait_all();
  out[lane] = buf[lane];
  out[32 + lane] = buf[32 + lane];
}

__global__ void cp_async_bad_size_kernel(const uint4* src) {
  __shared__ __align__(16) uint4 buf[32];
  cp_async_8(smem_addr(&buf[threadIdx.x]), src + threadIdx.x);
  cp_async_wait_all();
}

}  // namespace

void approx_f32(int op, const float* in, float* out, int n, cudaStream_t s) {
  approx_f32_kernel<<<1, 32, 0, s>>>(op, in, out, n);
}
void approx_f16(int op, const std::uint16_t* in, std::uint16_t* out, int n, cudaStream_t s) {
  approx_f16_kernel<<<1, 32, 0, s>>>(op, in, out, n);
}
void shfl_bfly(unsigned b, unsigned c_operand, float* out, cudaStream_t s) {
  shfl_bfly_kernel<<<1, 32, 0, s>>>(b, c_operand, out);
}
void laneid(unsigned* out, int threads, cudaStream_t s) { laneid_kernel<<<1, threads, 0, s>>>(out); }
void global_forms(int form, const unsigned* in, unsigned* out, const void* wild, cudaStream_t s) {
  global_forms_kernel<<<1, 32, 0, s>>>(form, in, out, wild);
}
void global_forms_misaligned(int form, const unsigned* in, unsigned* out, cudaStream_t s) {
  global_forms_misaligned_kernel<<<1, 32, 0, s>>>(form, in, out);
}
void mma_f16_acc(const std::uint16_t* A, const std::uint16_t* B, const std::uint16_t* C, std::uint16_t* D,
                 cudaStream_t s) {
  mma_f16_acc_kernel<<<1, 32, 0, s>>>(A, B, C, D);
}
void mma_rowsum(const std::uint16_t* A, bool bf16, const float* acc, float* out, cudaStream_t s) {
  mma_rowsum_kernel<<<1, 32, 0, s>>>(A, bf16, acc, out);
}
void ldmatrix_forms(const std::uint16_t* tile, int form, unsigned* out, cudaStream_t s) {
  ldmatrix_forms_kernel<<<1, 32, 0, s>>>(tile, form, out);
}
void cp_async_l2_128b(const uint4* src, const void* wild, uint4* out, cudaStream_t s) {
  cp_async_l2_kernel<<<1, 32, 0, s>>>(src, wild, out);
}
void cp_async_l2_128b_bad_size(const uint4* src, cudaStream_t s) { cp_async_bad_size_kernel<<<1, 32, 0, s>>>(src); }

}  // namespace pb_emu_test
