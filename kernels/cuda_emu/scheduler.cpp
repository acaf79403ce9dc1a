// pb_emu scheduler: runs one grid of an emulated kernel. Blocks run one after
// another, in a shuffled but fixed order (PB_EMU_BLOCK_ORDER=forward for launch
// order), so no block may rely on another having run first or later. A block's
// threads are fibers on this OS thread: each runs until it waits at a barrier or
// warp collective, or ends; the scheduler then resumes the next runnable one,
// sweeping forward and backward in turn. When no thread can run and some still
// wait, the block is deadlocked, and the launch fails saying who waits where.
#include <sanitizer/common_interface_defs.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <pthread.h>
#include <random>
#include <sstream>
#include <vector>

#define PB_EMU_RUNTIME
#include "counting.hpp"
#include "pb_emu.hpp"
#include "runtime_internal.hpp"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// The scheduler itself is not instrumented (it is hot, and not what is under
// test); CMake says whether the program is (PB_EMU_ASAN), so that fiber switches
// are announced to AddressSanitizer.
#if defined(PB_EMU_ASAN) && PB_EMU_ASAN
#include <sanitizer/asan_interface.h>
#else
#undef PB_EMU_ASAN
#define PB_EMU_ASAN 0
#endif

// AddressSanitizer's options for every emulated binary: the fibers' stacks are
// switched by hand (and announced), so no fake stacks; a test process that keeps
// a backend alive on purpose is not a leak.
extern "C" const char* __asan_default_options() {
  return "detect_stack_use_after_return=0:detect_leaks=0:abort_on_error=1";
}

namespace pb_emu {

ThreadState* g_thread = nullptr;
dim3 g_block_idx, g_block_dim, g_grid_dim;
unsigned char* g_dynamic_smem = nullptr;
std::size_t g_dynamic_smem_bytes = 0;
unsigned long long g_block_serial = 0;
std::uintptr_t g_fiber_stack_lo = 0, g_fiber_stack_hi = 0;
}  // namespace pb_emu
extern "C" char __executable_start, _end;  // the linker's: the program image's first and last byte
namespace pb_emu {
std::uintptr_t g_program_lo = reinterpret_cast<std::uintptr_t>(&__executable_start);
std::uintptr_t g_program_hi = reinterpret_cast<std::uintptr_t>(&_end);

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kStackBytes = 256 * 1024;  // usable, per fiber
constexpr std::size_t kGuardBytes = 4 * kPage;   // below each stack: an overflow faults
constexpr int kMaxGroups = 32;                   // collectives a warp can have pending (a lane waits in one)

enum class Wait { none, block_barrier, warp_collective };

struct Fiber {
  ThreadState ts;
  void* sp = nullptr;       // saved stack pointer while suspended
  char* stack = nullptr;    // usable stack [stack, stack + kStackBytes)
  bool started = false, done = false;
  Wait wait = Wait::none;
  Site site{};              // where it waits
  void* asan_fake = nullptr;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

struct WarpGroup {  // lanes gathering at one collective (mask 0: a free slot)
  unsigned mask = 0;      // as the lanes passed it
  unsigned required = 0;  // the lanes of the mask that have not returned
  unsigned arrived = 0;
  Site site{};
  void* payload[32] = {};
  Completion complete = nullptr;  // any arrived lane's (they are all the same code)
  void* ctx = nullptr;
};

struct Warp {
  unsigned live = 0;  // lanes that exist and have not exited
  int pending = 0;    // groups in use
  WarpGroup groups[kMaxGroups];
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned live = 0;
  unsigned bar_arrived = 0;
  Site bar_site{};
  int bar_votes = 0, bar_result = 0;
  std::size_t static_smem = 0;
  struct SharedSlotRange {
    const unsigned char* base;
    std::size_t bytes, window;  // window: its .shared address (offset in the block's shared window)
  };
  std::vector<SharedSlotRange> static_slots;  // this block's __shared__ arrays
  unsigned long long entry_serial = ~0ull;
};

struct Grid {
  GridLaunchView launch{};
  const char* kernel = nullptr;  // the kernel's own name once it has entered
  void* closure = nullptr;
  void (*body)(void*) = nullptr;
  Block block;
  bool failed = false;
  std::string failure;
};

Grid* g_grid = nullptr;
Fiber* g_fiber = nullptr;  // the running fiber; nullptr in the scheduler
// The scheduler's context: its saved stack pointer and its stack (for the sanitizer).
void* g_sched_sp = nullptr;
void* g_sched_fake = nullptr;
const void* g_sched_stack_bottom = nullptr;
std::size_t g_sched_stack_size = 0;
#if !defined(__x86_64__)
ucontext_t g_sched_uc;
#endif
// A sweep runs the runnable fibers in one direction; fibers hand over to the next
// one directly, and the last hands back to the scheduler.
std::size_t g_sweep_next = 0;
bool g_sweep_backward = false;
std::vector<char*> g_free_stacks;  // mapped, unused stacks (LIFO: the warm one first)
char* g_retired_stack = nullptr;   // of the fiber that just ended, freed once we are off it
bool g_stacks_dirty = false;       // a failed launch abandoned frames on them

// ---- stacks and switching -----------------------------------------------------------

char* take_stack() {
  if (!g_free_stacks.empty()) {
    char* s = g_free_stacks.back();
    g_free_stacks.pop_back();
    return s;
  }
  void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "pb_emu: cannot map a fiber stack (%zu bytes): %s\n", kStackBytes, std::strerror(errno));
    std::abort();
  }
  mprotect(p, kGuardBytes, PROT_NONE);
  return static_cast<char*>(p) + kGuardBytes;
}

