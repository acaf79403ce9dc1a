// The groups' model selection and axes: which models each group runs for (as the
// closed model lists chose them before), --axis parsing and its errors, the old
// flags as aliases (same points, one note per run), and `run --list-axes`.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cli_test_util.hpp"
#include "phasebench/error.hpp"
#include "sweep.hpp"

using namespace phasebench;

namespace {

const std::vector<std::string> k8b70b{"llama-3.1-8b", "llama-3.1-70b"};

// Which list each group ran for before groups declared their own selection
// (SweepGroup::Models), and that list's rule, kept here as the reference.
enum class Old { linear, attention, moe, mla, none };
const std::map<std::string, Old> kOldKind{
    {"prefill_linear", Old::linear},    {"decode_linear", Old::linear},        {"linear_int4", Old::linear},
    {"kv_append", Old::linear},         {"layer", Old::linear},                {"decode_attention", Old::attention},
    {"decode_attention_multi", Old::attention}, {"prefill_attention", Old::attention}, {"moe", Old::moe},
    {"latent_attention", Old::mla},     {"free", Old::none}};

std::vector<std::string> old_rule(Old kind, const SweepConfig& c, bool gpu) {
  std::vector<std::string> out;
  auto among = [&](auto pred, const std::vector<std::string>& defaults) {
    if (!c.models_given) return defaults;
    std::vector<std::string> v;
    for (const auto& n : c.models)
      if (pred(load_model(n))) v.push_back(n);
    return v;
  };
  switch (kind) {
    case Old::linear:
      return c.models;
    case Old::attention:
      for (const auto& n : gpu && !c.models_given ? k8b70b : c.models)
        if (!load_model(n).uses_mla()) out.push_back(n);
      return out;
    case Old::moe:
      return among([](const ModelConfig& m) { return m.experts > 0; },
                   gpu ? std::vector<std::string>{"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite"}
                       : std::vector<std::string>{"qwen3-30b-a3b"});
    case Old::mla:
      return among([](const ModelConfig& m) { return m.uses_mla(); },
                   gpu ? std::vector<std::string>{"deepseek-v2-lite", "deepseek-v3"}
                       : std::vector<std::string>{"deepseek-v2-lite"});
    case Old::none:
      return {};
  }
  return out;
}

std::vector<std::string> names(const std::vector<Point>& pts) {
  std::vector<std::string> v;
  for (const auto& p : pts) v.push_back(p.name);
  return v;
}

// The old flags, the axes each fed and its defaults (GPU; CPU), as they were
// before --axis: old command lines and default runs must give the same points.
struct OldFlag {
  std::vector<std::string> targets;
  std::string gpu, cpu;
};
const std::map<std::string, OldFlag> kOldFlags{
    {"--batches", {{"prefill_linear.batch", "prefill_attention.batch", "layer.prefill_batch"}, "1,4", "1"}},
    {"--prompts", {{"prefill_linear.prompt", "layer.prompt"}, "128,512,2048,8192", "32,128"}},
    {"--attention-batches", {{"decode_attention.batch", "layer.decode_batch"}, "1,8,32,128,256", "1,8,32"}},
    {"--contexts", {{"decode_attention.context", "layer.context"}, "512,2048,8192,32768", "1024,4096"}},
    {"--page-size", {{"decode_attention.page_size", "decode_attention_multi.page_size", "kv_append.page_size"}, "16", "16"}},
    {"--decode-batches", {{"decode_linear.batch"}, "1,2,4,8,16,32,64,128,256", "1,2,4,8,16,32,64"}},
    {"--int4-batches", {{"linear_int4.batch"}, "1,2,4,8,16", "1,4,16"}},
    {"--int4-group", {{"linear_int4.group"}, "128", "128"}},
    {"--new-tokens", {{"decode_attention_multi.new_tokens"}, "2,4,8", "4"}},
    {"--context-dist", {{"decode_attention_multi.context_dist"}, "lognormal:1", "lognormal:1"}},
    {"--multi-batches", {{"decode_attention_multi.batch"}, "1,32", "8"}},
    {"--multi-contexts", {{"decode_attention_multi.context"}, "4096", "1024"}},
    {"--mla-batches", {{"latent_attention.batch"}, "1,8,64,256", "1,4"}},
    {"--mla-contexts", {{"latent_attention.context"}, "1024,8192", "2048"}},
    {"--mla-page-size", {{"latent_attention.page_size"}, "64", "64"}},
    {"--append-batches", {{"kv_append.batch"}, "1,16,64,256", "1,16,64"}},
    {"--append-context", {{"kv_append.context"}, "4096", "1024"}},
    {"--routing", {{"moe.routing"}, "uniform", "uniform"}},
    {"--moe-decode-batches", {{"moe.batch"}, "1,4,16,64,256,1024,2048,4096,8192", "1,8,64"}},
    {"--moe-prompts", {{"moe.prompt"}, "512,2048,8192", "64"}},
    {"--prefill-attention-prompts", {{"prefill_attention.prompt"}, "512,1024,2048,4096,8192", "128,512"}},
};

std::string defaults_of(const AxisDecl& a, bool gpu) {
  std::vector<std::string> words = gpu ? a.gpu_text : a.cpu_text;
  if (!a.text)
    for (auto v : gpu ? a.gpu_default : a.cpu_default) words.push_back(std::to_string(v));
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : ",") + w;
  return s;
}

