// The phasebench subcommands (run, model, models, gpus, summary, overhead; serve in serve.cpp):
// their flags (CLI11, the sweep axes from the operation declarations) and what each does.
#include "commands.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "backend.hpp"
#include "build_info.hpp"
#include "counters.hpp"
#include "standing.hpp"
#include "fixture.hpp"
#include "phasebench/analytical.hpp"
#include "phasebench/checked.hpp"
#include "phasebench/error.hpp"
#include "phasebench/processes.hpp"
#include "phasebench/gpu_specs.hpp"
#include "phasebench/json_fields.hpp"
#include "phasebench/json_file.hpp"
#include "phasebench/step_time.hpp"
#include "phasebench/model.hpp"
#include "machine_load.hpp"
#include "results.hpp"
#include "overhead.hpp"
#include "summary.hpp"
#include "sweep.hpp"
#include "verify.hpp"

namespace phasebench {

namespace {

int input_error(const std::string& msg) {
  std::cerr << "phasebench: error: " << msg << "\n";
  return 2;
}

// CLI11's answer to a parse error (or --help): its message, and status 2 for
// every usage error (CLI11's own codes are 100 and up), 0 for --help.
// --help prints the help (status 0); any other parse error is one "error:" line and status 2.
int parse_failed(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  return input_error(std::string(e.what()) + " (see " + app.get_name() + " --help)");
}

// An option given an empty value (--dtype "", --out "") is a slip, never a
// request for the default: one line naming it. Flags take no value.
void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_expected_max() == 0) continue;
    for (const auto& r : o->results())
      if (r.empty())
        throw InputError(o->get_name() + " was given an empty value; give it a value or leave it out (" + app.get_name() +
                         " --help)");
  }
}

// Parse a subcommand's options, then run its body; usage errors and bad input
// end with one "error:" line and status 2.
template <class Body>
int run_command(CLI::App& app, int argc, char** argv, Body&& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_failed(app, e);
  }
  try {
    refuse_empty_values(app);
    return body();
  } catch (const InputError& e) {
    return input_error(e.what());
  }
}

bool has_flag(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

// The value of Google Benchmark's flag --<name>=VALUE (the last one), or "".
std::string benchmark_flag(int argc, char** argv, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  std::string value;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) value = argv[i] + prefix.size();
  return value;
}

// --benchmark_repetitions as a count (1 when not given); zero or not a number is an error.
std::uint64_t repetitions(int argc, char** argv) {
  const auto text = benchmark_flag(argc, argv, "benchmark_repetitions");
  if (text.empty()) return 1;
  if (text.find_first_not_of("0123456789") != std::string::npos || std::stoull("0" + text.substr(0, 18)) == 0)
    throw InputError("--benchmark_repetitions=" + text.substr(0, 40) + ": give a whole number of 1 or more");
  return std::stoull(text.substr(0, 18));
}

double parse_number(const std::string& text, const std::string& flag, double lo, double hi, const std::string& what);

// Google Benchmark's flags whose values it checks only by exiting (status 0, a
// usage text, nothing run) or not at all (a negative minimum time): checked
// here first, each bad value one line.
void check_benchmark_flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--benchmark_", 0) != 0) continue;
    const auto eq = arg.find('=');
    if (eq == std::string::npos) continue;
    const std::string flag = arg.substr(0, eq), value = arg.substr(eq + 1);
    auto refuse = [&](const std::string& should) {
      throw InputError(flag + "=" + quote_value(value) + ": " + should);
    };
    if (value.empty()) refuse("an empty value; give one or leave the flag out");
    if (flag == "--benchmark_format" || flag == "--benchmark_out_format") {
      if (value != "console" && value != "json" && value != "csv") refuse("give console, json or csv");
    } else if (flag == "--benchmark_time_unit") {
      if (value != "ns" && value != "us" && value != "ms" && value != "s") refuse("give ns, us, ms or s");
    } else if (flag == "--benchmark_min_time") {
      parse_number(value, flag, 1e-9, 86400, "seconds above 0 (e.g. 0.1)");
    } else if (flag == "--benchmark_min_warmup_time") {
      parse_number(value, flag, 0, 86400, "seconds (0 or more)");
    }
  }
}

// Where results go unless --out says otherwise: results/ under the current
// directory (not the source tree: a run from elsewhere writes where it runs).
std::string results_root() { return "results"; }

nlohmann::json device_json(const DeviceInfo& d) {
  nlohmann::json j = d.details;
  j["backend"] = d.backend;
  j["name"] = d.name;
  j["slug"] = d.slug;
  j["memory_bytes"] = d.memory_bytes;
  j["cache_bytes"] = d.cache_bytes;
  if (d.spec) {
    j["spec"] = {{"key", d.spec->key}, {"name", d.spec->name}, {"sources", d.spec->sources}};
  } else {
    j["spec"] = nullptr;
  }
  return j;
}

}  // namespace

namespace {

std::string join_words(const std::vector<std::string>& v, const std::string& sep = ",") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// What `phasebench run` takes besides Google Benchmark's flags.
struct RunFlags {
  std::string backend = "auto", models = join_words(SweepConfig{}.models), dtypes, ops, impls, out, cache = "cold", ceiling = "measured";
  std::string cold_timing = "rotate";
  std::vector<std::string> axes;              // --axis GROUP.AXIS=VALUES, in order
  std::string gpus;                           // --gpus: the gpus axis of every group that has one
  std::map<std::string, std::string> aliases;  // old flag -> its text (axis_aliases())
  std::vector<std::string> shapes;
  // The stopping rule and the energy window; empty: the backend's defaults (stop_rule()).
  std::string max_noise, min_samples, max_time, energy_window;
  bool no_calibrate = false, profile = false, no_blas = false, no_summary = false, no_paired_read = false,
       verify_only = false, overwrite = false, list_axes = false;
};

// Whether a group's points span GPUs (it declares the gpus axis: --gpus, mpirun).
bool has_gpus_axis(const SweepGroup& g) {
  return std::any_of(g.axes.begin(), g.axes.end(), [](const AxisDecl& a) { return a.name == "gpus"; });
}

// What selects a sweep's points: models, dtypes, the groups' axes, free shapes, groups.
void add_sweep_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--model", f.models,
                 "short names or config.json paths, comma-separated (default " + join_words(SweepConfig{}.models) +
                     "); without it, some groups run their own default models (--list-axes says which)")
      ->envname("PHASEBENCH_MODEL");
  app.add_option("--dtype", f.dtypes, "comma-separated: fp32, tf32, fp16, bf16, fp8 (default: bf16 on GPU, fp32 on CPU)")
      ->envname("PHASEBENCH_DTYPE");
  app.add_option("--axis", f.axes,
                 "GROUP.AXIS=VALUES, repeatable: one axis of one group, e.g. " + axis_example() +
                     " (lists; 1..256 doubling; start:end:xF geometric, e.g. 512:32768:x4; start:end:+S; words for "
                     "text axes; --list-axes lists them)")
      ->allow_extra_args(false);
  app.add_flag("--list-axes", f.list_axes, "list every group's axes, their defaults and old flags, and exit");
  std::string with_gpus;
  for (const auto& g : OpRegistry::get().groups())
    if (has_gpus_axis(g)) with_gpus += (with_gpus.empty() ? "" : ", ") + g.name;
  app.add_option("--gpus", f.gpus,
                 "GPU counts, comma-separated (one NCCL rank a GPU of this machine): the gpus axis of every group that has "
                 "one (" + with_gpus + "; the layer's 1 is one GPU, N is tensor-parallel over N); --axis GROUP.gpus=... "
                 "overrides it for one group")
      ->envname("PHASEBENCH_GPUS");
  // The flags of the axes before --axis, aliases for one release (each sets the axes that name it).
  for (const auto& a : axis_aliases())
    app.add_option(a.flag, f.aliases[a.flag], a.help)->envname(a.env)->group("Old sweep flags (aliases of --axis)");
  app.add_option("--shape", f.shapes, "free-form linear shape M,N,K (repeatable)");
  std::string groups = "groups to run, comma-separated (default: all):";
  for (const auto& g : OpRegistry::get().groups()) groups += "\n  " + g.name + ": " + g.help + (g.on_request ? " (only when --ops names it)" : "");
  app.add_option("--ops", f.ops, groups)->envname("PHASEBENCH_OPS");
  app.add_flag("--no-blas", f.no_blas, "omit the vendor-library comparison rows next to our own kernels");
  app.add_option("--impl", f.impls,
                 "implementations to run, comma-separated: own, blas, flashinfer, cudnn, nccl (default: every one the "
                 "backend has; the attention libraries' rows need the CUDA backend)")
      ->envname("PHASEBENCH_IMPL");
}