void asan_start(void** fake, const void* bottom, std::size_t size) {
#if PB_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
void asan_finish(void* fake) {
#if PB_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)fake;
#endif
}

}  // namespace
}  // namespace pb_emu

extern "C" {
void pb_emu_switch(void** save, void* load);
void pb_emu_fiber_trampoline();
void pb_emu_fiber_main();
}

namespace pb_emu {
namespace {

void thread_exit(Fiber& f);
void finish_group(Block& b, unsigned warp, WarpGroup& g, unsigned running_lane);

// A fiber about to run for the first time: a stack, and a first frame that enters
// pb_emu_fiber_main.
void prepare(Fiber& f) {
  f.stack = take_stack();
  f.started = true;
#if PB_EMU_ASAN
  // The top of a reused stack held the frames of the fiber that ended on it.
  __asan_unpoison_memory_region(f.stack + kStackBytes - 4 * kPage, 4 * kPage);
#endif
#if defined(__x86_64__)
  // The frame pb_emu_switch pops: MXCSR/x87 CW, r15..r12, rbx, rbp, then the
  // return address (the trampoline), so that the stack is 16-byte aligned at its call.
  auto* top = reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::uintptr_t>(f.stack + kStackBytes) & ~std::uintptr_t{15});
  *--top = reinterpret_cast<std::uint64_t>(&pb_emu_fiber_trampoline);
  for (int i = 0; i < 6; ++i) *--top = 0;          // rbp rbx r12 r13 r14 r15
  *--top = (std::uint64_t{0x037f} << 32) | 0x1f80;  // default x87 CW and MXCSR
  f.sp = top;
#else
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack;
  f.uc.uc_stack.ss_size = kStackBytes;
  f.uc.uc_link = nullptr;
  makecontext(&f.uc, pb_emu_fiber_main, 0);
#endif
}

// What a context does on arriving: free the stack of a fiber that ended.
void arrived() {
  if (g_retired_stack) {
    g_free_stacks.push_back(g_retired_stack);
    g_retired_stack = nullptr;
  }
}

// Leaves the running context (the scheduler when g_fiber is nullptr) for `to`
// (nullptr: the scheduler). `exiting`: the running context never resumes.
void transfer(Fiber* to, bool exiting) {
  Fiber* from = g_fiber;
  if (to && !to->started) prepare(*to);
  void** save = from ? &from->sp : &g_sched_sp;
  void** fake = exiting ? nullptr : (from ? &from->asan_fake : &g_sched_fake);
  g_fiber = to;
  g_thread = to ? &to->ts : nullptr;
  g_fiber_stack_lo = to ? reinterpret_cast<std::uintptr_t>(to->stack) : 0;
  g_fiber_stack_hi = to ? g_fiber_stack_lo + kStackBytes : 0;
  if (to)
    asan_start(fake, to->stack, kStackBytes);
  else
    asan_start(fake, g_sched_stack_bottom, g_sched_stack_size);
#if defined(__x86_64__)
  void* unused = nullptr;
  pb_emu_switch(exiting ? &unused : save, to ? to->sp : g_sched_sp);
#else
  (void)save;
  ucontext_t* here = from ? &from->uc : &g_sched_uc;
  ucontext_t* there = to ? &to->uc : &g_sched_uc;
  if (exiting)
    setcontext(there);
  else
    swapcontext(here, there);
#endif
  // Back in this context (someone transferred to it).
  asan_finish(from ? from->asan_fake : g_sched_fake);
  arrived();
}

// The next fiber of this sweep that can run, or nullptr when the sweep is done.
Fiber* next_runnable() {
  auto& fibers = g_grid->block.fibers;
  const std::size_t n = fibers.size();
  while (g_sweep_next < n) {
    const std::size_t k = g_sweep_next++;
    Fiber& f = fibers[g_sweep_backward ? n - 1 - k : k];
    if (!f.done && f.wait == Wait::none) return &f;
  }
  return nullptr;
}

// The running fiber waits: hand over to the next runnable one (or the scheduler).
void block_and_switch() { transfer(next_runnable(), false); }

// The running fiber leaves for good, for `to` (nullptr: the scheduler). A fiber
// that ended frees its stack; one abandoned by a failed launch keeps it (its
// frames are still on it). Not instrumented: a frame that never returns must
// leave no poisoned redzones on a stack that the next fiber reuses.
[[noreturn]] __attribute__((no_sanitize_address)) void leave_fiber(Fiber* to, bool ended) {
  if (ended) {
    g_retired_stack = g_fiber->stack;
    g_fiber->stack = nullptr;
  }
  transfer(to, true);
  __builtin_unreachable();
}

std::string dim_str(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string uint3_str(const uint3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string site_str(const Site& s) {
  const char* f = s.file ? s.file : "?";
  return std::string(s.what ? s.what : "?") + " at " + f + ":" + std::to_string(s.line);
}
bool same_site(const Site& a, const Site& b) {
  if (a.line != b.line) return false;
  if (a.file == b.file) return true;
  return a.file && b.file && std::strcmp(a.file, b.file) == 0;
}
std::string lanes_str(unsigned m) {
  std::string s;
  for (int i = 0; i < 32;) {
    if (!(m >> i & 1u)) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < 32 && (m >> (j + 1) & 1u)) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(i) + (j > i ? "-" + std::to_string(j) : "");
    i = j + 1;
  }
  return s.empty() ? "none" : s;
}

std::string where_prefix() {
  std::string k = g_grid && g_grid->kernel ? g_grid->kernel : (g_grid ? g_grid->launch.name : "?");
  std::string s = "kernel " + k + ", block " + dim_str(g_block_idx);
  if (g_thread) s += ", thread " + uint3_str(g_thread->tid);
  return s;
}

// Fails the grid from the scheduler's own context (deadlocks).
void fail_from_scheduler(const std::string& what) {
  g_grid->failed = true;
  g_grid->failure = where_prefix() + ": " + what;
}

void complete_block_barrier(Block& b) {
  unsigned warps = 0;
  for (const auto& w : b.warps) warps += w.live != 0;
  counters::event::barrier_done(warps);
  b.bar_result = b.bar_votes;
  b.bar_arrived = 0;
  b.bar_votes = 0;
  for (auto& o : b.fibers)
    if (o.wait == Wait::block_barrier) o.wait = Wait::none;
}

// Every lane the collective waits for is there: run its completion (in the
// running fiber, lane `running_lane` or one that just returned) and wake the others.
void finish_group(Block& b, unsigned warp, WarpGroup& g, unsigned running_lane) {
  void* slots[32];
  std::memcpy(slots, g.payload, sizeof slots);
  const unsigned arrived = g.arrived;
  const Completion complete = g.complete;
  const char* what = g.site.what;
  void* ctx = g.ctx;
  g.mask = 0;
  std::memset(g.payload, 0, sizeof g.payload);
  --b.warps[warp].pending;
  complete(slots, arrived, ctx);
  counters::event::collective_done(what ? what : "", warp, arrived, (b.warps[warp].live & ~arrived) == 0);
  Fiber* base = &b.fibers[std::size_t{warp} * 32];
  for (unsigned m = arrived; m; m &= m - 1) {
    const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
    if (l != running_lane) base[l].wait = Wait::none;
  }
}

void thread_exit(Fiber& f) {
  Block& b = g_grid->block;
  f.done = true;
  --b.live;
  Warp& w = b.warps[f.ts.warp];
  const unsigned bit = 1u << f.ts.lane;
  w.live &= ~bit;
  if (w.pending)
    for (auto& g : w.groups) {
      if (!(g.mask & bit)) continue;
      if (g.site.aligned)
        device_fail("lane " + std::to_string(f.ts.lane) + " returned while lanes " + lanes_str(g.arrived) +
                    " wait for it at " + site_str(g.site) + ", which every lane of the warp must execute");
      g.required &= ~bit;  // a lane that returned is absent from a .sync collective
      if (g.arrived == g.required) finish_group(b, f.ts.warp, g, ~0u);
    }
  // Threads that have returned do not hold up a block barrier (as on sm_70+).
  if (b.bar_arrived > 0 && b.bar_arrived == b.live) complete_block_barrier(b);
}

std::string deadlock_report(const Block& b) {
  std::ostringstream os;
  os << "deadlock: " << b.live << " thread(s) wait at barriers or warp collectives that can never complete";
  if (b.bar_arrived > 0)
    os << "; " << b.bar_arrived << " of " << b.live << " live threads wait at " << site_str(b.bar_site);
  for (std::size_t wi = 0; wi < b.warps.size(); ++wi)
    for (const auto& g : b.warps[wi].groups) {
      if (!g.mask) continue;
      os << "; warp " << wi << ": lanes " << lanes_str(g.arrived) << " wait at " << site_str(g.site) << " with mask "
         << hex_mask(g.mask) << ", lanes " << lanes_str(g.required & ~g.arrived) << " never arrived";
      for (unsigned l = 0; l < 32; ++l) {
        if (!((g.required & ~g.arrived) >> l & 1u)) continue;
        const std::size_t t = wi * 32 + l;
        if (t < b.fibers.size() && b.fibers[t].wait != Wait::none)
          os << " (lane " << l << " waits at " << site_str(b.fibers[t].site) << ")";
        break;  // the first missing lane says enough
      }
    }
  return os.str();
}

void run_block(Grid& grid) {
  Block& b = grid.block;
  g_sweep_backward = false;
  for (;;) {
    g_sweep_next = 0;
    Fiber* first = next_runnable();
    if (!first) {
      if (b.live > 0) fail_from_scheduler(deadlock_report(b));
      return;
    }
    transfer(first, false);  // back when this sweep has run out of runnable fibers
    if (grid.failed || b.live == 0) return;
    g_sweep_backward = !g_sweep_backward;
  }
}

// The order blocks run in: shuffled with a fixed seed, or launch order.
std::vector<std::uint64_t> block_order(std::uint64_t n) {
  std::vector<std::uint64_t> order(n);
  for (std::uint64_t i = 0; i < n; ++i) order[i] = i;
  static const bool forward = [] {
    const char* e = std::getenv("PB_EMU_BLOCK_ORDER");
    return e && std::strcmp(e, "forward") == 0;
  }();
  if (!forward) {
    std::mt19937_64 rng(0x5eedb10c + n);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

std::map<const void*, int>& dynamic_smem_attributes() {
  static std::map<const void*, int> m;
  return m;
}

}  // namespace

std::string hex_mask(unsigned mask) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", mask);
  return buf;
}

void device_fail(const std::string& what) {
  if (!g_grid || !g_fiber) {
    std::fprintf(stderr, "pb_emu: %s (outside a running kernel)\n", what.c_str());
    std::abort();
  }
  g_grid->failed = true;
  g_grid->failure = where_prefix() + ": " + what;
  g_stacks_dirty = true;
  leave_fiber(nullptr, false);
}

void check_access(const void* p, std::size_t align, const char* what) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a == 0) device_fail(std::string(what) + ": null address");
  if (a % align != 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%#" PRIxPTR, a);
    device_fail(std::string("misaligned address ") + buf + " in " + what + ": it needs " + std::to_string(align) +
                "-byte alignment");
  }
}

