// pb_emu: phasebench's functional CUDA emulation, device side. Force-included
// (g++ -include) into every kernels/cuda source after cu2emu.py has rewritten
// it, so that the project's own CUDA kernels compile unchanged as host C++ and
// run on a CPU for correctness (never for timing).
//
// Every CUDA thread is a fiber; a block's fibers run on one OS thread and switch
// only at barriers and warp collectives, so a run is deterministic. Collectives
// are checked as the hardware requires them to be used (every lane of the mask
// arrives at the same call site with the same mask; no lane of the mask has
// exited; block barriers reached by every live thread at the same site), and a
// violation fails the launch with a message naming the kernel, block, thread and
// source line, never a hang. Inline PTX lives in pb_emu_ptx.hpp, WMMA in
// pb_emu_wmma.hpp; the runtime (memory, streams, graphs, cuBLAS) in runtime.cpp.
#pragma once

// CUDA's execution-space keywords mean nothing to a host compiler. __shared__
// must have been rewritten by cu2emu.py (into PB_EMU_SHARED / PB_EMU_DYNAMIC_SMEM):
// one that reaches the compiler is a rewrite failure, reported as such.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __shared__ static_assert(false, "pb_emu: a __shared__ declaration was not rewritten by cu2emu.py");
#define __constant__ static_assert(false, "pb_emu: __constant__ memory is not emulated yet");

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __launch_bounds__
#define __launch_bounds__(...)
// A kernel parameter's placement (constant bank, addressable): nothing for a host function.
#undef __grid_constant__
#define __grid_constant__

// The emulated device's architecture and compiler version, as a library's preprocessor
// tests read them: cu2emu.py renames __CUDA_ARCH__ and __CUDACC_VER_MAJOR/MINOR__ in the
// sources it rewrites (a host compiler defines neither) to these. sm_80 by default, the
// project's lowest target, so that a header's sm_80 paths are the ones emulated.
#ifndef PB_EMU_CUDA_ARCH
#define PB_EMU_CUDA_ARCH 800
#endif
#define PB_EMU_CUDACC_VER_MAJOR (CUDART_VERSION / 1000)
#define PB_EMU_CUDACC_VER_MINOR (CUDART_VERSION % 1000 / 10)

// The emulation's own code that the kernels' files include (shuffles, the launch
// closure): in the counting build it is not instrumented, since its accesses
// (other lanes' operands, the launch's arguments) are not the kernel's.
#if defined(PB_EMU_COUNT) && PB_EMU_COUNT
#define PB_EMU_INTERNAL __attribute__((no_sanitize("thread")))
#else
#define PB_EMU_INTERNAL
#endif