void add_run_flags(CLI::App& app, RunFlags& f) {
  app.add_option("--backend", f.backend, "auto, cuda or cpu")->envname("PHASEBENCH_BACKEND");
  add_sweep_flags(app, f);
  app.add_option("--out", f.out,
                 "results file (default results/<device>/<UTC time>.json under the current directory); never replaced "
                 "unless --overwrite");
  app.add_flag("--overwrite", f.overwrite, "replace the --out file if it exists");
  app.add_option("--cache", f.cache, "cold (flush the last-level cache before each sample) or hot");
  app.add_option("--cold-timing", f.cold_timing,
                 "cold samples of short GPU launches (hot launch < 100 us, data < 2x L2): rotate (one CUDA graph over k "
                 "copies of the op's data, 2x L2 where 128 copies suffice, time / k; default) or single (one launch each)");
  app.add_option("--roofline", f.ceiling, "ceilings the percentages use: measured or datasheet");
  app.add_flag("--no-calibrate", f.no_calibrate, "skip measuring ceilings (percentages then use the datasheet)");
  app.add_flag("--no-paired-read", f.no_paired_read,
               "no streaming read before each sample of memory-bound points of >= 4x LLC (CPU backend; cold cache)");
  app.add_flag("--profile", f.profile, "run each selected point once between profiler start/stop, no statistics");
  app.add_flag("--verify-only", f.verify_only,
               "prepare every selected point and check it against its reference; time nothing, write no results file "
               "(exit 1 when a result is wrong)");
  app.add_flag("--no-summary", f.no_summary, "do not print the summary");
  app.add_option("--max-noise", f.max_noise,
                 "sample each point until the relative spread of its samples is at most this (percent, e.g. 0.5 or "
                 "0.5%), or `off` for Google Benchmark's --benchmark_min_time loop (default: 0.5% on a GPU, 2% on a CPU)");
  app.add_option("--min-samples", f.min_samples, "samples each point takes at least (default 10 on a GPU, 5 on a CPU; never under 5)");
  app.add_option("--max-time", f.max_time,
                 "seconds a point may sample before it stops unconverged (default 3 on a GPU, 1 on a CPU)");
  app.add_option("--energy-window", f.energy_window,
                 "seconds of back-to-back runs per point over which the energy counter is read, where the device has one "
                 "(default 0.5 on a GPU, 0.1 on a CPU; 0: no energy)");
}

// A number from a flag's text, or one line naming the flag and what it takes.
double parse_number(const std::string& text, const std::string& flag, double lo, double hi, const std::string& what) {
  std::string t = text;
  if (!t.empty() && t.back() == '%') t.pop_back();
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != t.size() || !std::isfinite(v) || v < lo || v > hi)
    throw InputError(flag + " takes " + what + ", got '" + text + "'");
  return v;
}

// The stopping rule of this run: the backend's defaults (tighter on a GPU,
// whose samples are steadier), then the flags. --benchmark_min_time alone
// means Google Benchmark's loop; with --max-noise too it is a contradiction.
StopRule stop_rule(const RunFlags& f, const Backend& backend, bool min_time_given) {
  StopRule r;
  const bool gpu = backend.device().backend == "cuda";
  r.max_noise = gpu ? 0.005 : 0.02;
  r.min_samples = gpu ? 10 : kMinSamplesPerPoint;
  r.max_time_s = gpu ? 3.0 : 1.0;
  if (min_time_given && !f.max_noise.empty() && f.max_noise != "off")
    throw InputError("--benchmark_min_time and --max-noise choose two different stopping rules; give one of them");
  if (min_time_given || f.max_noise == "off") r.by_noise = false;
  if (!f.max_noise.empty() && f.max_noise != "off")
    r.max_noise = parse_number(f.max_noise, "--max-noise", 1e-6, 100, "a percentage above 0 (e.g. 0.5 or 0.5%) or off") / 100;
  if (!f.min_samples.empty()) {
    const double n = parse_number(f.min_samples, "--min-samples", 1, 1e6, "a whole number of samples");
    if (n != std::floor(n)) throw InputError("--min-samples takes a whole number of samples, got '" + f.min_samples + "'");
    r.min_samples = static_cast<std::size_t>(n);
  }
  if (!f.max_time.empty()) r.max_time_s = parse_number(f.max_time, "--max-time", 1e-3, 86400, "seconds above 0");
  return r;
}

// A comma-separated flag value's items; an empty item (a,,b or a trailing
// comma) is a typo, refused naming the flag.
std::vector<std::string> list_items(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (text.empty() || text.back() == ',' || std::find(out.begin(), out.end(), "") != out.end())
    throw InputError(flag + ": an empty item in " + quote_value(text) + "; give comma-separated values without gaps");
  return out;
}