// The point names a --benchmark_list_tests run printed, in order.
std::vector<std::string> points(const std::string& out) {
  std::vector<std::string> v;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);)
    if (line.find("/manual_time") != std::string::npos) v.push_back(line);
  return v;
}

}  // namespace

TEST(SweepModels, EachGroupRunsForTheModelsTheOldListsChose) {
  const std::string tiny = std::string(PHASEBENCH_TEST_DATA_DIR) + "/tiny-moe.json";
  std::vector<SweepConfig> configs(5);
  configs[1].models = {"llama-3.1-8b"};
  configs[2].models = {"llama-3.1-8b", "deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "llama-3.1-70b"};
  configs[3].models = {"deepseek-v2-lite"};
  configs[4].models = {tiny, "qwen2.5-7b"};
  for (std::size_t i = 1; i < configs.size(); ++i) configs[i].models_given = true;
  std::set<std::string> seen;
  for (const auto& g : OpRegistry::get().groups()) {
    if (!kOldKind.count(g.name)) continue;  // a group added since: nothing to keep
    seen.insert(g.name);
    for (const bool gpu : {true, false})
      for (std::size_t i = 0; i < configs.size(); ++i)
        EXPECT_EQ(group_models(g, configs[i], gpu), old_rule(kOldKind.at(g.name), configs[i], gpu))
            << g.name << (gpu ? " on a GPU" : " on a CPU") << ", config " << i;
  }
  EXPECT_EQ(seen.size(), kOldKind.size());
}

TEST(SweepModels, DefaultCpuSweepKeepsItsModelsAndPoints) {
  // One default CPU sweep, whole: the moe and latent_attention groups bring their
  // own model, every other group --model's default, and no point is made twice.
  auto b = make_cpu_backend();
  SweepConfig c;
  apply_defaults(c, *b);
  const auto pts = build_sweep(c, *b);
  std::map<std::string, std::set<std::string>> models_by_op;
  for (const auto& p : pts) models_by_op[p.op].insert(p.model);
  EXPECT_EQ(models_by_op["moe"], (std::set<std::string>{"qwen3-30b-a3b"}));
  EXPECT_EQ(models_by_op["latent_attention"], (std::set<std::string>{"deepseek-v2-lite"}));
  EXPECT_EQ(models_by_op["decode_attention"], (std::set<std::string>{"llama-3.1-8b"}));
  EXPECT_EQ(models_by_op["linear"], (std::set<std::string>{"llama-3.1-8b"}));
  auto n = names(pts);
  std::sort(n.begin(), n.end());
  EXPECT_EQ(std::adjacent_find(n.begin(), n.end()), n.end());
}

TEST(SweepAxes, RangesAndLists) {
  EXPECT_EQ(parse_size_list("512:32768:x4", "--x"), (std::vector<std::uint64_t>{512, 2048, 8192, 32768}));
  EXPECT_EQ(parse_size_list("512:30000:x4", "--x"), (std::vector<std::uint64_t>{512, 2048, 8192}));
  EXPECT_EQ(parse_size_list("16:64:+16", "--x"), (std::vector<std::uint64_t>{16, 32, 48, 64}));
  EXPECT_EQ(parse_size_list("1:10:x3,2", "--x"), (std::vector<std::uint64_t>{1, 2, 3, 9}));
  EXPECT_EQ(parse_size_list("7:7:+1", "--x"), (std::vector<std::uint64_t>{7}));
  EXPECT_EQ(parse_size_list("1,8,64", "--x"), (std::vector<std::uint64_t>{1, 8, 64}));
  EXPECT_EQ(parse_size_list("1..256", "--x").size(), 9u);
  EXPECT_EQ(parse_size_list("18446744073709551615:18446744073709551615:x2", "--x").size(), 1u);  // no overflow loop
  for (const std::string bad : {"1:8", "1:8:x1", "8:1:x2", "1:8:+0", "1:8:y2", "1:8:x", "a:8:x2", "1:8:x2:x2",
                                "1:1000000:+1", ":8:x2"}) {
    try {
      parse_size_list(bad, "--axis g.a");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--axis g.a: ", 0), 0u) << e.what();
    }
  }
}

TEST(SweepAxes, SetAxisSetsOneAxisOfOneGroup) {
  SweepConfig c;
  set_axis(c, "decode_attention.batch=1,8,64");
  set_axis(c, "decode_attention.context=512:32768:x4");
  set_axis(c, "moe.routing=uniform,zipf:1.5");
  EXPECT_EQ(c.axes["decode_attention"].sizes["batch"], (std::vector<std::uint64_t>{1, 8, 64}));
  EXPECT_EQ(c.axes["decode_attention"].sizes["context"], (std::vector<std::uint64_t>{512, 2048, 8192, 32768}));
  EXPECT_EQ(c.axes["moe"].texts["routing"], (std::vector<std::string>{"uniform", "zipf:1.5"}));
  EXPECT_FALSE(c.axes.count("layer"));  // layer.context is its own axis
  set_axis(c, "decode_attention.batch=2");  // the last one counts
  EXPECT_EQ(c.axes["decode_attention"].sizes["batch"], (std::vector<std::uint64_t>{2}));
  // Only that group's points change.
  auto b = make_cpu_backend();
  apply_defaults(c, *b);
  c.groups = {"decode_attention", "decode_attention_multi"};
  for (const auto& p : build_sweep(c, *b))  // decode_attention_multi keeps its CPU default, 8
    EXPECT_EQ(p.args.at("batch"), p.args.count("new_tokens") ? 8u : 2u) << p.name;
}

TEST(SweepAxes, BadAxisNamesWhatIsWrongAndWhatExists) {
  struct Case {
    std::string arg, expect;
  };
  for (const auto& k : std::vector<Case>{
           {"decode_attention", "give GROUP.AXIS=VALUES"},
           {"batch=1", "give GROUP.AXIS=VALUES"},
           {"nope.batch=1", "unknown group 'nope'; the groups are prefill_linear, decode_linear"},
           {"decode_attention.batches=1", "decode_attention has no axis 'batches'; its axes are batch, context, page_size"},
           {"free.batch=1", "free has no axis 'batch'; it has none"},
           {"decode_attention.context=8:2:x2", "--axis decode_attention.context: '8:2:x2' is empty"},
           {"decode_attention.context=", "--axis decode_attention.context: empty list"},
           {"decode_attention.page_size=16,32", "--axis decode_attention.page_size takes one value"},
           {"decode_attention.page_size=10", "--axis decode_attention.page_size must be a positive multiple of 16"},
           {"decode_linear_int4.batch=17", "--axis decode_linear_int4.batch takes batches of 1 to 16, got 17"},
           {"moe.routing=zipf:x", "--axis moe.routing: --routing 'zipf:x'"},
           {"moe.routing=uniform,", "--axis moe.routing: an empty item"},
       }) {
    SweepConfig c;
    try {
      set_axis(c, k.arg);
      ADD_FAILURE() << k.arg << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(k.expect), std::string::npos) << k.arg << ": " << e.what();
    }
  }
}

