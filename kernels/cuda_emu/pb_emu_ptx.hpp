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
// Whether [p, p + bytes) lies in the running block's shared memory (dynamic or a __shared__ array).
bool is_shared_address(const void* p, std::size_t bytes);
// The bytes at .shared address `addr` (__cvta_generic_to_shared's result) of the running
// block, or nullptr when [addr, addr + bytes) is not in its shared window.
unsigned char* shared_window_pointer(std::size_t addr, std::size_t bytes);
// The fake %globaltimer: advances 1 us per read, so a spin on it ends at once (never a time).
unsigned long long fake_globaltimer();

// D (16x8, fp32) = A (16x16, row) * B (16x8, col) + C, bf16 or fp16 inputs, every
// lane's registers as the ISA lays them out (see ptx.cpp). A warp collective of all 32 lanes.
void mma_m16n8k16_f32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4], bool bf16,
                      const char* file, int line);

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16: `num` 8x8 matrices of
// 16-bit elements; lane 8*i + j supplies the shared address of row j of matrix i
// (16 bytes, 16-byte aligned; the addresses of lanes >= 8*num are not used), and
// every lane receives one register per matrix (see ptx.cpp). A warp collective of all 32 lanes.
void ldmatrix_m8n8_b16(unsigned* r, int num, bool trans, std::size_t shared_addr, const char* what, const char* file,
                       int line);
// cp.async.cg.shared.global [dst], [src], 16{, src_size}: a 16-byte copy from global to
// shared memory of which the first src_size bytes come from src and the rest are zero.
// It is complete only once a cp.async.wait_group/wait_all of this thread covers the
// group it was committed in; until then the destination keeps its old contents (the
// emulation completes each copy at the latest moment the PTX ISA allows, so a read
// before the wait sees stale data and fails verification). The source is read at issue.
// `site` names the instruction for the counters (a return address in the counting build, else 0).
void cp_async_shared_global(std::size_t dst_shared, const void* src, int cp_size, int src_size, const char* what,
                            const char* file, int line, const void* site);
// cp.async.commit_group: this thread's copies not yet in a group become the newest group.
void cp_async_commit_group_impl();
// cp.async.wait_group n: every committed group of this thread but the newest n is complete
// (copies not yet committed are not waited for). wait_all = commit_group + wait_group 0.
void cp_async_wait_group_impl(int n, const char* file, int line);

namespace ptx {

// ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {x, y, z, w}, [p]: 16 bytes through the
// non-coherent (read-only) path; p must be 16-byte aligned.
PB_EMU_HELPER inline void ld_global_nc_L1__no_allocate_L2__256B_v4_u32(unsigned& x, unsigned& y, unsigned& z,
                                                                       unsigned& w, const void* p) {
  check_access(p, 16, "ld.global.nc.L1::no_allocate.L2::256B.v4.u32");
  PB_EMU_COUNT_ACCESS(p, 16, 0);
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

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 {r...}, [addr]: one
// macro per register count, each made with and without .trans.
#define PB_EMU_LDMATRIX_X1(name, trans, text)                                                                  \
  inline void name(unsigned& r0, std::size_t addr, const char* file = __builtin_FILE(), int line = __builtin_LINE()) { \
    unsigned r[1];                                                                                              \
    ldmatrix_m8n8_b16(r, 1, trans, addr, text, file, line);                                                     \
    r0 = r[0];                                                                                                  \
  }
#define PB_EMU_LDMATRIX_X2(name, trans, text)                                                              \
  inline void name(unsigned& r0, unsigned& r1, std::size_t addr, const char* file = __builtin_FILE(),     \
                   int line = __builtin_LINE()) {                                                         \
    unsigned r[2];                                                                                          \
    ldmatrix_m8n8_b16(r, 2, trans, addr, text, file, line);                                                 \
    r0 = r[0];                                                                                              \
    r1 = r[1];                                                                                              \
  }
#define PB_EMU_LDMATRIX_X4(name, trans, text)                                                                     \
  inline void name(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, std::size_t addr,                     \
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                           \
    unsigned r[4];                                                                                                 \
    ldmatrix_m8n8_b16(r, 4, trans, addr, text, file, line);                                                        \
    r0 = r[0];                                                                                                     \
    r1 = r[1];                                                                                                     \
    r2 = r[2];                                                                                                     \
    r3 = r[3];                                                                                                     \
  }
PB_EMU_LDMATRIX_X1(ldmatrix_sync_aligned_m8n8_x1_shared_b16, false, "ldmatrix.sync.aligned.m8n8.x1.shared.b16")
PB_EMU_LDMATRIX_X2(ldmatrix_sync_aligned_m8n8_x2_shared_b16, false, "ldmatrix.sync.aligned.m8n8.x2.shared.b16")
PB_EMU_LDMATRIX_X4(ldmatrix_sync_aligned_m8n8_x4_shared_b16, false, "ldmatrix.sync.aligned.m8n8.x4.shared.b16")
PB_EMU_LDMATRIX_X1(ldmatrix_sync_aligned_m8n8_x1_trans_shared_b16, true, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16")
PB_EMU_LDMATRIX_X2(ldmatrix_sync_aligned_m8n8_x2_trans_shared_b16, true, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16")
PB_EMU_LDMATRIX_X4(ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16, true, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16")
#undef PB_EMU_LDMATRIX_X1
#undef PB_EMU_LDMATRIX_X2
#undef PB_EMU_LDMATRIX_X4

// cp.async.cg.shared.global [dst], [src], 16{, src_size}; (.cg takes only cp-size 16,
// so the literal 16 of the template, which cu2emu.py does not pass, is implied.)
#if defined(PB_EMU_COUNT) && PB_EMU_COUNT
#define PB_EMU_PTX_SITE __builtin_return_address(0)
#else
#define PB_EMU_PTX_SITE nullptr
#endif
PB_EMU_HELPER inline void cp_async_cg_shared_global(std::size_t dst, const void* src, const char* file = __builtin_FILE(),
                                                    int line = __builtin_LINE()) {
  cp_async_shared_global(dst, src, 16, 16, "cp.async.cg.shared.global", file, line, PB_EMU_PTX_SITE);
}
PB_EMU_HELPER inline void cp_async_cg_shared_global(std::size_t dst, const void* src, int src_size,
                                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cp_async_shared_global(dst, src, 16, src_size, "cp.async.cg.shared.global", file, line, PB_EMU_PTX_SITE);
}
#undef PB_EMU_PTX_SITE
inline void cp_async_commit_group() { cp_async_commit_group_impl(); }
inline void cp_async_wait_group(int n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cp_async_wait_group_impl(n, file, line);
}
inline void cp_async_wait_all(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cp_async_commit_group_impl();
  cp_async_wait_group_impl(0, file, line);
}

// mov.u64 %0, %%globaltimer: a nanosecond clock on the GPU; here fake_globaltimer().
inline void mov_u64__globaltimer(unsigned long long& t) { t = fake_globaltimer(); }

}  // namespace ptx
}  // namespace pb_emu
