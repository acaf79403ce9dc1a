#pragma once
// pb_emu test support, for tests that make launches fail on purpose: on a GPU a
// failed kernel leaves the context unusable (a sticky error); the emulation can
// forget it, so that the next test in the same process starts clean.
namespace pb_emu {
void reset_after_failure_for_tests();
}  // namespace pb_emu
