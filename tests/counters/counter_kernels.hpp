#pragma once
// Purpose-built kernels whose counters are known by construction, to prove each
// counter of the emulation's counting build (tests/counters/test_counter_basics.cpp)
// before the real kernels' expectations rely on it; and kernels with planted races.
// Compiled through cu2emu.py and the counting build's flags, like kernels/cuda.
#include <cuda_runtime.h>

#include <cstdint>

namespace pb_count_test {

// One thread per element, blocks of 256: out[i] = in[i].
void coalesced(const float* in, float* out, int n, cudaStream_t s);
// out[i] = in[i * stride]: each lane's 4 bytes in a sector of its own when stride >= 8.
void strided(const float* in, float* out, int n, int stride, cudaStream_t s);
// 16 bytes a lane, one vector load and store each: out[i] = in[i].
void vectors(const uint4* in, uint4* out, int n, cudaStream_t s);
// Each lane reads 4 consecutive floats as 4 scalar loads (16-byte stride between lanes).
void scalar_runs(const float* in, float* out, int n, cudaStream_t s);
// One warp transposes a 32 x 32 tile through shared memory, reading columns: 32 banks
// apart without padding (a 32-way conflict), distinct with a row of 33.
void transpose(const float* in, float* out, bool padded, cudaStream_t s);
// Odd lanes load and store, even lanes idle: 16 active lanes a request.
void divergent(const float* in, float* out, int n, cudaStream_t s);
// Every one of `blocks` blocks reads all n floats (a redundant re-read): out[block] = their sum.
void reread(const float* in, float* out, int n, int blocks, cudaStream_t s);
// 256 threads atomicAdd 1 to acc[thread % 8].
void atomics(float* acc, cudaStream_t s);
// One block of 128: 3 __syncthreads, 2 shuffles, 1 ballot, 1 __syncwarp per warp; out[thread].
void syncs(int* out, cudaStream_t s);
// Each thread loads `loads` independent floats (stride 256 between them), then shuffles: `loads` x 4
// bytes in flight at the shuffle. One block of 256; out[thread] = the sum.
void bursts(const float* in, float* out, int loads, cudaStream_t s);
// One warp: 4 8x8 matrices by ldmatrix.x4 from rows `row_bytes` apart (16: contiguous; 128:
// every row in the same 4 banks, 8-way; 144: conflict-free). out[lane*4 + i] = register i.
void ldmatrix_rows(const std::uint16_t* in, unsigned* out, int row_bytes, cudaStream_t s);
// One warp copies `tiles` tiles of 512 bytes through a two-stage cp.async pipeline.
void cp_async_tiles(const uint4* in, uint4* out, int tiles, cudaStream_t s);

// Planted races: each must fail its launch under the race check.
void race_missing_barrier(int* out, cudaStream_t s);        // threads read a neighbour's store, no __syncthreads
void race_missing_syncwarp(const std::uint16_t* in, unsigned* out, cudaStream_t s);  // stores, then ldmatrix
void race_cp_async_in_use(const uint4* in, uint4* out, cudaStream_t s);  // cp.async into a buffer lanes still read
// The same three patterns made correct: no race.
void no_race_barrier(int* out, cudaStream_t s);
void no_race_syncwarp(const std::uint16_t* in, unsigned* out, cudaStream_t s);
void no_race_cp_async(const uint4* in, uint4* out, cudaStream_t s);
// Lanes of one warp storing to one shared word with no __syncwarp: from different
// executions of the store (loop iterations), a race; in one execution (one warp-wide
// store instruction, as FlashInfer's decode stores a row's softmax state), none.
void race_same_word_other_iterations(int* out, cudaStream_t s);
void no_race_same_word_one_instruction(int* out, cudaStream_t s);

}  // namespace pb_count_test
