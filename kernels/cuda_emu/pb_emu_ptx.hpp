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
#include <cmath>
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

// cp.async.cg.shared.global{.L2::128B} [dst], [src], cp-size{, src-size}: .cg takes
// only cp-size 16 (a literal of the template, or an "n" operand); the L2 prefetch-size
// hint changes no result.
#if defined(PB_EMU_COUNT) && PB_EMU_COUNT
#define PB_EMU_PTX_SITE __builtin_return_address(0)
#else
#define PB_EMU_PTX_SITE nullptr
#endif
#define PB_EMU_CP_ASYNC_CG(name, text)                                                                               \
  PB_EMU_HELPER inline void name(std::size_t dst, const void* src, int cp_size, const char* file = __builtin_FILE(), \
                                 int line = __builtin_LINE()) {                                                      \
    if (cp_size != 16) device_fail(text ": .cg takes cp-size 16 only, not " + std::to_string(cp_size));              \
    cp_async_shared_global(dst, src, 16, 16, text, file, line, PB_EMU_PTX_SITE);                                    \
  }                                                                                                                  \
  PB_EMU_HELPER inline void name(std::size_t dst, const void* src, int cp_size, int src_size,                        \
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                 \
    if (cp_size != 16) device_fail(text ": .cg takes cp-size 16 only, not " + std::to_string(cp_size));              \
    cp_async_shared_global(dst, src, 16, src_size, text, file, line, PB_EMU_PTX_SITE);                              \
  }
PB_EMU_CP_ASYNC_CG(cp_async_cg_shared_global, "cp.async.cg.shared.global")
PB_EMU_CP_ASYNC_CG(cp_async_cg_shared_global_L2__128B, "cp.async.cg.shared.global.L2::128B")
#undef PB_EMU_CP_ASYNC_CG
#undef PB_EMU_PTX_SITE
inline void cp_async_commit_group() { cp_async_commit_group_impl(); }
inline void cp_async_wait_group(int n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cp_async_wait_group_impl(n, file, line);
}
inline void cp_async_wait_all(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cp_async_commit_group_impl();
  cp_async_wait_group_impl(0, file, line);
}

// ---- the inline PTX of FlashInfer's attention headers (PHASEBENCH_EMU_FLASHINFER) ----
// Written from the PTX ISA; each has its own test in tests/emu/test_emu_ptx_forms.cpp.

// '_' in an operand list (PTX's sink symbol: a destination whose value is discarded):
// binds to any destination register.
struct Sink {
  template <class T>
  operator T&() const {
    static T discarded;
    return discarded;
  }
};
inline constexpr Sink sink{};

// ldmatrix's qualifiers in the other order the ISA's grammar allows (.trans before the shape).
inline void ldmatrix_sync_aligned_trans_m8n8_x4_shared_b16(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                                           std::size_t addr, const char* file = __builtin_FILE(),
                                                           int line = __builtin_LINE()) {
  unsigned r[4];
  ldmatrix_m8n8_b16(r, 4, true, addr, "ldmatrix.sync.aligned.trans.m8n8.x4.shared.b16", file, line);
  r0 = r[0];
  r1 = r[1];
  r2 = r[2];
  r3 = r[3];
}

// mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {d0, d1}, {a0..a3}, {b0, b1}, {c0, c1}:
// fp16 inputs and accumulator, each .f16x2 register two elements of C/D laid out as the
// fp32 form's c0..c3 (see ptx.cpp).
void mma_m16n8k16_f16(unsigned (&d)[2], const unsigned (&a)[4], const unsigned (&b)[2], const unsigned (&c)[2],
                      const char* file, int line);
inline void mma_sync_aligned_m16n8k16_row_col_f16_f16_f16_f16(unsigned& d0, unsigned& d1, unsigned a0, unsigned a1,
                                                              unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                                                              unsigned c0, unsigned c1,
                                                              const char* file = __builtin_FILE(),
                                                              int line = __builtin_LINE()) {
  unsigned d[2];
  const unsigned a[4] = {a0, a1, a2, a3}, b[2] = {b0, b1}, c[2] = {c0, c1};
  mma_m16n8k16_f16(d, a, b, c, file, line);
  d0 = d[0];
  d1 = d[1];
}

