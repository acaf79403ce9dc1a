#pragma once
// pb_emu test support. For tests that make launches fail on purpose: on a GPU a
// failed kernel leaves the context unusable (a sticky error); the emulation can
// forget it, so that the next test in the same process starts clean. And what
// is still queued on the (lazy) streams, to test that a caller waits for it.
#include <cstddef>

namespace pb_emu {
void reset_after_failure_for_tests();
// Launches, copies and memsets enqueued on any stream and not yet run.
std::size_t queued_work_for_tests();
// Sets how many devices the emulation has (as PB_EMU_DEVICES would, 1 to 8), so one
// test process can check one device and several; device 0 becomes current if the
// current one is gone.
void set_device_count_for_tests(int n);
}  // namespace pb_emu
