// pb_emu counters (counting.hpp): per launch, the warp-level memory requests of
// every access the instrumented kernels make (grouped as the hardware coalesces a
// warp instruction), the distinct bytes and sectors each allocation gave up, the
// shared-memory wavefronts and bank conflicts, barriers and collectives, and the
// bytes each thread has in flight where it can stall; and the shared-memory race
// check. Built into both runtimes; it does work only in the counting build
// (PB_EMU_COUNT), where tsan_hooks.cpp feeds it every load and store.
#include "counting.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#define PB_EMU_RUNTIME
#include "pb_emu.hpp"
#include "resources.hpp"
#include "runtime_internal.hpp"

namespace pb_emu::counters {

std::uint64_t Launch::memory_instructions() const {
  return global_ld.requests + global_st.requests + global_atom.requests + ldgsts.requests + shared_ld.requests +
         shared_st.requests + shared_atom.requests + ldsm.requests;
}
std::uint64_t Launch::memory_lanes() const {
  return global_ld.lanes + global_st.lanes + global_atom.lanes + ldgsts.lanes + shared_ld.lanes + shared_st.lanes +
         shared_atom.lanes + ldsm.lanes;
}

namespace {

// Explicit sites (file:line of an emulated helper's caller), for messages.
struct ExplicitSite {
  const char* file;
  int line;
};
std::unordered_map<std::uintptr_t, ExplicitSite>& explicit_sites() {
  static std::unordered_map<std::uintptr_t, ExplicitSite> m;
  return m;
}

}  // namespace

std::uintptr_t site_key(const char* file, int line) {
  // Odd keys never collide with return addresses of calls into the hooks, which
  // point at the instruction after a call (any alignment, but then also in the map).
  const std::uintptr_t k = (reinterpret_cast<std::uintptr_t>(file) * 131u + static_cast<unsigned>(line)) | 1u;
#if PB_EMU_COUNT
  explicit_sites().emplace(k, ExplicitSite{file, line});
#endif
  return k;
}

// file:line of an explicit site, or the source line of a return address in the
// instrumented kernels (addr2line over the binary's line tables; -g1 has them).
std::string describe_site(std::uintptr_t site) {
  auto& ex = explicit_sites();
  if (auto it = ex.find(site); it != ex.end()) return std::string(it->second.file) + ":" + std::to_string(it->second.line);
  return describe_code_address(reinterpret_cast<const void*>(site));
}

#if !PB_EMU_COUNT

// ---- the functional (AddressSanitizer) build: nothing is counted ----------------------

bool available() { return false; }
std::string unavailable_reason() {
  return "counters come from the counting build of the emulation (phasebench-counters, the counting test binary); "
         "this program is the functional build (AddressSanitizer), which does not count";
}
void begin() {}
std::vector<Launch> end() { return {}; }
bool window_open() { return false; }
void set_racecheck(bool) {}
bool racecheck() { return false; }

namespace event {
void launch_begin(const char*, dim3, dim3, std::size_t) {}
void kernel_identified(const void*) {}
void launch_end(bool, const std::string&) {}
void block_begin(unsigned) {}
void block_end(std::size_t) {}
void barrier_done(unsigned) {}
void collective_done(const char*, unsigned, unsigned, bool) {}
void thread_use_point() {}
void access(const void*, std::size_t, Kind, std::uintptr_t) {}
void ldmatrix(const std::size_t*, const unsigned char* const*, int, std::uintptr_t, unsigned) {}
void cp_async_issue(std::size_t, unsigned char*, const void*, int, std::uintptr_t) {}
void cp_async_land(unsigned char*, std::size_t, int, unsigned, unsigned, std::uintptr_t) {}
void cp_async_wait_begin() {}
unsigned barrier_epoch() { return 0; }
unsigned sync_epoch() { return 0; }
void runtime_work(const char*, const std::string&, std::uint64_t, std::uint64_t) {}
void allocation_added(const void*, std::size_t) {}
void allocation_removed(const void*) {}
}  // namespace event

#else  // PB_EMU_COUNT

namespace {

using event::Kind;

constexpr std::uint16_t kNoThread = 0xffff;
constexpr std::size_t kDynamicWindow = 0x10000;  // scheduler.cpp's dynamic shared window

// ---- device allocations -----------------------------------------------------------------

struct Alloc {
  std::uintptr_t base = 0, end = 0;
  std::uint64_t id = 0;
  // One 32-bit byte mask per 32-byte sector, read and written, mapped on first use
  // in a launch (anonymous memory: untouched pages cost nothing) and dropped after it.
  std::uint32_t* rmask = nullptr;
  std::uint32_t* wmask = nullptr;
  std::size_t mask_bytes = 0;
  int buffer = -1;  // index into the current launch's buffers, -1 when untouched
};

std::vector<Alloc> g_allocs;  // sorted by base
std::uint64_t g_alloc_serial = 0;
// The last allocations hit (kernels stream a few buffers at once: K and V, W and
// X), as copies of their bounds; a hit moves to the front.
constexpr int kHitCache = 4;
struct Hit {
  std::uintptr_t base = 0, end = 0;  // empty: nothing is inside
  std::size_t index = 0;
};
Hit g_hits[kHitCache];

void forget_hits() {
  for (auto& h : g_hits) h = Hit{};
}

inline void remember(std::size_t index) {
  for (int j = kHitCache - 1; j > 0; --j) g_hits[j] = g_hits[j - 1];
  g_hits[0] = Hit{g_allocs[index].base, g_allocs[index].end, index};
}

// The allocation holding a among the last ones hit, or nullptr.
inline Alloc* cached_alloc(std::uintptr_t a) {
  for (int i = 0; i < kHitCache; ++i)
    if (a - g_hits[i].base < g_hits[i].end - g_hits[i].base) {
      if (i) std::swap(g_hits[0], g_hits[i]);
      return &g_allocs[g_hits[0].index];
    }
  return nullptr;
}

// The allocation holding a, or nullptr.
Alloc* find_alloc(std::uintptr_t a) {
  if (Alloc* c = cached_alloc(a)) return c;
  auto it = std::upper_bound(g_allocs.begin(), g_allocs.end(), a,
                             [](std::uintptr_t x, const Alloc& al) { return x < al.base; });
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a >= it->base && a < it->end) {
    remember(static_cast<std::size_t>(it - g_allocs.begin()));
    return &*it;
  }
  return nullptr;
}

void drop_masks(Alloc& a) {
  if (a.rmask) munmap(a.rmask, a.mask_bytes);
  if (a.wmask) munmap(a.wmask, a.mask_bytes);
  a.rmask = a.wmask = nullptr;
  a.buffer = -1;
}

std::uint32_t* map_mask(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "pb_emu: counters: cannot map %zu bytes of byte masks\n", bytes);
    std::abort();
  }
  return static_cast<std::uint32_t*>(p);
}

