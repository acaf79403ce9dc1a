#pragma once
// Sweeps declared as data: the operations' sweep groups (phasebench/op.hpp, one
// file per operation in harness/src/ops/) make the points of each model and
// dtype from their axes' values, each with its name (a path, docs/design.md
// "Names"), its structured args, its request and its cost. Which models a group
// runs for and its axes with their defaults are the group's; nothing here names one.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend.hpp"
#include "phasebench/model.hpp"
#include "phasebench/op.hpp"

namespace phasebench {

struct SweepConfig {
  std::vector<std::string> models{"llama-3.1-8b"};
  bool models_given = false;  // --model (or PHASEBENCH_MODEL) was set: groups keep to it
  std::vector<DType> dtypes;  // empty: the backend's default
  std::set<std::string> groups;  // empty: every group with points
  bool compare_blas = true;      // put the vendor-library row beside our own kernels
  // The implementations the run makes points of (--impl); empty: every one the backend has.
  std::set<Impl> impls;
  // Each group's axis values, by group name, from --axis and the old flags;
  // apply_defaults fills the rest.
  std::map<std::string, AxisValues> axes;
  std::vector<LinearShape> shapes;  // --shape M,N,K (groups made from_shapes)
  // Former group names given in --ops or --axis (SweepGroup::former_names), with
  // today's: the run says so once.
  std::map<std::string, std::string> former_groups;
};

// The backend's defaults (the CPU's sweep finishes in a few minutes on 2 cores;
// the GPU's in a few minutes on one GPU) for what `c` leaves empty, and each
// axis's check of its values.
void apply_defaults(SweepConfig& c, const Backend& backend);

// The models group `g` runs for: those of c.models it takes, or with no --model
// given its default list for the backend (when it has one), those it takes.
std::vector<std::string> group_models(const SweepGroup& g, const SweepConfig& c, bool gpu);

// Every point of the sweep that the backend implements and that applies (our
// GEMV for small batches). Points that cannot run (e.g. do not fit) stay in the
// list: the fixture skips them with the reason. A group --ops names that makes
// no point (no model it runs for; no --shape) is an InputError saying why.
// `warnings`: where given, one line per model whose contexts or prompts go
// beyond its max_position_embeddings (measured anyway).
std::vector<Point> build_sweep(const SweepConfig& c, const Backend& backend, std::vector<std::string>* warnings = nullptr);

// "1,2,4"; "1..256" or "1-256" (every power of two from the first bound up to
// the second); "512:32768:x4" (times 4 from 512 while at most 32768);
// "16:64:+16" (plus 16 from 16 while at most 64); items may mix. Sorted, each
// value once; throws InputError naming `flag`.
std::vector<std::uint64_t> parse_size_list(const std::string& text, const std::string& flag);
LinearShape parse_shape(const std::string& text);

// An --axis example from the declarations (the first group's first list axis at its GPU default).
std::string axis_example();

// --axis GROUP.AXIS=VALUES: sets that axis of that group (its kind's values,
// checked); InputError naming what is wrong and what exists.
void set_axis(SweepConfig& c, const std::string& assignment);

// An old sweep flag, kept for one release: it sets the axes that declare it
// (AxisDecl::alias) in every group, as it fed them before --axis.
struct AxisAlias {
  std::string flag;  // "--contexts"
  std::string env;   // "PHASEBENCH_CONTEXTS"
  std::vector<std::pair<std::string, std::string>> targets;  // (group, axis)
  std::string help;
};
std::vector<AxisAlias> axis_aliases();  // in the order the groups declare them
// Sets every target of `a` to `values` (errors name the flag); returns its
// replacement, "--axis g.x=VALUES --axis h.y=VALUES".
std::string set_alias(SweepConfig& c, const AxisAlias& a, const std::string& values);

// `phasebench run --list-axes`: every group, the models it runs for, its axes
// with their GPU and CPU defaults and their old flags.
std::string list_axes();

}  // namespace phasebench
