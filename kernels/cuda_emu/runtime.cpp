// pb_emu runtime: the CUDA runtime API phasebench calls, over host memory.
// Device memory is exactly-sized heap memory (AddressSanitizer bounds every
// allocation, so the emulated suite stands in for compute-sanitizer memcheck),
// poisoned with 0xff bytes; every copy and memset is checked against the
// allocations it touches. Streams keep their work until something waits for it,
// which exposes missing synchronisation between streams; events order work but
// never report a time; CUDA graphs record and replay stream work. The device is
// a named target (PB_EMU_TARGET: h200, h100, a100, b200, rtxpro6000), PB_EMU_DEVICES
// of them (1 to 8, one by default; each its own memory budget, streams, events and
// CUDA's rules on which device's stream a launch or an event may use); NVML is absent.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#define PB_EMU_RUNTIME
#include "counting.hpp"
#include "pb_emu.hpp"
#include "pb_emu_testing.hpp"
#include "resources.hpp"
#include "runtime_internal.hpp"

// The runtime's own opaque handle types.
struct CUstream_st {
  int device = 0;        // the device current when it was created
  bool blocking = true;  // synchronises with the legacy stream (not cudaStreamNonBlocking)
  struct Queued {
    pb_emu::Op op;
    std::uint64_t seq;
    std::vector<std::pair<CUstream_st*, std::uint64_t>> deps;  // streams to run up to seq first
  };
  std::deque<Queued> queue;
  std::uint64_t enqueued = 0, executed = 0;
  bool capturing = false, capture_invalid = false;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
  std::vector<pb_emu::Op> captured;
  std::string capture_problem;
};
struct CUevent_st {
  int device = 0;  // the device current when it was created
  CUstream_st* stream = nullptr;
  std::uint64_t seq = 0;
  bool recorded = false;
};
struct CUgraph_st {
  std::vector<pb_emu::Op> ops;
};
struct CUgraphExec_st {
  std::vector<pb_emu::Op> ops;
};