TEST(SweepAxes, OldFlagsSetTheAxesTheyFedWithTheirDefaults) {
  const auto aliases = axis_aliases();
  ASSERT_EQ(aliases.size(), kOldFlags.size());
  for (const auto& a : aliases) {
    ASSERT_TRUE(kOldFlags.count(a.flag)) << a.flag;
    const auto& old = kOldFlags.at(a.flag);
    std::vector<std::string> targets;
    for (const auto& [g, x] : a.targets) {
      targets.push_back(g + "." + x);
      const AxisDecl* d = OpRegistry::get().find_group(g)->axis(x);
      EXPECT_EQ(defaults_of(*d, true), old.gpu) << g << "." << x;
      EXPECT_EQ(defaults_of(*d, false), old.cpu) << g << "." << x;
    }
    std::sort(targets.begin(), targets.end());
    auto expected = old.targets;
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(targets, expected) << a.flag;
    std::string env = "PHASEBENCH_" + a.flag.substr(2);
    for (auto& ch : env) ch = ch == '-' ? '_' : static_cast<char>(std::toupper(ch));
    EXPECT_EQ(a.env, env);
  }
}

TEST(SweepAxes, AnOldFlagAndItsAxesMakeTheSameSweep) {
  auto b = make_cpu_backend();
  const std::map<std::string, std::string> values{
      {"--int4-group", "64"}, {"--routing", "zipf:1.5,hot:0.5"}, {"--context-dist", "uniform:0.5"}, {"--page-size", "32"},
      {"--mla-page-size", "32"}, {"--new-tokens", "2,3"}, {"--append-context", "100"}, {"--multi-contexts", "16,32"}};
  for (const auto& a : axis_aliases()) {
    const std::string v = values.count(a.flag) ? values.at(a.flag) : "3,16";
    SweepConfig by_flag, by_axis;
    for (SweepConfig* c : {&by_flag, &by_axis}) c->models = {"llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v2-lite"};
    const auto replacement = set_alias(by_flag, a, v);
    for (const auto& [g, x] : a.targets) {
      set_axis(by_axis, g + "." + x + "=" + v);
      EXPECT_NE(replacement.find("--axis " + g + "." + x + "=" + v), std::string::npos) << replacement;
    }
    apply_defaults(by_flag, *b);
    apply_defaults(by_axis, *b);
    const auto pf = names(build_sweep(by_flag, *b)), pa = names(build_sweep(by_axis, *b));
    EXPECT_EQ(pf, pa) << a.flag;
    // And the value took: the sweep differs from the default one.
    SweepConfig plain;
    plain.models = by_flag.models;
    apply_defaults(plain, *b);
    EXPECT_NE(pf, names(build_sweep(plain, *b))) << a.flag << " changed nothing";
  }
}

