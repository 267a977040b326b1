// A program made ready to run: built once from a lowering::Program (ATen
// operators resolved, their arguments prepared), then run any number of times,
// from any number of threads, on CPU tensors.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "executor/aten_call.h"
#include "lowering/program.h"

namespace lazyjit::executor {

struct Bindings {
  std::vector<at::Tensor> inputs;   // by input index; dense, with the declared strides
  std::vector<int64_t> scalars;     // by argument index: a double's bits or an int64 (bridge/aten_ir.h)
};

class Executable {
 public:
  // Throws when an ATen step names an operator that does not exist.
  explicit Executable(std::shared_ptr<const lowering::Program> program);

  // Returns one CPU tensor per graph output, dense with the declared strides.
  // Kernels split over `threads` oneTBB workers.
  std::vector<at::Tensor> run(const Bindings& bindings, int threads) const;

  const lowering::Program& program() const { return *program_; }

 private:
  std::shared_ptr<const lowering::Program> program_;
  std::vector<std::unique_ptr<AtenCall>> aten_;  // per step; null for other kinds
};

}  // namespace lazyjit::executor
