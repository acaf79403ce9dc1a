#pragma once
// The streaming-read kernels the CPU backend measures its read ceiling with: one
// XOR reduction (never the bottleneck: 1-cycle latency) in several shapes, as
// STREAM's and likwid-bench's load variants do, because no single shape is the
// fastest way to read every machine's memory (a VM's vCPU is limited by the L2
// misses it keeps in flight, which streams and software prefetch change; on a
// shared machine a thread that is descheduled holds up a read split into fixed
// halves, where the sweep's kernels hand out work dynamically).
#include <cstdint>
#include <string>
#include <vector>

namespace phasebench::cpu::read {

// One read kernel: `streams` sequential streams per piece of work (split in
// that many equal parts, read in lockstep), `unroll` 32-byte loads per stream
// per step, software prefetch `prefetch_bytes` ahead of each stream (0: none);
// the threads share the buffer in one contiguous share each (`block_bytes` 0) or
// in blocks of `block_bytes` handed out dynamically.
struct Kernel {
  int streams = 1, unroll = 4, prefetch_bytes = 0;
  std::uint64_t block_bytes = 0;
  std::uint64_t (*fn)(const std::uint64_t* p, std::uint64_t words) = nullptr;
  std::string name() const {
    return std::to_string(streams) + (streams == 1 ? " stream" : " streams") + " per " +
           (block_bytes ? "block" : "thread") + ", unroll " + std::to_string(unroll) +
           (prefetch_bytes ? ", prefetch " + std::to_string(prefetch_bytes) + " B ahead" : ", no software prefetch") +
           (block_bytes ? ", " + std::to_string(block_bytes >> 20) + " MiB blocks handed out dynamically"
                        : ", one share per thread");
  }
};

// Every variant measured (read_kernels.cpp, compiled for this machine's
// instruction set): 1, 2, 4 and 8 streams, unroll 2 to 8, no prefetch or one
// 512 B / 2 KiB ahead, each with one share per thread and with dynamic blocks.
// The first is the read the backend used before (one stream per thread, four
// 32-byte loads a step, no prefetch).
const std::vector<Kernel>& kernels();

// XOR of p[0..words) by all threads with `k` (the read the ceiling times).
std::uint64_t read_all(const Kernel& k, const std::uint64_t* p, std::uint64_t words);

}  // namespace phasebench::cpu::read
