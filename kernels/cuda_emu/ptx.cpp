// pb_emu: the inline PTX instructions that need more than a few lines
// (declared in pb_emu_ptx.hpp). Fragment layouts are the PTX ISA's ("Matrix
// Fragments for mma.m16n8k16 with floating point type"), with
// groupID = lane >> 2 and threadID_in_group = lane % 4; in a .f16x2/.bf16x2
// register the element of lower index is the lower half.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <vector>

#define PB_EMU_RUNTIME
#include "counting.hpp"
#include "pb_emu.hpp"
#include "runtime_internal.hpp"

namespace pb_emu {

namespace {

float half_to_float(unsigned short h, bool bf16) {
  if (bf16) return __uint_as_float(static_cast<unsigned>(h) << 16);
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

float element(unsigned reg, int half, bool bf16) {
  return half_to_float(static_cast<unsigned short>(half ? reg >> 16 : reg & 0xffffu), bf16);
}

struct MmaPayload {
  const unsigned* a;  // 4 registers: a0..a7
  const unsigned* b;  // 2 registers: b0..b3
  const float* c;     // c0..c3
  float* d;           // d0..d3
};

}  // namespace

void mma_m16n8k16_f32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4], bool bf16,
                      const char* file, int line) {
  MmaPayload mine{a, b, c, d};
  const char* what = bf16 ? "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
                          : "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  // .aligned: all 32 threads of the warp execute the same mma.sync.
  warp_collective(0xffffffffu, Site{what, file, line, true}, &mine, [bf16](void* const* ps, unsigned) {
    float A[16][16], B[16][8], C[16][8];
    for (unsigned lane = 0; lane < 32; ++lane) {
      const auto& p = *static_cast<const MmaPayload*>(ps[lane]);
      const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
      for (int i = 0; i < 8; ++i) {  // a_i
        const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
        const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        A[row][col] = element(p.a[i / 2], i & 1, bf16);
      }
      for (int i = 0; i < 4; ++i) {  // b_i
        const int row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
        B[row][g] = element(p.b[i / 2], i & 1, bf16);
      }
      for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][t * 2 + (i & 1)] = p.c[i];  // c_i
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
      auto& p = *static_cast<MmaPayload*>(ps[lane]);
      const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
      for (int i = 0; i < 4; ++i) {  // d_i, laid out as c_i
        const int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1);
        float acc = C[row][col];
        for (int k = 0; k < 16; ++k) acc = std::fma(A[row][k], B[k][col], acc);
        p.d[i] = acc;
      }
    }
  });
}

// mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16: C and D are .f16x2 registers,
// c0..c3 / d0..d3 of the fp32 form packed two to a register (lower index in the low
// half). The products are summed in fp32 and D rounded to nearest fp16 (the ISA leaves
// the internal precision to the implementation; fp32 is at least what it guarantees).
// (Declared in pb_emu_ptx.hpp's namespace ptx.)
void ptx::mma_m16n8k16_f16(unsigned (&d)[2], const unsigned (&a)[4], const unsigned (&b)[2], const unsigned (&c)[2],
                      const char* file, int line) {
  const float cf[4] = {element(c[0], 0, false), element(c[0], 1, false), element(c[1], 0, false),
                       element(c[1], 1, false)};
  float df[4];
  mma_m16n8k16_f32(df, a, b, cf, false, file, line);
  auto h = [](float x) { return static_cast<unsigned>(__half_raw(__float2half_rn(x)).x); };
  d[0] = h(df[0]) | h(df[1]) << 16;
  d[1] = h(df[2]) | h(df[3]) << 16;
}

namespace ptx {
// .ftz: a subnormal float becomes zero of the same sign.
float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

unsigned short f16_unary(unsigned short h, int op) {
  const float x = half_to_float(h, false);
  const float y = op == 0 ? std::exp2(x) : std::tanh(x);
  return __half_raw(__float2half_rn(y)).x;
}
}  // namespace ptx

