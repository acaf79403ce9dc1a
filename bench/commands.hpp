#pragma once
// The subcommands of `phasebench`. Each returns the process exit status and
// reports bad input as one line naming the problem (exit 2).
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace phasebench {

int cmd_run(int argc, char** argv);       // the benchmark sweep (Google Benchmark)
int cmd_model(int argc, char** argv);     // the analytical model
int cmd_models(int argc, char** argv);    // shipped model configs
int cmd_gpus(int argc, char** argv);      // the GPU spec table
int cmd_summary(int argc, char** argv);   // summary of a results file
int cmd_overhead(int argc, char** argv);  // harness time vs a bare loop
int cmd_counters(int argc, char** argv);  // counted memory traffic and the speed-of-light estimate
int cmd_serve(int argc, char** argv);     // the serving simulation (serve.cpp)
int phasebench_main(int argc, char** argv);
// Parses a subcommand's options, then runs `body`; usage errors and bad input end
// with one "error:" line and status 2.
int run_cli(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace phasebench
