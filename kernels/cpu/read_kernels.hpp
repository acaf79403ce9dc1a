#pragma once
// The streaming-read kernels the CPU backend measures its read ceiling with: one
// XOR reduction (never the bottleneck: 1-cycle latency) in several shapes, as
// STREAM's and likwid-bench's load variants do, because no single shape is the
// fastest way to read every machine's memory (a VM's vCPU is limited by the L2
// misses it keeps in flight, which streams and software prefetch change).
#include <cstdint>
#include <string>
#include <vector>

namespace phasebench::cpu::read {

// One read kernel: `streams` sequential streams per thread (its share split in
// that many equal parts, read in lockstep), `unroll` 32-byte loads per stream
// per step, software prefetch `prefetch_bytes` ahead of each stream (0: none).
struct Kernel {
  int streams = 1, unroll = 4, prefetch_bytes = 0;
  std::uint64_t (*fn)(const std::uint64_t* p, std::uint64_t words) = nullptr;
  std::string name() const {
    return std::to_string(streams) + (streams == 1 ? " stream" : " streams") + " per thread, unroll " +
           std::to_string(unroll) + (prefetch_bytes ? ", prefetch " + std::to_string(prefetch_bytes) + " B ahead"
                                                     : ", no software prefetch");
  }
};

// Every variant measured (read_kernels.cpp, compiled for this machine's
// instruction set): 1, 2, 4 and 8 streams per thread, unroll 2 to 8, no prefetch
// or one 512 B / 2 KiB ahead. The first is the read the backend used before (one
// stream, four 32-byte loads a step, no prefetch).
const std::vector<Kernel>& kernels();

}  // namespace phasebench::cpu::read