void kernel_entry(const char* name, const void* fn, unsigned launch_bound_threads) {
  Grid& grid = *g_grid;
  grid.kernel = name;
  Block& b = grid.block;
  if (b.entry_serial == g_block_serial) return;  // the first thread of the block checks for all
  b.entry_serial = g_block_serial;
  counters::event::kernel_identified(fn);
  const unsigned threads = g_block_dim.x * g_block_dim.y * g_block_dim.z;
  if (launch_bound_threads > 0 && threads > launch_bound_threads)
    device_fail("launched with " + std::to_string(threads) + " threads per block, more than its __launch_bounds__(" +
                std::to_string(launch_bound_threads) + "); a GPU refuses the launch (too many resources requested)");
  if (g_dynamic_smem_bytes > kStaticSmemLimit) {
    const int allowed = max_dynamic_smem_attribute(fn);
    if (allowed < 0 || static_cast<std::size_t>(allowed) < g_dynamic_smem_bytes)
      device_fail("launched with " + std::to_string(g_dynamic_smem_bytes) +
                  " bytes of dynamic shared memory; above 48 KiB the kernel needs cudaFuncSetAttribute(kernel, "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize, >= that), " +
                  (allowed < 0 ? std::string("which was never set") : "which is " + std::to_string(allowed)));
  }
}