// The sweep the flags ask for. The old flags set their axes first, --axis then
// overrides; `alias_note` says what replaces the old flags used (empty: none),
// for the run to print once its input has passed every check (bad input stays one line).
SweepConfig sweep_config(const RunFlags& f, bool models_given, std::string& alias_note) {
  SweepConfig cfg;
  cfg.models = list_items(f.models, "--model");
  cfg.models_given = models_given;
  if (!f.dtypes.empty())
    for (auto& d : list_items(f.dtypes, "--dtype")) {
      const auto t = parse_run_dtype(d);
      if (std::find(cfg.dtypes.begin(), cfg.dtypes.end(), t) != cfg.dtypes.end())
        throw InputError("--dtype " + quote_value(f.dtypes) + " names " + std::string(to_string(t)) + " twice");
      cfg.dtypes.push_back(t);
    }
  std::vector<std::string> old, replacements;
  for (const auto& a : axis_aliases()) {
    const auto& text = f.aliases.at(a.flag);
    if (text.empty()) continue;
    replacements.push_back(set_alias(cfg, a, text));  // bad input fails before a device is chosen
    old.push_back(a.flag + (std::getenv(a.env.c_str()) ? " (" + a.env + ")" : ""));
  }
  if (!f.gpus.empty())
    for (const auto& g : OpRegistry::get().groups())
      if (has_gpus_axis(g)) try {
          set_axis(cfg, g.name + ".gpus=" + f.gpus);
        } catch (const InputError& e) {  // its message names the axis; the user gave --gpus
          std::string why = e.what();
          const std::string axis = "--axis " + g.name + ".gpus";
          if (why.rfind(axis, 0) == 0) why = "--gpus" + why.substr(axis.size());
          throw InputError(why);
        }
  for (const auto& x : f.axes) set_axis(cfg, x);
  alias_note.clear();
  if (!old.empty())
    alias_note = "phasebench: note: " + join_words(old, ", ") + (old.size() > 1 ? " are old flags" : " is an old flag") +
                 ", kept for one release as an alias of --axis; instead use " + join_words(replacements, " ") + "\n";
  for (const auto& s : f.shapes) cfg.shapes.push_back(parse_shape(s));
  if (!f.ops.empty())
    for (auto& g : list_items(f.ops, "--ops")) {
      const auto* group = OpRegistry::get().find_group_or_former(g);
      if (group && group->name != g) cfg.former_groups.emplace(g, group->name);
      cfg.groups.insert(group ? group->name : g);
    }
  // --shape alone runs just those shapes.
  if (!cfg.shapes.empty() && f.ops.empty())
    for (const auto& g : OpRegistry::get().groups())
      if (g.from_shapes) cfg.groups.insert(g.name);
  for (const auto& [was, is] : cfg.former_groups)
    alias_note += "phasebench: note: the group " + was + " is now called " + is +
                  "; its old name works for one release (--ops " + is + ", --axis " + is + ".AXIS=...)\n";
  cfg.compare_blas = !f.no_blas;
  if (!f.impls.empty())
    for (const auto& name : list_items(f.impls, "--impl")) {
      const auto impl = impl_named(name);
      if (!impl) throw InputError("--impl: unknown implementation '" + name + "'; use own, blas, flashinfer, cudnn or nccl");
      cfg.impls.insert(*impl);
    }
  // Unknown model: fail before choosing a device. Two entries that are the same
  // model (or share a name) would make points of the same names.
  std::map<std::string, std::string> by_name;
  for (const auto& m : cfg.models) {
    const auto name = load_model(m).name;
    if (const auto it = by_name.find(name); it != by_name.end())
      throw InputError("--model: " +
                       (it->second == m ? quote_value(m) + " is given twice"
                                        : quote_value(it->second) + " and " + quote_value(m) + " are both the model " +
                                              quote_value(name) + " (points are named by it)") +
                       "; give each model once");
    by_name[name] = m;
  }
  return cfg;
}

// --profile: each selected point once, inside its NVTX range, between profiler start/stop.
int profile_points(Backend& backend, const std::vector<const Point*>& points) {
  int n = 0;
  for (const Point* p : points) {
    if (auto why_not = backend.cannot_run(p->request)) {
      std::cerr << "phasebench: skip " << p->name << ": " << *why_not << "\n";
      continue;
    }
    auto op = backend.prepare(p->request);
    op->verify();
    backend.profile(*op, p->name);
    std::cout << "profiled " << p->name << "\n";
    ++n;
  }
  std::cout << n << " point(s) profiled\n";
  return 0;
}

// The results file's context: what ran, on what, how the numbers are meant.
// Every rank of the run (one without mpirun): its host and GPU, in rank order.
nlohmann::json processes_json(const Backend& backend) {
  Processes& procs = processes();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const auto& dev = backend.device();
  const nlohmann::json mine = {{"rank", procs.rank()},
                               {"local_rank", procs.local_rank()},
                               {"host", host},
                               {"device", dev.name},
                               {"pci_bus_id", dev.details.value("pci_bus_id", "")}};
  nlohmann::json all = nlohmann::json::array();
  for (const auto& text : procs.all_gather(mine.dump())) all.push_back(nlohmann::json::parse(text));
  return {{"count", procs.size()},
          {"launcher", procs.size() > 1 ? "mpi" : "none"},
          {"ranks", std::move(all)}};
}

// Under mpirun or srun (more than one rank): every point spans the ranks, one a
// GPU. The groups that have a gpus axis run at the rank count (--gpus, if given,
// must say it); those that do not are refused, as they would run N times alone.
void spanning_sweep(SweepConfig& cfg, const RunFlags& f) {
  const int n = processes().size();
  const std::string ranks = "under mpirun with " + std::to_string(n) + " ranks";
  if (!f.gpus.empty() && f.gpus != std::to_string(n))
    throw InputError("--gpus " + quote_value(f.gpus) + ": " + ranks + " every point spans all of them (one rank a GPU); "
                     "give --gpus " + std::to_string(n) + " or leave it out");
  std::vector<std::string> spanning, alone;
  for (const auto& g : OpRegistry::get().groups()) {
    const bool has = has_gpus_axis(g);
    if (has) {
      spanning.push_back(g.name);
      if (!cfg.axes[g.name].sizes.count("gpus")) set_axis(cfg, g.name + ".gpus=" + std::to_string(n));
    }
    if (!has && cfg.groups.count(g.name)) alone.push_back(g.name);
  }
  if (!alone.empty())
    throw InputError("--ops " + join_words(alone) + ": " + ranks + " only points that span the ranks run (" +
                     join_words(spanning, ", ") + "); run the others without mpirun");
  if (cfg.groups.empty()) cfg.groups.insert(spanning.begin(), spanning.end());
}

nlohmann::json run_context(Backend& backend, const std::string& why, const RunFlags& f, const RunOptions& opts, int argc,
                           char** argv) {
  nlohmann::json pctx;
  pctx["build"] = build_json();
  pctx["backend"] = backend.device().backend;
  pctx["backend_choice"] = why;
  pctx["device"] = device_json(backend.device());
  pctx["cache"] = f.cache;
  if (f.cache == "cold") pctx["cold_timing"] = f.cold_timing;
  pctx["ceiling_used"] = f.ceiling;
  pctx["notes"] = "FLOPs exclude softmax, RoPE and norms; bytes are the minimum traffic (each input read once, each output "
                  "written once); times are the median of samples; fractions use ceiling_used ceilings, all sources in "
                  "roofline_by_source.";
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
  pctx["command_line"] = cmdline;
  pctx["warnings"] = opts.warnings;  // what the summary repeats: contexts beyond a model's positions
  pctx["processes"] = processes_json(backend);
  for (const auto& r : OpRegistry::get().records()) pctx[r.key] = nlohmann::json::array();  // filled in when the sweep ends
  pctx["beyond_caches_bytes"] = kBeyondCachesFactor * backend.device().cache_bytes;  // points' "beyond_caches"
  const auto& stop = opts.stop;
  if (stop.by_noise)
    pctx["stopping"] = {{"rule", "noise"}, {"max_noise", stop.max_noise}, {"min_samples", std::max(kMinSamplesPerPoint, stop.min_samples)},
                        {"max_time_s", stop.max_time_s},
                        {"noise", "interquartile range / 1.349 / median of a call's samples (a robust stddev/mean)"}};
  else
    pctx["stopping"] = {{"rule", "google_benchmark_min_time"}, {"min_samples", std::max(kMinSamplesPerPoint, stop.min_samples)}};
  pctx["clock_check"] = {{"ratio", opts.clock_ratio},
                         {"available", !backend.clocks_unavailable()},
                         {"why", backend.clocks_unavailable().value_or("")}};
  // Energy: said once here when there is none, never a made-up number.
  if (opts.energy_window_s <= 0) {
    pctx["energy"] = {{"available", false}, {"why", "not measured: --energy-window 0"}};
  } else if (const auto e = backend.energy(); e.ok) {
    pctx["energy"] = {{"available", true}, {"source", backend.energy_source()}, {"window_s", opts.energy_window_s}};
  } else {
    pctx["energy"] = {{"available", false}, {"why", e.error}};
  }
  return pctx;
}