namespace pb_emu {

namespace {

// ---- targets --------------------------------------------------------------------------

// Datasheet figures of the parts (SM count, boost clock, memory clock and bus,
// L2, memory, shared memory per block opt-in / per SM).
constexpr Target kTargets[] = {
    {"h200", "NVIDIA H200 (pb_emu functional emulation)", 9, 0, 132, 1980000, 3201000, 6144, 50ull << 20,
     143771ull << 20, 232448, 233472},
    {"h100", "NVIDIA H100 80GB HBM3 (pb_emu functional emulation)", 9, 0, 132, 1980000, 2619000, 5120, 50ull << 20,
     81559ull << 20, 232448, 233472},
    {"a100", "NVIDIA A100-SXM4-80GB (pb_emu functional emulation)", 8, 0, 108, 1410000, 1593000, 5120, 40ull << 20,
     81229ull << 20, 166912, 167936},
    // Blackwell. B200 (cc 10.0): 148 SMs, HBM3e at 8 TB/s (the 7680-bit bus drivers
    // report), 126 MiB of L2; shared memory as on Hopper (227 KiB a block, 228 KiB an
    // SM; CUDA C++ Programming Guide, compute capability 10.0). gpus.json: b200-sxm.
    {"b200", "NVIDIA B200 (pb_emu functional emulation)", 10, 0, 148, 1965000, 4166000, 7680, 126ull << 20,
     183359ull << 20, 232448, 233472},
    // RTX PRO 6000 Blackwell Server Edition (cc 12.0): 188 SMs, 512-bit GDDR7 at
    // 1597 GB/s, 128 MiB of L2; the small shared memory of the consumer parts (99
    // KiB a block, 100 KiB an SM; CUDA C++ Programming Guide, compute capability 12.0).
    // gpus.json: rtx-pro-6000-bse.
    {"rtxpro6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition (pb_emu functional emulation)", 12, 0, 188, 2617000,
     12477000, 512, 128ull << 20, 97887ull << 20, 101376, 102400},
};

// ---- errors ---------------------------------------------------------------------------

cudaError_t g_last = cudaSuccess;  // pending for cudaGetLastError
cudaError_t g_last_message_code = cudaSuccess;  // the error g_last_message explains (kept after clearing)
std::string g_last_message;
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_message;

// ---- memory ---------------------------------------------------------------------------

struct Allocation {
  std::size_t bytes;
  bool device;  // false: cudaMallocHost / cudaHostAlloc (pinned host memory)
  int on = 0;   // the device it was allocated on (device memory)
};
std::map<std::uintptr_t, Allocation>& allocations() {
  static std::map<std::uintptr_t, Allocation> m;
  return m;
}
// Device memory in use, per device (each has its own budget, PB_EMU_MEMORY_GIB).
std::size_t g_device_bytes[kMaxDevices] = {};
// The current device: CUDA keeps one per host thread.
thread_local int g_current = 0;
int g_device_count = 0;  // 0: not read from PB_EMU_DEVICES yet

// The allocation containing p, or nullptr.
const std::pair<const std::uintptr_t, Allocation>* find_allocation(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto& m = allocations();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  if (a >= it->first && a < it->first + std::max<std::size_t>(it->second.bytes, 1)) return &*it;
  return nullptr;
}
bool is_device(const void* p) {
  const auto* a = find_allocation(p);
  return a && a->second.device;
}
bool is_pinned(const void* p) {
  const auto* a = find_allocation(p);
  return a && !a->second.device;
}

std::string ptr_str(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// ---- streams --------------------------------------------------------------------------

CUstream_st& legacy_stream() {
  static CUstream_st s;
  return s;
}
std::set<CUstream_st*>& streams() {
  static std::set<CUstream_st*> s;
  return s;
}
std::vector<CUstream_st*>& stream_order() {  // creation order, the legacy stream first
  static std::vector<CUstream_st*> v{&legacy_stream()};
  return v;
}

CUstream_st* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || s == &legacy_stream()) return &legacy_stream();
  return streams().count(s) ? s : nullptr;
}


void flush(CUstream_st* s, std::uint64_t upto);

void run_op(CUstream_st::Queued& q) {
  for (const auto& [dep, seq] : q.deps) flush(dep, seq);
  if (g_sticky != cudaSuccess) return;  // a failed context runs nothing more
  if (q.op.counted) counters::event::runtime_work(q.op.counted, q.op.what, q.op.bytes_read, q.op.bytes_written);
  const cudaError_t e = q.op.run();
  if (e != cudaSuccess) sticky_error(e, e == g_last_message_code ? g_last_message : q.op.what + " failed");
}

void flush(CUstream_st* s, std::uint64_t upto) {
  while (!s->queue.empty() && s->queue.front().seq <= upto) {
    CUstream_st::Queued q = std::move(s->queue.front());
    s->queue.pop_front();
    s->executed = q.seq;
    run_op(q);
  }
}

void flush_everything() {
  for (CUstream_st* s : stream_order()) flush(s, s->enqueued);
}

bool any_global_capture() {
  for (CUstream_st* s : stream_order())
    if (s->capturing && s->capture_mode != cudaStreamCaptureModeRelaxed) return true;
  return false;
}

// A call that is not allowed while a stream is being captured invalidates the capture.
cudaError_t refuse_during_capture(CUstream_st* s, const char* call) {
  s->capture_invalid = true;
  s->capture_problem = std::string(call) + " is not permitted while the stream is being captured";
  return api_error(cudaErrorStreamCaptureUnsupported, "pb_emu: " + s->capture_problem);
}

cudaError_t check_device(int device) {
  if (device >= 0 && device < device_count()) return cudaSuccess;
  return api_error(cudaErrorInvalidDevice, "pb_emu: device " + std::to_string(device) + " does not exist: the emulation has " +
                                               std::to_string(device_count()) + " (PB_EMU_DEVICES)");
}

cudaError_t invalid_stream(cudaStream_t s, const char* call) {
  return api_error(cudaErrorInvalidResourceHandle,
                   std::string("pb_emu: ") + call + ": " + ptr_str(s) + " is not a stream (destroyed, or never created)");
}

// ---- copies ---------------------------------------------------------------------------

// Resolves cudaMemcpyDefault and checks that each side is what `kind` says it is
// and, on the device, lies inside one allocation (dst_n and src_n bytes).
cudaError_t check_copy(void* dst, std::size_t dst_n, const void* src, std::size_t src_n, cudaMemcpyKind& kind,
                       const char* call) {
  if (kind == cudaMemcpyDefault)
    kind = is_device(src) ? (is_device(dst) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                          : (is_device(dst) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  auto side = [&](const void* p, std::size_t n, bool dev, const char* what) -> cudaError_t {
    if (dev) {
      if (auto why = check_device_range(p, n, what); !why.empty())
        return api_error(cudaErrorInvalidValue, std::string("pb_emu: ") + call + ": " + why);
    } else if (is_device(p)) {
      return api_error(cudaErrorInvalidValue, std::string("pb_emu: ") + call + ": the " + what + " " + ptr_str(p) +
                                                  " is device memory but the copy's kind says host");
    }
    return cudaSuccess;
  };
  if (cudaError_t e = side(dst, dst_n, dst_dev, "destination"); e != cudaSuccess) return e;
  return side(src, src_n, src_dev, "source");
}

// Enqueues a 2D copy (a 1D one is one row) with CUDA's pageable-memory rules: from
// pageable host memory the data is taken now (staged); to pageable host memory the
// call returns once the copy is done.
cudaError_t copy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                    std::size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool sync_call, const char* call) {
  if (g_sticky) return g_sticky;
  if (width > dpitch || width > spitch)
    return api_error(cudaErrorInvalidPitchValue, std::string("pb_emu: ") + call + ": width " + std::to_string(width) +
                                                     " exceeds a pitch (" + std::to_string(spitch) + ", " +
                                                     std::to_string(dpitch) + ")");
  if (width == 0 || height == 0) return cudaSuccess;
  const std::size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  if (cudaError_t e = check_copy(dst, dspan, src, sspan, kind, call); e != cudaSuccess) return e;
  CUstream_st* s = sync_call ? &legacy_stream() : resolve(stream);
  if (!s) return invalid_stream(stream, call);
  const bool from_pageable = kind == cudaMemcpyHostToDevice && !is_pinned(src);
  const bool to_pageable = kind == cudaMemcpyDeviceToHost && !is_pinned(dst);
  if (s->capturing && (from_pageable || to_pageable || kind == cudaMemcpyHostToHost))
    return refuse_during_capture(s, call);
  Op op;
  op.what = call;
  op.counted = "copy";
  const bool reads_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool writes_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  op.bytes_read = reads_device ? width * height : 0;
  op.bytes_written = writes_device ? width * height : 0;
  if (from_pageable) {
    auto staged = std::make_shared<std::vector<unsigned char>>(width * height);
    for (std::size_t r = 0; r < height; ++r)
      std::memcpy(staged->data() + r * width, static_cast<const unsigned char*>(src) + r * spitch, width);
    op.run = [dst, dpitch, width, height, staged] {
      for (std::size_t r = 0; r < height; ++r)
        std::memcpy(static_cast<unsigned char*>(dst) + r * dpitch, staged->data() + r * width, width);
      return cudaSuccess;
    };
  } else {
    op.run = [dst, dpitch, src, spitch, width, height] {
      for (std::size_t r = 0; r < height; ++r)
        std::memmove(static_cast<unsigned char*>(dst) + r * dpitch, static_cast<const unsigned char*>(src) + r * spitch,
                     width);
      return cudaSuccess;
    };
  }
  if (cudaError_t e = enqueue(s, std::move(op)); e != cudaSuccess) return e;
  // A synchronous call, or a copy into pageable memory: done when the call returns.
  if (sync_call || to_pageable || kind == cudaMemcpyHostToHost) {
    if (sync_call) {
      flush_everything();
    } else {
      flush(s, s->enqueued);
    }
  }
  return g_sticky;
}

cudaError_t memset_on(void* p, int v, std::size_t n, cudaStream_t stream, const char* call) {
  if (g_sticky) return g_sticky;
  if (n == 0) return cudaSuccess;
  if (auto why = check_device_range(p, n, "destination"); !why.empty())
    return api_error(cudaErrorInvalidValue, std::string("pb_emu: ") + call + ": " + why);
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, call);
  Op op{call, [p, v, n] {
            std::memset(p, v, n);
            return cudaSuccess;
          }};
  op.counted = "memset";
  op.bytes_written = n;
  return enqueue(s, std::move(op));
}

// ---- kernels launched by address ----------------------------------------------------

std::map<const void*, Invoker>& invokers() {
  static std::map<const void*, Invoker> m;
  return m;
}

}  // namespace