int block_barrier(const Site& site, int vote) {
  this_thread(site.what);
  Fiber& f = *g_fiber;
  Block& b = g_grid->block;
  counters::event::thread_use_point();
  if (b.bar_arrived == 0) {
    b.bar_site = site;
  } else if (!same_site(b.bar_site, site)) {
    device_fail("divergent barrier: this thread reached " + site_str(site) + " while " + std::to_string(b.bar_arrived) +
                " thread(s) wait at " + site_str(b.bar_site) + "; every live thread of a block must reach the same one");
  }
  ++b.bar_arrived;
  b.bar_votes += vote;
  if (b.bar_arrived == b.live) {
    complete_block_barrier(b);
    return b.bar_result;
  }
  f.wait = Wait::block_barrier;
  f.site = site;
  block_and_switch();
  return b.bar_result;
}

void warp_collective_raw(unsigned mask, const Site& site, void* payload, Completion complete, void* ctx) {
  this_thread(site.what);
  Fiber& f = *g_fiber;
  Block& b = g_grid->block;
  Warp& w = b.warps[f.ts.warp];
  const unsigned lane = f.ts.lane, bit = 1u << lane;
  if (!(mask & bit))
    device_fail(site_str(site) + ": lane " + std::to_string(lane) + " calls it with mask " + hex_mask(mask) +
                ", which does not include the lane itself");
  if (site.aligned && (mask & ~w.live))
    device_fail(site_str(site) + ": lanes " + lanes_str(mask & ~w.live) +
                " have returned or do not exist in this block, and every lane of the warp must execute it");
  counters::event::thread_use_point();
  WarpGroup* g = nullptr;
  WarpGroup* free_slot = nullptr;
  for (auto& x : w.groups) {
    if (x.mask == mask) {
      g = &x;
      break;
    }
    if (!x.mask && !free_slot) free_slot = &x;
  }
  if (!g) {
    g = free_slot;  // there is one: each pending group holds a waiting lane, and this lane is in none
    g->mask = mask;
    g->required = mask & w.live;
    g->arrived = 0;
    g->site = site;
    ++w.pending;
  } else if (site.aligned || g->site.aligned ? !same_site(g->site, site) : std::strcmp(g->site.what, site.what) != 0) {
    device_fail("divergent warp: lane " + std::to_string(lane) + " reached " + site_str(site) + " while lanes " +
                lanes_str(g->arrived) + " wait at " + site_str(g->site) + " with the same mask " + hex_mask(mask) +
                "; the lanes of a mask must all reach the same collective");
  }
  g->payload[lane] = payload;
  g->arrived |= bit;
  g->complete = complete;
  g->ctx = ctx;
  if (g->arrived == g->required) {
    finish_group(b, f.ts.warp, *g, lane);
    return;
  }
  f.wait = Wait::warp_collective;
  f.site = site;
  block_and_switch();
}