// The read ceiling once more after the sweep: on a shared machine the bandwidth
// can move while the sweep runs, and every fraction of the measured roofline with it.
void check_bandwidth_again(Backend& backend, ResultsFile& file) {
  const auto start = backend.ceilings().bandwidth_for(CeilingSource::measured);
  if (!start || start->source != CeilingSource::measured) return;
  std::cerr << "phasebench: measuring the read bandwidth again...\n";
  if (const auto end = backend.remeasure_read_bandwidth()) {
    file.set_phasebench_field("bandwidth_check", {{"start_bytes_per_s", start->value},
                                                  {"end_bytes_per_s", *end},
                                                  {"change", *end / start->value - 1.0},
                                                  {"method", start->method}});
    file.write();
  }
}

// Calibrate, run every selected point through Google Benchmark into the results file, summarise.
int measure(Backend& backend, const std::string& why, const RunFlags& f, const SweepConfig& cfg, BenchContext& ctx,
            std::size_t expected_runs, int argc, char** argv) {
  if (auto no = backend.cannot_time())
    throw InputError(*no + "; use --verify-only to check every point's result, or --backend=cpu to measure the CPU");
  const std::string path = f.out.empty() ? default_results_path(results_root(), backend.device().slug) : f.out;
  // How busy the machine is before anything runs (and, below, over the run).
  const auto load_before = load_snapshot();
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  auto pctx = run_context(backend, why, f, ctx.options(), argc, argv);
  pctx["machine_load"] = load_json(load_before, std::nullopt, cpus);
  // Refuses now (before any measuring) a path it must not replace or that another run writes.
  // Under mpirun rank 0 writes the file (each point is already the slowest rank's);
  // the others keep theirs in memory, and all stop if rank 0 cannot write.
  Processes& procs = processes();
  std::unique_ptr<ResultsFile> owned;
  std::string refused;
  try {
    owned = procs.rank() == 0 ? std::make_unique<ResultsFile>(path, std::move(pctx), f.overwrite)
                              : std::make_unique<ResultsFile>(ResultsFile::InMemory{}, std::move(pctx));
  } catch (const InputError& e) {
    refused = e.what();
  }
  if (procs.size() > 1) refused = procs.first_of(refused);
  if (!refused.empty()) throw InputError(refused);
  ResultsFile& file = *owned;
  file.exit_cleanly_on_interrupt("results");
  if (!f.no_calibrate) {
    std::cerr << "phasebench: measuring ceilings (--no-calibrate to skip)...\n";
    backend.measure_ceilings(cfg.dtypes);
  } else if (ctx.options().ceiling == CeilingSource::measured) {
    std::cerr << "phasebench: --no-calibrate: percentages use the datasheet ceilings where known\n";
  }
  file.set_phasebench_field("ceilings", ceilings_json(backend.ceilings()));
  file.set_phasebench_field("device", device_json(backend.device()));  // with what calibrating found (read kernels)
  const char* progress_env = std::getenv("PHASEBENCH_PROGRESS");
  const bool progress = progress_env ? std::string(progress_env) == "1" : ::isatty(2) != 0;
  TeeReporter reporter(file, ctx, expected_runs, progress);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  file.set_phasebench_field("machine_load", load_json(load_before, load_snapshot(), cpus));
  if (!f.no_calibrate) check_bandwidth_again(backend, file);
  {
    // The operations' run records (phasebench/report.hpp), from the standing entries.
    const auto standing = standing_points(file.document());
    const auto run = file.document().at("context").at("phasebench");
    for (const auto& r : OpRegistry::get().records()) file.set_phasebench_field(r.key, r.make(standing, run));
  }
  file.write();
  if (procs.rank() != 0) return ctx.errored_points().empty() ? 0 : 1;  // rank 0 reports
  if (!f.no_summary) std::cout << summarize(file.document());
  std::cout << "\nresults: " << path << "\n";
  const auto errored = ctx.errored_points();
  if (errored.empty()) return 0;
  std::cerr << "phasebench: " << errored.size() << " point(s) ended in an error (exit status 1), the first: "
            << errored.front() << " (its message is in the results)\n";
  return 1;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  // Google Benchmark's own flags (--benchmark_filter, --benchmark_repetitions, ...)
  // pass through; a shorter default minimum time keeps the sweep to minutes.
  std::vector<char*> args(argv, argv + argc);
  std::string min_time = "--benchmark_min_time=0.1";
  if (!has_flag(argc, argv, "--benchmark_min_time")) args.insert(args.begin() + 1, min_time.data());
  int gb_argc = static_cast<int>(args.size());
  // Google Benchmark answers --help with its own flags only and exits; leave
  // --help to CLI11, whose footer names the Google Benchmark flags.
  const bool help = has_flag(argc, argv, "--help") || has_flag(argc, argv, "-h");
  try {
    if (!help) check_benchmark_flags(argc, argv);
  } catch (const InputError& e) {
    return input_error(e.what());
  }
  if (!help) benchmark::Initialize(&gb_argc, args.data());

  CLI::App app{"Run the benchmark sweep. Google Benchmark's --benchmark_* flags are accepted too.", "phasebench run"};
  std::string spanning;  // the groups whose points span GPUs, from their declarations
  for (const auto& g : OpRegistry::get().groups())
    if (has_gpus_axis(g)) spanning += (spanning.empty() ? "" : ", ") + g.name;
  app.footer(
      "Sampling (default): each point takes samples until their noise (interquartile range / 1.349 / median)\n"
      "is at most --max-noise (2% on a CPU, 0.5% on a GPU), with at least --min-samples (5 CPU, 10 GPU) and for\n"
      "at most --max-time seconds (1 CPU, 3 GPU), then stops unconverged; the point's time is the median sample.\n"
      "--max-noise off, or --benchmark_min_time=SECONDS alone, use Google Benchmark's loop instead (iterations\n"
      "for at least the minimum time, 0.1 s unless given; still at least 5 samples).\n"
      "Google Benchmark flags pass through, e.g. --benchmark_filter=REGEX, --benchmark_repetitions=N,\n"
      "--benchmark_enable_random_interleaving=true, --benchmark_format=console|json|csv,\n"
      "--benchmark_counters_tabular=true, --benchmark_list_tests.\n"
      "Under mpirun or srun (N ranks, one a GPU): the points that span the ranks (" + spanning + "; at --gpus N),\n"
      "sampled in lockstep; rank 0 writes the results (README: Multi-GPU and multi-node).");
  RunFlags f;
  add_run_flags(app, f);
  try {
    app.parse(gb_argc, args.data());
  } catch (const CLI::ParseError& e) {
    return parse_failed(app, e);
  }
  try {
    refuse_empty_values(app);
  } catch (const InputError& e) {
    return input_error(e.what());
  }

  if (f.list_axes) {
    std::cout << list_axes();
    return 0;
  }
  try {
    // Google Benchmark's own output file would be opened (and an existing one replaced) behind
    // the results file's checks; the results file is a superset of its JSON.
    for (const char* flag : {"--benchmark_out_format", "--benchmark_out"})
      if (has_flag(argc, argv, flag))
        throw InputError(std::string(flag) + " is not taken: Google Benchmark would replace an existing file unasked. "
                         "phasebench's results file (--out FILE, never replaced without --overwrite) is a superset of "
                         "Google Benchmark's JSON; give --out FILE instead");
    if (f.cache != "cold" && f.cache != "hot") throw InputError("--cache must be cold or hot, got '" + f.cache + "'");
    RunOptions ropts;
    ropts.cold_cache = f.cache == "cold";
    if (const auto ct = parse_cold_timing(f.cold_timing))
      ropts.cold_timing = *ct;
    else
      throw InputError("--cold-timing must be rotate or single, got '" + f.cold_timing + "'");
    ropts.paired_read = !f.no_paired_read;
    ropts.ceiling = parse_ceiling_source(f.ceiling);
    std::optional<double> energy_window;  // a bad value is refused here, before a backend is chosen
    if (!f.energy_window.empty())
      energy_window = parse_number(f.energy_window, "--energy-window", 0, 3600, "seconds (0: no energy)");
    if (ropts.ceiling == CeilingSource::theoretical) throw InputError("--roofline takes measured or datasheet");
    std::string alias_note;
    SweepConfig cfg = sweep_config(f, app.count("--model") > 0 || std::getenv("PHASEBENCH_MODEL") != nullptr, alias_note);
    Processes& procs = processes();
    if (procs.size() > 1) {
      spanning_sweep(cfg, f);
      // Rank 0 prints the tables and the summary; the others' stderr still says what each does.
      if (procs.rank() != 0 && !std::freopen("/dev/null", "w", stdout)) throw InputError("cannot silence rank stdout");
    }

    std::string why;
    auto backend = make_backend(f.backend, &why);
    std::cerr << "phasebench: " << why << "\n";
    apply_defaults(cfg, *backend);
    ropts.stop = stop_rule(f, *backend, has_flag(argc, argv, "--benchmark_min_time"));
    if (procs.size() > 1 && has_flag(argc, argv, "--benchmark_enable_random_interleaving") &&
        !has_flag(argc, argv, "--benchmark_enable_random_interleaving=false"))
      throw InputError("under mpirun every rank must run the points in one order; --benchmark_enable_random_interleaving "
                       "would shuffle each rank's own way");
    if (procs.size() > 1 && !ropts.stop.by_noise)
      throw InputError("under mpirun the ranks sample each point in lockstep until its noise settles (--max-noise); "
                       "Google Benchmark's --benchmark_min_time loop would take a different count on each rank");
    // NVML's energy counter moves every few tens of ms, RAPL's every millisecond.
    ropts.energy_window_s = energy_window.value_or(backend->device().backend == "cuda" ? 0.5 : 0.1);
    const auto points = build_sweep(cfg, *backend, &ropts.warnings);
    if (points.empty()) throw InputError("the sweep is empty: no selected operation is implemented by this backend for these dtypes (the "
                                         "libraries' rows, NCCL's included, run on the CUDA backend only)");
    const auto filter = benchmark_flag(argc, argv, "benchmark_filter");
    const auto selected = select_points(points, filter);
    if (selected.empty())
      throw InputError("--benchmark_filter=" + quote_value(filter) + " matches none of the " + std::to_string(points.size()) +
                       " points of this sweep (--benchmark_list_tests without the filter lists them)");
    const auto reps = repetitions(argc, argv);
    std::cerr << alias_note;
    for (const auto& w : ropts.warnings) std::cerr << "phasebench: warning: " << w << "\n";
    if (has_flag(argc, argv, "--benchmark_list_tests") && !has_flag(argc, argv, "--benchmark_list_tests=false")) {
      for (const Point* p : selected) std::cout << p->name << "/manual_time\n";  // as Google Benchmark lists them
      return 0;
    }
    if (f.verify_only) {
      const auto c = verify_points(*backend, selected, std::cout);
      const bool bad = c.wrong + c.errors > 0;
      return (procs.size() > 1 ? procs.any(bad) : bad) ? 1 : 0;
    }
    if (f.profile) return profile_points(*backend, selected);
    BenchContext ctx(*backend, ropts);
    register_points(ctx, points);
    return measure(*backend, why, f, cfg, ctx, selected.size() * reps, argc, argv);
  } catch (const InputError& e) {
    const int status = input_error(e.what());
    // Under mpirun a rank may meet what the others did not (a device, the results
    // file): stop them all rather than leave them waiting for it.
    if (processes().size() > 1) processes().abort_all(status);
    return status;
  }
}