// ---- ldmatrix ----------------------------------------------------------------------
// PTX ISA, "Warp-level matrix load instruction: ldmatrix": for .m8n8 with .b16
// elements, lanes 0-7 give the row addresses of the first matrix, 8-15 of the
// second, 16-23 of the third, 24-31 of the fourth (for .x1 and .x2 only the
// lanes of the matrices loaded). Register r_i of a lane holds matrix i's fragment:
// with groupID g = lane >> 2 and threadID_in_group t = lane % 4, the elements
// (row g, columns 2t and 2t+1) without .trans, (rows 2t and 2t+1, column g)
// with .trans; the element of lower index is the low half.

namespace {

std::string hex_address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#" PRIxPTR, reinterpret_cast<std::uintptr_t>(p));
  return buf;
}

// A .shared address (a 32- or 64-bit operand holding __cvta_generic_to_shared's
// result) of `bytes` bytes: inside this block's shared window and aligned to `align`.
const unsigned char* shared_operand(std::size_t addr, std::size_t bytes, std::size_t align, const char* what,
                                    const char* operand) {
  const unsigned char* p = shared_window_pointer(addr, bytes);
  if (!p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%#zx", addr);
    device_fail(std::string(what) + ": the " + operand + " .shared address " + buf + " (" + std::to_string(bytes) +
                " bytes) is not in this block's shared memory (pass __cvta_generic_to_shared of a pointer into "
                "__shared__ memory)");
  }
  if (addr % align != 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%#zx", addr);
    device_fail(std::string("misaligned .shared address ") + buf + " in " + what + ": it needs " +
                std::to_string(align) + "-byte alignment");
  }
  check_access(p, align, what);
  return p;
}

struct LdmatrixPayload {
  const unsigned char* row;  // this lane's row address (nullptr when it supplies none)
  std::size_t window;        // and its .shared address
  unsigned* r;
};

}  // namespace

void ldmatrix_m8n8_b16(unsigned* r, int num, bool trans, std::size_t shared_addr, const char* what, const char* file,
                       int line) {
  const unsigned lane = lane_id();
  // Each lane that supplies a row checks its own address (the message names it).
  LdmatrixPayload mine{lane < 8u * static_cast<unsigned>(num) ? shared_operand(shared_addr, 16, 16, what, "row")
                                                              : nullptr,
                       shared_addr, r};
  const unsigned warp = this_thread(what).warp;
  const std::uintptr_t site = counters::available() ? counters::site_key(file, line) : 0;
  // .aligned: all 32 threads of the warp execute the same ldmatrix.
  warp_collective(0xffffffffu, Site{what, file, line, true}, &mine, [num, trans, site, warp](void* const* ps, unsigned) {
    std::size_t windows[32];
    const unsigned char* rows[32];
    for (int i = 0; i < 8 * num; ++i) {
      windows[i] = static_cast<const LdmatrixPayload*>(ps[i])->window;
      rows[i] = static_cast<const LdmatrixPayload*>(ps[i])->row;
    }
    // Before the rows are read: the race check must see the reads of this instruction.
    counters::event::ldmatrix(windows, rows, num, site, warp);
    std::uint16_t M[4][8][8];
    for (int i = 0; i < num; ++i)
      for (int row = 0; row < 8; ++row)
        std::memcpy(M[i][row], static_cast<const LdmatrixPayload*>(ps[8 * i + row])->row, 16);
    for (unsigned l = 0; l < 32; ++l) {
      auto& p = *static_cast<LdmatrixPayload*>(ps[l]);
      const int g = static_cast<int>(l >> 2), t = static_cast<int>(l & 3);
      for (int i = 0; i < num; ++i) {
        const std::uint16_t lo = trans ? M[i][2 * t][g] : M[i][g][2 * t];
        const std::uint16_t hi = trans ? M[i][2 * t + 1][g] : M[i][g][2 * t + 1];
        p.r[i] = static_cast<unsigned>(lo) | static_cast<unsigned>(hi) << 16;
      }
    }
  });
}

// ---- cp.async -----------------------------------------------------------------------
// PTX ISA, "cp.async", "cp.async.commit_group", "cp.async.wait_group": a
// non-blocking copy of cp-size bytes (4, 8 or 16; .cg only 16) from .global to
// .shared, both addresses aligned to cp-size; with src-size < cp-size only that
// many bytes are read and the rest of the destination is zero-filled (src-size >
// cp-size is undefined: reported). Copies are tracked per thread; commit_group
// closes the thread's open copies into a group; wait_group N waits until at most
// the N most recent groups are pending. Nothing orders them with other threads:
// a barrier after the wait does that. Here a copy's source is read at issue and
// its destination written when a wait covers it.