namespace pb_emu {

// ---- where a thread is ----------------------------------------------------------

struct ThreadState {
  uint3 tid;             // threadIdx
  unsigned linear = 0;   // x + y*Dx + z*Dx*Dy
  unsigned lane = 0, warp = 0;
};

// Plain globals (not thread_local: every access from a kernel goes through them):
// emulated work runs on one host thread at a time (run_grid serialises).
extern ThreadState* g_thread;  // the running fiber's thread; nullptr on the host
extern dim3 g_block_idx, g_block_dim, g_grid_dim;
extern unsigned char* g_dynamic_smem;  // this launch's dynamic shared memory
extern std::size_t g_dynamic_smem_bytes;
extern unsigned long long g_block_serial;  // changes with every block run

// A collective or barrier and where it is called (file and line). Lanes of a
// mask meet at the same intrinsic (`what`) with the same mask, from any call site,
// and lanes named in the mask that have returned are simply absent (shfl.sync,
// vote.sync, bar.warp.sync on sm_70+). `aligned` (PTX .aligned: mma.sync, WMMA):
// every lane of the warp executes the very same instruction, none has returned.
struct Site {
  const char* what;
  const char* file;
  int line;
  bool aligned = false;
};

// Fails the running launch: the message names the kernel, block, thread and
// `what`; the launch's stream then reports cudaErrorLaunchFailure with it.
[[noreturn]] void device_fail(const std::string& what);
// Outside a kernel (a device-only intrinsic called from host code): a usage error.
inline ThreadState& this_thread(const char* intrinsic) {
  if (!g_thread) device_fail(std::string(intrinsic) + " called outside a kernel");
  return *g_thread;
}

// The first statement of every kernel (inserted by cu2emu.py): names the kernel
// for messages and checks the launch against what the kernel declares (its
// __launch_bounds__ maximum, the dynamic shared memory its attributes allow).
void kernel_entry(const char* name, const void* fn, unsigned launch_bound_threads);

// ---- barriers and warp collectives -----------------------------------------------

// __syncthreads and its counting variants: every live thread of the block must
// arrive at the same site. `vote` is this thread's predicate; the result is the
// block-wide count of true predicates.
int block_barrier(const Site& site, int vote);

// Every lane of `mask` that has not returned arrives with a pointer to its
// `payload`; when the last one arrives, `complete(payloads, arrived, ctx)` runs
// once, in that lane's fiber (or in the fiber of the lane whose return completed
// the set), with the payload pointers of all lanes (indexed by lane; nullptr for
// lanes that did not arrive) and the mask of those that did; then every lane
// continues. The payloads live on the lanes' own stacks, valid while they wait.
using Completion = void (*)(void* const* payloads, unsigned mask, void* ctx);
void warp_collective_raw(unsigned mask, const Site& site, void* payload, Completion complete, void* ctx);

template <class F>
inline void warp_collective(unsigned mask, const Site& site, void* payload, F&& f) {
  using Fn = std::remove_reference_t<F>;
  warp_collective_raw(
      mask, site, payload, [](void* const* p, unsigned m, void* c) { (*static_cast<Fn*>(c))(p, m); }, &f);
}

inline unsigned lane_id() { return this_thread("a warp intrinsic").lane; }
std::string hex_mask(unsigned mask);

// Shuffles: mode 0 idx, 1 xor, 2 down, 3 up, with CUDA's width semantics.
template <class T>
PB_EMU_INTERNAL T shfl(unsigned mask, T v, int sel, int width, int mode, const Site& site) {
  // (CUDA's 16-bit float types have user-written copies but shuffle as their bits.)
  static_assert((std::is_trivially_copyable_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __half2> ||
                 std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __nv_bfloat162>) &&
                    sizeof(T) <= 8,
                "pb_emu: shuffle of a type wider than 8 bytes");
  if (width < 1 || width > 32 || (width & (width - 1)))
    device_fail(std::string(site.what) + ": width " + std::to_string(width) + " is not a power of two in 1..32");
  struct Payload {  // each lane's own operands, as PTX computes the source per thread
    T in, out;
    int sel, width;
  } mine{v, v, sel, width};
  warp_collective(mask, site, &mine, [&](void* const* ps, unsigned m) PB_EMU_INTERNAL {
    for (unsigned lane = 0; lane < 32; ++lane) {
      if (!(m >> lane & 1u)) continue;
      auto& p = *static_cast<Payload*>(ps[lane]);
      const int w = p.width, seg = static_cast<int>(lane) & ~(w - 1), me = static_cast<int>(lane);
      const int b = p.sel & 31;  // PTX takes b[4:0]
      int src;
      switch (mode) {
        case 0: src = seg + (b & (w - 1)); break;
        case 1: src = me ^ b; src = src >= seg + w ? me : src; break;
        case 2: src = me + b; src = src >= seg + w ? me : src; break;
        default: src = me - b; src = src < seg ? me : src; break;
      }
      if (!(m >> src & 1u))
        device_fail(std::string(site.what) + ": lane " + std::to_string(lane) + " reads lane " + std::to_string(src) +
                    ", which is not in the mask " + hex_mask(mask) +
                    " or has returned (the value read is undefined on the GPU)");
      p.out = static_cast<Payload*>(ps[src])->in;
    }
  });
  return mine.out;
}

// Votes: op 0 ballot, 1 any, 2 all.
unsigned vote(unsigned mask, bool pred, int op, const Site& site);
void syncwarp(unsigned mask, const Site& site);

// ---- shared memory ----------------------------------------------------------------

// Static __shared__ storage, one per declaration. Heap-allocated
// at its exact size so AddressSanitizer bounds every array; poisoned (0xff bytes:
// NaN in every float type) at the first use in each block; counted against the
// block's static shared-memory limit.
void* shared_storage(void*& storage, std::size_t bytes, std::size_t align, unsigned long long& serial, const char* name);

template <class T, std::size_t Align>
struct SharedSlot {
  void* storage = nullptr;
  unsigned long long serial = ~0ull;
  T& bind(const char* name) {
    if (serial == g_block_serial) return *static_cast<T*>(storage);
    return *static_cast<T*>(shared_storage(storage, sizeof(T), Align, serial, name));
  }
};

// extern __shared__ T name[] of the running launch (checked against its size when used).
void* dynamic_smem(std::size_t align, const char* name);

// ---- host-side launch ---------------------------------------------------------------

// One kernel launch, as kernel<<<grid, block, smem, stream>>>(args) is rewritten:
// LaunchConfig{grid, block, smem, stream}.launch("kernel", [](auto&&... a) { kernel(a...); })(args...).
// The arguments are copied now (as a launch copies them); the grid runs when the
// stream's work is executed (see runtime.cpp).
using GridBody = void (*)(void* closure);
struct GridLaunch {
  dim3 grid, block;
  std::size_t smem = 0;
  cudaStream_t stream = nullptr;
  const char* name = "";
};
// Validates the configuration (errors go to cudaGetLastError, as a real launch's)
// and enqueues `closure`, owned from now on (deleted with `destroy`; a captured
// graph shares it between replays, which never modify it).
void enqueue_grid(const GridLaunch& l, void* closure, GridBody run, void (*destroy)(void*));

struct LaunchConfig {
  dim3 grid, block;
  std::size_t smem = 0;
  cudaStream_t stream = nullptr;
  LaunchConfig(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), smem(s), stream(st) {}