void syncwarp(unsigned mask, const Site& site) {
  warp_collective(mask, site, nullptr, [](void* const*, unsigned) {});
}

unsigned vote(unsigned mask, bool pred, int op, const Site& site) {
  struct Payload {
    bool pred;
    unsigned out;
  } mine{pred, 0};
  warp_collective(mask, site, &mine, [op](void* const* ps, unsigned m) {
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; ++l)
      if ((m >> l & 1u) && static_cast<Payload*>(ps[l])->pred) ballot |= 1u << l;
    const unsigned r = op == 0 ? ballot : op == 1 ? (ballot != 0) : (ballot == m);
    for (unsigned l = 0; l < 32; ++l)
      if (m >> l & 1u) static_cast<Payload*>(ps[l])->out = r;
  });
  return mine.out;
}

void* shared_storage(void*& storage, std::size_t bytes, std::size_t align, unsigned long long& serial, const char* name) {
  this_thread("__shared__");
  if (!storage) {
    void* p = nullptr;
    if (posix_memalign(&p, std::max<std::size_t>(align, 16), std::max<std::size_t>(bytes, 1)) != 0) {
      std::fprintf(stderr, "pb_emu: out of host memory for __shared__ %s\n", name);
      std::abort();
    }
    storage = p;
  }
  std::memset(storage, 0xff, bytes);  // uninitialised shared memory reads as NaN
  serial = g_block_serial;
  Block& b = g_grid->block;
  b.static_slots.push_back({static_cast<const unsigned char*>(storage), bytes, b.static_smem});
  b.static_smem += (bytes + 15) / 16 * 16;
  if (b.static_smem > kStaticSmemLimit)
    device_fail("__shared__ " + std::string(name) + " brings the block's static shared memory to " +
                std::to_string(b.static_smem) + " bytes, above the 48 KiB limit of static allocations");
  if (b.static_smem + g_dynamic_smem_bytes > static_cast<std::size_t>(target().smem_per_block_optin))
    device_fail("static (" + std::to_string(b.static_smem) + ") plus dynamic (" + std::to_string(g_dynamic_smem_bytes) +
                ") shared memory exceed the " + std::to_string(target().smem_per_block_optin) +
                " bytes a block of this device can have");
  return storage;
}

