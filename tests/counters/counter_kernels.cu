// Kernels with known counters, and planted races (counter_kernels.hpp). Plain
// CUDA, rewritten by cu2emu.py and built with the counting build's flags. The
// inline PTX is kernels/cuda/ptx.cuh's, as the real kernels use it.
#include "counter_kernels.hpp"

#include "cuda/ptx.cuh"

namespace pb_count_test {

using phasebench::cuda::cp_async_16;
using phasebench::cuda::cp_async_commit;
using phasebench::cuda::cp_async_wait;
using phasebench::cuda::ldmatrix_x4;
using phasebench::cuda::smem_addr;

namespace {

__global__ void coalesced_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

__global__ void strided_kernel(const float* in, float* out, int n, int stride) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[static_cast<long long>(i) * stride];
}

__global__ void vector_kernel(const uint4* in, uint4* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

__global__ void scalar_runs_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (4 * i + 3 < n) {
    const float a = in[4 * i], b = in[4 * i + 1], c = in[4 * i + 2], d = in[4 * i + 3];
    out[i] = a + b + c + d;
  }
}

template <int Row>
__global__ void transpose_kernel(const float* in, float* out) {
  __shared__ float tile[32][Row];
  const int lane = static_cast<int>(threadIdx.x);
  for (int r = 0; r < 32; ++r) tile[r][lane] = in[r * 32 + lane];
  __syncwarp();
  for (int r = 0; r < 32; ++r) out[r * 32 + lane] = tile[lane][r];
}

__global__ void divergent_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if ((i & 1) && i < n) out[i] = in[i];
}

__global__ void reread_kernel(const float* in, float* out, int n) {
  __shared__ float partial[256];
  float sum = 0.f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) sum += in[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int k = 0; k < static_cast<int>(blockDim.x); ++k) t += partial[k];
    out[blockIdx.x] = t;
  }
}

__global__ void atomics_kernel(float* acc) { atomicAdd(acc + threadIdx.x % 8, 1.0f); }

__global__ void syncs_kernel(int* out) {
  __shared__ int s[128];
  const int t = static_cast<int>(threadIdx.x);
  s[t] = t;
  __syncthreads();
  int v = s[127 - t];
  __syncthreads();
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_down_sync(0xffffffffu, v, 2);
  const unsigned b = __ballot_sync(0xffffffffu, v & 1);
  __syncwarp();
  __syncthreads();
  out[t] = v + static_cast<int>(b & 1u);
}

template <int Loads>
__global__ void burst_kernel(const float* in, float* out) {
  const int t = static_cast<int>(threadIdx.x);
  float v[Loads];
#pragma unroll
  for (int k = 0; k < Loads; ++k) v[k] = in[k * 256 + t];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < Loads; ++k) sum += v[k];
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  out[t] = sum;
}

template <int RowBytes>
__global__ void ldmatrix_rows_kernel(const std::uint16_t* in, unsigned* out) {
  // 32 rows (4 matrices x 8) of 16 bytes each, RowBytes apart.
  __shared__ __align__(16) unsigned char rows[32 * RowBytes];
  const int lane = static_cast<int>(threadIdx.x);
  *reinterpret_cast<uint4*>(rows + lane * RowBytes) = reinterpret_cast<const uint4*>(in)[lane];
  __syncwarp();
  unsigned r[4];
  ldmatrix_x4(r, smem_addr(rows + lane * RowBytes));
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

__global__ void cp_async_tiles_kernel(const uint4* in, uint4* out, int tiles) {
  __shared__ __align__(16) uint4 buf[2][32];
  const int lane = static_cast<int>(threadIdx.x);
  cp_async_16(smem_addr(&buf[0][lane]), in + lane, 16);
  cp_async_commit();
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) cp_async_16(smem_addr(&buf[(t + 1) & 1][lane]), in + (t + 1) * 32 + lane, 16);
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
    out[t * 32 + lane] = buf[t & 1][(lane + 1) % 32];  // a neighbour's copy: the warp's order matters
    __syncwarp();
  }
}

// ---- races ---------------------------------------------------------------------------

template <bool Barrier>
__global__ void neighbour_kernel(int* out) {
  __shared__ int s[128];
  const int t = static_cast<int>(threadIdx.x);
  s[t] = t * 3;
  if (Barrier) __syncthreads();
  out[t] = s[(t + 1) % 128];
}

