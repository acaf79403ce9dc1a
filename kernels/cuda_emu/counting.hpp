// pb_emu counters: what every emulated kernel launch did to memory, counted the way
// Nsight Compute counts it, and a shared-memory race check, from the counting build
// of the emulation (PB_EMU_COUNT: the kernels compiled with GCC's ThreadSanitizer
// instrumentation, whose __tsan_* hooks are ours, tsan_hooks.cpp). Counts are
// counts: deterministic, never a time. docs/design.md lists each counter beside
// the Nsight Compute metric it stands for.
//
// Two audiences: the runtime's own files (scheduler, runtime, ptx) report events
// through the `event` functions; host code (the CUDA backend, tests) opens a
// window with begin() and takes the launches it recorded with end().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pb_emu::counters {

// ---- what is counted ----------------------------------------------------------------

// One kind of warp-level memory instruction: a request is one warp's execution of
// one access site (the k-th execution of a site by each lane of a warp, between
// the warp's synchronisation points, is one request, as the hardware coalesces
// one warp instruction).
struct Traffic {
  std::uint64_t requests = 0;  // warp-level instructions
  std::uint64_t lanes = 0;     // active lanes, summed over the requests
  std::uint64_t bytes = 0;     // bytes the lanes asked for
  // Global: 32-byte sectors the requests touched, and the fewest that their
  // unique bytes need (ceil(unique / 32) per request). Shared: wavefronts, and the
  // fewest the request needs (one per 128 bytes; one per 8x8 matrix for ldmatrix).
  std::uint64_t sectors = 0;
  std::uint64_t ideal = 0;
  void add(const Traffic& o) {
    requests += o.requests, lanes += o.lanes, bytes += o.bytes, sectors += o.sectors, ideal += o.ideal;
  }
};

// One device allocation a launch touched.
struct Buffer {
  std::uint64_t id = 0;           // allocation order (1 = the first cudaMalloc of the process)
  std::uint64_t size = 0;         // the allocation's bytes
  std::uint64_t unique_read = 0;  // distinct bytes read at least once (loads, atomics, cp.async sources)
  std::uint64_t unique_written = 0;
  std::uint64_t sectors_read = 0;  // distinct 32-byte sectors read / written
  std::uint64_t sectors_written = 0;
  Traffic ld, st, atom, ldgsts;  // the requests whose first active lane addressed this buffer
};

// One access site whose requests took more sectors (global) or wavefronts
// (shared) than their bytes need: where uncoalesced access or bank conflicts are.
struct WastefulSite {
  std::string kind;   // global ld, global st, global atom, ldgsts, shared ld, shared st, ldmatrix, ...
  std::string where;  // file:line (function), from the binary's line tables
  Traffic traffic;
};

// What a kernel's real build says (ptxas, captured at build time; resources.cpp).
struct Resources {
  bool known = false;       // false: the kernel is not in the nvcc build's table
  std::string arch;         // sm_80, sm_90
  int registers = 0;        // per thread
  int static_smem = 0;      // bytes per block
  int stack_frame = 0;      // bytes per thread
  int spill_stores = 0;     // bytes
  int spill_loads = 0;
  int max_threads = 1024;   // __launch_bounds__
};

struct Occupancy {
  int blocks_per_sm = 0;    // the occupancy calculator's answer (cuda_occupancy.h)
  int warps_per_sm = 0;     // blocks_per_sm * warps per block
  int max_warps_per_sm = 64;
  std::string limiter;      // registers, shared memory, warps, blocks
  bool from_resources = false;  // false: modelled from the launch alone (64 registers assumed)
};

struct Launch {
  std::string kernel;          // the instantiation's demangled name
  std::string kind = "kernel"; // kernel; copy, memset (runtime work); library (cuBLAS: not counted)
  std::string what;            // for non-kernels: the call, e.g. "cudaMemsetAsync", "cublasGemmEx"
  dim3 grid, block;
  std::uint64_t dynamic_smem = 0, static_smem = 0;  // bytes per block (static: as the emulation laid it out)
  bool failed = false;
  std::string failure;

  Traffic global_ld, global_st, global_atom;  // plain and cache-hinted accesses; ATOM and RED together
  Traffic ldgsts;                             // cp.async, global side
  Traffic shared_ld, shared_st, shared_atom;  // plain accesses (wavefronts)
  Traffic ldsm;                               // ldmatrix
  Traffic ldgsts_shared;                      // cp.async, shared side (written when the copy lands)
  std::uint64_t unique_read = 0, unique_written = 0;    // distinct bytes over all buffers
  std::uint64_t sectors_read = 0, sectors_written = 0;  // distinct sectors over all buffers
  std::uint64_t copy_bytes_read = 0, copy_bytes_written = 0;  // runtime copies and memsets