int cmd_counters(int argc, char** argv) {
  CLI::App app{"Count what each selected point's kernels do, as Nsight Compute would count it (memory requests and "
               "sectors, distinct bytes, shared-memory wavefronts and bank conflicts, barriers, bytes in flight, "
               "registers and occupancy), on the CUDA emulation's counting build, and estimate each point's speed "
               "of light on a GPU of the spec table. Counts and a model: nothing is timed.",
               "phasebench counters"};
  RunFlags f;
  add_sweep_flags(app, f);
  std::string gpu = "h200-sxm", filter;
  bool list = false;
  app.add_option("--gpu", gpu, "the GPU the estimate is for, and the emulated device's limits: " + counted_gpus());
  app.add_option("--benchmark_filter", filter, "points whose names match this regular expression (as for run; -REGEX: "
                                               "those that do not)");
  app.add_flag("--benchmark_list_tests", list, "list the selected points and count nothing");
  app.add_option("--out", f.out,
                 "counters file (default results/counters/<gpu>/<UTC time>.json under the current directory); never "
                 "replaced unless --overwrite");
  app.add_flag("--overwrite", f.overwrite, "replace the --out file if it exists");
  return run_command(app, argc, argv, [&]() -> int {
    if (f.list_axes) {
      std::cout << list_axes();
      return 0;
    }
    const GpuSpec spec = GpuTable::load().get(gpu);
    const auto target = emulated_target_for(spec.key);
    if (!target)
      throw InputError("--gpu " + quote_value(gpu) + ": the emulation stands in for " + counted_gpus() +
                       " only (their SM counts and shared-memory limits decide occupancy)");
    if (const char* env = std::getenv("PB_EMU_TARGET"); env && *env && *target != env)
      throw InputError(std::string("PB_EMU_TARGET=") + env + " contradicts --gpu " + spec.key + " (target " + *target +
                       "); unset PB_EMU_TARGET, or give the matching --gpu");
    ::setenv("PB_EMU_TARGET", target->c_str(), 1);  // before the emulated device is first asked
    std::string alias_note;
    SweepConfig cfg = sweep_config(f, app.count("--model") > 0 || std::getenv("PHASEBENCH_MODEL") != nullptr, alias_note);
    std::string why;
    auto backend = make_backend("cuda", &why);
    if (auto no = backend->cannot_count()) throw InputError("counters: " + *no);
    apply_defaults(cfg, *backend);
    const auto points = build_sweep(cfg, *backend);
    if (points.empty()) throw InputError("the sweep is empty: no selected operation is implemented for these dtypes");
    const auto selected = select_points(points, filter);
    if (selected.empty())
      throw InputError("--benchmark_filter=" + quote_value(filter) + " matches none of the " + std::to_string(points.size()) +
                       " points of this sweep (--benchmark_list_tests without the filter lists them)");
    std::cerr << alias_note;
    if (list) {
      for (const Point* p : selected) std::cout << p->name << "\n";
      return 0;
    }
    const std::string path = f.out.empty() ? default_results_path(results_root() + "/counters", spec.key) : f.out;
    nlohmann::json ctx;
    ctx["kind"] = "counters";
    ctx["counters_schema_version"] = kCountersSchemaVersion;
    ctx["gpu"] = {{"key", spec.key}, {"name", spec.name}};
    ctx["emulated_target"] = *target;
    ctx["device"] = device_json(backend->device());
    ctx["build"] = build_json();
    std::string cmdline;
    for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
    ctx["command_line"] = cmdline;
    ctx["notes"] = "Counts of one run() of each point on the functional CUDA emulation's counting build (deterministic: "
                   "any change is a real change) and a speed-of-light estimate for the GPU (an upper bound from a "
                   "model, not a measurement). docs/design.md, \"Counters\", maps each counter to its Nsight Compute metric.";
    ResultsFile file(path, ctx, f.overwrite);
    file.exit_cleanly_on_interrupt("the counters");
    const auto tally = count_points(*backend, selected, spec, file, std::cout, std::cerr);
    file.set_complete(true);
    file.write();
    std::cout << fmt::format("\ncounted {} point(s): {} ok, {} skipped, {} errors\ncounters: {}\n", selected.size(), tally.ok,
                             tally.skipped, tally.errors, path);
    return tally.errors > 0 ? 1 : 0;
  });
}