TEST(SweepAxesCli, OldFlagsStillWorkAndSayOnceWhatReplacesThem) {
  const std::string base = "run --backend=cpu --model llama-3.1-8b --benchmark_list_tests ";
  const std::string ops = "--ops decode_attention,kv_append,layer ";
  const auto old = test::run_cli(base + ops + "--contexts 64,128 --attention-batches 2 --page-size 32 --append-batches 3");
  const auto axes = test::run_cli(base + ops +
                                  "--axis decode_attention.context=64,128 --axis layer.context=64:128:x2 "
                                  "--axis decode_attention.batch=2 --axis layer.decode_batch=2 "
                                  "--axis decode_attention.page_size=32 --axis kv_append.page_size=32 "
                                  "--axis decode_attention_multi.page_size=32 --axis kv_append.batch=3");
  ASSERT_EQ(old.status, 0) << old.out;
  ASSERT_EQ(axes.status, 0) << axes.out;
  EXPECT_FALSE(points(old.out).empty());
  EXPECT_EQ(points(old.out), points(axes.out));
  // One note, naming each old flag and its replacement; none for --axis.
  std::size_t notes = 0;
  for (std::size_t at = 0; (at = old.out.find("old flag", at)) != std::string::npos; ++at) ++notes;
  EXPECT_EQ(notes, 1u) << old.out;
  for (const std::string s : {"--contexts", "--attention-batches", "--page-size", "--append-batches",
                              "--axis decode_attention.context=64,128 --axis layer.context=64,128",
                              "--axis kv_append.batch=3"})
    EXPECT_NE(old.out.find(s), std::string::npos) << s << "\n" << old.out;
  EXPECT_EQ(axes.out.find("old flag"), std::string::npos) << axes.out;
  // Bad input after an old flag stays one line: the note waits until the input has passed.
  const auto bad = test::run_cli("run --backend=nosuch --contexts 64");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  // Their environment variables too.
  const auto env = test::run_cli(base + "--ops kv_append", "PHASEBENCH_APPEND_BATCHES=3");
  ASSERT_EQ(env.status, 0) << env.out;
  EXPECT_NE(env.out.find("--append-batches (PHASEBENCH_APPEND_BATCHES) is an old flag"), std::string::npos) << env.out;
  EXPECT_NE(env.out.find("kv_append/llama-3.1-8b/fp32/batch:3/"), std::string::npos) << env.out;
}