  template <class F>
  auto launch(const char* name, F f) const {
    return [l = GridLaunch{grid, block, smem, stream, name}, f](auto&&... a) {
      using Closure = std::pair<F, std::tuple<std::decay_t<decltype(a)>...>>;
      auto* c = new Closure{f, std::tuple<std::decay_t<decltype(a)>...>(a...)};
      enqueue_grid(
          l, c, [](void* p) PB_EMU_INTERNAL {
            auto& cl = *static_cast<Closure*>(p);
            auto args = cl.second;  // every thread starts from its own copy of the arguments
            std::apply(cl.first, args);
          },
          [](void* p) { delete static_cast<Closure*>(p); });
    };
  }
};

// Kernels launched by address (cudaLaunchKernel, occupancy queries): cu2emu.py
// rewrites reinterpret_cast<void*>(&kernel<...>) into kernel_handle(&kernel<...>),
// which records how to call that kernel with a void** argument array.
using Invoker = void (*)(const void* fn, const GridLaunch& l, void** args);
void register_kernel(const void* fn, Invoker inv);

// The argument array's values, in order (args[i] points at parameter i's value).
template <class... P, class F, std::size_t... I>
void launch_from_args(const LaunchConfig& cfg, const char* name, F call, void** args, std::index_sequence<I...>) {
  cfg.launch(name, call)(*static_cast<std::decay_t<P>*>(args[I])...);
}

template <class... P>
void* kernel_handle(void (*fn)(P...)) {
  register_kernel(reinterpret_cast<const void*>(fn), [](const void* f, const GridLaunch& l, void** args) {
    auto k = reinterpret_cast<void (*)(P...)>(const_cast<void*>(f));
    auto call = [k](auto&&... a) { k(a...); };
    LaunchConfig cfg(l.grid, l.block, l.smem, l.stream);
    launch_from_args<P...>(cfg, l.name, call, args, std::index_sequence_for<P...>{});
  });
  return reinterpret_cast<void*>(fn);
}

// cudaLaunchKernelEx(config, kernel, args...) (cu2emu.py renames the call): the grid,
// block, dynamic shared memory and stream of `config`. Of its attributes,
// programmatic stream serialization (PDL) is accepted either way: the emulated stream
// runs each grid to completion before the next, which PDL's order allows.
template <class... P, class... A>
cudaError_t launch_kernel_ex(const cudaLaunchConfig_t* config, void (*kernel)(P...), A&&... args) {
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id != cudaLaunchAttributeProgrammaticStreamSerialization) return cudaErrorNotSupported;
  (void)cudaGetLastError();
  LaunchConfig(config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream)
      .launch("a kernel launched by cudaLaunchKernelEx", [kernel](auto&&... a) { kernel(a...); })(
          static_cast<P>(std::forward<A>(args))...);
  return cudaPeekAtLastError();
}

}  // namespace pb_emu

