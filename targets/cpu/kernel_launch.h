// Runs one compiled fused kernel over its iteration space: allocates its stores
// from the buffer pool and splits the outer dim over up to `threads` threads of
// ATen's OpenMP pool when the kernel is big enough to pay for it.
#pragma once
#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "lowering/plan.h"

namespace lazyjit::executor {

// `dims` is lowering::kernel_dims(k) (the caller computes it once per program).
// A store listed in `into` (Bindings::into) goes into that tensor when it is
// contiguous and of the value's type.
void launch_kernel(const lowering::FusedKernel& k, lowering::KernelFn fn, const int64_t* dims, const ir::Graph& g,
                   std::vector<at::Tensor>& env, const std::vector<int64_t>& scalars, int threads,
                   const std::vector<std::pair<ir::ValueId, at::Tensor>>& into = {});

}  // namespace lazyjit::executor
