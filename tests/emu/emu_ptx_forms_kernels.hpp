#pragma once
// Kernels that run, one at a time, the inline PTX instructions the emulation takes for
// FlashInfer's headers (kernels/cuda_emu/pb_emu_ptx.hpp, ptx.cpp), each in the operand
// forms FlashInfer writes; used by test_emu_ptx_forms.cpp, which checks them against
// the PTX ISA.
#include <cuda_runtime.h>

#include <cstdint>

namespace pb_emu_test {

// out[i] = op(in[i]), i < n (one block of 32 threads), for the .f32 approximations:
// op 0 ex2.approx.ftz.f32, 1 lg2.approx.ftz.f32, 2 rcp.approx.ftz.f32,
// 3 rsqrt.approx.ftz.f32, 4 tanh.approx.f32.
void approx_f32(int op, const float* in, float* out, int n, cudaStream_t s);
// The 16-bit forms, on fp16 bits: op 0 ex2.approx.f16, 1 tanh.approx.f16 (one
// element per input), 2 ex2.approx.f16x2, 3 tanh.approx.f16x2 (in[2i], in[2i+1] packed
// into one register, the lower index in the low half). n even for the x2 forms.
void approx_f16(int op, const std::uint16_t* in, std::uint16_t* out, int n, cudaStream_t s);

// One warp: out[lane] = shfl.sync.bfly.b32 of value 100 + lane with lane mask `b` and
// operand c = c_operand (membermask 0xffffffff), as a float register (FlashInfer's "f"
// operand) and out[32 + lane] the same as a .b32 integer register.
void shfl_bfly(unsigned b, unsigned c_operand, float* out, cudaStream_t s);
// One block of `threads` (a multiple of 32): out[tid] = mov.u32 %laneid.
void laneid(unsigned* out, int threads, cudaStream_t s);

// Global loads and stores with cache operators or memory orders, one lane each:
// lane l copies in[4l .. 4l+3] to out[4l .. 4l+3] by form `form`:
//   0 ld.global.cs.b32 x4 / st.global.cs.b32 x4,
//   1 ld.global.cs.v2.b32 x2 / st.global.cs.v2.b32 x2,
//   2 ld.acquire.global.sys.v4.b32 / st.release.global.sys.v4.b32,
//   3 ld.volatile.global.v4.b32 / st.volatile.global.v4.b32.
// Then it issues prefetch.global.L2 on in + 4l and on `wild` (any address: a
// prefetch never faults), and griddepcontrol.wait / .launch_dependents.
void global_forms(int form, const unsigned* in, unsigned* out, const void* wild, cudaStream_t s);
// Form `form` of the above with lane 3's addresses 2 bytes past their alignment.
void global_forms_misaligned(int form, const unsigned* in, unsigned* out, cudaStream_t s);

// mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16: D (16x8, fp16, row-major) =
// A (16x16, row-major) * B (16x8, row-major here; the instruction's .col operand
// fragment is built from it) + C (16x8, row-major), all fp16 bits.
void mma_f16_acc(const std::uint16_t* A, const std::uint16_t* B, const std::uint16_t* C, std::uint16_t* D,
                 cudaStream_t s);
// FlashInfer's row sum: mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
// {%0, _, %1, _}, {a}, {b = all ones}, {%8, 0., %9, 0.}: out[lane * 2 + {0, 1}] = d0, d2
// of each lane for A (16x16 row-major, bf16 or fp16 bits) with C's c0, c2 = acc[lane * 2 + {0, 1}].
void mma_rowsum(const std::uint16_t* A, bool bf16, const float* acc, float* out, cudaStream_t s);

// ldmatrix of a 16x16 tile of 16-bit elements (row-major, `tile`; matrix i is its 8x8
// block at rows (i % 2) * 8, columns (i / 2) * 8), out[lane * 4 + i] = register i:
//   form 0: ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16 (.trans before the shape)
//   form 1: ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, _, %1, _}: registers 0 and 2
//           into out[.. + 0] and [.. + 2]; out[.. + 1] and [.. + 3] keep 0xdeadbeef
//   form 2: ldmatrix.sync.aligned.m8n8.x4.shared.b16 {_, %0, _, %1}: registers 1 and 3
//   form 3: ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16 {%0, %1, _, _}
//   form 4: ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16 {_, _, %0, %1}
void ldmatrix_forms(const std::uint16_t* tile, int form, unsigned* out, cudaStream_t s);

// cp.async.cg.shared.global.L2::128B with cp-size 16 as a literal ("n" operand), one lane
// a 16-byte copy each into shared memory prefilled with 0xa5 bytes, then wait_all:
//   out[lane] (uint4) after `cp.async ... [%0], [%1], %2, %3` with src-size 16 for even
//   lanes and 0 for odd lanes (zero fill; odd lanes' source is `wild`, never read);
//   out[32 + lane] after the predicated form { .reg .pred p; setp.ne.b32 p, %0, 0;
//   @p cp.async ... [%1], [%2], %3; } with p = lane % 3 != 0 (lanes it skips keep 0xa5).
void cp_async_l2_128b(const uint4* src, const void* wild, uint4* out, cudaStream_t s);
// cp.async.cg.shared.global.L2::128B with cp-size 8 (.cg takes 16 only): the launch fails.
void cp_async_l2_128b_bad_size(const uint4* src, cudaStream_t s);

}  // namespace pb_emu_test
