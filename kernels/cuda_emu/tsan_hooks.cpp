// pb_emu counting build: the hooks GCC's ThreadSanitizer instrumentation calls
// (-fsanitize=thread at compile time only; no TSan runtime is linked). Every load
// and store of the instrumented kernel sources arrives here with its address,
// size and, through the return address, the instruction that made it; counting.cpp
// classifies it (device memory, the block's shared memory, or neither) and counts
// it. Host code in the same files also calls these; outside a kernel they return
// at once. Atomics and vptr hooks of instrumented host code do what the plain
// operations would.
#include <cstddef>
#include <cstdint>

#define PB_EMU_RUNTIME
#include "counting.hpp"
#include "pb_emu.hpp"
#include "runtime_internal.hpp"

namespace {
using pb_emu::counters::event::Kind;
inline void hook(void* p, std::size_t n, Kind k, void* pc) {
  if (!pb_emu::g_thread) return;
  // The running thread's locals, the program's own data (blockIdx and the like)
  // and the thread's own description (threadIdx) are most accesses, and never
  // device or shared memory: not counted.
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if ((a >= pb_emu::g_fiber_stack_lo && a < pb_emu::g_fiber_stack_hi) ||
      (a >= pb_emu::g_program_lo && a < pb_emu::g_program_hi) ||
      a - reinterpret_cast<std::uintptr_t>(pb_emu::g_thread) < sizeof(pb_emu::ThreadState))
    return;
  pb_emu::counters::event::access(p, n, k, reinterpret_cast<std::uintptr_t>(pc));
}
}  // namespace

#define PB_EMU_HOOK(name, n, kind) \
  extern "C" __attribute__((noinline)) void name(void* p) { hook(p, n, kind, __builtin_return_address(0)); }
#define PB_EMU_HOOKS(prefix, kind)         \
  PB_EMU_HOOK(prefix##1, 1, kind)          \
  PB_EMU_HOOK(prefix##2, 2, kind)          \
  PB_EMU_HOOK(prefix##4, 4, kind)          \
  PB_EMU_HOOK(prefix##8, 8, kind)          \
  PB_EMU_HOOK(prefix##16, 16, kind)
PB_EMU_HOOKS(__tsan_read, Kind::gld)
PB_EMU_HOOKS(__tsan_write, Kind::gst)
PB_EMU_HOOKS(__tsan_volatile_read, Kind::gld)
PB_EMU_HOOKS(__tsan_volatile_write, Kind::gst)
PB_EMU_HOOK(__tsan_unaligned_read2, 2, Kind::gld)
PB_EMU_HOOK(__tsan_unaligned_read4, 4, Kind::gld)
PB_EMU_HOOK(__tsan_unaligned_read8, 8, Kind::gld)
PB_EMU_HOOK(__tsan_unaligned_read16, 16, Kind::gld)
PB_EMU_HOOK(__tsan_unaligned_write2, 2, Kind::gst)
PB_EMU_HOOK(__tsan_unaligned_write4, 4, Kind::gst)
PB_EMU_HOOK(__tsan_unaligned_write8, 8, Kind::gst)
PB_EMU_HOOK(__tsan_unaligned_write16, 16, Kind::gst)
#undef PB_EMU_HOOKS
#undef PB_EMU_HOOK

extern "C" {
__attribute__((noinline)) void __tsan_read_range(void* p, unsigned long n) {
  hook(p, n, Kind::gld, __builtin_return_address(0));
}
__attribute__((noinline)) void __tsan_write_range(void* p, unsigned long n) {
  hook(p, n, Kind::gst, __builtin_return_address(0));
}
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_read(void**) {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}

// The atomics of instrumented host code (shared_ptr's counts, statics), as sequentially
// consistent atomics: stronger than asked, never weaker.
#define PB_EMU_ATOMICS(bits, T)                                                                                    \
  extern "C" {                                                                                                     \
  T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }          \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }         \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                                    \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                                \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                          \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
  }                                                                                                                \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                            \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
  }                                                                                                                \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                                \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                              \
    return c;                                                                                                      \
  }                                                                                                                \
  }
PB_EMU_ATOMICS(8, std::int8_t)
PB_EMU_ATOMICS(16, std::int16_t)
PB_EMU_ATOMICS(32, std::int32_t)
PB_EMU_ATOMICS(64, std::int64_t)
#undef PB_EMU_ATOMICS
