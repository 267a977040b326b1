// Whether a step may write into a value's buffer in place: the in-place rule
// the view scatter (view_thunk.h) and an all_reduce (collective_thunk.h) share.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

#include "lowering/program.h"

namespace lazyjit::executor {

// Value `v` is a step result (not an input: the caller's data) that no step
// after `step` reads (the buffer plan frees it after `step`, and a view of it
// would keep it), held by nothing else, with its declared layout: `step` may
// write its buffer in place.
bool dead_after(const lowering::Program& p, size_t step, ir::ValueId v, const std::vector<at::Tensor>& env);

}  // namespace lazyjit::executor
