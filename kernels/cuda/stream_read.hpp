#pragma once
// A kernel that reads a buffer once with 16-byte loads and nothing else: the
// measured read-bandwidth ceiling, and the cold-cache flush (reading, not
// writing, so the timed op that follows never pays to write back dirty lines).
#include <cuda_runtime.h>

#include <cstddef>

namespace phasebench::cuda {

// Enqueue a read of `bytes` (a multiple of 16, `data` 16-byte aligned) from
// `data`. `sink` (one unsigned on the device) is written only if the data
// hashes to an impossible value, so the compiler must do every load.
void stream_read(const void* data, std::size_t bytes, unsigned* sink, int sm_count, cudaStream_t stream);

}  // namespace phasebench::cuda
