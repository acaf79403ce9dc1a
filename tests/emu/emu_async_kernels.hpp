#pragma once
// Kernels that exercise the emulation of ldmatrix and cp.async (kernels/cuda_emu/
// pb_emu_ptx.hpp, ptx.cpp), with host launchers; used by test_emu_ldmatrix_cp_async.cpp.
#include <cuda_runtime.h>

#include <cstdint>

namespace pb_emu_test {

// One warp: a 16x16 tile of 16-bit elements (row-major, `tile`) is put in shared
// memory; matrix i of ldmatrix.m8n8.x{num}{.trans} is its 8x8 block at rows
// (i % 2) * 8, columns (i / 2) * 8, each lane giving the address of the row it
// names (lane 8i + j: row j of matrix i). out[lane * 4 + i] = register i of the
// lane; registers beyond `num` keep 0xdeadbeef. num: 1, 2 or 4.
void ldmatrix(const std::uint16_t* tile, int num, bool trans, unsigned* out, cudaStream_t s);
// ldmatrix.x4 whose lane 9 gives a row address 8 bytes past its row (misaligned).
void ldmatrix_misaligned(cudaStream_t s);
// ldmatrix.x4 given a generic pointer (not __cvta_generic_to_shared of it) as its address.
void ldmatrix_generic_address(cudaStream_t s);

// One warp, 16-byte cp.async copies of src (3 x 32 uint4) into shared memory
// prefilled with 0xa5 bytes: copy 0 (src[lane]) committed as group 1, copy 1
// (src[32 + lane], src-size 5) as group 2, copy 2 (src[64 + lane]) left uncommitted.
// out[k * 32 + lane], uint4 each, snapshots of the destinations:
//   k = 0: copy 0 after wait_group 1;   k = 1: copy 1 after wait_group 1;
//   k = 2: copy 1 after wait_group 0;   k = 3: copy 2 after wait_group 0;
//   k = 4: copy 2 after wait_all.
void cp_async_groups(const uint4* src, uint4* out, cudaStream_t s);
// Each breaks a rule of cp.async; the launch must fail with a message.
void cp_async_misaligned_dst(const uint4* src, cudaStream_t s);   // destination 8 bytes into a row
void cp_async_misaligned_src(const uint4* src, cudaStream_t s);   // source 8 bytes into an element
void cp_async_src_size_too_large(const uint4* src, cudaStream_t s);  // src-size 17 > cp-size 16
void cp_async_global_dst(const uint4* src, uint4* dst, cudaStream_t s);  // a global pointer as the destination
// A cp.async whose source runs past the end of its allocation (src has 64 elements;
// lane 31 reads the 65th). The emulation's own copy, which AddressSanitizer cannot
// see, is checked against the device allocations.
void cp_async_past_the_end(const uint4* src, cudaStream_t s);

}  // namespace pb_emu_test
