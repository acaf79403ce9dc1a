#pragma once
// What the cuDNN attention rows (prefill_attention_cudnn.cpp, decode_attention_cudnn.cpp)
// share through cuDNN's frontend: the process's cuDNN handle per device, building an
// SDPA graph once per point into its execution plan (in the request's plan, before
// anything is timed), running it on the context's stream, and what a point's JSON
// says of it (PreparedOp::notes). Built only where CMake finds cuDNN and its frontend.
#include <cudnn_frontend.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "cuda/attention_cudnn_layout.hpp"
#include "cuda/cuda_common.hpp"

namespace phasebench::cuda {

// A graph built into an execution plan: the plan cuDNN's heuristics chose (its
// name) and the workspace it asks for, which the request's plan declares as scratch.
struct CudnnSdpaGraph {
  std::shared_ptr<cudnn_frontend::graph::Graph> graph;
  cudnnHandle_t handle = nullptr;  // the process's handle on the plan's device
  std::string engine;  // the execution plan's name (engine and knobs)
  std::uint64_t workspace_bytes = 0;
};

// A new graph of 16-bit io (`t`) with fp32 intermediates and compute.
std::shared_ptr<cudnn_frontend::graph::Graph> new_cudnn_sdpa_graph(DType t);
// A tensor of `g` named `name` with `uid` (the variant pack's key), over `layout`;
// int32 when `int32` (the block table, sequence lengths), else the graph's io type.
std::shared_ptr<cudnn_frontend::graph::Tensor_attributes> cudnn_tensor(cudnn_frontend::graph::Graph& g,
                                                                       const char* name, std::int64_t uid,
                                                                       const CudnnTensorLayout& layout,
                                                                       bool int32 = false);

// Marks `t` (an SDPA output) as the graph's output `uid` over `layout`.
void cudnn_output(cudnn_frontend::graph::Tensor_attributes& t, std::int64_t uid, const CudnnTensorLayout& layout);

// Builds `g` (tensors and its SDPA node added, outputs marked) on ctx's device:
// validation, the operation graph, engine configurations from heuristics (mode A,
// then the fallback list), the support check, and the chosen execution plan. On
// failure: why, with cuDNN's message ("cuDNN refuses ...: <step>: <message>"),
// which the request's plan makes its reason not to run.
std::optional<std::string> build_cudnn_sdpa(std::shared_ptr<cudnn_frontend::graph::Graph> g, const Context& ctx,
                                            const std::string& what, CudnnSdpaGraph& out);

// Runs a built graph on ctx's stream with these device pointers by uid and its
// workspace; std::runtime_error with cuDNN's message when it fails.
void run_cudnn_sdpa(const CudnnSdpaGraph& g, std::unordered_map<std::int64_t, void*>& pack, void* workspace,
                    const Context& ctx);

// Records cuDNN's version (the loaded library's) and the frontend's in the device's
// details (library_versions: `cudnn`, `cudnn_frontend`); each row's registration calls it.
void register_cudnn_versions();

// A cuDNN row's PreparedOp::notes(): the library, cuDNN's version (the loaded
// library's, cudnnGetVersion, and the headers' it was built with), the frontend's
// and the execution plan chosen.
std::map<std::string, std::string> cudnn_sdpa_notes(const CudnnSdpaGraph& g);

}  // namespace phasebench::cuda
