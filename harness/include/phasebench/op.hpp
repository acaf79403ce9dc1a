#pragma once
// Benchmark operations, each declared once (docs/design.md, "Operations"): its
// kind, the named dimensions of its shape, its cost (FLOPs and minimum bytes by
// kind, from workload.hpp), the memory a backend allocates for it, and the sweep
// group that makes its points (axes, names and args built together). The sweep,
// the fixture, the results JSON, the summary and the tests all read these
// declarations; backends implement operations by kind (kernels/backend.hpp).
//
// An operation's declaration is a file harness/src/ops/<name>.cpp whose
// PHASEBENCH_DECLARE_OPS(<name>) registers it; CMake finds these files, so
// adding one touches no other file of the harness.
#include <algorithm>
#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "phasebench/dtype.hpp"
#include "phasebench/model.hpp"
#include "phasebench/report.hpp"
#include "phasebench/shape.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

// Which implementation of an operation, side by side in a sweep: our own kernel,
// the vendor BLAS (OpenBLAS on the CPU, cuBLAS/cuBLASLt on CUDA), or the attention
// libraries engines run (FlashInfer's templates, cuDNN's SDPA through its frontend),
// or NCCL (the collectives, which only NCCL implements). The names are the results' `impl`.
enum class Impl { own, blas, flashinfer, cudnn, nccl };
inline constexpr Impl kAllImpls[] = {Impl::own, Impl::blas, Impl::flashinfer, Impl::cudnn, Impl::nccl};
std::string_view to_string(Impl i);
// The Impl named `name` ("own", "blas", "flashinfer", "cudnn", "nccl"), or nullopt.
std::optional<Impl> impl_named(std::string_view name);

// An operation's own options, typed (page size, splits, routing, ...): each
// operation declares one struct in its header (DecodeAttentionOptions in
// phasebench/ops/decode_attention.hpp, ...), its request builder stores one, and its
// cost, footprint and kernels read it with as<T>(). The harness core and the
// backends' shared code never name one, so a new operation's options edit no shared
// list. (A kernel's own parameter block is its Params, kernels/cuda/<op>.cuh.)
// Empty: every field at its default.
class OpOptions {
 public:
  OpOptions() = default;
  template <class T>
  explicit OpOptions(T v) : held_(std::make_shared<std::any>(std::move(v))) {}
  // The options as T (T's defaults when none are set); std::logic_error when the
  // request holds another operation's (a declaration bug).
  template <class T>
  const T& as() const {
    if (!held_) {
      static const T defaults{};
      return defaults;
    }
    if (const T* p = std::any_cast<T>(held_.get())) return *p;
    throw std::logic_error(std::string("a request's options are not ") + typeid(T).name());
  }
  // For builders: the options as T to fill in (set to T's defaults when none are
  // set). Copies of a request share their options until one of them is edited.
  template <class T>
  T& edit() {
    if (!held_)
      held_ = std::make_shared<std::any>(T{});
    else if (held_.use_count() > 1)
      held_ = std::make_shared<std::any>(*held_);
    if (T* p = std::any_cast<T>(held_.get())) return *p;
    throw std::logic_error(std::string("a request's options are not ") + typeid(T).name());
  }
  bool empty() const { return !held_; }
  // The same options: none on both, or the options of one request that both are
  // unedited copies of. Two requests built apart with equal values are not the
  // same here (their types need no comparison): what asks (the CUDA backend's
  // plan, kept from cannot_run for the prepare of the same request) plans again.
  bool same(const OpOptions& o) const { return held_ == o.held_; }

 private:
  std::shared_ptr<std::any> held_;
};

// What to prepare: the operation, its shape and element type. Declared as data,
// like an nvbench state; the sweep groups make these.
struct OpRequest {
  std::string kind = "linear";  // a declared operation (OpRegistry::op)
  Phase phase = Phase::decode;  // the step it belongs to
  DType dtype = DType::bf16;    // weights + activations (linear); KV cache + activations (attention, append)
  Impl impl = Impl::own;
  Shape shape;   // the declared dimensions (the results' "shape")
  OpOptions options;  // the operation's own typed options (page size, splits, routing, ...)
  std::uint64_t seed = 0x5eed;
  // The point's name: an op that runs several kernels (layer) names the NVTX
  // range of each "<name>/<op>"; empty = the kind.
  std::string name;
  // Minimum traffic and FLOPs (the declaration's cost).
  OpCost cost() const;
  // Bytes a backend allocates for it: inputs, outputs, caches (the declaration's footprint).
  std::uint64_t footprint_bytes() const;
};

// ---- serving (step_time.hpp) -------------------------------------------------------------