TEST(SweepAxesCli, AGroupsFormerNameStillWorksAndSaysOnceWhatItIsNow) {
  // decode_linear_int4 is linear_int4 since one name per operation: --ops and --axis
  // take the old name for one release, give the same points, and say so once.
  const std::string base = "run --backend=cpu --model llama-3.1-8b --benchmark_list_tests ";
  const auto old = test::run_cli(base + "--ops decode_linear_int4 --axis decode_linear_int4.batch=4");
  const auto now = test::run_cli(base + "--ops linear_int4 --axis linear_int4.batch=4");
  ASSERT_EQ(old.status, 0) << old.out;
  ASSERT_EQ(now.status, 0) << now.out;
  EXPECT_FALSE(points(now.out).empty());
  EXPECT_EQ(points(old.out), points(now.out));
  EXPECT_NE(points(now.out).front().find("decode/linear_int4/llama-3.1-8b."), std::string::npos) << now.out;
  EXPECT_NE(points(now.out).front().find("/batch:4/"), std::string::npos) << now.out;
  std::size_t notes = 0;
  for (std::size_t at = 0; (at = old.out.find("is now called linear_int4", at)) != std::string::npos; ++at) ++notes;
  EXPECT_EQ(notes, 1u) << old.out;
  EXPECT_EQ(now.out.find("is now called"), std::string::npos) << now.out;
}

TEST(SweepAxesCli, ListAxesShowsEveryGroupAndRunsNothing) {
  const auto r = test::run_cli("run --list-axes");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const auto& g : OpRegistry::get().groups()) {
    EXPECT_NE(r.out.find("\n" + g.name + ": "), std::string::npos) << g.name;
    for (const auto& a : g.axes) EXPECT_NE(r.out.find("  " + a.name + " "), std::string::npos) << g.name << "." << a.name;
  }
  EXPECT_NE(r.out.find("512,2048,8192,32768 | 1024,4096"), std::string::npos) << r.out;  // decode_attention.context
  EXPECT_NE(r.out.find("; old: --contexts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("without --model: mixtral-8x7b,qwen3-30b-a3b,deepseek-v2-lite | qwen3-30b-a3b"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("phasebench: "), std::string::npos) << "chose a backend or ran: " << r.out;
}

TEST(SweepAxesCli, BadAxisIsOneLineAndExitStatus2) {
  for (const std::string arg : {"nope.batch=1", "decode_attention.batches=1", "decode_attention.context=8:2:x2",
                                "decode_attention", "moe.routing=zipf:x", "decode_attention.page_size=10"}) {
    const auto r = test::run_cli("run --backend=cpu --axis " + arg + " --verify-only");
    EXPECT_EQ(r.status, 2) << arg << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << arg << ": " << r.out;
    EXPECT_EQ(r.out.rfind("phasebench: error: --axis", 0), 0u) << arg << ": " << r.out;
  }
}