// ---- internal API -----------------------------------------------------------------------

const Target& target() {
  static const Target& t = [] () -> const Target& {
    const char* key = std::getenv("PB_EMU_TARGET");
    if (!key || !*key) return kTargets[0];
    for (const auto& x : kTargets)
      if (std::strcmp(x.key, key) == 0) return x;
    std::fprintf(stderr, "pb_emu: unknown PB_EMU_TARGET '%s'; use h200, h100, a100, b200 or rtxpro6000\n", key);
    std::exit(2);
  }();
  return t;
}

std::size_t memory_budget() {
  static const std::size_t b = [] {
    const char* e = std::getenv("PB_EMU_MEMORY_GIB");
    double gib = 8;
    if (e && *e) {
      char* end = nullptr;
      gib = std::strtod(e, &end);
      if (!end || *end || !(gib > 0) || gib > 1e6) {
        std::fprintf(stderr, "pb_emu: PB_EMU_MEMORY_GIB='%s' is not a positive number of GiB\n", e);
        std::exit(2);
      }
    }
    return std::min(static_cast<std::size_t>(gib * 1073741824.0), target().memory_bytes);
  }();
  return b;
}

int device_count() {
  if (g_device_count == 0) {
    g_device_count = 1;
    if (const char* e = std::getenv("PB_EMU_DEVICES"); e && *e) {
      char* end = nullptr;
      const long n = std::strtol(e, &end, 10);
      if (!end || *end || n < 1 || n > kMaxDevices) {
        std::fprintf(stderr, "pb_emu: PB_EMU_DEVICES='%s' is not a number of devices from 1 to %d\n", e, kMaxDevices);
        std::exit(2);
      }
      g_device_count = static_cast<int>(n);
    }
  }
  return g_device_count;
}