// ---- per launch, block, warp and thread ---------------------------------------------------

struct Rec {
  std::uintptr_t site;
  std::uintptr_t addr;  // device address, or the .shared window address
  std::uint32_t k;      // this lane's k-th execution of the site since the warp's last flush
  std::uint16_t bytes;
  std::uint8_t lane;
  Kind kind;
  std::int32_t alloc;   // index into g_allocs (global kinds), else -1
};

struct WarpLog {
  std::vector<Rec> recs;
  std::unordered_map<std::uintptr_t, std::array<std::uint32_t, 32>> occurrences;
  std::uint32_t sync_count = 0;  // __syncwarp completions in this barrier interval
  std::uint32_t flushes = 0;     // times `occurrences` restarted (a new numbering of executions)
  std::vector<std::uint32_t> sync_masks;  // their masks, in order
};

struct ThreadState {
  std::uint64_t plain_pending = 0;  // global load bytes since the last use point
  std::uint64_t async_pending = 0;  // cp.async bytes issued and not yet landed
};

// Race check shadow of one shared byte (indexed by .shared window address).
struct Shadow {
  unsigned long long block = ~0ull;  // block serial of the entries below
  std::uint32_t w_bar = 0, r_bar = 0;
  std::uint32_t w_sync = 0, r_sync = 0;
  std::uint16_t w_tid = kNoThread, r_tid = kNoThread;
  bool w_collective = false, r_collective = false;
  bool r_many = false;  // more than one thread read it in r_bar's interval
  std::uintptr_t w_site = 0, r_site = 0;
  // The writer's execution of w_site: its k-th since its warp's flush number w_flush.
  std::uint32_t w_k = 0, w_flush = 0;
};

struct State {
  bool window = false;
  std::vector<Launch> done;
  bool in_launch = false;
  Launch cur;
  bool racecheck = true;
  // The block.
  unsigned threads = 0;
  std::uint32_t bar_epoch = 0;
  std::vector<WarpLog> warps;
  std::vector<ThreadState> thread_state;
  std::vector<Shadow> shadow;
  std::vector<int> touched_allocs;
  std::map<std::pair<int, std::uintptr_t>, Traffic> sites;  // (kind, site) of this launch
};

// One emulated grid runs at a time (run_grid serialises), so the state is one plain object.
State g_state = [] {
  State x;
  const char* e = std::getenv("PB_EMU_RACECHECK");
  x.racecheck = !(e && std::strcmp(e, "0") == 0);
  return x;
}();
inline State& st() { return g_state; }

bool counting() { return st().window && st().in_launch; }

// ---- grouping a warp's records into requests ----------------------------------------------

bool is_global(Kind k) { return k == Kind::gld || k == Kind::gst || k == Kind::gatom || k == Kind::ldgsts; }

Traffic& traffic_of(Launch& L, Kind k) {
  switch (k) {
    case Kind::gld: return L.global_ld;
    case Kind::gst: return L.global_st;
    case Kind::gatom: return L.global_atom;
    case Kind::ldgsts: return L.ldgsts;
    case Kind::sld: return L.shared_ld;
    case Kind::sst: return L.shared_st;
    case Kind::satom: return L.shared_atom;
    case Kind::ldgsts_shared: return L.ldgsts_shared;
  }
  return L.global_ld;
}

Traffic* buffer_traffic(Buffer& b, Kind k) {
  switch (k) {
    case Kind::gld: return &b.ld;
    case Kind::gst: return &b.st;
    case Kind::gatom: return &b.atom;
    case Kind::ldgsts: return &b.ldgsts;
    default: return nullptr;
  }
}