bool static_shared_window(const void* p, std::size_t* window) {
  if (!g_grid) return false;
  const auto* a = static_cast<const unsigned char*>(p);
  for (const auto& r : g_grid->block.static_slots)
    if (a >= r.base && a < r.base + r.bytes) {
      *window = r.window + static_cast<std::size_t>(a - r.base);
      return true;
    }
  return false;
}

bool is_shared_address(const void* p, std::size_t bytes) {
  if (!g_grid) return false;
  const auto* a = static_cast<const unsigned char*>(p);
  auto inside = [&](const unsigned char* base, std::size_t n) { return a >= base && a + bytes <= base + n; };
  if (g_dynamic_smem && inside(g_dynamic_smem, g_dynamic_smem_bytes)) return true;
  for (const auto& r : g_grid->block.static_slots)
    if (inside(r.base, r.bytes)) return true;
  return false;
}

// The block's shared window: static __shared__ arrays from 0 in the order the block
// first touched them (16-byte aligned, at most 48 KiB), dynamic shared memory from
// kDynamicSharedWindow. Addresses are small offsets, as on the GPU, so a generic
// pointer passed where PTX wants a .shared address is caught.
constexpr std::size_t kDynamicSharedWindow = 0x10000;

std::size_t shared_window_address(const void* p) {
  this_thread("__cvta_generic_to_shared");
  const auto* a = static_cast<const unsigned char*>(p);
  if (g_dynamic_smem && a >= g_dynamic_smem && a <= g_dynamic_smem + g_dynamic_smem_bytes)
    return kDynamicSharedWindow + static_cast<std::size_t>(a - g_dynamic_smem);
  for (const auto& r : g_grid->block.static_slots)
    if (a >= r.base && a <= r.base + r.bytes) return r.window + static_cast<std::size_t>(a - r.base);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#" PRIxPTR, reinterpret_cast<std::uintptr_t>(p));
  device_fail(std::string("__cvta_generic_to_shared(") + buf +
              "): not an address in this block's shared memory (the result is undefined on the GPU)");
}