// Approximate math (ex2, lg2, rcp, rsqrt, tanh .approx): computed exactly in float (the
// ISA bounds the approximations' error; an exact result is within it). .ftz flushes
// subnormal inputs and results to sign-preserving zero. The f16 forms round the float
// result to nearest half (.f16x2: each half alone).
float ftz(float x);
inline void ex2_approx_ftz_f32(float& d, float a) { d = ftz(std::exp2(ftz(a))); }
inline void lg2_approx_ftz_f32(float& d, float a) { d = ftz(std::log2(ftz(a))); }
inline void rcp_approx_ftz_f32(float& d, float a) { d = ftz(1.0f / ftz(a)); }
inline void rsqrt_approx_ftz_f32(float& d, float a) { d = ftz(1.0f / std::sqrt(ftz(a))); }
inline void tanh_approx_f32(float& d, float a) { d = std::tanh(a); }
unsigned short f16_unary(unsigned short h, int op);  // op 0 ex2, 1 tanh
inline void ex2_approx_f16(unsigned short& d, unsigned short a) { d = f16_unary(a, 0); }
inline void tanh_approx_f16(unsigned short& d, unsigned short a) { d = f16_unary(a, 1); }
inline void ex2_approx_f16x2(unsigned& d, unsigned a) {
  d = f16_unary(static_cast<unsigned short>(a & 0xffffu), 0) | static_cast<unsigned>(f16_unary(static_cast<unsigned short>(a >> 16), 0)) << 16;
}
inline void tanh_approx_f16x2(unsigned& d, unsigned a) {
  d = f16_unary(static_cast<unsigned short>(a & 0xffffu), 1) | static_cast<unsigned>(f16_unary(static_cast<unsigned short>(a >> 16), 1)) << 16;
}

// shfl.sync.bfly.b32 d, a, b, c, membermask: c packs the clamp value (c[4:0]) and the
// segment mask (c[12:8]); CUDA's width w (a power of two) is c = ((32 - w) << 8) | 0x1f,
// for which the ISA's rule (lane j = lane ^ b[4:0] when j <= maxLane, else this lane)
// is __shfl_xor_sync's. Only that form is taken here (other clamps fail the launch).
template <class T>
inline void shfl_sync_bfly_b32(T& d, T a, unsigned b, unsigned c, unsigned membermask,
                               const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(sizeof(T) == 4, "shfl.sync.bfly.b32 moves 32-bit registers");
  const unsigned width = 32u - (c >> 8 & 0x1fu);
  if ((c & 0x1fu) != 0x1fu || (width & (width - 1u)) != 0 || (c >> 13) != 0)
    device_fail("shfl.sync.bfly.b32: operand c " + std::to_string(c) +
                " is not ((32 - width) << 8) | 0x1f for a power-of-two width");
  d = shfl(membermask, a, static_cast<int>(b), static_cast<int>(width), 1, Site{"shfl.sync.bfly.b32", file, line});
}

// mov.u32 d, %laneid.
template <class T>
inline void mov_u32__laneid(T& d) {
  static_assert(sizeof(T) == 4, "a 32-bit destination");
  d = static_cast<T>(lane_id());
}

