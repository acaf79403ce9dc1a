// pb_emu: the inline PTX of phasebench's kernels, one named function per
// instruction. cu2emu.py turns asm("op.q1.q2 {%0, %1}, [%2];" : ... ) into
// ::pb_emu::ptx::op_q1_q2(operands in the order the template names them);
// special registers (%%globaltimer) are appended to the name. An instruction
// without a function here is a compile error naming it: a kernel that adds
// inline PTX adds its emulation here, in the same change (kernels/cuda/README.md).
// Semantics follow the PTX ISA; fragment layouts are written from the ISA's
// tables, independently of the kernels that use them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace pb_emu {

void check_access(const void* p, std::size_t align, const char* what);
// The fake %globaltimer: advances 1 us per read, so a spin on it ends at once (never a time).
unsigned long long fake_globaltimer();

// D (16x8, fp32) = A (16x16, row) * B (16x8, col) + C, bf16 or fp16 inputs, every
// lane's registers as the ISA lays them out (see ptx.cpp). A warp collective of all 32 lanes.
void mma_m16n8k16_f32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4], bool bf16,
                      const char* file, int line);

namespace ptx {

// ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {x, y, z, w}, [p]: 16 bytes through the
// non-coherent (read-only) path; p must be 16-byte aligned.
inline void ld_global_nc_L1__no_allocate_L2__256B_v4_u32(unsigned& x, unsigned& y, unsigned& z, unsigned& w,
                                                         const void* p) {
  check_access(p, 16, "ld.global.nc.L1::no_allocate.L2::256B.v4.u32");
  unsigned v[4];
  std::memcpy(v, p, 16);
  x = v[0];
  y = v[1];
  z = v[2];
  w = v[3];
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
//   {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}
#define PB_EMU_MMA_16816(name, is_bf16)                                                                           \
  inline void name(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2, unsigned a3, \
                   unsigned b0, unsigned b1, float c0, float c1, float c2, float c3,                              \
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                            \
    float d[4];                                                                                                   \
    const unsigned a[4] = {a0, a1, a2, a3}, b[2] = {b0, b1};                                                      \
    const float c[4] = {c0, c1, c2, c3};                                                                          \
    mma_m16n8k16_f32(d, a, b, c, is_bf16, file, line);                                                            \
    d0 = d[0];                                                                                                    \
    d1 = d[1];                                                                                                    \
    d2 = d[2];                                                                                                    \
    d3 = d[3];                                                                                                    \
  }
PB_EMU_MMA_16816(mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32, true)
PB_EMU_MMA_16816(mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32, false)
#undef PB_EMU_MMA_16816

// mov.u64 %0, %%globaltimer: a nanosecond clock on the GPU; here fake_globaltimer().
inline void mov_u64__globaltimer(unsigned long long& t) { t = fake_globaltimer(); }

}  // namespace ptx
}  // namespace pb_emu