// Distinct bytes of a set of [lo, hi) intervals.
std::uint64_t union_bytes(std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& iv) {
  std::sort(iv.begin(), iv.end());
  std::uint64_t total = 0;
  std::uintptr_t lo = 0, hi = 0;
  bool open = false;
  for (const auto& [a, b] : iv) {
    if (!open || a > hi) {
      if (open) total += hi - lo;
      lo = a, hi = b, open = true;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (open) total += hi - lo;
  return total;
}

// Shared-memory wavefronts of one request: 32 banks of 4 bytes; a request of
// 8-byte accesses is served per half-warp and of 16-byte ones per quarter-warp
// (128 bytes a wavefront); within a phase, lanes reading the same word share it
// (broadcast), and a bank asked for n distinct words takes n wavefronts.
std::uint64_t shared_wavefronts(const Rec* r, std::size_t n) {
  unsigned width = 0;
  for (std::size_t i = 0; i < n; ++i) width = std::max<unsigned>(width, r[i].bytes);
  const unsigned lanes_per_phase = width <= 4 ? 32 : (width <= 8 ? 16 : 8);
  std::uint64_t total = 0;
  std::vector<std::pair<unsigned, std::uintptr_t>> bank_words;
  for (unsigned p = 0; p < 32 / lanes_per_phase; ++p) {
    bank_words.clear();
    for (std::size_t i = 0; i < n; ++i) {
      if (r[i].lane / lanes_per_phase != p) continue;
      for (std::uintptr_t w = r[i].addr / 4; w <= (r[i].addr + r[i].bytes - 1) / 4; ++w)
        bank_words.emplace_back(static_cast<unsigned>(w % 32), w);
    }
    if (bank_words.empty()) continue;
    std::sort(bank_words.begin(), bank_words.end());
    bank_words.erase(std::unique(bank_words.begin(), bank_words.end()), bank_words.end());
    std::uint64_t worst = 0, run = 0;
    for (std::size_t i = 0; i < bank_words.size(); ++i) {
      run = (i > 0 && bank_words[i].first == bank_words[i - 1].first) ? run + 1 : 1;
      worst = std::max(worst, run);
    }
    total += worst;
  }
  return total;
}

void flush_warp(unsigned w) {
  State& s = st();
  if (w >= s.warps.size()) return;
  WarpLog& log = s.warps[w];
  log.occurrences.clear();
  ++log.flushes;
  if (log.recs.empty()) return;
  if (!counting()) {
    log.recs.clear();
    return;
  }
  auto& recs = log.recs;
  std::sort(recs.begin(), recs.end(), [](const Rec& a, const Rec& b) {
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.site != b.site) return a.site < b.site;
    if (a.k != b.k) return a.k < b.k;
    return a.lane < b.lane;
  });
  Launch& L = s.cur;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> iv;
  std::vector<std::uintptr_t> sectors;
  for (std::size_t i = 0; i < recs.size();) {
    std::size_t j = i + 1;
    while (j < recs.size() && recs[j].kind == recs[i].kind && recs[j].site == recs[i].site && recs[j].k == recs[i].k) ++j;
    const Kind kind = recs[i].kind;
    Traffic t;
    t.requests = 1;
    iv.clear();
    for (std::size_t x = i; x < j; ++x) {
      t.bytes += recs[x].bytes;
      iv.emplace_back(recs[x].addr, recs[x].addr + recs[x].bytes);
    }
    // A lane is in a request once (one execution of the site), so records are lanes.
    t.lanes = j - i;
    const std::uint64_t unique = union_bytes(iv);
    if (is_global(kind)) {
      sectors.clear();
      for (std::size_t x = i; x < j; ++x)
        for (std::uintptr_t sct = recs[x].addr / 32; sct <= (recs[x].addr + recs[x].bytes - 1) / 32; ++sct)
          sectors.push_back(sct);
      std::sort(sectors.begin(), sectors.end());
      t.sectors = static_cast<std::uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
      t.ideal = (unique + 31) / 32;
      const int ai = recs[i].alloc;
      if (ai >= 0 && g_allocs[static_cast<std::size_t>(ai)].buffer >= 0)
        if (Traffic* bt = buffer_traffic(L.buffers[static_cast<std::size_t>(g_allocs[static_cast<std::size_t>(ai)].buffer)],
                                         kind))
          bt->add(t);
    } else {
      t.sectors = shared_wavefronts(&recs[i], j - i);
      t.ideal = std::max<std::uint64_t>(1, (unique + 127) / 128);
    }
    traffic_of(L, kind).add(t);
    s.sites[{static_cast<int>(kind), recs[i].site}].add(t);
    i = j;
  }
  recs.clear();
}

const char* kind_name(int k) {
  switch (static_cast<Kind>(k)) {
    case Kind::gld: return "global ld";
    case Kind::gst: return "global st";
    case Kind::gatom: return "global atom";
    case Kind::ldgsts: return "cp.async (global)";
    case Kind::sld: return "shared ld";
    case Kind::sst: return "shared st";
    case Kind::satom: return "shared atom";
    case Kind::ldgsts_shared: return "cp.async (shared)";
  }
  return "ldmatrix";
}
constexpr int kLdmatrixKind = 100;  // the sites map's kind for ldmatrix (no event::Kind)

// The sites whose requests took the most beyond their ideal, described.
std::vector<WastefulSite> wasteful_sites(const std::map<std::pair<int, std::uintptr_t>, Traffic>& sites) {
  std::vector<std::pair<std::uint64_t, const std::pair<const std::pair<int, std::uintptr_t>, Traffic>*>> waste;
  for (const auto& e : sites)
    if (e.second.sectors > e.second.ideal) waste.emplace_back(e.second.sectors - e.second.ideal, &e);
  std::sort(waste.begin(), waste.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<WastefulSite> out;
  for (std::size_t i = 0; i < waste.size() && i < 8; ++i) {
    const auto& [key, t] = *waste[i].second;
    out.push_back(WastefulSite{kind_name(key.first), describe_site(key.second), t});
  }
  return out;
}

void flush_all_warps() {
  for (unsigned w = 0; w < st().warps.size(); ++w) flush_warp(w);
}

// ---- memory-level parallelism ---------------------------------------------------------

void use_point(ThreadState& t, bool async_wait) {
  const std::uint64_t out = t.plain_pending + t.async_pending;
  t.plain_pending = 0;
  if (out == 0 || !counting()) return;
  Launch& L = st().cur;
  L.inflight_sum += static_cast<double>(out);
  ++L.inflight_events;
  L.inflight_max = std::max(L.inflight_max, out);
  if (async_wait) ++L.inflight_async_events;
}

ThreadState* running_thread_state() {
  State& s = st();
  if (!g_thread || g_thread->linear >= s.thread_state.size()) return nullptr;
  return &s.thread_state[g_thread->linear];
}

// ---- the race check ----------------------------------------------------------------------

std::string thread_str(unsigned linear) {
  const unsigned x = linear % g_block_dim.x, y = linear / g_block_dim.x % g_block_dim.y,
                 z = linear / (g_block_dim.x * g_block_dim.y);
  return "thread (" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ") (warp " +
         std::to_string(linear / 32) + ", lane " + std::to_string(linear % 32) + ")";
}

std::string window_str(std::size_t window) {
  char buf[64];
  if (window >= kDynamicWindow)
    std::snprintf(buf, sizeof buf, "dynamic shared memory + %zu", window - kDynamicWindow);
  else
    std::snprintf(buf, sizeof buf, "static __shared__ byte %zu", window);
  return buf;
}

// Whether a __syncwarp completed between an access at warp sync count `then` and
// now, with a mask naming both lanes (a collective access: every lane).
bool warp_synced_since(const WarpLog& w, std::uint32_t then, unsigned lane_a, bool a_all, unsigned lane_b, bool b_all) {
  for (std::uint32_t i = then; i < w.sync_count && i < w.sync_masks.size(); ++i) {
    const unsigned m = w.sync_masks[i];
    const bool a_in = a_all ? m == 0xffffffffu : (m >> lane_a & 1u);
    const bool b_in = b_all ? m == 0xffffffffu : (m >> lane_b & 1u);
    if (a_in && b_in) return true;
  }
  return false;
}

constexpr std::uint32_t kNoExecution = ~0u;

struct Accessor {
  unsigned tid;          // linear thread id
  bool collective;       // the whole warp (ldmatrix)
  std::uint32_t bar, sync;
  std::uintptr_t site;
  // Which execution of `site` by this lane (the counters' k: the k-th since the warp's
  // flush number `flush`), or kNoExecution where it is not numbered.
  std::uint32_t k = kNoExecution, flush = 0;
};

// Whether earlier access `p` (of thread p_tid) is ordered before `c` by a barrier or a __syncwarp.
bool ordered(std::uint32_t p_bar, std::uint32_t p_sync, unsigned p_tid, bool p_coll, const Accessor& c) {
  if (p_bar < c.bar) return true;
  if (p_tid / 32 != c.tid / 32) return false;
  const State& s = st();
  return warp_synced_since(s.warps[c.tid / 32], p_sync, p_tid % 32, p_coll, c.tid % 32, c.collective);
}

bool other_thread(unsigned p_tid, bool p_coll, const Accessor& c) {
  if (p_tid == kNoThread) return false;
  if (p_coll || c.collective) {
    // A warp-wide access involves every lane: any other thread of the warp, or any thread elsewhere.
    return true;
  }
  return p_tid != c.tid;
}

[[noreturn]] void report_race(const char* kind, std::size_t window, const Accessor& c, bool c_write, unsigned p_tid,
                              bool p_coll, bool p_write, std::uintptr_t p_site, std::uint32_t p_bar) {
  const bool same_warp = p_tid / 32 == c.tid / 32;
  std::string msg = std::string("shared-memory race (") + kind + "): ";
  msg += (c.collective ? "warp " + std::to_string(c.tid / 32) + " (every lane)" : thread_str(c.tid));
  msg += std::string(c_write ? " writes " : " reads ") + window_str(window) + " at " + describe_site(c.site);
  msg += ", which ";
  msg += (p_coll ? "warp " + std::to_string(p_tid / 32) + " (every lane)" : thread_str(p_tid));
  msg += std::string(p_write ? " wrote" : " read") + " at " + describe_site(p_site);
  msg += p_bar == c.bar ? " in the same barrier interval, with no __syncthreads between them"
                        : " in an earlier interval, before this cp.async could land";
  if (same_warp && p_bar == c.bar) msg += " and no __syncwarp naming both lanes";
  msg += " (racecheck; PB_EMU_RACECHECK=0 turns it off)";
  device_fail(msg);
}

// This block's shadow of the shared byte at `window` (a stale entry of an earlier
// block is reset), or nullptr past the window.
Shadow* shadow_at(std::size_t window) {
  State& s = st();
  if (window >= s.shadow.size()) return nullptr;
  Shadow& sh = s.shadow[window];
  if (sh.block != g_block_serial) {
    sh = Shadow{};
    sh.block = g_block_serial;
  }
  return &sh;
}

// The hazards of an access by `c` to a byte: with its last writer, and for a write
// also with its readers since.
// A write by another lane of the same warp in the same warp-wide store instruction is
// no race: several lanes of one store naming one address is defined (one lane's value
// lands); FlashInfer's decode has every lane of a row store the row's softmax state to
// one word. The same instruction is the same dynamic execution, as the counters take a
// request: the same site, executed for the same (k-th) time by both lanes since their
// warp's last synchronisation point (barrier, __syncwarp, warp collective). The same
// site in different loop iterations (different k) is two instructions: a race.
bool same_store_instruction(const Shadow& sh, const Accessor& c) {
  return !sh.w_collective && !c.collective && c.k != kNoExecution && sh.w_tid / 32 == c.tid / 32 &&
         sh.w_site == c.site && sh.w_bar == c.bar && sh.w_sync == c.sync && sh.w_flush == c.flush && sh.w_k == c.k;
}

void check_hazards(const Shadow& sh, std::size_t window, const Accessor& c, bool write, const char* ww = "write after write",
                   const char* wr = "write after read") {
  if (other_thread(sh.w_tid, sh.w_collective, c) && !ordered(sh.w_bar, sh.w_sync, sh.w_tid, sh.w_collective, c) &&
      !(write && same_store_instruction(sh, c)))
    report_race(write ? ww : "read after write", window, c, write, sh.w_tid, sh.w_collective, true, sh.w_site, sh.w_bar);
  if (write && sh.r_tid != kNoThread && (sh.r_many || other_thread(sh.r_tid, sh.r_collective, c)) &&
      !ordered(sh.r_bar, sh.r_sync, sh.r_tid, sh.r_collective, c))
    report_race(wr, window, c, true, sh.r_tid, sh.r_collective, false, sh.r_site, sh.r_bar);
}

void race_read(std::size_t window, std::size_t n, const Accessor& c) {
  for (std::size_t i = 0; i < n; ++i) {
    Shadow* sh = shadow_at(window + i);
    if (!sh) break;
    check_hazards(*sh, window + i, c, false);
    // Keep the reader: a second distinct reader in the same interval marks it shared.
    if (sh->r_tid == kNoThread || sh->r_bar < c.bar) {
      sh->r_tid = static_cast<std::uint16_t>(c.tid);
      sh->r_collective = c.collective;
      sh->r_many = false;
    } else if (sh->r_tid != c.tid || c.collective) {
      sh->r_many = true;
      sh->r_tid = static_cast<std::uint16_t>(c.tid);
      sh->r_collective = sh->r_collective || c.collective;
    }
    sh->r_bar = c.bar;
    sh->r_sync = c.sync;
    sh->r_site = c.site;
  }
}

void race_write(std::size_t window, std::size_t n, const Accessor& c, const char* what_if_ww = "write after write") {
  for (std::size_t i = 0; i < n; ++i) {
    Shadow* sh = shadow_at(window + i);
    if (!sh) break;
    check_hazards(*sh, window + i, c, true, what_if_ww);
    sh->w_tid = static_cast<std::uint16_t>(c.tid);
    sh->w_collective = c.collective;
    sh->w_bar = c.bar;
    sh->w_sync = c.sync;
    sh->w_site = c.site;
    sh->w_k = c.k;
    sh->w_flush = c.flush;
    sh->r_tid = kNoThread;
    sh->r_many = false;
  }
}

Accessor accessor_now(std::uintptr_t site, bool collective = false) {
  const unsigned tid = g_thread->linear;
  const State& s = st();
  return Accessor{tid, collective, s.bar_epoch, s.warps[tid / 32].sync_count, site};
}

// ---- recording one access ------------------------------------------------------------------

// This lane's execution of `site` (as `kind`): the k-th since its warp's last flush.
std::uint32_t next_execution(Kind kind, std::uintptr_t site) {
  State& s = st();
  const unsigned warp = g_thread->warp;
  if (warp >= s.warps.size()) return kNoExecution;
  return s.warps[warp].occurrences[site ^ (static_cast<std::uintptr_t>(kind) << 56)][g_thread->lane]++;
}

// `k`: the access's execution number, when the caller has taken it (next_execution).
void log_access(Kind kind, std::uintptr_t addr, std::size_t bytes, std::uintptr_t site, std::int32_t alloc,
                std::uint32_t k = kNoExecution) {
  State& s = st();
  const unsigned lane = g_thread->lane, warp = g_thread->warp;
  if (warp >= s.warps.size()) return;
  WarpLog& w = s.warps[warp];
  if (k == kNoExecution) k = next_execution(kind, site);
  w.recs.push_back(Rec{site, addr, k, static_cast<std::uint16_t>(std::min<std::size_t>(bytes, 0xffff)),
                       static_cast<std::uint8_t>(lane), kind, alloc});
  // A warp that never synchronises (one long loop) is flushed now and then: a
  // request boundary at worst, with the occurrences restarting together.
  if (w.recs.size() >= (1u << 22)) flush_warp(warp);
}

void mark(Alloc& a, std::uintptr_t addr, std::size_t n, bool write, Launch& L) {
  if (a.buffer < 0) {
    a.buffer = static_cast<int>(L.buffers.size());
    Buffer b;
    b.id = a.id;
    b.size = a.end - a.base;
    L.buffers.push_back(b);
    st().touched_allocs.push_back(static_cast<int>(&a - g_allocs.data()));
  }
  std::uint32_t*& m = write ? a.wmask : a.rmask;
  if (!m) {
    a.mask_bytes = ((a.end - a.base + 31) / 32) * sizeof(std::uint32_t);
    m = map_mask(a.mask_bytes);
  }
  Buffer& b = L.buffers[static_cast<std::size_t>(a.buffer)];
  const std::uintptr_t off = addr - a.base;
  for (std::uintptr_t sct = off / 32; sct <= (off + n - 1) / 32; ++sct) {
    const std::uintptr_t lo = std::max(off, sct * 32) - sct * 32, hi = std::min(off + n, sct * 32 + 32) - sct * 32;
    const std::uint32_t bits = static_cast<std::uint32_t>(((hi - lo) >= 32 ? ~0ull : ((1ull << (hi - lo)) - 1)) << lo);
    const std::uint32_t old = m[sct], now = old | bits;
    if (now == old) continue;
    m[sct] = now;
    const auto added = static_cast<std::uint64_t>(__builtin_popcount(now ^ old));
    if (write) {
      b.unique_written += added;
      if (!old) ++b.sectors_written;
    } else {
      b.unique_read += added;
      if (!old) ++b.sectors_read;
    }
  }
}

// The .shared window address of p (the running block's shared memory), or false.
bool shared_window(const void* p, std::size_t* window) {
  const auto* a = static_cast<const unsigned char*>(p);
  if (g_dynamic_smem && a >= g_dynamic_smem && a < g_dynamic_smem + g_dynamic_smem_bytes) {
    *window = kDynamicWindow + static_cast<std::size_t>(a - g_dynamic_smem);
    return true;
  }
  return static_shared_window(p, window);
}

}  // namespace

// ---- host API ------------------------------------------------------------------------------

bool available() { return true; }
std::string unavailable_reason() { return ""; }
void begin() {
  State& s = st();
  s.window = true;
  s.done.clear();
}
std::vector<Launch> end() {
  State& s = st();
  s.window = false;
  return std::move(s.done);
}
bool window_open() { return st().window; }
void set_racecheck(bool on) { st().racecheck = on; }
bool racecheck() { return st().racecheck; }

// ---- events ----------------------------------------------------------------------------------

namespace event {

void launch_begin(const char* name, dim3 grid, dim3 block, std::size_t dynamic_smem) {
  State& s = st();
  s.in_launch = true;
  s.cur = Launch{};
  s.cur.kernel = name ? name : "";
  s.cur.grid = grid;
  s.cur.block = block;
  s.cur.dynamic_smem = dynamic_smem;
  s.touched_allocs.clear();
  const unsigned threads = block.x * block.y * block.z;
  s.warps.assign((threads + 31) / 32, WarpLog{});
  s.thread_state.assign(threads, ThreadState{});
  const std::size_t window_bytes = kDynamicWindow + static_cast<std::size_t>(target().smem_per_block_optin);
  if (s.racecheck && s.shadow.size() < window_bytes) s.shadow.assign(window_bytes, Shadow{});
}

void kernel_identified(const void* fn) {
  State& s = st();
  if (!s.in_launch || !s.cur.resources.arch.empty() || s.cur.resources.known) return;
  const KernelInfo& k = kernel_info(fn);
  if (!k.name.empty()) s.cur.kernel = k.name;
  s.cur.resources = k.resources;
  if (s.cur.resources.arch.empty()) s.cur.resources.arch = target_arch();
  const unsigned threads = s.cur.block.x * s.cur.block.y * s.cur.block.z;
  s.cur.occupancy = occupancy_of(fn, static_cast<int>(threads), s.cur.dynamic_smem);
}

void launch_end(bool failed, const std::string& failure) {
  State& s = st();
  if (!s.in_launch) return;
  s.in_launch = false;
  for (int ai : s.touched_allocs) {
    Alloc& a = g_allocs[static_cast<std::size_t>(ai)];
    if (a.buffer >= 0 && s.window) {
      const Buffer& b = s.cur.buffers[static_cast<std::size_t>(a.buffer)];
      s.cur.unique_read += b.unique_read;
      s.cur.unique_written += b.unique_written;
      s.cur.sectors_read += b.sectors_read;
      s.cur.sectors_written += b.sectors_written;
    }
    drop_masks(a);
  }
  s.touched_allocs.clear();
  if (!s.window) {
    s.sites.clear();
    return;
  }
  s.cur.wasteful_sites = wasteful_sites(s.sites);
  s.sites.clear();
  s.cur.failed = failed;
  s.cur.failure = failure;
  std::sort(s.cur.buffers.begin(), s.cur.buffers.end(), [](const Buffer& a, const Buffer& b) { return a.id < b.id; });
  s.done.push_back(std::move(s.cur));
  s.cur = Launch{};
}

void block_begin(unsigned threads) {
  State& s = st();
  if (!s.in_launch) return;
  s.threads = threads;
  s.bar_epoch = 0;
  for (auto& w : s.warps) {
    w.recs.clear();
    w.occurrences.clear();
    w.sync_count = 0;
    w.sync_masks.clear();
  }
  std::fill(s.thread_state.begin(), s.thread_state.end(), ThreadState{});
  if (s.window) {
    ++s.cur.blocks;
    s.cur.threads += threads;
    s.cur.warps += (threads + 31) / 32;
  }
}

void block_end(std::size_t static_smem) {
  State& s = st();
  if (!s.in_launch) return;
  flush_all_warps();
  for (auto& t : s.thread_state) use_point(t, false);
  if (s.window) s.cur.static_smem = std::max<std::uint64_t>(s.cur.static_smem, static_smem);
}

void barrier_done(unsigned warps_in_block) {
  State& s = st();
  if (!s.in_launch) return;
  flush_all_warps();
  ++s.bar_epoch;
  for (auto& w : s.warps) {
    w.sync_count = 0;
    w.sync_masks.clear();
  }
  if (s.window) s.cur.barriers += warps_in_block;
}

void collective_done(const char* what, unsigned warp, unsigned mask, bool full) {
  State& s = st();
  if (!s.in_launch || warp >= s.warps.size()) return;
  const bool is_syncwarp = std::strncmp(what, "__syncwarp", 10) == 0;
  if (is_syncwarp) {
    WarpLog& w = s.warps[warp];
    w.sync_masks.push_back(mask);
    ++w.sync_count;
  }
  if (s.window) {
    if (is_syncwarp)
      ++s.cur.syncwarp;
    else if (std::strncmp(what, "__shfl", 6) == 0)
      ++s.cur.shfl;
    else if (std::strncmp(what, "__ballot", 8) == 0 || std::strncmp(what, "__any", 5) == 0 ||
             std::strncmp(what, "__all", 5) == 0)
      ++s.cur.vote;
    else if (std::strncmp(what, "mma.sync", 8) == 0)
      ++s.cur.mma;
    s.cur.collective_lanes += static_cast<std::uint64_t>(__builtin_popcount(mask));
  }
  if (full) flush_warp(warp);
}

void thread_use_point() {
  if (!st().in_launch) return;
  if (ThreadState* t = running_thread_state()) use_point(*t, false);
}

void access(const void* p, std::size_t bytes, Kind kind, std::uintptr_t site) {
  State& s = st();
  if (!s.in_launch || !g_thread || bytes == 0) return;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::size_t window = 0;
  if (kind == Kind::gld || kind == Kind::gst || kind == Kind::gatom) {
    // Device memory the kernel is streaming, then shared memory, then any device memory.
    Alloc* al = cached_alloc(a);
    const bool shared = !al && shared_window(p, &window);
    if (!al && !shared) al = find_alloc(a);
    if (al) {
      if (a + bytes > al->end)
        device_fail("out-of-bounds access: " + std::to_string(bytes) + " bytes at " + std::to_string(a - al->base) +
                    " of a " + std::to_string(al->end - al->base) + "-byte allocation, at " + describe_site(site));
      ThreadState* t = running_thread_state();
      if (kind == Kind::gld) {
        if (t) t->plain_pending += bytes;
      } else if (t) {
        use_point(*t, false);
      }
      if (!s.window) return;
      if (kind != Kind::gst) mark(*al, a, bytes, false, s.cur);
      if (kind != Kind::gld) mark(*al, a, bytes, true, s.cur);
      log_access(kind, a, bytes, site, static_cast<std::int32_t>(al - g_allocs.data()));
      return;
    }
    if (shared) {
      const Kind sk = kind == Kind::gld ? Kind::sld : (kind == Kind::gst ? Kind::sst : Kind::satom);
      if (ThreadState* t = running_thread_state()) use_point(*t, false);
      const std::uint32_t k = (s.racecheck || s.window) ? next_execution(sk, site) : kNoExecution;
      if (s.racecheck && sk != Kind::satom) {
        Accessor c = accessor_now(site);
        c.k = k;
        c.flush = s.warps[g_thread->warp].flushes;
        if (sk == Kind::sld)
          race_read(window, bytes, c);
        else
          race_write(window, bytes, c);
      }
      if (s.window) log_access(sk, window, bytes, site, -1, k);
      return;
    }
    if (s.window) ++s.cur.other_accesses;
    return;
  }
  if (s.window) log_access(kind, a, bytes, site, -1);
}

void ldmatrix(const std::size_t* row_window, const unsigned char* const* rows, int num, std::uintptr_t site,
              unsigned warp) {
  (void)rows;
  State& s = st();
  if (!s.in_launch) return;
  if (s.racecheck) {
    // The warp reads every row of every matrix; each row was written by whoever
    // stored it, and must be ordered before this instruction for every lane.
    Accessor c = accessor_now(site, true);
    c.tid = warp * 32;
    c.sync = s.warps[warp].sync_count;
    for (int i = 0; i < 8 * num; ++i) race_read(row_window[i], 16, c);
  }
  if (!s.window) return;
  Traffic t;
  t.requests = 1;
  t.lanes = 32;
  t.bytes = static_cast<std::uint64_t>(num) * 128;
  t.ideal = static_cast<std::uint64_t>(num);
  // One phase per matrix: its 8 rows of 16 bytes; a bank asked for n distinct words takes n wavefronts.
  for (int m = 0; m < num; ++m) {
    std::array<std::pair<unsigned, std::size_t>, 32> bw{};
    std::size_t n = 0;
    for (int r = 0; r < 8; ++r)
      for (std::size_t w = row_window[8 * m + r] / 4; w < row_window[8 * m + r] / 4 + 4; ++w) bw[n++] = {unsigned(w % 32), w};
    std::sort(bw.begin(), bw.begin() + static_cast<long>(n));
    const auto last = std::unique(bw.begin(), bw.begin() + static_cast<long>(n));
    std::uint64_t worst = 0, run = 0;
    for (auto it = bw.begin(); it != last; ++it) {
      run = (it != bw.begin() && it->first == (it - 1)->first) ? run + 1 : 1;
      worst = std::max(worst, run);
    }
    t.sectors += worst;
  }
  s.cur.ldsm.add(t);
  s.sites[{kLdmatrixKind, site}].add(t);
}

void cp_async_issue(std::size_t dst_window, unsigned char* dst, const void* src, int bytes, std::uintptr_t site) {
  (void)dst;
  State& s = st();
  if (!s.in_launch || !g_thread) return;
  const auto a = reinterpret_cast<std::uintptr_t>(src);
  ThreadState* t = running_thread_state();
  if (t) t->async_pending += static_cast<std::uint64_t>(bytes);
  if (s.racecheck) {
    // The copy may land at any moment from now until its wait: the destination must
    // not be in use by another thread now (checked again when it lands).
    const Accessor c = accessor_now(site);
    for (int i = 0; i < bytes; ++i)
      if (Shadow* sh = shadow_at(dst_window + static_cast<std::size_t>(i)))
        check_hazards(*sh, dst_window + static_cast<std::size_t>(i), c, true, "cp.async write after write",
                      "cp.async write after read");
  }
  if (!s.window) return;
  Alloc* al = find_alloc(a);
  if (al && bytes > 0) mark(*al, a, static_cast<std::size_t>(bytes), false, s.cur);
  log_access(Kind::ldgsts, a, static_cast<std::size_t>(bytes), site,
             al ? static_cast<std::int32_t>(al - g_allocs.data()) : -1);
  log_access(Kind::ldgsts_shared, dst_window, 16, site, -1);
}

void cp_async_land(unsigned char* dst, std::size_t dst_window, int bytes, unsigned issue_bar, unsigned issue_sync,
                   std::uintptr_t site) {
  (void)dst;
  State& s = st();
  if (!s.in_launch || !g_thread) return;
  if (ThreadState* t = running_thread_state())
    t->async_pending -= std::min<std::uint64_t>(t->async_pending, static_cast<std::uint64_t>(bytes));
  if (!s.racecheck) return;
  // Accesses by other threads since the issue are unordered with the landing.
  Accessor issue{g_thread->linear, false, issue_bar, issue_sync, site};
  for (std::size_t i = 0; i < 16; ++i) {
    if (dst_window + i >= s.shadow.size()) break;
    Shadow& sh = s.shadow[dst_window + i];
    if (sh.block == g_block_serial) {
      if (other_thread(sh.w_tid, sh.w_collective, issue) && sh.w_bar >= issue_bar &&
          !(sh.w_bar == issue_bar && sh.w_tid / 32 == issue.tid / 32 && sh.w_sync < issue_sync &&
            warp_synced_since(s.warps[issue.tid / 32], sh.w_sync, sh.w_tid % 32, sh.w_collective, issue.tid % 32, false)))
        report_race("cp.async landing after write", dst_window + i, accessor_now(site), true, sh.w_tid,
                    sh.w_collective, true, sh.w_site, sh.w_bar);
      if (sh.r_tid != kNoThread && (sh.r_many || other_thread(sh.r_tid, sh.r_collective, issue)) &&
          sh.r_bar >= issue_bar &&
          !(sh.r_bar == issue_bar && sh.r_tid / 32 == issue.tid / 32 && sh.r_sync < issue_sync &&
            warp_synced_since(s.warps[issue.tid / 32], sh.r_sync, sh.r_tid % 32, sh.r_collective, issue.tid % 32, false)))
        report_race("cp.async landing after read", dst_window + i, accessor_now(site), true, sh.r_tid,
                    sh.r_collective, false, sh.r_site, sh.r_bar);
    }
  }
  race_write(dst_window, 16, accessor_now(site), "cp.async write after write");
}

void cp_async_wait_begin() {
  if (!st().in_launch) return;
  if (ThreadState* t = running_thread_state()) use_point(*t, true);
}

unsigned barrier_epoch() { return st().bar_epoch; }
unsigned sync_epoch() {
  const State& s = st();
  if (!g_thread || g_thread->warp >= s.warps.size()) return 0;
  return s.warps[g_thread->warp].sync_count;
}

void runtime_work(const char* kind, const std::string& what, std::uint64_t bytes_read, std::uint64_t bytes_written) {
  State& s = st();
  if (!s.window || s.in_launch) return;
  Launch L;
  L.kind = kind;
  L.what = what;
  L.kernel = what;
  L.copy_bytes_read = bytes_read;
  L.copy_bytes_written = bytes_written;
  s.done.push_back(std::move(L));
}

void allocation_added(const void* p, std::size_t bytes) {
  Alloc a;
  a.base = reinterpret_cast<std::uintptr_t>(p);
  a.end = a.base + bytes;
  a.id = ++g_alloc_serial;
  auto it = std::upper_bound(g_allocs.begin(), g_allocs.end(), a.base,
                             [](std::uintptr_t x, const Alloc& al) { return x < al.base; });
  g_allocs.insert(it, a);
  forget_hits();
}

void allocation_removed(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = std::lower_bound(g_allocs.begin(), g_allocs.end(), a,
                             [](const Alloc& al, std::uintptr_t x) { return al.base < x; });
  if (it == g_allocs.end() || it->base != a) return;
  drop_masks(*it);
  g_allocs.erase(it);
  forget_hits();
}

}  // namespace event

#endif  // PB_EMU_COUNT

}  // namespace pb_emu::counters


namespace pb_emu {
void counted_access(const void* p, std::size_t bytes, int kind, const void* site) {
  counters::event::access(p, bytes, static_cast<counters::event::Kind>(kind), reinterpret_cast<std::uintptr_t>(site));
}
}  // namespace pb_emu