  std::uint64_t barriers = 0;  // warp-level barrier instructions (warps of the block x __syncthreads)
  std::uint64_t shfl = 0, vote = 0, syncwarp = 0;  // warp-level collectives
  std::uint64_t collective_lanes = 0;              // lanes that took part, summed over them
  std::uint64_t mma = 0;                           // warp-level mma.sync m16n8k16
  std::uint64_t blocks = 0, warps = 0, threads = 0;

  // Memory-level parallelism, per thread: at each point where a thread can stall
  // on what it loaded (its next shared access, store, atomic, barrier, collective
  // or cp.async wait), the global load bytes it has outstanding (plain loads since
  // the last such point, plus cp.async copies not yet waited for). inflight_sum /
  // inflight_events is the mean over points with something outstanding.
  double inflight_sum = 0;
  std::uint64_t inflight_events = 0;
  std::uint64_t inflight_max = 0;
  std::uint64_t inflight_async_events = 0;  // those that were cp.async waits

  // Accesses to neither device nor shared memory (closures, host data), not counted;
  // the thread's own locals and the program's data are not even seen here.
  std::uint64_t other_accesses = 0;
  std::vector<Buffer> buffers;
  std::vector<WastefulSite> wasteful_sites;  // at most 8, the most sectors/wavefronts beyond ideal first
  Resources resources;
  Occupancy occupancy;

  // Warp-level memory instructions and their active lanes, all kinds together
  // (divergence: lanes / instructions, 32 when no lane is ever idle).
  std::uint64_t memory_instructions() const;
  std::uint64_t memory_lanes() const;
};

// ---- host API -------------------------------------------------------------------------

// Whether this build counts (the counting build of the emulation), or why not.
bool available();
std::string unavailable_reason();
// Opens a counting window: every grid, copy, memset and library call that runs
// until end() is recorded (work already queued counts when it runs).
void begin();
// Closes the window and returns what ran in it, in execution order.
std::vector<Launch> end();
bool window_open();

// The shared-memory race check (on by default in the counting build;
// PB_EMU_RACECHECK=0 turns it off): a hazard fails the launch with both threads
// and both source lines.
void set_racecheck(bool on);
bool racecheck();

// ---- events from the runtime's own files (no-ops outside the counting build) ---------

namespace event {
enum class Kind : std::uint8_t { gld, gst, gatom, ldgsts, sld, sst, satom, ldgsts_shared };

// Grids and blocks (scheduler.cpp).
void launch_begin(const char* name, dim3 grid, dim3 block, std::size_t dynamic_smem);
void kernel_identified(const void* fn);  // the kernel's first thread entered it
void launch_end(bool failed, const std::string& failure);
void block_begin(unsigned threads);
void block_end(std::size_t static_smem);
void barrier_done(unsigned warps_in_block);
// A warp collective completed: `what` is its intrinsic (the Site's name), `mask`
// the lanes that took part, `full` whether they are all the warp's live lanes.
void collective_done(const char* what, unsigned warp, unsigned mask, bool full);
void thread_use_point();  // the running thread arrives at a barrier or collective

// Accesses the emulation performs or sees on a kernel's behalf (the running
// thread's): `site` identifies the instruction (a return address, or a file:line key).
void access(const void* p, std::size_t bytes, Kind kind, std::uintptr_t site);
// ldmatrix: the warp's row addresses (.shared window addresses) of `num` matrices.
void ldmatrix(const std::size_t* row_window_addresses, const unsigned char* const* rows, int num,
              std::uintptr_t site, unsigned warp);
// cp.async: issued (the shared side's .shared window address), and landed at a wait.
void cp_async_issue(std::size_t dst_window, unsigned char* dst, const void* src, int bytes, std::uintptr_t site);
void cp_async_land(unsigned char* dst, std::size_t dst_window, int bytes, unsigned issue_barrier_epoch,
                   unsigned issue_sync_epoch, std::uintptr_t site);
void cp_async_wait_begin();  // a use point with the thread's pending copies outstanding
// What the race check needs to know of a cp.async at issue (the epochs it was issued in).
unsigned barrier_epoch();
unsigned sync_epoch();

// Runtime work (runtime.cpp, cublas.cpp).
void runtime_work(const char* kind, const std::string& what, std::uint64_t bytes_read, std::uint64_t bytes_written);

// Device allocations (runtime.cpp).
void allocation_added(const void* p, std::size_t bytes);
void allocation_removed(const void* p);
}  // namespace event

// A site key for an explicit file:line (helpers that know their caller's line),
// and a site described for messages (file:line, or the source line of a code address).
std::uintptr_t site_key(const char* file, int line);
std::string describe_site(std::uintptr_t site);

}  // namespace pb_emu::counters