// A measured point, or an op of an engine step, placed on a step-time curve: the
// key the points of one curve share (the operation, its fixed sizes and types)
// and its position on the sizes that vary along it (the curve's axes: M of a
// linear layer; B and L of decode attention).
struct StepMatch {
  std::string key;
  std::vector<double> axes;
  // The curve holds the measured times themselves, not fractions of the roofline: for
  // ops the roofline does not bound (the collectives, bound by their link).
  bool time_curve = false;
};
// An op of an engine step, as the step-time model asks the operations about it.
struct StepOpView {
  const LayerOp& op;
  const ModelConfig& model;
  const Precision& precision;   // the step's weights, activations and KV cache
  std::uint64_t tokens = 0;     // the tokens (rows) the op runs over
  DType dtype = DType::bf16;    // the activations
  DType kv_dtype = DType::bf16;
};

struct OpDecl {
  std::string kind;                 // results' "op_kind"
  std::vector<std::string> dims;    // shape dimensions, in the order of the results' "shape"
  std::function<OpCost(const OpRequest&)> cost;
  std::function<std::uint64_t(const OpRequest&)> footprint;
  // The results' "shape" object; empty: the shape's dimensions in order.
  std::function<nlohmann::json(const OpRequest&)> shape_json;
  // The kind's former names: results files written before a rename still read
  // (OpRegistry::current_kind; python/phasebench_tools/results.py keeps the same list).
  std::vector<std::string> former_kinds = {};
  // The libraries with a row of this kind on some backend (Impl::flashinfer, ...): a
  // sweep whose backend has none of them says so once, with why.
  std::vector<Impl> libraries = {};
  // Serving (step_time.hpp): where a results point of this kind (its "phasebench"
  // object) lies on a step-time curve, and where an engine step's op lies on the
  // same curve; nullopt: not one this kind's points stand for. Empty: the kind's
  // points do not feed `phasebench serve`.
  std::function<std::optional<StepMatch>(const nlohmann::json& point)> match_point = {};
  std::function<std::optional<StepMatch>(const StepOpView& op)> match_step_op = {};
};

// ---- sweeps ---------------------------------------------------------------------------

// A sweep axis of one group: `--axis <group>.<name>=VALUES` sets it, with a
// default per backend. Size axes take lists and ranges (1,2,4; 1..256 doubling;
// 512:32768:x4 geometric; 16:64:+16 arithmetic), `single` ones one value; text
// axes (names, not sizes: routing, context_dist) comma-separated words.
struct AxisDecl {
  std::string name;  // "context": unique within its group
  std::string help;
  bool single = false;  // one value, not a list
  std::vector<std::uint64_t> gpu_default = {}, cpu_default = {};
  // Throws InputError for values the operations cannot take (e.g. a page size);
  // `what` names the axis as the user set it (--axis g.name, or the old flag).
  std::function<void(const std::vector<std::uint64_t>&, const std::string& what)> check = {};
  // A text axis: comma-separated words with these defaults and this check; the size fields unused.
  bool text = false;
  std::vector<std::string> gpu_text = {}, cpu_text = {};
  std::function<void(const std::vector<std::string>&, const std::string& what)> check_text = {};
  // The flag that set this axis before --axis ("--contexts"; its environment
  // variable PHASEBENCH_CONTEXTS): an alias, kept for one release, that sets the
  // axis in every group declaring the same alias. Empty: none.
  std::string alias = "";
};

// One group's axis values, by the axes' names.
struct AxisValues {
  std::map<std::string, std::vector<std::uint64_t>> sizes;  // name -> values (one for single axes)
  std::map<std::string, std::vector<std::string>> texts;    // text axes: name -> words
  const std::vector<std::uint64_t>& operator[](const std::string& name) const;  // logic_error when absent
  std::uint64_t one(const std::string& name) const;
  const std::vector<std::string>& text(const std::string& name) const;  // logic_error when absent
};

// A point of a sweep: the request, its name and structured args, and its cost
// (computed once, here).
struct Point {
  std::string name;    // e.g. decode/linear/llama-3.1-8b.down_proj/bf16/batch:8/impl:own
  std::string phase;   // prefill | decode | free
  std::string op;      // the request's kind: linear, decode_attention_paged, moe, ...
  std::string model;   // short name, or "custom" for free-form shapes
  std::string target;  // projection name (qkv_proj, ...) or the free shape, else empty
  std::map<std::string, std::uint64_t> args;
  std::map<std::string, std::string> text_args;  // args that are words (routing), beside the numbers in "args"
  OpRequest request;
  OpCost cost;
  // Why the point cannot be costed (a size that overflows 64 bits), or empty. The
  // sweep keeps such a point and reports it skipped with this reason; the rest runs.
  std::string invalid;
};

// One arg of a point: its key in "args", and whether and how the name shows it.
struct PointArg {
  std::string key;
  std::uint64_t value = 0;
  std::string label;  // in the name as "<label>:<value>"; empty: not in the name
  std::string text = "";  // non-empty: a word arg ("routing": "zipf:1"), named "<label>:<text>", value unused
};