unsigned char* shared_window_pointer(std::size_t addr, std::size_t bytes) {
  if (!g_grid) return nullptr;
  if (addr >= kDynamicSharedWindow) {
    const std::size_t off = addr - kDynamicSharedWindow;
    if (g_dynamic_smem && off <= g_dynamic_smem_bytes && bytes <= g_dynamic_smem_bytes - off)
      return g_dynamic_smem + off;
    return nullptr;
  }
  for (const auto& r : g_grid->block.static_slots)
    if (addr >= r.window && addr - r.window <= r.bytes && bytes <= r.bytes - (addr - r.window))
      return const_cast<unsigned char*>(r.base) + (addr - r.window);
  return nullptr;
}

void* dynamic_smem(std::size_t align, const char* name) {
  this_thread("extern __shared__");
  if (reinterpret_cast<std::uintptr_t>(g_dynamic_smem) % align != 0)
    device_fail("extern __shared__ " + std::string(name) + " needs " + std::to_string(align) + "-byte alignment");
  return g_dynamic_smem;
}

int max_dynamic_smem_attribute(const void* fn) {
  auto it = dynamic_smem_attributes().find(fn);
  return it == dynamic_smem_attributes().end() ? -1 : it->second;
}

void set_max_dynamic_smem_attribute(const void* fn, int bytes) { dynamic_smem_attributes()[fn] = bytes; }

