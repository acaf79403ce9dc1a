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