namespace {
// `phasebench counters` from a program that is not the counting build: the
// counting build is phasebench-counters, beside it; hand the command over.
int hand_to_counting_build(int argc, char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto sibling = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "phasebench-counters";
  if (!std::filesystem::exists(sibling))
    throw InputError("`counters` runs on phasebench-counters, the counting build of the CUDA emulation, which is not "
                     "beside this program (" + sibling.string() + "); scripts/build makes it where the CUDA toolkit's "
                     "headers and GCC are");
  std::vector<std::string> args{sibling.string()};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::cout << std::flush;
  ::execv(sibling.c_str(), cargs.data());
  throw InputError("cannot run " + sibling.string() + ": " + std::strerror(errno));
}
}  // namespace

int cmd_model(int argc, char** argv) {
  CLI::App app{"Analytical model: FLOPs, bytes, roofline times, TTFT and per-token latency from a config.", "phasebench model"};
  std::string model = "llama-3.1-8b", config, dtype = "bf16", kv_dtype, gpu = "h100-sxm", weight_dtype, routing = "uniform";
  std::int64_t batch = 1, prompt = 1024, context = 0, hidden = 0, layers = 0, generate = 0, tp = 1, new_tokens = 1;
  bool json = false, simple = false, allow_long = false;
  app.add_option("--model", model, "shipped model short name (see `phasebench models`)")->capture_default_str();
  app.add_option("--config", config, "path to a Hugging Face config.json (overrides --model)");
  app.add_option("--batch", batch, "sequences per step")->capture_default_str();
  app.add_option("--prompt", prompt, "prompt length (prefill step)")->capture_default_str();
  app.add_option("--context", context, "tokens in the KV cache at the decode step (default: the prompt length)");
  app.add_option("--new-tokens", new_tokens,
                 "new tokens per sequence in the decode step (default 1; S > 1: speculative verification of S tokens, "
                 "causal among themselves, with logits for each, as the multi-token decode attention benchmarks run them)")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "weights/activations: fp32, fp16, bf16, fp8")->capture_default_str();
  app.add_option("--kv-dtype", kv_dtype, "KV cache element type (default: --dtype, 16-bit for 8-bit weights)");
  app.add_option("--weight-dtype", weight_dtype,
                 "the linear layers' weights: bf16, fp16, fp32, fp8 (128x128 block scales), int4 (groups of 128, fp16 "
                 "scale + zero), mxfp4 (groups of 32, e8m0 scale), nvfp4 (groups of 16, e4m3 scale, fp32 tensor scale); FP4 "
                 "computes against the GPU's FP4 ceiling where it has one, else bf16 (default: the config's "
                 "quantization_config, else --dtype)");
  app.add_option("--generate", generate,
                 "also estimate a whole request: the prompt, then this many generated tokens (TTFT, time per token, "
                 "tokens/s)");
  app.add_option("--routing", routing,
                 "how tokens pick experts (MoE): uniform, zipf:S for expert popularity proportional to 1/rank^S, or "
                 "hot:F for a fraction F of the tokens sent to one hot expert; "
                 "sets how many distinct experts a decode step reads")
      ->capture_default_str();
  app.add_option("--tp", tp,
                 "tensor-parallel GPUs: each op per GPU (heads, MLP and experts split as Megatron-LM/vLLM do), plus "
                 "the all-reduces timed on the GPU's interconnect from the spec table: its latency (NCCL's tuning model, "
                 "gpus.json) plus the bytes over one direction of the link")
      ->capture_default_str();
  app.add_flag("--allow-long-context", allow_long, "estimate beyond max_position_embeddings (with a warning)");
  std::string collectives;
  app.add_option("--collectives", collectives,
                 "with --tp: a results file of measured collectives (phasebench run --ops collectives or "
                 "collectives_sizes on the GPUs the model runs on): the all-reduces and all-gathers its points cover "
                 "take their measured times, the rest the link model's");
  double power = 0;
  app.add_option("--power", power,
                 "each GPU's power draw in watts (e.g. 700): also predict joules per token for prefill and decode, "
                 "and per byte for decode, at that draw");
  app.add_option("--gpu", gpu, "GPU from the spec table (see `phasebench gpus`)")->capture_default_str();
  app.add_flag("--json", json, "print JSON (fields documented in docs/model-json.md)");
  app.add_flag("--simple", simple, "the simple 12*h^2 weights-only layer model of docs/design.md");
  app.add_option("--hidden", hidden, "hidden size for --simple (default: the model's)");
  app.add_option("--layers", layers, "layers for --simple (default: the model's)");
  // A size flag of 1 or more; the error echoes the value as typed ("00", "-0"), not as converted.
  auto size_flag = [&](std::int64_t v, const std::string& flag) -> std::uint64_t {
    if (v > 0) return static_cast<std::uint64_t>(v);
    const CLI::Option* o = app.get_option_no_throw(flag);
    throw InputError(flag + " must be a positive integer, got " +
                     (o && !o->results().empty() ? o->results().back() : std::to_string(v)));
  };
  return run_command(app, argc, argv, [&]() -> int {
    const auto table = GpuTable::load();
    const auto spec = table.get(gpu);
    const DType t = parse_run_dtype(dtype);
    size_flag(batch, "--batch");
    size_flag(prompt, "--prompt");
    if (context < 0 || app.count("--context")) size_flag(context, "--context");
    if (!config.empty() && !std::filesystem::exists(config))
      throw InputError("--config '" + config + "': no such file; give the path of a Hugging Face config.json");
    if (!simple && (app.count("--hidden") || app.count("--layers")))
      throw InputError(std::string(app.count("--hidden") ? "--hidden" : "--layers") +
                       " sizes the --simple model only; the full model takes its sizes from --model or --config "
                       "(add --simple, or drop it)");
    if (simple) {
      // Given: must be positive; not given: the model's.
      const std::uint64_t h = app.count("--hidden") ? size_flag(hidden, "--hidden") : 0;
      const std::uint64_t n = app.count("--layers") ? size_flag(layers, "--layers") : 0;
      std::uint64_t H = h, N = n;
      if (h == 0 || n == 0) {
        const auto m = load_model(config.empty() ? model : config);
        if (h == 0) H = m.hidden;
        if (n == 0) N = m.layers;
      }
      const auto s = simple_estimate(H, N, static_cast<std::uint64_t>(batch), static_cast<std::uint64_t>(prompt), t);
      if (json) {
        auto j = to_json(s);
        // The GPU's datasheet ridge for the dtype: what compute- and memory-bound are measured against.
        const auto c = spec.ceilings();
        const auto P = c.compute_for(t, CeilingSource::datasheet);
        const auto W = c.bandwidth_for(CeilingSource::datasheet);
        j["gpu"] = spec.key;
        j["ridge_flop_per_byte"] = P && W ? nlohmann::json(P->value / W->value) : nlohmann::json();
        std::cout << j.dump(2) << "\n";
      } else {
        std::cout << to_text(s, &spec);
      }
      return 0;
    }
    auto m = load_model(config.empty() ? model : config);
    m.routing = parse_routing(routing);
    EstimateInputs in;
    in.batch = static_cast<std::uint64_t>(batch);
    in.prompt = static_cast<std::uint64_t>(prompt);
    in.context = context > 0 ? static_cast<std::uint64_t>(context) : in.prompt;
    in.new_tokens = size_flag(new_tokens, "--new-tokens");
    in.dtype = t;
    in.kv_dtype = kv_dtype.empty() ? (element_bytes(t) == 1 ? DType::bf16 : t) : parse_run_dtype(kv_dtype);
    if (!weight_dtype.empty()) in.weights = WeightFormat::parse(weight_dtype);
    if (generate < 0 || app.count("--generate")) size_flag(generate, "--generate");
    in.generate = static_cast<std::uint64_t>(std::max<std::int64_t>(generate, 0));
    in.allow_long_context = allow_long;
    in.tp = size_flag(tp, "--tp");
    if (app.count("--power")) in.power_w = power;
    std::shared_ptr<const MeasuredCurves> curves;
    if (!collectives.empty()) {
      if (in.tp <= 1) throw InputError("--collectives times the collectives of tensor parallelism: give --tp N (N >= 2)");
      curves = std::make_shared<const MeasuredCurves>(
          MeasuredCurves::from_results(read_json_file(collectives, "--collectives"), collectives));
      if (curves->points() == 0)
        throw InputError("--collectives " + collectives +
                         ": no measured point there places on a curve (run phasebench run --backend=cuda --ops "
                         "collectives_sizes --gpus N on the GPUs, then give its file)");
      const DType act = element_bytes(t) == 1 ? DType::bf16 : t;
      in.measured_collectives_from = collectives;
      in.measured_collective = [curves, m, act, kv = in.kv_dtype](const LayerOp& op) -> std::optional<double> {
        const Precision prec{};
        const StepOpView view{op, m, prec, 0, act, kv};
        for (const auto& d : OpRegistry::get().ops()) {
          if (!d.match_step_op) continue;
          const auto where = d.match_step_op(view);
          if (!where) continue;
          const auto hit = curves->at(*where);
          if (hit && hit->time_s > 0) return hit->time_s;
          return std::nullopt;
        }
        return std::nullopt;
      };
    }
    const auto e = estimate(m, spec, in);
    if (json)
      std::cout << to_json(e).dump(2) << "\n";
    else
      std::cout << to_text(e);
    return 0;
  });
}