template <bool Sync>
__global__ void stores_then_ldmatrix_kernel(const std::uint16_t* in, unsigned* out) {
  __shared__ __align__(16) uint4 rows[32];
  const int lane = static_cast<int>(threadIdx.x);
  rows[lane] = reinterpret_cast<const uint4*>(in)[lane];
  if (Sync) __syncwarp();
  unsigned r[4];
  ldmatrix_x4(r, smem_addr(&rows[lane]));
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

template <bool Sync>
__global__ void cp_async_in_use_kernel(const uint4* in, uint4* out) {
  __shared__ __align__(16) uint4 buf[32];
  const int lane = static_cast<int>(threadIdx.x);
  buf[lane] = in[lane];
  __syncwarp();
  out[lane] = buf[(lane + 1) % 32];  // lanes read their neighbours' entries...
  if (Sync) __syncwarp();
  cp_async_16(smem_addr(&buf[lane]), in + 32 + lane, 16);  // ...which the next tile overwrites
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
  out[32 + lane] = buf[(lane + 1) % 32];
}

// Lanes storing to one shared word with no barrier or __syncwarp between the stores.
// Race: in iteration i lane i stores to word 0 (the others to words of their own), so
// lane i's store to it is its (i+1)-th execution of the site, no other lane's: stores
// of different iterations, unordered. No race: every lane stores its row's value (lane
// / 4) to the row's word in one store instruction, then to word 8 + i in iteration i,
// each time the same execution of the site by every lane (one value lands).
template <bool Race>
__global__ void same_word_stores_kernel(int* out) {
  __shared__ int s[40];
  const int lane = static_cast<int>(threadIdx.x);
  if (Race) {
    for (int i = 0; i < 8; ++i) s[lane == i ? 0 : 8 + lane] = i;
  } else {
    s[lane / 4] = lane / 4 * 10;
    for (int i = 0; i < 4; ++i) s[8 + i] = i;
  }
  __syncwarp();
  out[lane] = s[lane % 12];
}

}  // namespace

void coalesced(const float* in, float* out, int n, cudaStream_t s) {
  coalesced_kernel<<<(n + 255) / 256, 256, 0, s>>>(in, out, n);
}
void strided(const float* in, float* out, int n, int stride, cudaStream_t s) {
  strided_kernel<<<(n + 255) / 256, 256, 0, s>>>(in, out, n, stride);
}
void vectors(const uint4* in, uint4* out, int n, cudaStream_t s) {
  vector_kernel<<<(n + 255) / 256, 256, 0, s>>>(in, out, n);
}
void scalar_runs(const float* in, float* out, int n, cudaStream_t s) {
  scalar_runs_kernel<<<(n / 4 + 255) / 256, 256, 0, s>>>(in, out, n);
}
void transpose(const float* in, float* out, bool padded, cudaStream_t s) {
  if (padded)
    transpose_kernel<33><<<1, 32, 0, s>>>(in, out);
  else
    transpose_kernel<32><<<1, 32, 0, s>>>(in, out);
}
void divergent(const float* in, float* out, int n, cudaStream_t s) {
  divergent_kernel<<<(n + 255) / 256, 256, 0, s>>>(in, out, n);
}
void reread(const float* in, float* out, int n, int blocks, cudaStream_t s) {
  reread_kernel<<<blocks, 256, 0, s>>>(in, out, n);
}
void atomics(float* acc, cudaStream_t s) { atomics_kernel<<<1, 256, 0, s>>>(acc); }
void syncs(int* out, cudaStream_t s) { syncs_kernel<<<1, 128, 0, s>>>(out); }
void bursts(const float* in, float* out, int loads, cudaStream_t s) {
  if (loads == 1)
    burst_kernel<1><<<1, 256, 0, s>>>(in, out);
  else if (loads == 4)
    burst_kernel<4><<<1, 256, 0, s>>>(in, out);
  else
    burst_kernel<8><<<1, 256, 0, s>>>(in, out);
}
void ldmatrix_rows(const std::uint16_t* in, unsigned* out, int row_bytes, cudaStream_t s) {
  if (row_bytes == 16)
    ldmatrix_rows_kernel<16><<<1, 32, 0, s>>>(in, out);
  else if (row_bytes == 128)
    ldmatrix_rows_kernel<128><<<1, 32, 0, s>>>(in, out);
  else
    ldmatrix_rows_kernel<144><<<1, 32, 0, s>>>(in, out);
}
void cp_async_tiles(const uint4* in, uint4* out, int tiles, cudaStream_t s) {
  cp_async_tiles_kernel<<<1, 32, 0, s>>>(in, out, tiles);
}
void race_missing_barrier(int* out, cudaStream_t s) { neighbour_kernel<false><<<1, 128, 0, s>>>(out); }
void no_race_barrier(int* out, cudaStream_t s) { neighbour_kernel<true><<<1, 128, 0, s>>>(out); }
void race_missing_syncwarp(const std::uint16_t* in, unsigned* out, cudaStream_t s) {
  stores_then_ldmatrix_kernel<false><<<1, 32, 0, s>>>(in, out);
}
void no_race_syncwarp(const std::uint16_t* in, unsigned* out, cudaStream_t s) {
  stores_then_ldmatrix_kernel<true><<<1, 32, 0, s>>>(in, out);
}
void race_cp_async_in_use(const uint4* in, uint4* out, cudaStream_t s) { cp_async_in_use_kernel<false><<<1, 32, 0, s>>>(in, out); }
void no_race_cp_async(const uint4* in, uint4* out, cudaStream_t s) { cp_async_in_use_kernel<true><<<1, 32, 0, s>>>(in, out); }
void race_same_word_other_iterations(int* out, cudaStream_t s) { same_word_stores_kernel<true><<<1, 32, 0, s>>>(out); }
void no_race_same_word_one_instruction(int* out, cudaStream_t s) { same_word_stores_kernel<false><<<1, 32, 0, s>>>(out); }

}  // namespace pb_count_test