int current_device() { return g_current; }

void set_device_count_for_tests(int n) {
  if (n < 1 || n > kMaxDevices) std::abort();
  g_device_count = n;
  if (g_current >= n) g_current = 0;
}

cudaError_t api_error(cudaError_t e, const std::string& message) {
  g_last = e;
  g_last_message_code = e;
  g_last_message = message;
  return e;
}

void sticky_error(cudaError_t e, const std::string& message) {
  if (g_sticky != cudaSuccess) return;
  g_sticky = e;
  g_sticky_message = message;
}

cudaError_t sticky() { return g_sticky; }

void reset_after_failure_for_tests() {
  g_sticky = cudaSuccess;
  g_sticky_message.clear();
  g_last = cudaSuccess;
}

std::size_t queued_work_for_tests() {
  std::size_t n = 0;
  for (CUstream_st* s : stream_order()) n += s->queue.size();
  return n;
}

std::string check_device_range(const void* p, std::size_t n, const char* what) {
  if (n == 0) return "";
  const auto* a = find_allocation(p);
  if (!a || !a->second.device)
    return std::string("the ") + what + " " + ptr_str(p) + " is not in any device allocation";
  const auto base = a->first;
  const auto end = base + a->second.bytes, lo = reinterpret_cast<std::uintptr_t>(p);
  if (lo + n > end)
    return std::string("the ") + what + " [" + ptr_str(p) + ", +" + std::to_string(n) + " bytes) runs " +
           std::to_string(lo + n - end) + " bytes past the end of its allocation of " + std::to_string(a->second.bytes) +
           " bytes at " + ptr_str(reinterpret_cast<void*>(base));
  return "";
}

cudaError_t enqueue(cudaStream_t stream, Op op) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, op.what.c_str());
  if (g_sticky) return g_sticky;
  if (s->capturing) {
    if (!op.capturable) return refuse_during_capture(s, op.what.c_str());
    s->captured.push_back(std::move(op));
    return cudaSuccess;
  }
  if (s == &legacy_stream() && any_global_capture())
    return api_error(cudaErrorStreamCaptureImplicit,
                     "pb_emu: " + op.what + " on the legacy stream while another stream is being captured");
  CUstream_st::Queued q{std::move(op), ++s->enqueued, {}};
  // The legacy stream waits for the blocking streams' earlier work, and they for its.
  if (s == &legacy_stream()) {
    for (CUstream_st* o : stream_order())
      if (o != s && o->blocking && o->enqueued > o->executed) q.deps.emplace_back(o, o->enqueued);
  } else if (s->blocking) {
    CUstream_st& l = legacy_stream();
    if (l.enqueued > l.executed) q.deps.emplace_back(&l, l.enqueued);
  }
  s->queue.push_back(std::move(q));
  return cudaSuccess;
}