namespace {

struct PendingCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  int n;
  int src_bytes;                       // of them read from global memory (the rest is zero fill)
  std::size_t window;                  // the destination's .shared address
  unsigned barrier_epoch, sync_epoch;  // when it was issued (the race check)
  std::uintptr_t site;
};

struct AsyncCopies {
  unsigned long long block_serial = ~0ull;
  std::vector<PendingCopy> open;                // issued, not yet committed
  std::deque<std::vector<PendingCopy>> groups;  // committed, oldest first
};

// Emulated work runs on one host thread at a time; a thread's entry is reset when
// a new block reuses its state (copies a thread never waited for are dropped, as
// nothing could have read them legally).
AsyncCopies& async_copies() {
  static std::unordered_map<const ThreadState*, AsyncCopies> m;
  AsyncCopies& a = m[&this_thread("cp.async")];
  if (a.block_serial != g_block_serial) {
    a = AsyncCopies{};
    a.block_serial = g_block_serial;
  }
  return a;
}

}  // namespace

void cp_async_shared_global(std::size_t dst_shared, const void* src, int cp_size, int src_size, const char* what,
                            const char* file, int line, const void* site) {
  if (cp_size != 4 && cp_size != 8 && cp_size != 16)
    device_fail(std::string(what) + ": cp-size " + std::to_string(cp_size) + " is not 4, 8 or 16");
  if (src_size < 0 || src_size > cp_size)
    device_fail(std::string(what) + ": src-size " + std::to_string(src_size) + " is outside 0.." +
                std::to_string(cp_size) + " (undefined behaviour)");
  auto* dst = const_cast<unsigned char*>(shared_operand(dst_shared, static_cast<std::size_t>(cp_size),
                                                        static_cast<std::size_t>(cp_size), what, "destination"));
  check_access(src, static_cast<std::size_t>(cp_size), what);
  // Only the src-size bytes are read: with src-size 0 (a predicated-off zero fill, as
  // FlashInfer's pred_load_128b issues past the end of a tile) the address is never
  // dereferenced and may point anywhere, the emulation's shared memory included.
  if (src_size > 0 && is_shared_address(src, static_cast<std::size_t>(src_size)))
    device_fail(std::string(what) + ": the source address " + hex_address(src) +
                " is in shared memory; cp.async reads .global");
  // The copy is the emulation's own (AddressSanitizer does not see it): the bytes
  // it reads must lie in one device allocation.
  if (auto why = check_device_range(src, static_cast<std::size_t>(src_size), "source"); !why.empty())
    device_fail(std::string(what) + " at " + file + ":" + std::to_string(line) + ": " + why);
  const std::uintptr_t key = site                  ? reinterpret_cast<std::uintptr_t>(site)
                            : counters::available() ? counters::site_key(file, line)
                                                    : 0;
  PendingCopy c{dst, {}, cp_size, src_size, dst_shared, counters::event::barrier_epoch(), counters::event::sync_epoch(), key};
  std::memcpy(c.bytes, src, static_cast<std::size_t>(src_size));  // the zero fill is the rest of c.bytes
  counters::event::cp_async_issue(dst_shared, dst, src, src_size, key);
  async_copies().open.push_back(c);
}

void cp_async_commit_group_impl() {
  AsyncCopies& a = async_copies();
  a.groups.push_back(std::move(a.open));  // an empty group is legal (it completes at once)
  a.open.clear();
}

void cp_async_wait_group_impl(int n, const char* file, int line) {
  (void)file;
  (void)line;
  if (n < 0) device_fail("cp.async.wait_group: a negative group count " + std::to_string(n));
  AsyncCopies& a = async_copies();
  counters::event::cp_async_wait_begin();
  while (a.groups.size() > static_cast<std::size_t>(n)) {
    for (const PendingCopy& c : a.groups.front()) {
      counters::event::cp_async_land(c.dst, c.window, c.src_bytes, c.barrier_epoch, c.sync_epoch, c.site);
      std::memcpy(c.dst, c.bytes, static_cast<std::size_t>(c.n));
    }
    a.groups.pop_front();
  }
}

}  // namespace pb_emu
