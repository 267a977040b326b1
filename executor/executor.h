// Runs a compiled Program on CPU tensors: fused kernels through their JIT-compiled
// entry points (split over oneTBB), library steps through ATen's CPU kernels.
#pragma once
#include <ATen/core/Tensor.h>
#include <vector>

#include "lowering/lower.h"

namespace lazyjit::executor {

struct Bindings {
  std::vector<at::Tensor> inputs;   // by input index; dense, with the declared strides
  std::vector<int64_t> scalars;     // by argument index: a double's bits or an int64
};

// Returns one CPU tensor per graph output, dense with the declared strides.
std::vector<at::Tensor> run(const lowering::Program& program, const Bindings& bindings);

// Threads used for kernels: LAZYJIT_NUM_THREADS, else torch.get_num_threads().
int num_threads();

// Reads a scalar slot as the c10::Scalar it was recorded from.
c10::Scalar scalar_from_slot(int64_t slot, ir::DType dtype);
int64_t slot_from_scalar(const c10::Scalar& s);

at::ScalarType to_aten(ir::DType t);
ir::DType from_aten(at::ScalarType t);

}  // namespace lazyjit::executor