cudaError_t flush_stream(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "flush");
  flush(s, s->enqueued);
  return g_sticky;
}

void register_kernel(const void* fn, Invoker inv) { invokers()[fn] = inv; }

int device_of(const void* p) {
  const auto* a = find_allocation(p);
  return a && a->second.device ? a->second.on : -1;
}

int stream_device(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return -1;
  return s == &legacy_stream() ? g_current : s->device;
}

bool stream_capturing(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  return s && s->capturing;
}

std::uint64_t last_enqueued(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  return s ? s->enqueued : 0;
}

void flush_stream_to(cudaStream_t stream, std::uint64_t seq) {
  if (CUstream_st* s = resolve(stream)) flush(s, seq);
}

void enqueue_grid(const GridLaunch& l, void* closure, GridBody run, void (*destroy)(void*)) {
  std::shared_ptr<void> owned(closure, destroy);
  const std::string name = l.name && *l.name ? l.name : "a kernel";
  if (g_sticky) {
    api_error(g_sticky, g_sticky_message);
    return;
  }
  const dim3 b = l.block, g = l.grid;
  const std::uint64_t threads = std::uint64_t{b.x} * b.y * b.z;
  auto bad = [&](cudaError_t e, const std::string& why) { api_error(e, "pb_emu: launch of " + name + ": " + why); };
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024)
    return bad(cudaErrorInvalidConfiguration, "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                                                  std::to_string(b.z) +
                                                  ") is outside the limits (each side >= 1, x,y <= 1024, z <= 64, "
                                                  "at most 1024 threads)");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return bad(cudaErrorInvalidConfiguration, "grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," +
                                                  std::to_string(g.z) +
                                                  ") is outside the limits (x in 1..2^31-1, y and z in 1..65535)");
  if (l.smem > static_cast<std::size_t>(target().smem_per_block_optin))
    return bad(cudaErrorInvalidValue, std::to_string(l.smem) + " bytes of dynamic shared memory exceed the " +
                                          std::to_string(target().smem_per_block_optin) + " a block can have");
  CUstream_st* s = resolve(l.stream);
  if (!s) {
    invalid_stream(l.stream, ("launch of " + name).c_str());
    return;
  }
  // CUDA: a kernel launch fails on a stream of another device than the current one.
  if (s != &legacy_stream() && s->device != g_current)
    return bad(cudaErrorInvalidResourceHandle, "its stream belongs to device " + std::to_string(s->device) +
                                                   " but device " + std::to_string(g_current) +
                                                   " is current (cudaSetDevice to the stream's device first)");
  const GridLaunchView view{g, b, l.smem, l.name};
  Op op;
  op.what = "launch of " + name;
  op.run = [view, owned, run] { return run_grid(view, owned.get(), run); };
  enqueue(s, std::move(op));
}

}  // namespace pb_emu

using namespace pb_emu;

// ---- the CUDA runtime API ---------------------------------------------------------------