// The runtime's C++ overloads that take a kernel itself (cuda_runtime.h defines
// them only for nvcc).
template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// ---- what kernels see --------------------------------------------------------------
// (The runtime's own files define PB_EMU_RUNTIME: these names would clash with
// cudaDeviceProp's fields there.)

#ifndef PB_EMU_RUNTIME
#define threadIdx (::pb_emu::this_thread("threadIdx").tid)
// References, not macros: cudaLaunchConfig_t has fields named gridDim and blockDim.
inline const dim3& blockIdx = ::pb_emu::g_block_idx;
inline const dim3& blockDim = ::pb_emu::g_block_dim;
inline const dim3& gridDim = ::pb_emu::g_grid_dim;
#define warpSize 32
#endif

// Written by cu2emu.py.
#define PB_EMU_KERNEL_ENTRY(name, fn, bound) ::pb_emu::kernel_entry(name, reinterpret_cast<const void*>(fn), bound)
#define PB_EMU_SHARED(type, name, dims, align)                                      \
  static ::pb_emu::SharedSlot<type dims, align> pb_emu_slot_##name;                \
  auto& name = pb_emu_slot_##name.bind(#name)
// (An array of unknown bound, as the declaration is: reinterpret_cast<S&>(name) must name
// the shared memory itself, not a pointer variable; FlashInfer's prefill does that.)
#define PB_EMU_DYNAMIC_SMEM(type, name, align) \
  type(&name)[] = *static_cast<type(*)[]>(::pb_emu::dynamic_smem(align, #name))

#define PB_EMU_SITE(what) \
  ::pb_emu::Site { what, file, line }

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::pb_emu::block_barrier(PB_EMU_SITE("__syncthreads"), 0);
}
inline int __syncthreads_count(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::pb_emu::block_barrier(PB_EMU_SITE("__syncthreads_count"), p != 0);
}
inline int __syncthreads_and(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  // Counts the false predicates: threads that have returned take no part.
  return ::pb_emu::block_barrier(PB_EMU_SITE("__syncthreads_and"), p == 0) == 0;
}
inline int __syncthreads_or(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::pb_emu::block_barrier(PB_EMU_SITE("__syncthreads_or"), p != 0) > 0;
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::pb_emu::syncwarp(mask, PB_EMU_SITE("__syncwarp"));
}
template <class T>
inline T __shfl_sync(unsigned m, T v, int src, int w = 32, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::pb_emu::shfl(m, v, src, w, 0, PB_EMU_SITE("__shfl_sync"));
}
template <class T>
inline T __shfl_xor_sync(unsigned m, T v, int lane_mask, int w = 32, const char* file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
  return ::pb_emu::shfl(m, v, lane_mask, w, 1, PB_EMU_SITE("__shfl_xor_sync"));
}
template <class T>
inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
  return ::pb_emu::shfl(m, v, static_cast<int>(d), w, 2, PB_EMU_SITE("__shfl_down_sync"));
}
template <class T>
inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  return ::pb_emu::shfl(m, v, static_cast<int>(d), w, 3, PB_EMU_SITE("__shfl_up_sync"));
}
inline unsigned __ballot_sync(unsigned m, int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::pb_emu::vote(m, p != 0, 0, PB_EMU_SITE("__ballot_sync"));
}
inline int __any_sync(unsigned m, int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(::pb_emu::vote(m, p != 0, 1, PB_EMU_SITE("__any_sync")));
}
inline int __all_sync(unsigned m, int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(::pb_emu::vote(m, p != 0, 2, PB_EMU_SITE("__all_sync")));
}

