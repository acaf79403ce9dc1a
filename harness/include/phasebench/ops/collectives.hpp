#pragma once
// The collectives of tensor and expert parallelism (harness/src/ops/collectives.cpp),
// as NCCL runs them over the GPUs of a node: all_reduce, all_gather, reduce_scatter
// and all_to_all, one rank a GPU. A request's shape is {count, gpus}: count is the
// element count of nccl-tests' "size" (the larger buffer of one rank: all-reduce's
// buffer, all-gather's output, reduce-scatter's input, all-to-all's whole send
// buffer), in the request's dtype, so time, algorithm and bus bandwidth read as
// nccl-tests prints them.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "phasebench/op.hpp"

namespace phasebench {

inline constexpr const char* kAllReduce = "all_reduce";
inline constexpr const char* kAllGather = "all_gather";
inline constexpr const char* kReduceScatter = "reduce_scatter";
inline constexpr const char* kAllToAll = "all_to_all";

// Whether `kind` is one of the four.
bool is_collective(std::string_view kind);

// `count` elements (a multiple of `gpus` except for all_reduce) over `gpus` GPUs.
OpRequest collective_request(std::string_view kind, std::uint64_t count, std::uint64_t gpus, DType dtype,
                             Phase phase, std::uint64_t seed = 0x5eed);

// Of one rank of a {count, gpus} request: the elements of its send buffer and of its
// receive buffer (all_gather: count/n in, count out; reduce_scatter: count in, count/n out).
std::pair<std::uint64_t, std::uint64_t> collective_rank_elements(std::string_view kind, std::uint64_t count,
                                                                 std::uint64_t gpus);

// nccl-tests' bus bandwidth factor (busbw = algbw x factor): 2(n-1)/n for all_reduce,
// (n-1)/n for all_gather, reduce_scatter and all_to_all; 0 for n = 1 (nothing crosses a link).
double bus_factor(std::string_view kind, std::uint64_t gpus);

}  // namespace phasebench