int cmd_models(int argc, char** argv) {
  CLI::App app{"List the shipped model configs.", "phasebench models"};
  return run_command(app, argc, argv, [&]() -> int {
    std::cout << fmt::format("{:<16} {:<34} {:>14} {:>11} {:>15} {:>10}\n", "name", "hugging face repo", "parameters",
                             "published", "active", "published");
    for (const auto& s : shipped_models()) {
      const auto m = load_model(s.name);
      const auto active = active_parameter_count(m) - (s.active_without_input_embedding ? m.vocab * m.hidden : 0);
      std::cout << fmt::format("{:<16} {:<34} {:>14} {:>11} {:>15} {:>10}\n", s.name, s.hf_repo, parameter_count(m),
                               s.published_params ? std::to_string(s.published_params) : s.published,
                               m.experts ? std::to_string(active) + (s.active_without_input_embedding ? "*" : " ")
                                         : std::string("- "),
                               m.experts ? s.published_active : std::string("-"));
    }
    std::cout << "active: parameters one token uses, counted as the vendor counts them (*: without the input "
                 "embedding); parameters: everything the model holds (the text model; DeepSeek-V3 without its MTP "
                 "layer)\n";
    return 0;
  });
}

int cmd_gpus(int argc, char** argv) {
  CLI::App app{"List the GPU spec table (dense datasheet peaks).", "phasebench gpus"};
  return run_command(app, argc, argv, [&]() -> int {
    const auto table = GpuTable::load();
    // Cut to a column's width, so that the table keeps to 160 columns.
    auto cut = [](const std::string& s, std::size_t w) { return s.size() <= w ? s : s.substr(0, w - 2) + ".."; };
    std::cout << fmt::format("{:<16} {:<32} {:>4} {:>5} {:>5} {:>4} {:>5} {:>7} {:>7} {:>7} {:>8} {:>6}  {}\n", "key",
                             "name", "SMs", "L2MiB", "GB/s", "GiB", "TDP W", "bf16 TF", "fp8 TF", "fp6 TF", "fp4 TF",
                             "fp32", "driver name");
    bool any_analytical = false;
    for (const auto& g : table.gpus()) {
      auto peak = [&](DType t) -> std::optional<double> {
        auto it = g.peak_tflops.find(t);
        return it == g.peak_tflops.end() ? std::nullopt : std::optional<double>(it->second);
      };
      // One decimal below 1000 TFLOP/s (19.5, 989.5), none above.
      auto num = [](double v) { return v < 1000 ? fmt::format("{:.1f}", v) : fmt::format("{:.0f}", v); };
      auto tf = [&](DType t) {
        const auto p = peak(t);
        return p ? num(*p) : std::string("-");
      };
      // fp4: NVFP4, with MXFP4 beside it where the two differ; "m" where only MXFP4 runs (AMD).
      const auto nv = peak(DType::nvfp4), mx = peak(DType::mxfp4);
      std::string fp4 = "-";
      if (nv && mx && *nv != *mx)
        fp4 = num(*nv) + "/" + num(*mx);
      else if (nv)
        fp4 = num(*nv);
      else if (mx)
        fp4 = num(*mx) + "m";
      auto count = [](auto v) { return v > 0 ? fmt::format("{}", v) : std::string("-"); };
      std::string driver;
      if (g.analytical_only) {
        driver = "* analytical only";
        any_analytical = true;
      } else if (!g.driver_names.empty()) {
        driver = g.driver_names.front();
        if (g.driver_names.size() > 1) driver += fmt::format(" +{}", g.driver_names.size() - 1);
      }
      std::cout << fmt::format("{:<16} {:<32} {:>4} {:>5} {:>5.0f} {:>4.0f} {:>5} {:>7} {:>7} {:>7} {:>8} {:>6}  {}\n",
                               cut(g.key, 16), cut(g.name, 32), count(g.sm_count),
                               g.l2_bytes ? fmt::format("{:.0f}", g.l2_bytes / 1048576.0) : std::string("-"),
                               g.memory_bandwidth_gbps, g.memory_bytes / 1073741824.0, count(g.tdp_watts),
                               tf(DType::bf16), tf(DType::fp8), tf(DType::fp6), fp4, tf(DType::fp32), cut(driver, 36));
    }
    std::cout << "dense peaks in TFLOP/s; fp4 TF: NVFP4 (a/b: NVFP4/MXFP4 where they differ; m: MXFP4 only); "
                 "L2MiB: the last-level cache; -: not in the table";
    if (any_analytical)
      std::cout << "\n* analytical only (phasebench model --gpu): never matched to a run's device; SMs counts "
                   "compute units (AMD), L2MiB its Infinity Cache";
    std::cout << "\n";
    return 0;
  });
}