// The one place a point's name and args are made, together: the name is
// phase/op/subject/dtype, then each named arg, then impl:<impl> when `name_impl`.
// The op is the request's kind (one name per operation: kind, point op, group,
// files); `subject` is the model, "model.target", or the free shape.
Point make_point(const std::string& phase, const std::string& model, const std::string& target, const std::string& subject,
                 OpRequest request, const std::vector<PointArg>& args, bool name_impl);

// What a sweep group's generator sees for one (model, dtype).
struct SweepScope {
  const ModelConfig* model = nullptr;  // nullptr for groups that take no model (free)
  DType dtype = DType::bf16;
  // Every dtype of the run (--dtype), for groups whose type is their own (the
  // int4 GEMV: bf16 activations whatever --dtype): they run once, at one of them.
  std::vector<DType> dtypes;
  const AxisValues* axes = nullptr;                  // this group's axes
  const std::vector<LinearShape>* shapes = nullptr;  // --shape M,N,K, for groups `from_shapes`
  // The implementations the backend runs for this request (impl ignored), of
  // those the run asks for (--impl), in the order own, blas, flashinfer, cudnn.
  // `beside_own`: also the vendor BLAS row when our own applies; the attention
  // libraries' rows (flashinfer, cudnn) come wherever the backend has them.
  std::function<std::vector<Impl>(const OpRequest& r, bool beside_own)> impls;
  bool compare_blas = true;  // put the vendor-library row beside our own kernels
  // Whether the run makes points of implementation `i` of this request (the groups
  // that time our kernel alone ask for Impl::own).
  bool runs(const OpRequest& r, Impl i) const {
    const auto v = impls(r, true);
    return std::find(v.begin(), v.end(), i) != v.end();
  }
};

struct SweepGroup {
  std::string name;  // the --ops name, and the group of its --axis names
  // Names it had before (an operation renamed): --ops and --axis still take them
  // for one release, and the run says what replaces them.
  std::vector<std::string> former_names = {};
  std::string help;  // one line for --ops
  int order = 0;     // groups run in ascending order, for each model and dtype
  // The models it runs for: those of the run's --model list it takes; with no
  // --model given, its default list for the backend instead (empty: the --model
  // list, llama-3.1-8b unless given), again those it takes.
  std::function<bool(const ModelConfig&)> takes = {};  // empty: every model
  std::string takes_what = "";                        // e.g. "mixture-of-experts models", for --list-axes
  std::vector<std::string> gpu_models = {}, cpu_models = {};
  bool per_model = true;     // false: once per dtype with no model (SweepScope::model is nullptr)
  bool from_shapes = false;  // made from --shape; --shape without --ops runs only such groups
  // Only when --ops names it, never in a run without --ops (the collectives: on the usual
  // one-GPU machine every point of theirs would be skipped for want of GPUs).
  bool on_request = false;
  std::vector<AxisDecl> axes = {};
  std::function<std::vector<Point>(const SweepScope&)> points = {};
  const AxisDecl* axis(std::string_view name) const;  // nullptr when it has none of that name
};

// ---- the registry -----------------------------------------------------------------------

class OpRegistry {
 public:
  // Every declaration in harness/src/ops/, registered on first use.
  static const OpRegistry& get();
  void declare(OpDecl d);
  void group(SweepGroup g);
  // Reporting (phasebench/report.hpp): at most one point report per kind.
  void point_report(PointReport r);
  void record(RunRecord r);
  void section(SummarySection s);
  // The operation `kind`; std::logic_error when nothing declares it.
  const OpDecl& op(std::string_view kind) const;
  const std::vector<OpDecl>& ops() const { return ops_; }
  // The declared kind that is or was called `kind` (OpDecl::former_kinds); `kind`
  // itself when none is.
  std::string current_kind(std::string_view kind) const;
  const std::vector<SweepGroup>& groups() const { return groups_; }
  // The point report of `kind`, or nullptr.
  const PointReport* point_report(std::string_view kind) const;
  const std::vector<RunRecord>& records() const { return records_; }
  const std::vector<SummarySection>& sections() const { return sections_; }  // in order
  const SweepGroup* find_group(std::string_view name) const;  // nullptr when none is declared
  // The group that is or was called `name` (SweepGroup::former_names), or nullptr.
  const SweepGroup* find_group_or_former(std::string_view name) const;

 private:
  std::vector<OpDecl> ops_;
  std::vector<SweepGroup> groups_;
  std::vector<PointReport> point_reports_;
  std::vector<RunRecord> records_;
  std::vector<SummarySection> sections_;
};

// Defines the registration function of harness/src/ops/<name>.cpp.
#define PHASEBENCH_DECLARE_OPS(name) void phasebench_declare_ops_##name(::phasebench::OpRegistry& registry)

}  // namespace phasebench
