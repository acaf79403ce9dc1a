// The phasebench program: dispatches to a subcommand (commands.hpp); any error that
// reaches here is one line and a non-zero exit status, never a crash.
#include <exception>
#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  try {
    return phasebench::phasebench_main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "phasebench: error: " << e.what() << "\n";
    return 1;
  }
}
