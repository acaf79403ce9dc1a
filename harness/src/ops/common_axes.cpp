// The sweep axes several operations share (the prefill batch and prompt, the
// decode attention batch and context, the page size); each op's own axes are
// declared in its own file. Defaults: a few minutes per backend (docs/design.md).
#include <string>

#include "phasebench/error.hpp"
#include "phasebench/op.hpp"

PHASEBENCH_DECLARE_OPS(common_axes) {
  using phasebench::AxisDecl;
  registry.axis(AxisDecl{"batches", "--batches", "PHASEBENCH_BATCHES",
                         "prefill batch sizes (linear layers, prefill attention, whole layers), e.g. 1,4 or 1..16",
                         false, {1, 4}, {1}, {}});
  registry.axis(AxisDecl{"prompts", "--prompts", "PHASEBENCH_PROMPTS",
                         "prefill prompt lengths for the linear layers and whole layers", false,
                         {128, 512, 2048, 8192}, {32, 128}, {}});
  registry.axis(AxisDecl{"attention_batches", "--attention-batches", "PHASEBENCH_ATTENTION_BATCHES",
                         "decode attention (and decode whole-layer) batch sizes", false, {1, 8, 32, 128, 256}, {1, 8, 32},
                         {}});
  registry.axis(AxisDecl{"contexts", "--contexts", "PHASEBENCH_CONTEXTS",
                         "decode attention (and decode whole-layer) context lengths", false, {512, 2048, 8192, 32768},
                         {1024, 4096}, {}});
  registry.axis(AxisDecl{"page_size", "--page-size", "PHASEBENCH_PAGE_SIZE", "paged KV page size in tokens (multiple of 16)",
                         true, {16}, {16}, [](const std::vector<std::uint64_t>& v) {
                           for (auto p : v)
                             if (p == 0 || p % 16 != 0)
                               throw phasebench::InputError("--page-size must be a positive multiple of 16, got " +
                                                            std::to_string(p));
                         }});
}