// The counting build (PB_EMU_COUNT, counting.hpp) instruments the kernels with
// GCC's ThreadSanitizer hooks; accesses the emulation makes in its own helpers
// are reported by the helpers instead, which are then real calls (so that the
// return address names the instruction) and not instrumented themselves.
namespace pb_emu {
void check_access(const void* p, std::size_t align, const char* what);
// kind: 0 load, 1 store, 2 atomic (counting.hpp's event::Kind gld, gst, gatom).
void counted_access(const void* p, std::size_t bytes, int kind, const void* site);
}
#if defined(PB_EMU_COUNT) && PB_EMU_COUNT
#define PB_EMU_HELPER __attribute__((noinline, no_sanitize("thread")))
#define PB_EMU_COUNT_ACCESS(p, n, kind) ::pb_emu::counted_access(p, n, kind, __builtin_return_address(0))
#else
#define PB_EMU_HELPER
#define PB_EMU_COUNT_ACCESS(p, n, kind) ((void)0)
#endif

// Blocks run one after another and a thread runs until its next barrier or
// collective, so an atomic is a plain read-modify-write; the address checks are
// the hardware's (natural alignment).
#define PB_EMU_ATOMIC(name, expr)                                  \
  template <class T, class U>                                      \
  PB_EMU_HELPER inline T name(T* p, U v_in) {                      \
    ::pb_emu::check_access(p, sizeof(T), #name);                   \
    PB_EMU_COUNT_ACCESS(p, sizeof(T), 2);                          \
    const T v = static_cast<T>(v_in);                              \
    const T old = *p;                                              \
    *p = (expr);                                                   \
    return old;                                                    \
  }
PB_EMU_ATOMIC(atomicAdd, old + v)
PB_EMU_ATOMIC(atomicSub, old - v)
PB_EMU_ATOMIC(atomicExch, v)
PB_EMU_ATOMIC(atomicMin, v < old ? v : old)
PB_EMU_ATOMIC(atomicMax, v > old ? v : old)
PB_EMU_ATOMIC(atomicAnd, old & v)
PB_EMU_ATOMIC(atomicOr, old | v)
PB_EMU_ATOMIC(atomicXor, old ^ v)
#undef PB_EMU_ATOMIC
template <class T>
PB_EMU_HELPER inline T atomicCAS(T* p, T compare, T val) {
  ::pb_emu::check_access(p, sizeof(T), "atomicCAS");
  PB_EMU_COUNT_ACCESS(p, sizeof(T), 2);
  const T old = *p;
  if (old == compare) *p = val;
  return old;
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

// Cache-hinted loads and stores: plain accesses, with the alignment check the hardware makes.
#define PB_EMU_LOAD(name)                              \
  template <class T>                                   \
  PB_EMU_HELPER inline T name(const T* p) {            \
    ::pb_emu::check_access(p, alignof(T), #name);      \
    PB_EMU_COUNT_ACCESS(p, sizeof(T), 0);              \
    return *p;                                         \
  }
PB_EMU_LOAD(__ldg)
PB_EMU_LOAD(__ldca)
PB_EMU_LOAD(__ldcg)
PB_EMU_LOAD(__ldcs)
PB_EMU_LOAD(__ldlu)
PB_EMU_LOAD(__ldcv)
#undef PB_EMU_LOAD
#define PB_EMU_STORE(name)                             \
  template <class T>                                   \
  PB_EMU_HELPER inline void name(T* p, T v) {          \
    ::pb_emu::check_access(p, alignof(T), #name);      \
    PB_EMU_COUNT_ACCESS(p, sizeof(T), 1);              \
    *p = v;                                            \
  }
PB_EMU_STORE(__stwb)
PB_EMU_STORE(__stcg)
PB_EMU_STORE(__stcs)
PB_EMU_STORE(__stwt)
#undef PB_EMU_STORE

// Device math and bit intrinsics the host headers leave out.
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp2f(float x) { return std::exp2(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>(static_cast<unsigned long long>(a) * b >> 32);
}
// prmt.b32 (default mode): byte i of the result is byte s[4i+2:4i] of {y, x} (x the low
// four bytes), replicated from its sign bit when s[4i+3] is set.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = static_cast<unsigned long long>(y) << 32 | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned sel = s >> (4 * i) & 0xfu;
    unsigned b = static_cast<unsigned>(v >> (8 * (sel & 7u))) & 0xffu;
    if (sel & 8u) b = (b & 0x80u) ? 0xffu : 0u;
    r |= b << (8 * i);
  }
  return r;
}
// brkpt: the GPU stops in the debugger (a trap without one); here the launch fails.
inline void __brkpt() { ::pb_emu::device_fail("brkpt (__brkpt) reached"); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
// Address-space conversion: the block's shared window (scheduler.cpp) gives each
// shared byte a small .shared address, as the GPU does, which the inline PTX that
// takes a .shared operand ("r" or "l") translates back. A pointer that is not in
// the block's shared memory fails the launch.
namespace pb_emu {
std::size_t shared_window_address(const void* p);
}
inline std::size_t __cvta_generic_to_shared(const void* p) { return ::pb_emu::shared_window_address(p); }
using std::max;
using std::min;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
// CUDA's mixed-sign overloads (math_functions.hpp): the comparison is unsigned.
inline unsigned min(int a, unsigned b) { return min(static_cast<unsigned>(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, static_cast<unsigned>(b)); }
inline unsigned max(int a, unsigned b) { return max(static_cast<unsigned>(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, static_cast<unsigned>(b)); }
inline unsigned long long min(long long a, unsigned long long b) { return std::min(static_cast<unsigned long long>(a), b); }
inline unsigned long long min(unsigned long long a, long long b) { return std::min(a, static_cast<unsigned long long>(b)); }
inline unsigned long long max(long long a, unsigned long long b) { return std::max(static_cast<unsigned long long>(a), b); }
inline unsigned long long max(unsigned long long a, long long b) { return std::max(a, static_cast<unsigned long long>(b)); }

// cooperative_groups (<cooperative_groups.h> declares it for nvcc only): the block
// group, whose sync() is __syncthreads at the caller's site. A grid-wide sync needs a
// cooperative launch, which the emulation does not make: it fails the launch.
namespace cooperative_groups {
struct thread_block {
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { ::__syncthreads(file, line); }
  dim3 group_index() const { return ::pb_emu::g_block_idx; }
  dim3 thread_index() const { return ::pb_emu::this_thread("thread_block::thread_index").tid; }
  dim3 group_dim() const { return ::pb_emu::g_block_dim; }
  unsigned size() const { return ::pb_emu::g_block_dim.x * ::pb_emu::g_block_dim.y * ::pb_emu::g_block_dim.z; }
  unsigned thread_rank() const { return ::pb_emu::this_thread("thread_block::thread_rank").linear; }
};
inline thread_block this_thread_block() { return {}; }
struct grid_group {
  void sync() const { ::pb_emu::device_fail("cooperative_groups::grid_group::sync: no cooperative launch in the emulation"); }
};
inline grid_group this_grid() { return {}; }
}  // namespace cooperative_groups

#include "pb_emu_ptx.hpp"
#include "pb_emu_wmma.hpp"
