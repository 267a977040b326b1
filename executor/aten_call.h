// One ATen library step, prepared once per program: the operator handle, and
// for each schema argument either a constant IValue or where its value comes
// from at run time (an operand tensor, a scalar slot converted as the schema
// wants, a tensor list). Running it builds the stack without parsing types or
// looking up names.
//
// Every tensor operand reaches the op in its value's declared layout (with_layout,
// executor/tensor_layout.h), never in whatever strides a view step left at run
// time. The tracer declares each operand with the sizes and strides the op saw
// when it was recorded (tracer/aten_node.cpp): a view keeps its own strides
// (no copy), and a value a view was copied into (x.contiguous() of a
// channels-last or expanded x) arrives in the copy's layout, not the view's.
// So an op such as native_group_norm_backward, which reads dY and X in X's
// suggested memory format without checking dY's, computes what eager does.
//
// Mutable arguments are cloned first, so the node stays functional: its outputs
// are the clones, then the op's returns.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "executor/gemm.h"
#include "graph_ir/graph.h"

namespace lazyjit::executor {

class AtenCall {
 public:
  // Throws (c10::Error) when the schema named by the node does not exist.
  // `device`: where the step runs (its Device arguments name it; the tracer
  // recorded the lazyjit device). `onednn_gemms`: mm and addmm may run through
  // oneDNN (executor/gemm.h).
  AtenCall(const ir::Graph& g, const ir::Node& n, c10::Device device, bool onednn_gemms = false);
  void run(const ir::Graph& g, const ir::Node& n, std::vector<at::Tensor>& env,
           const std::vector<int64_t>& scalars) const;

 private:
  // How a scalar operand is passed: as a double, as a Scalar, or as a 0-d tensor.
  enum class ScalarAs { Double, Number, Tensor };
  struct Operand {
    ir::ValueId value;
    int32_t scalar_slot = -1;  // >= 0: a program scalar argument
    ir::DType dtype = ir::DType::Float32;
    bool wrapped = false;      // 0-d tensor made from a Python number
    ScalarAs as = ScalarAs::Tensor;
  };
  struct Arg {
    enum class Kind { Constant, Operand, TensorList, OptionalTensorList } kind = Kind::Constant;
    c10::IValue constant;
    std::vector<Operand> operands;  // Operand: one; lists: one per element (value -1: None)
    bool mutated = false;           // cloned before the call
  };
  c10::IValue operand_value(const ir::Graph& g, const Operand& o, const std::vector<at::Tensor>& env,
                            const std::vector<int64_t>& scalars) const;

  c10::OperatorHandle op_;
  std::vector<Arg> args_;
  std::vector<bool> return_aliases_;  // per return: it is a mutated argument (bound by the clone)
  Gemm gemm_ = Gemm::None;            // mm / addmm / bmm that may run lazyjit's GEMM paths (gemm.h)
};

}  // namespace lazyjit::executor