int cmd_summary(int argc, char** argv) {
  CLI::App app{"Print the summary of a results file.", "phasebench summary"};
  std::string path;
  app.add_option("file", path, "results JSON")->required();
  return run_command(app, argc, argv, [&]() -> int {
    const auto results = load_results(path);
    if (standing_points(results).empty()) {
      // Nothing to summarise is said, not printed as an empty table.
      const bool finished = run_context(results).value("complete", true) != false;
      throw InputError("results file '" + path + "' holds no points: " +
                       (finished ? std::string("its run selected or finished none")
                                 : std::string("its run was interrupted before its first point finished")));
    }
    std::cout << summarize(results);
    return 0;
  });
}

int cmd_overhead(int argc, char** argv) {
  CLI::App app{"Check that the harness distorts little: the same >= 1 ms operation timed by phasebench and by a bare loop.",
               "phasebench overhead"};
  std::string backend_name = "auto", shape_text, dtype_text;
  int reps = 8, rounds = 16;
  app.add_option("--backend", backend_name, "auto, cuda or cpu");
  app.add_option("--shape", shape_text, "linear shape M,N,K (default: 8192^3 on a GPU, 256x4096x4096 on a CPU)");
  app.add_option("--dtype", dtype_text, "dtype (default bf16 on a GPU, fp32 on a CPU)");
  app.add_option("--reps", reps, "calls per round on each path");
  app.add_option("--rounds", rounds, "rounds (each a bare loop and as many harness samples, order alternating)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_failed(app, e);
  }
  try {
    if (reps < 1 || rounds < 1) throw InputError("--reps and --rounds must be at least 1");
    std::string why;
    auto backend = make_backend(backend_name, &why);
    std::cerr << "phasebench: " << why << "\n";
    if (auto no = backend->cannot_time()) throw InputError("overhead: " + *no);
    const bool gpu = backend->device().backend != "cpu";
    const LinearShape shape =
        shape_text.empty() ? (gpu ? LinearShape{8192, 8192, 8192} : LinearShape{256, 4096, 4096}) : parse_shape(shape_text);
    // The request the free-shape groups make for this shape: their vendor-library row.
    SweepConfig cfg;
    cfg.shapes = {shape};
    cfg.dtypes = {dtype_text.empty() ? (gpu ? DType::bf16 : DType::fp32) : parse_run_dtype(dtype_text)};
    for (const auto& g : OpRegistry::get().groups())
      if (g.from_shapes) cfg.groups.insert(g.name);
    apply_defaults(cfg, *backend);
    const auto pts = build_sweep(cfg, *backend);
    const auto vendor = std::find_if(pts.begin(), pts.end(), [](const Point& p) { return p.request.impl == Impl::blas; });
    if (vendor == pts.end())
      throw InputError("overhead: this backend has no vendor-library row for --shape " + shape_text +
                       " in " + std::string(to_string(cfg.dtypes.front())) + "; try another --dtype");
    const OpRequest r = vendor->request;
    if (auto no = backend->cannot_run(r)) throw InputError("overhead check cannot run: " + *no);
    auto op = backend->prepare(r);
    op->verify();
    op->run();
    backend->synchronize();
    using Clock = std::chrono::steady_clock;
    TimingOptions topts;
    topts.cold_cache = false;  // hot, so both paths see the same cache state
    topts.range_name = "overhead";
    std::vector<OverheadRound> timed;
    for (int round = 0; round < rounds; ++round) {
      OverheadRound o;
      auto bare = [&] {  // back-to-back calls, one synchronisation at the end
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) op->run();
        backend->synchronize();
        o.bare_per_call = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
      };
      auto harness = [&] {
        for (int i = 0; i < reps; ++i) o.harness_samples.push_back(backend->time(*op, topts).seconds);
      };
      if (round % 2 == 0) {
        bare();
        harness();
      } else {
        harness();
        bare();
      }
      timed.push_back(std::move(o));
    }
    const auto c = compare_overhead(timed);
    std::cout << fmt::format("operation: linear M={} N={} K={} {} ({})\n", shape.M, shape.N, shape.K,
                             to_string(r.dtype), backend->device().name);
    std::cout << fmt::format("{} rounds, each {} back-to-back calls and {} harness samples, order alternating\n", c.rounds,
                             reps, reps);
    std::cout << fmt::format("bare loop median   {:.4f} ms per call\n", c.bare_median * 1e3);
    std::cout << fmt::format("phasebench median  {:.4f} ms  ({} samples, cv {:.2f}%)\n", c.harness_median * 1e3, c.samples,
                             c.harness_cv * 100);
    std::cout << fmt::format(
        "difference         {:+.2f}% +- {:.2f}%  (median over rounds of harness mean / bare mean - 1, +- half its\n"
        "                   interquartile range; target: within 2% for operations of 1 ms or more)\n",
        c.paired_difference * 100, c.spread * 100);
    if (c.bare_median < 1e-3) std::cout << "note: this operation is shorter than 1 ms; the 2% target does not apply\n";
    return std::abs(c.paired_difference) <= 0.02 || c.bare_median < 1e-3 ? 0 : 1;
  } catch (const InputError& e) {
    return input_error(e.what());
  } catch (const std::exception& e) {
    return input_error(e.what());
  }
}

int run_cli(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  return run_command(app, argc, argv, body);
}

int phasebench_main(int argc, char** argv) {
  const std::string usage =
      "usage: phasebench <command> [options]\n"
      "commands:\n"
      "  run       run the benchmark sweep (Google Benchmark; writes results JSON)\n"
      "  model     analytical model: FLOPs, bytes, roofline times, TTFT, per-token latency\n"
      "  models    list the shipped model configs\n"
      "  gpus      list the GPU spec table\n"
      "  summary   print the summary of a results file\n"
      "  overhead  compare phasebench's timing with a bare loop\n"
      "  counters  count each point's kernels on the CUDA emulation and estimate its speed of light\n"
      "  serve     serving simulation: TTFT, TPOT, throughput and goodput over concurrency or request rate\n"
      "  --version the version and git commit of this build\n"
      "`phasebench <command> --help` describes each command's options.\n";
  if (argc < 2) {
    std::cerr << usage;
    return 2;
  }
  const std::string cmd = argv[1];
  // The subcommand's own argv: the program name, then its options.
  std::string prog = std::string(argv[0]) + " " + cmd;
  std::vector<char*> sub{prog.data()};
  for (int i = 2; i < argc; ++i) sub.push_back(argv[i]);
  sub.push_back(nullptr);
  const int n = static_cast<int>(sub.size()) - 1;
  try {
    if (cmd == "run") return cmd_run(n, sub.data());
    if (cmd == "model") return cmd_model(n, sub.data());
    if (cmd == "models") return cmd_models(n, sub.data());
    if (cmd == "gpus") return cmd_gpus(n, sub.data());
    if (cmd == "summary") return cmd_summary(n, sub.data());
    if (cmd == "overhead") return cmd_overhead(n, sub.data());
    if (cmd == "serve") return cmd_serve(n, sub.data());
    if (cmd == "counters") return counting_build() ? cmd_counters(n, sub.data()) : hand_to_counting_build(argc, argv);
    if (cmd == "--version" || cmd == "version") {
      std::cout << version_line() << "\n";
      return 0;
    }
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      std::cout << usage;
      return 0;
    }
  } catch (const InputError& e) {
    return input_error(e.what());
  }
  return input_error("unknown command " + quote_value(cmd) +
                     "; the commands are run, model, models, gpus, summary, overhead, counters, serve (phasebench --help)");
}

}  // namespace phasebench
