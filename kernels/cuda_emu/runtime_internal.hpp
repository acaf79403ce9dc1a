// pb_emu internals shared by the runtime's files (scheduler.cpp, runtime.cpp,
// cublas.cpp): the emulated target, errors, device memory bookkeeping and
// stream work queues. Not seen by kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace pb_emu {

// ---- the emulated device ----------------------------------------------------------

struct Target {
  const char* key;   // h200, h100, a100, b200, rtxpro6000
  const char* name;  // cudaDeviceProp::name
  int cc_major, cc_minor;
  int sm_count;
  int sm_clock_khz, memory_clock_khz, bus_width_bits;
  std::size_t l2_bytes, memory_bytes;
  int smem_per_block_optin;  // bytes
  int smem_per_sm;
};
// PB_EMU_TARGET (h200 unless set); an unknown key is a one-line error at start.
const Target& target();
// Static shared memory per block without opting in.
constexpr std::size_t kStaticSmemLimit = 48 * 1024;
// The emulated devices: PB_EMU_DEVICES of them (1 unless set; at most kMaxDevices),
// all of the one target; an invalid count is a one-line error at first use.
constexpr int kMaxDevices = 8;
int device_count();
int current_device();  // cudaSetDevice's, of the calling thread
// Device memory the emulation hands out, per device: PB_EMU_MEMORY_GIB (default 8).
std::size_t memory_budget();

// ---- errors -------------------------------------------------------------------------

// Records `e` with `message` as the last error (cudaGetLastError) and returns it.
cudaError_t api_error(cudaError_t e, const std::string& message);
// A kernel or library call that failed while a stream's work ran: sticky, as on a
// GPU (every later call returns it), and its message is kept for cudaGetErrorString.
void sticky_error(cudaError_t e, const std::string& message);
cudaError_t sticky();  // cudaSuccess while the emulated context is healthy

// ---- device memory ------------------------------------------------------------------

// "" when [p, p + n) lies inside one device allocation, else what is wrong with it.
std::string check_device_range(const void* p, std::size_t n, const char* what);

// ---- streams --------------------------------------------------------------------------

// Work on a stream runs when something waits for it (a synchronising call, an
// event, a copy to pageable host memory), in stream order and after the work it
// depends on (the legacy stream's implicit synchronisation, event waits). An op
// is copyable: a captured graph replays copies of it.
struct Op {
  std::string what;                  // names the op in errors
  std::function<cudaError_t()> run;  // a failure becomes the sticky error
  bool capturable = true;            // may be recorded into a CUDA graph
  // For the counters (counting.hpp): "copy", "memset" or "library" work, with the
  // device bytes it reads and writes; nullptr for kernels (counted as they run) and markers.
  const char* counted = nullptr;
  std::uint64_t bytes_read = 0, bytes_written = 0;
};
// Enqueues `op` on `s` (or records it while `s` is being captured).
cudaError_t enqueue(cudaStream_t s, Op op);
// Runs what `s` holds, with what it depends on; returns the sticky error.
cudaError_t flush_stream(cudaStream_t s);
// For the NCCL stand-in (nccl.cpp), whose collectives span several streams:
// the device of `s` (the current one for the legacy stream; -1: not a stream),
// whether it is being captured, the number of the last op enqueued on it, and
// running its work up to and including op number `seq`.
int stream_device(cudaStream_t s);
bool stream_capturing(cudaStream_t s);
std::uint64_t last_enqueued(cudaStream_t s);
void flush_stream_to(cudaStream_t s, std::uint64_t seq);
// The device whose allocation holds `p`, or -1 when `p` is not device memory.
int device_of(const void* p);

// ---- kernels --------------------------------------------------------------------------

struct GridLaunchView {
  dim3 grid, block;
  std::size_t smem;
  const char* name;
};
// Runs one grid now (stream work calls this); cudaSuccess or the launch's failure,
// whose message api_error has recorded.
cudaError_t run_grid(const GridLaunchView& l, void* closure, void (*body)(void*));
// The running fiber's stack, [lo, hi) (0 outside a kernel), and the program's own
// code and data (the executable's image): addresses that are never device memory.
extern std::uintptr_t g_fiber_stack_lo, g_fiber_stack_hi, g_program_lo, g_program_hi;
// Whether p is inside one of the running block's __shared__ arrays, and its .shared address.
bool static_shared_window(const void* p, std::size_t* window);
// The cudaFuncAttributeMaxDynamicSharedMemorySize set for a kernel, or -1.
int max_dynamic_smem_attribute(const void* fn);
void set_max_dynamic_smem_attribute(const void* fn, int bytes);

}  // namespace pb_emu