extern "C" {

cudaError_t cudaGetLastError(void) {
  if (g_sticky) return g_sticky;
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return g_sticky ? g_sticky : g_last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define PB_EMU_NAME(x) \
  case x: return #x;
    PB_EMU_NAME(cudaSuccess)
    PB_EMU_NAME(cudaErrorInvalidValue)
    PB_EMU_NAME(cudaErrorMemoryAllocation)
    PB_EMU_NAME(cudaErrorInvalidConfiguration)
    PB_EMU_NAME(cudaErrorInvalidPitchValue)
    PB_EMU_NAME(cudaErrorInvalidDevice)
    PB_EMU_NAME(cudaErrorInvalidDeviceFunction)
    PB_EMU_NAME(cudaErrorInvalidResourceHandle)
    PB_EMU_NAME(cudaErrorNoDevice)
    PB_EMU_NAME(cudaErrorNotReady)
    PB_EMU_NAME(cudaErrorLaunchFailure)
    PB_EMU_NAME(cudaErrorIllegalAddress)
    PB_EMU_NAME(cudaErrorMisalignedAddress)
    PB_EMU_NAME(cudaErrorNotSupported)
    PB_EMU_NAME(cudaErrorIllegalState)
    PB_EMU_NAME(cudaErrorStreamCaptureUnsupported)
    PB_EMU_NAME(cudaErrorStreamCaptureInvalidated)
    PB_EMU_NAME(cudaErrorStreamCaptureImplicit)
    PB_EMU_NAME(cudaErrorStreamCaptureUnmatched)
#undef PB_EMU_NAME
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  // The generic sentence, plus what pb_emu knows about the error it last reported.
  thread_local std::string s;
  s = e == cudaSuccess ? "no error" : std::string("pb_emu error ") + cudaGetErrorName(e);
  if (e != cudaSuccess && e == g_sticky && !g_sticky_message.empty())
    s = g_sticky_message;
  else if (e != cudaSuccess && e == g_last_message_code && !g_last_message.empty())
    s = g_last_message;
  return s.c_str();
}

// ---- device ---------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
  g_current = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_current;
  return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
  if (cudaError_t e = check_device(peer); e != cudaSuccess) return e;
  *can = device != peer;  // every emulated device reaches every other (one NVLink domain)
  return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) {
  flush_everything();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
  const Target& t = target();
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "%s", t.name);
  p->totalGlobalMem = t.memory_bytes;
  p->sharedMemPerBlock = kStaticSmemLimit;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = t.cc_major;
  p->minor = t.cc_minor;
  p->textureAlignment = 512;
  p->multiProcessorCount = t.sm_count;
  p->integrated = 0;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->ECCEnabled = 1;
  p->pciBusID = 0xee + device;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = t.bus_width_bits;
  p->l2CacheSize = static_cast<int>(t.l2_bytes);
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = static_cast<std::size_t>(t.smem_per_sm);
  p->regsPerMultiprocessor = 65536;
  p->sharedMemPerBlockOptin = static_cast<std::size_t>(t.smem_per_block_optin);
  p->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int device) {
  if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
  const Target& t = target();
  switch (a) {
    case cudaDevAttrComputeCapabilityMajor: *v = t.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = t.cc_minor; break;
    case cudaDevAttrMultiProcessorCount: *v = t.sm_count; break;
    case cudaDevAttrClockRate: *v = t.sm_clock_khz; break;
    case cudaDevAttrMemoryClockRate: *v = t.memory_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = t.bus_width_bits; break;
    case cudaDevAttrL2CacheSize: *v = static_cast<int>(t.l2_bytes); break;
    case cudaDevAttrEccEnabled: *v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = t.smem_per_block_optin; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = static_cast<int>(kStaticSmemLimit); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = t.smem_per_sm; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: *v = 65536; break;
    case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    default:
      return api_error(cudaErrorInvalidValue,
                       "pb_emu: cudaDeviceGetAttribute(" + std::to_string(static_cast<int>(a)) +
                           ") is not emulated; add it to kernels/cuda_emu/runtime.cpp");
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device) {
  if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
  std::snprintf(bus, static_cast<std::size_t>(len), "00000000:%02X:00.0", 0xee + device);
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  if (any_global_capture())
    return api_error(cudaErrorStreamCaptureUnsupported, "pb_emu: cudaDeviceSynchronize while a stream is being captured");
  flush_everything();
  return g_sticky;
}
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

// ---- memory ----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t n) {
  *ptr = nullptr;
  if (g_sticky) return g_sticky;
  if (any_global_capture())
    return api_error(cudaErrorStreamCaptureUnsupported, "pb_emu: cudaMalloc while a stream is being captured");
  if (n == 0) return cudaSuccess;
  std::size_t& used = g_device_bytes[g_current];
  if (n > memory_budget() - std::min(used, memory_budget()))
    return api_error(cudaErrorMemoryAllocation, "pb_emu: cudaMalloc of " + std::to_string(n) + " bytes: the emulation's " +
                                                    std::to_string(memory_budget()) + "-byte budget has " +
                                                    std::to_string(memory_budget() - std::min(used, memory_budget())) +
                                                    " left on device " + std::to_string(g_current) +
                                                    " (PB_EMU_MEMORY_GIB)");
  void* p = nullptr;
  if (posix_memalign(&p, 256, n) != 0)
    return api_error(cudaErrorMemoryAllocation, "pb_emu: the host has no memory for a " + std::to_string(n) + "-byte allocation");
  std::memset(p, 0xff, n);  // never-written device memory reads as NaN in every float type
  allocations()[reinterpret_cast<std::uintptr_t>(p)] = Allocation{n, true, g_current};
  counters::event::allocation_added(p, n);
  used += n;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  flush_everything();  // cudaFree synchronises the device
  auto& m = allocations();
  auto it = m.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == m.end() || !it->second.device)
    return api_error(cudaErrorInvalidValue, "pb_emu: cudaFree(" + ptr_str(p) +
                                                "): not the start of a device allocation (freed twice, or never allocated)");
  g_device_bytes[it->second.on] -= it->second.bytes;
  m.erase(it);
  counters::event::allocation_removed(p);
  std::free(p);
  return g_sticky;
}

