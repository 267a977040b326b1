// A fused kernel the CPU target compiled (Plan::kernel_fns), run over ATen's
// OpenMP pool (kernel_launch.h).
#pragma once
#include <cstddef>
#include <memory>

#include "executor/thunk.h"
#include "lowering/program.h"

namespace lazyjit::executor {

// The thunk of kernel step `step` of `p` on the CPU. Its run fails (a step
// failure, not a crash) when the kernel has no CPU code (a GPU target's program).
std::unique_ptr<Thunk> cpu_kernel_thunk(const lowering::Program& p, size_t step);

}  // namespace lazyjit::executor
