// The sweep axes several groups declare alike (phasebench/ops/shared_axes.hpp):
// the prefill batch and prompt, the decode attention batch and context, the page
// size, the GPU count; and the attention groups' models. Defaults: a few minutes per backend
// (docs/design.md).
#include "phasebench/ops/shared_axes.hpp"

#include "phasebench/error.hpp"

namespace phasebench {

namespace {

AxisDecl sizes(std::string name, std::string help, std::vector<std::uint64_t> gpu, std::vector<std::uint64_t> cpu,
               std::string alias) {
  AxisDecl a;
  a.name = std::move(name);
  a.help = std::move(help);
  a.gpu_default = std::move(gpu);
  a.cpu_default = std::move(cpu);
  a.alias = std::move(alias);
  return a;
}

}  // namespace

AxisDecl prefill_batch_axis(std::string name, std::string help) {
  return sizes(std::move(name), std::move(help), {1, 4}, {1}, "--batches");
}

AxisDecl prompt_axis(std::string name, std::string help) {
  return sizes(std::move(name), std::move(help), {128, 512, 2048, 8192}, {32, 128}, "--prompts");
}

AxisDecl attention_batch_axis(std::string name, std::string help) {
  return sizes(std::move(name), std::move(help), {1, 8, 32, 128, 256}, {1, 8, 32}, "--attention-batches");
}

AxisDecl context_axis(std::string name, std::string help) {
  return sizes(std::move(name), std::move(help), {512, 2048, 8192, 32768}, {1024, 4096}, "--contexts");
}

AxisDecl page_size_axis() {
  auto a = sizes("page_size", "paged KV page size in tokens (a multiple of 16)", {16}, {16}, "--page-size");
  a.single = true;
  a.check = [](const std::vector<std::uint64_t>& v, const std::string& what) {
    for (auto p : v)
      if (p == 0 || p % 16 != 0) throw InputError(what + " must be a positive multiple of 16, got " + std::to_string(p));
  };
  return a;
}

AxisDecl gpus_axis(std::string help, std::vector<std::uint64_t> gpu_default, std::vector<std::uint64_t> cpu_default) {
  auto a = sizes("gpus", std::move(help), std::move(gpu_default), std::move(cpu_default), "");
  a.check = [](const std::vector<std::uint64_t>& v, const std::string& what) {
    for (auto x : v)
      if (x < 1 || x > 72) throw InputError(what + ": a GPU count from 1 to 72 (one rank a GPU), not " + std::to_string(x));
  };
  return a;
}

bool grouped_query_attention(const ModelConfig& m) { return !m.uses_mla(); }

std::vector<std::string> attention_gpu_models() { return {"llama-3.1-8b", "llama-3.1-70b"}; }

}  // namespace phasebench