cudaError_t run_grid(const GridLaunchView& l, void* closure, void (*body)(void*)) {
  const unsigned nthreads = l.block.x * l.block.y * l.block.z;
  Grid grid;
  grid.launch = l;
  grid.closure = closure;
  grid.body = body;
  if (g_grid) return api_error(cudaErrorNotSupported, "pb_emu: a kernel launched from inside a kernel");
  // One host thread runs emulated grids at a time (the emulator's state is global).
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  if (!g_sched_stack_bottom) {  // this thread's stack, for the sanitizer's switch annotations
    pthread_attr_t attr;
    void* addr = nullptr;
    std::size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &addr, &size);
      pthread_attr_destroy(&attr);
    }
    g_sched_stack_bottom = addr;
    g_sched_stack_size = size;
  }
  g_grid = &grid;
  if (g_stacks_dirty) {  // frames a failed launch abandoned are still poisoned
#if PB_EMU_ASAN
    for (char* s : g_free_stacks) __asan_unpoison_memory_region(s, kStackBytes);
#endif
    g_stacks_dirty = false;
  }
  // Dynamic shared memory: exactly the launch's size, so any access past it is caught.
  void* dyn = nullptr;
  if (posix_memalign(&dyn, 1024, l.smem) != 0) {
    g_grid = nullptr;
    return api_error(cudaErrorMemoryAllocation, "pb_emu: no host memory for the dynamic shared memory");
  }
  g_dynamic_smem = static_cast<unsigned char*>(dyn);
  g_dynamic_smem_bytes = l.smem;
  g_grid_dim = l.grid;
  g_block_dim = l.block;

  Block& b = grid.block;
  b.fibers.resize(nthreads);
  b.warps.resize((nthreads + 31) / 32);
  counters::event::launch_begin(l.name, l.grid, l.block, l.smem);
  const std::uint64_t nblocks = std::uint64_t{l.grid.x} * l.grid.y * l.grid.z;
  for (const std::uint64_t bi : block_order(nblocks)) {
    g_block_idx = dim3(static_cast<unsigned>(bi % l.grid.x), static_cast<unsigned>(bi / l.grid.x % l.grid.y),
                       static_cast<unsigned>(bi / (std::uint64_t{l.grid.x} * l.grid.y)));
    ++g_block_serial;
    if (l.smem) std::memset(dyn, 0xff, l.smem);  // uninitialised shared memory reads as NaN
    b.live = nthreads;
    b.bar_arrived = 0;
    b.bar_votes = 0;
    b.static_smem = 0;
    b.static_slots.clear();
    for (auto& w : b.warps) {
      w.live = 0;
      w.pending = 0;
      for (auto& g : w.groups) g.mask = 0;
    }
    for (unsigned t = 0; t < nthreads; ++t) {
      Fiber& f = b.fibers[t];
      f.started = f.done = false;
      f.wait = Wait::none;
      f.stack = nullptr;
      f.ts.tid = uint3{t % l.block.x, t / l.block.x % l.block.y, t / (l.block.x * l.block.y)};
      f.ts.linear = t;
      f.ts.lane = t % 32;
      f.ts.warp = t / 32;
      b.warps[f.ts.warp].live |= 1u << f.ts.lane;
    }
    counters::event::block_begin(nthreads);
    run_block(grid);
    if (!grid.failed) counters::event::block_end(b.static_smem);
    if (grid.failed) {
      // Frames of the abandoned fibers stay on their stacks: return the stacks,
      // to be unpoisoned before their next use.
      for (auto& f : b.fibers)
        if (f.stack) g_free_stacks.push_back(f.stack);
      g_stacks_dirty = true;
      break;
    }
  }
  counters::event::launch_end(grid.failed, grid.failed ? grid.failure : std::string());
  std::free(dyn);
  g_dynamic_smem = nullptr;
  g_dynamic_smem_bytes = 0;
  g_grid = nullptr;
  if (grid.failed) return api_error(cudaErrorLaunchFailure, "pb_emu: " + grid.failure);
  return cudaSuccess;
}

}  // namespace pb_emu

// Where every fiber starts: run the kernel body as this thread, then end. When
// the next thread of the sweep has not started yet, it runs right here, on this
// stack, without a switch: a kernel without barriers or collectives runs its
// threads as a plain loop.
extern "C" __attribute__((no_sanitize_address)) void pb_emu_fiber_main() {
  using namespace pb_emu;
  asan_finish(nullptr);
  arrived();
  for (;;) {
    g_grid->body(g_grid->closure);
    thread_exit(*g_fiber);
    Fiber* next = next_runnable();
    if (!next || next->started) leave_fiber(next, true);
    next->started = true;
    next->stack = g_fiber->stack;
    g_fiber->stack = nullptr;
    g_fiber = next;
    g_thread = &next->ts;
  }
}
