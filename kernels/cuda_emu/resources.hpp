// pb_emu: what the real build says about each kernel (registers, static shared
// memory, stack frame and spills per architecture, from ptxas at build time:
// ptxas_usage.py writes the table), looked up by the instantiation's demangled
// name, and the occupancy NVIDIA's calculator (cuda_occupancy.h) gives for it on
// the emulated target. Not seen by kernels.
#pragma once

#include <cstddef>
#include <string>

#include "counting.hpp"

namespace pb_emu {

struct KernelInfo {
  std::string name;               // demangled, "" when the address has no symbol
  counters::Resources resources;  // known = false when the nvcc build's table lacks it
};

// The kernel at `fn` (an emulated __global__ function), cached per address.
const KernelInfo& kernel_info(const void* fn);
// The architecture the emulated target's binaries are built for: sm_90 (h200, h100), sm_80 (a100).
std::string target_arch();
// Blocks of `block_threads` threads with `dynamic_smem` bytes that fit on one SM
// of the target: from the kernel's real registers and static shared memory
// when the table has them, else from 64 registers per thread and no static
// shared memory (from_resources = false says so).
counters::Occupancy occupancy_of(const void* fn, int block_threads, std::size_t dynamic_smem);
// Where the table came from ("ptxas of the nvcc build, N kernels", or why there is none).
std::string resource_table_source();
// A demangled function's name without namespaces, return type and parameters.
std::string short_function_name(std::string demangled);
// "file:line (function)" of a code address, from the binary's line tables (addr2line).
std::string describe_code_address(const void* pc);

}  // namespace pb_emu