// ld/st.global with a cache operator (.cs: evict-first) or a memory-order qualifier
// (.acquire/.release at .sys scope, .volatile): plain accesses with the hardware's
// alignment check. The emulation runs one thread at a time, so every access is
// sequentially consistent and the orders hold trivially.
template <class T, class P>
PB_EMU_HELPER inline void ld_global_b32(T& d, const P* p, const char* what) {
  static_assert(sizeof(T) == 4, "a .b32 destination");
  check_access(p, 4, what);
  PB_EMU_COUNT_ACCESS(p, 4, 0);
  std::memcpy(&d, p, 4);
}
template <class T, class P>
PB_EMU_HELPER inline void ld_global_cs_b32(T& d, const P* p) { ld_global_b32(d, p, "ld.global.cs.b32"); }
template <class T, class P>
PB_EMU_HELPER inline void ld_global_cs_v2_b32(T& x, T& y, const P* p) {
  static_assert(sizeof(T) == 4, "a .b32 destination");
  check_access(p, 8, "ld.global.cs.v2.b32");
  PB_EMU_COUNT_ACCESS(p, 8, 0);
  std::memcpy(&x, p, 4);
  std::memcpy(&y, reinterpret_cast<const unsigned char*>(p) + 4, 4);
}
template <class T, class P>
PB_EMU_HELPER inline void st_global_cs_b32(P* p, T v) {
  static_assert(sizeof(T) == 4, "a .b32 source");
  check_access(p, 4, "st.global.cs.b32");
  PB_EMU_COUNT_ACCESS(p, 4, 1);
  std::memcpy(p, &v, 4);
}
template <class T, class P>
PB_EMU_HELPER inline void st_global_cs_v2_b32(P* p, T x, T y) {
  static_assert(sizeof(T) == 4, "a .b32 source");
  check_access(p, 8, "st.global.cs.v2.b32");
  PB_EMU_COUNT_ACCESS(p, 8, 1);
  std::memcpy(p, &x, 4);
  std::memcpy(reinterpret_cast<unsigned char*>(p) + 4, &y, 4);
}
#define PB_EMU_LD_V4_B32(name, text)                                                 \
  template <class T, class P>                                                        \
  PB_EMU_HELPER inline void name(T& x, T& y, T& z, T& w, const P* p) {                \
    static_assert(sizeof(T) == 4, "a .b32 destination");                             \
    check_access(p, 16, text);                                                       \
    PB_EMU_COUNT_ACCESS(p, 16, 0);                                                   \
    unsigned char v[16];                                                             \
    std::memcpy(v, p, 16);                                                           \
    std::memcpy(&x, v, 4);                                                           \
    std::memcpy(&y, v + 4, 4);                                                       \
    std::memcpy(&z, v + 8, 4);                                                       \
    std::memcpy(&w, v + 12, 4);                                                      \
  }
#define PB_EMU_ST_V4_B32(name, text)                                                 \
  template <class T, class P>                                                        \
  PB_EMU_HELPER inline void name(P* p, T x, T y, T z, T w) {                          \
    static_assert(sizeof(T) == 4, "a .b32 source");                                  \
    check_access(p, 16, text);                                                       \
    PB_EMU_COUNT_ACCESS(p, 16, 1);                                                   \
    unsigned char v[16];                                                             \
    std::memcpy(v, &x, 4);                                                           \
    std::memcpy(v + 4, &y, 4);                                                       \
    std::memcpy(v + 8, &z, 4);                                                       \
    std::memcpy(v + 12, &w, 4);                                                      \
    std::memcpy(p, v, 16);                                                           \
  }
PB_EMU_LD_V4_B32(ld_acquire_global_sys_v4_b32, "ld.acquire.global.sys.v4.b32")
PB_EMU_LD_V4_B32(ld_volatile_global_v4_b32, "ld.volatile.global.v4.b32")
PB_EMU_ST_V4_B32(st_release_global_sys_v4_b32, "st.release.global.sys.v4.b32")
PB_EMU_ST_V4_B32(st_volatile_global_v4_b32, "st.volatile.global.v4.b32")
#undef PB_EMU_LD_V4_B32
#undef PB_EMU_ST_V4_B32

// prefetch.global.L2 [a]: a hint; no result, and no fault for any address (the ISA
// makes a prefetch of an invalid address a no-op).
template <class P>
inline void prefetch_global_L2(const P*) {}

// griddepcontrol.wait / .launch_dependents (sm_90 programmatic dependent launch): the
// emulated stream runs each grid to completion before the next starts, so the
// prerequisite grids are always complete and there is nothing to release early.
inline void griddepcontrol_wait() {}
inline void griddepcontrol_launch_dependents() {}

// mov.u64 %0, %%globaltimer: a nanosecond clock on the GPU; here fake_globaltimer().
inline void mov_u64__globaltimer(unsigned long long& t) { t = fake_globaltimer(); }

}  // namespace ptx
}  // namespace pb_emu
