#pragma once
// NCCL beside the CUDA ops that call it (collectives.cpp, layer_tp.cpp): the error
// check, the version as text, and our dtypes as NCCL's. Host code; include only
// where NCCL is built (nccl.h).
#include <nccl.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/rank_context.hpp"
#include "phasebench/dtype.hpp"
#include "phasebench/processes.hpp"

#define PB_NCCL_CHECK(call)                                                                                        \
  do {                                                                                                             \
    const ncclResult_t pb_nccl_result = (call);                                                                    \
    if (pb_nccl_result != ncclSuccess)                                                                             \
      throw std::runtime_error(std::string("NCCL: ") + #call + ": " + ncclGetErrorString(pb_nccl_result) + " (" + \
                               ncclGetLastError(nullptr) + ")");                                                   \
  } while (0)

namespace phasebench::cuda {

inline std::optional<ncclDataType_t> nccl_type(DType t) {
  switch (t) {
    case DType::bf16: return ncclBfloat16;
    case DType::fp16: return ncclFloat16;
    case DType::fp32: return ncclFloat32;
    default: return std::nullopt;
  }
}

// "2.28.9"; "unknown" where NCCL does not say.
inline std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL_VERSION's encoding: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10, patch = v % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// This process's rank of a communicator over the run's processes (mpirun: one
// rank a process), on the current device: every rank first says whether it is
// ready (`failed`: why not), and all throw the first rank's reason if one is not,
// so none waits in NCCL's init; rank 0's id (or its failure) goes to all.
inline ncclComm_t join_processes(int nranks, const std::string& failed) {
  Processes& procs = processes();
  const std::string first = procs.first_of(failed.empty() ? std::string() : "rank " + std::to_string(procs.rank()) + ": " + failed);
  if (!first.empty()) throw std::runtime_error(first);
  struct {
    int ok;
    ncclUniqueId id;
  } boot{};
  if (procs.rank() == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
  procs.broadcast(&boot, sizeof boot, 0);
  if (!boot.ok) throw std::runtime_error("NCCL: ncclGetUniqueId failed on rank 0");
  ncclComm_t comm = nullptr;
  PB_NCCL_CHECK(ncclCommInitRank(&comm, nranks, boot.id, procs.rank()));
  return comm;
}

// The communicators of this process's ranks (`mine`, local_ranks): one process,
// ncclCommInitAll over their devices; under mpirun, join_processes for its one rank
// on its device. `failed`: why this process is not ready, thrown (under mpirun on
// every rank, after all heard it) instead of an init.
inline std::vector<ncclComm_t> communicators(int gpus, const LocalRanks& mine, const std::string& failed) {
  std::vector<ncclComm_t> comms(mine.ranks.size());
  if (processes().size() > 1) {
    DeviceScope on(mine.devices.front());
    comms.front() = join_processes(gpus, failed);
    return comms;
  }
  if (!failed.empty()) throw std::runtime_error(failed);
  PB_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), mine.devices.data()));
  return comms;
}

// An NCCL op's impl_detail notes: NCCL's version and its ranks' devices ("0,1,2,3").
inline std::map<std::string, std::string> nccl_notes(const std::vector<int>& devices) {
  std::string devs;
  for (int d : devices) {
    if (!devs.empty()) devs += ',';
    devs += std::to_string(d);
  }
  return {{"nccl", nccl_version()}, {"devices", devs}};
}

}  // namespace phasebench::cuda
