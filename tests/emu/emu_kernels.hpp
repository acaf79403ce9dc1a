#pragma once
// Small CUDA kernels that exercise the functional emulation itself (correct use
// of each intrinsic, and each misuse it must report), with host launchers.
// Compiled through cu2emu.py like kernels/cuda; used by test_emu_runtime.cpp.
#include <cuda_runtime.h>

#include <cstdint>

namespace pb_emu_test {

// out[lane] for every lane of one warp: mode 0 idx (src), 1 xor, 2 down, 3 up; `width` as CUDA's.
void shuffle(int mode, int src, int width, int* out, cudaStream_t s);
// ballot / any / all of (lane % 3 == 0) over `mask`; one warp; out[0..2].
void votes(unsigned mask, unsigned* out, cudaStream_t s);
// The same over a full mask after lanes 20..31 have returned.
void votes_after_returns(unsigned* out, cudaStream_t s);
// Legal partial-mask shuffles: 16 disjoint pairs at once (lane l with l ^ 16:
// out[l]), then overlapping masks in turn (lanes 1,2 with mask 0x6, then 0,1
// with 0x3: out[32 + lane] for lanes 0..2).
void partial_masks(int* out, cudaStream_t s);
// D (16x8 fp32, row-major) = A (16x16, row-major) B (16x8, row-major) via mma.sync
// m16n8k16, bf16 or fp16 bits in A and B.
void mma_16816(const std::uint16_t* A, const std::uint16_t* B, float* D, bool bf16, cudaStream_t s);
// A block of `threads` sums its thread ids through shared memory and two barriers; out[block] = sum.
void block_sum(int blocks, int threads, int* out, cudaStream_t s);
// out[i] = in[i] for i < n, one thread per element (grid of blocks of 128).
void copy(const int* in, int* out, int n, cudaStream_t s);
// Reads shared memory nobody wrote: out[0] = its bits.
void read_unwritten_shared(unsigned* out, cudaStream_t s);

// Each of these breaks a rule; the launch must fail with a message, never hang.
void divergent_barrier(cudaStream_t s);               // odd threads at one __syncthreads, even at another
void lane_returns_before_shuffle(cudaStream_t s);     // lane 5 returns; the rest shuffle with a full mask
void lane_skips_shuffle_at_barrier(cudaStream_t s);   // lane 7 waits at __syncthreads instead of shuffling
void mask_without_self(cudaStream_t s);               // lane 0 calls a shuffle whose mask excludes it
void misaligned_vector_load(const void* base, cudaStream_t s);  // a 16-byte load at base + 8
void too_much_static_shared(cudaStream_t s);          // 64 KiB of static __shared__
void dynamic_shared_without_attribute(std::size_t bytes, cudaStream_t s);  // > 48 KiB, no cudaFuncSetAttribute
void dynamic_shared_with_attribute(std::size_t bytes, cudaStream_t s);     // the same after setting it
void over_launch_bounds(cudaStream_t s);              // 256 threads into __launch_bounds__(128)
void launch_with(dim3 grid, dim3 block, std::size_t smem, cudaStream_t s);  // an empty kernel
void read_past_the_end(const int* p, int n, int* out, cudaStream_t s);     // out[0] = p[n]

}  // namespace pb_emu_test