cudaError_t cudaMallocHost(void** ptr, size_t n) { return cudaHostAlloc(ptr, n, 0); }

cudaError_t cudaHostAlloc(void** ptr, size_t n, unsigned int) {
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<std::size_t>(n, 1)) != 0)
    return api_error(cudaErrorMemoryAllocation, "pb_emu: no host memory for cudaHostAlloc");
  allocations()[reinterpret_cast<std::uintptr_t>(p)] = Allocation{n, false};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  flush_everything();
  auto& m = allocations();
  auto it = m.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == m.end() || it->second.device)
    return api_error(cudaErrorInvalidValue, "pb_emu: cudaFreeHost(" + ptr_str(p) + "): not pinned host memory");
  m.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  *free_b = memory_budget() - std::min(g_device_bytes[g_current], memory_budget());
  *total_b = target().memory_bytes;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy_2d(dst, n, src, n, n, 1, kind, nullptr, true, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  return copy_2d(dst, n, src, n, n, 1, kind, s, false, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, true, "cudaMemcpy2D");
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, false, "cudaMemcpy2DAsync");
}
cudaError_t cudaMemset(void* p, int v, size_t n) { return memset_on(p, v, n, nullptr, "cudaMemset"); }
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) { return memset_on(p, v, n, s, "cudaMemsetAsync"); }

// ---- streams and events ---------------------------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* out, unsigned int flags, int) {
  auto* s = new CUstream_st;
  s->device = g_current;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  streams().insert(s);
  stream_order().push_back(s);
  *out = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
  return cudaStreamCreateWithPriority(out, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t* out) { return cudaStreamCreateWithPriority(out, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s || s == &legacy_stream()) return invalid_stream(stream, "cudaStreamDestroy");
  flush(s, s->enqueued);  // its work completes even though nobody waits for it
  streams().erase(s);
  auto& v = stream_order();
  v.erase(std::remove(v.begin(), v.end(), s), v.end());
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "cudaStreamSynchronize");
  if (s->capturing) return refuse_during_capture(s, "cudaStreamSynchronize");
  flush(s, s->enqueued);
  return g_sticky;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  (*e)->device = g_current;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "cudaEventRecord");
  // CUDA: recording fails when the event and the stream belong to different devices
  // (waiting on an event of another device is fine).
  if (s != &legacy_stream() && s->device != e->device)
    return api_error(cudaErrorInvalidResourceHandle, "pb_emu: cudaEventRecord: the event belongs to device " +
                                                         std::to_string(e->device) + ", the stream to device " +
                                                         std::to_string(s->device));
  if (s->capturing) return refuse_during_capture(s, "cudaEventRecord (event nodes are not emulated)");
  if (cudaError_t err = enqueue(s, Op{"cudaEventRecord", [] { return cudaSuccess; }}); err != cudaSuccess) return err;
  e->stream = s;
  e->seq = s->enqueued;
  e->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e->recorded) return cudaSuccess;
  if (streams().count(e->stream) || e->stream == &legacy_stream()) flush(e->stream, e->seq);
  return g_sticky;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "cudaStreamWaitEvent");
  if (s->capturing) return refuse_during_capture(s, "cudaStreamWaitEvent (cross-stream capture is not emulated)");
  if (!e->recorded) return cudaSuccess;
  CUstream_st* from = e->stream;
  const std::uint64_t seq = e->seq;
  if (cudaError_t err = enqueue(s, Op{"cudaStreamWaitEvent", [] { return cudaSuccess; }}); err != cudaSuccess) return err;
  s->queue.back().deps.emplace_back(from, seq);
  return cudaSuccess;
}

// Events order work in the emulation; they carry no time, and asking for one is refused.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0;
  return api_error(cudaErrorNotSupported,
                   "pb_emu: cudaEventElapsedTime: the functional CUDA emulation has no time to report (it checks "
                   "results, never speed)");
}

// ---- graphs ---------------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "cudaStreamBeginCapture");
  if (s == &legacy_stream())
    return api_error(cudaErrorStreamCaptureUnsupported, "pb_emu: the legacy default stream cannot be captured");
  if (s->capturing) return api_error(cudaErrorIllegalState, "pb_emu: the stream is already being captured");
  s->capturing = true;
  s->capture_invalid = false;
  s->capture_mode = mode;
  s->captured.clear();
  s->capture_problem.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "cudaStreamEndCapture");
  if (!s->capturing) return api_error(cudaErrorIllegalState, "pb_emu: cudaStreamEndCapture on a stream not being captured");
  s->capturing = false;
  if (s->capture_invalid)
    return api_error(cudaErrorStreamCaptureInvalidated, "pb_emu: the capture was invalidated: " + s->capture_problem);
  auto* g = new CUgraph_st;
  g->ops = std::move(s->captured);
  s->captured.clear();
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  CUstream_st* s = resolve(stream);
  if (!s) return invalid_stream(stream, "cudaStreamIsCapturing");
  *status = !s->capturing ? cudaStreamCaptureStatusNone
                          : (s->capture_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return api_error(cudaErrorInvalidValue, "pb_emu: cudaGraphInstantiate of a null graph");
  auto* x = new CUgraphExec_st;
  x->ops = graph->ops;
  *exec = x;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}
cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t) { return g_sticky; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return api_error(cudaErrorInvalidValue, "pb_emu: cudaGraphLaunch of a null graph");
  for (const auto& op : exec->ops)
    if (cudaError_t e = enqueue(stream, op); e != cudaSuccess) return e;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

// ---- kernels --------------------------------------------------------------------------------

cudaError_t cudaFuncSetAttribute(const void* fn, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > target().smem_per_block_optin)
      return api_error(cudaErrorInvalidValue, "pb_emu: cudaFuncSetAttribute: " + std::to_string(value) +
                                                  " bytes of dynamic shared memory exceed the device's " +
                                                  std::to_string(target().smem_per_block_optin));
    set_max_dynamic_smem_attribute(fn, value);
  }
  return cudaSuccess;
}

// Occupancy as NVIDIA's calculator (cuda_occupancy.h) gives it for the kernel's real
// registers and static shared memory, taken from the nvcc build's ptxas report
// (resources.cpp); a kernel missing from that table (no nvcc build) is modelled
// at 64 registers per thread and no static shared memory.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* fn, int block, size_t smem, unsigned) {
  if (block <= 0 || block > 1024) return api_error(cudaErrorInvalidValue, "pb_emu: occupancy of an invalid block size");
  *n = occupancy_of(fn, block, smem).blocks_per_sm;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* fn, int block, size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, fn, block, smem, 0);
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* fn) {
  if (!invokers().count(fn) && kernel_info(fn).name.empty())
    return api_error(cudaErrorInvalidDeviceFunction, "pb_emu: cudaFuncGetAttributes: " + ptr_str(fn) + " is not a kernel");
  const KernelInfo& k = kernel_info(fn);
  std::memset(attr, 0, sizeof *attr);
  attr->numRegs = k.resources.known ? k.resources.registers : 64;
  attr->sharedSizeBytes = k.resources.known ? static_cast<std::size_t>(k.resources.static_smem) : 0;
  attr->localSizeBytes = k.resources.known ? static_cast<std::size_t>(k.resources.stack_frame) : 0;
  attr->maxThreadsPerBlock = 1024;
  attr->binaryVersion = attr->ptxVersion = target().cc_major * 10 + target().cc_minor;
  const int allowed = max_dynamic_smem_attribute(fn);
  attr->maxDynamicSharedSizeBytes = allowed >= 0 ? allowed : static_cast<int>(kStaticSmemLimit);
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* fn, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t stream) {
  auto it = invokers().find(fn);
  if (it == invokers().end())
    return api_error(cudaErrorInvalidDeviceFunction,
                     "pb_emu: cudaLaunchKernel: " + ptr_str(fn) +
                         " is not a kernel address cu2emu.py has seen (write it as reinterpret_cast<void*>(&kernel))");
  g_last = cudaSuccess;
  it->second(fn, GridLaunch{grid, block, smem, stream, "a kernel launched by address"}, args);
  return cudaPeekAtLastError();
}

}  // extern "C"

namespace pb_emu {
unsigned long long fake_globaltimer() {
  thread_local unsigned long long t = 0;
  return t += 1000;
}
}  // namespace pb_emu
