#include "executor/collective_step.h"

#include <chrono>
#include <variant>

#include "debug/metrics.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

namespace {

using Op = Collective::Op;

// The ops tracer/collectives.cpp records, and the form a program runs.
// `attrs`: the node's attributes (its op's name, then the schema's arguments).
struct Named {
  const char* name;
  const char* start;
  Op op;
  size_t attrs;
};
constexpr Named kCollectives[] = {
    {"lazyjit_c10d::all_reduce", "lazyjit_c10d::all_reduce_start", Op::AllReduce, 4},
    {"lazyjit_c10d::all_gather_into_tensor", "lazyjit_c10d::all_gather_into_tensor_start", Op::AllGather, 4},
    {"lazyjit_c10d::reduce_scatter_tensor", "lazyjit_c10d::reduce_scatter_tensor_start", Op::ReduceScatter, 5},
    {"lazyjit_c10d::broadcast", "lazyjit_c10d::broadcast_start", Op::Broadcast, 4},
    {"lazyjit_c10d::scatter", "lazyjit_c10d::scatter_start", Op::Scatter, 4},
    {"lazyjit_c10d::gather", "lazyjit_c10d::gather_start", Op::Gather, 4},
    {"lazyjit_c10d::reduce", "lazyjit_c10d::reduce_start", Op::Reduce, 5},
    {"lazyjit_c10d::all_to_all_single", "lazyjit_c10d::all_to_all_single_start", Op::AllToAllSingle, 5},
    {"lazyjit_c10d::send", "lazyjit_c10d::send_start", Op::Send, 5},
    {"lazyjit_c10d::recv", "lazyjit_c10d::recv_start", Op::Recv, 5},
};

const Named& named(Op op) {
  for (const Named& c : kCollectives)
    if (c.op == op) return c;
  return kCollectives[0];
}

// The started form when registered, else the op itself (which waits); throws
// when neither is.
c10::OperatorHandle resolve(Op op) {
  auto& d = c10::Dispatcher::singleton();
  if (auto h = d.findSchema({named(op).start, ""})) return *h;
  return d.findSchemaOrThrow(named(op).name, "");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::optional<Collective> decode_collective(const ir::Graph& g, const ir::Node& n) {
  if (n.kind != ir::OpKind::Aten || n.attrs.empty() || n.operands.size() != 1 || n.outputs.size() != 1)
    return std::nullopt;
  const auto* name = std::get_if<std::string>(&n.attrs[0].value);
  if (!name) return std::nullopt;
  const Named* known = nullptr;
  for (const Named& c : kCollectives)
    if (*name == c.name) known = &c;
  if (!known) return std::nullopt;
  // The schema's arguments, attrs[1] on: the input, then the op's own.
  if (n.attrs.size() != known->attrs || g.producer(n.operands[0]).kind == ir::OpKind::Scalar) return std::nullopt;
  const auto* input = std::get_if<ir::OperandRef>(&n.attrs[1].value);
  if (!input || input->index != 0) return std::nullopt;
  Collective c;
  c.op = known->op;
  auto str = [&](size_t i, std::string& to) {
    const auto* s = std::get_if<std::string>(&n.attrs[i].value);
    if (s) to = *s;
    return s != nullptr;
  };
  auto int64 = [&](size_t i, int64_t& to) {
    const auto* v = std::get_if<int64_t>(&n.attrs[i].value);
    if (v) to = *v;
    return v != nullptr;
  };
  auto ints = [&](size_t i, std::vector<int64_t>& to) {
    const auto* v = std::get_if<std::vector<int64_t>>(&n.attrs[i].value);
    if (v) to = *v;
    return v != nullptr;
  };
  bool ok = false;
  switch (c.op) {
    case Op::AllReduce: ok = str(2, c.reduce_op) && str(3, c.group); break;
    case Op::AllGather: ok = int64(2, c.group_size) && str(3, c.group); break;
    case Op::ReduceScatter: ok = str(2, c.reduce_op) && int64(3, c.group_size) && str(4, c.group); break;
    case Op::Broadcast: ok = int64(2, c.src) && str(3, c.group); break;
    case Op::Scatter:
    case Op::Gather: ok = int64(2, c.peer) && str(3, c.group); break;
    case Op::Reduce: ok = str(2, c.reduce_op) && int64(3, c.peer) && str(4, c.group); break;
    case Op::AllToAllSingle: ok = ints(2, c.output_splits) && ints(3, c.input_splits) && str(4, c.group); break;
    case Op::Send:
    case Op::Recv: ok = int64(2, c.peer) && int64(3, c.tag) && str(4, c.group); break;
  }
  if (!ok) return std::nullopt;
  return c;
}

CollectiveStep::CollectiveStep(const ir::Graph& g, const ir::Node& n, Collective c)
    : c_(std::move(c)), start_op_(resolve(c_.op)), in_(n.operands.at(0)), out_(n.outputs.at(0)),
      out_type_(g.value(out_).type) {
  const ir::TensorType& in_type = g.value(in_).type;
  may_reuse_input_ = c_.op == Op::AllReduce && c_.reduce_op != "avg" && in_type.sizes == out_type_.sizes &&
                     in_type.strides == out_type_.strides;
}

void CollectiveStep::start(std::vector<at::Tensor>& env, bool reuse_input) const {
  if (reuse_input) {
    static const c10::OperatorHandle all_reduce_ =
        c10::Dispatcher::singleton().findSchemaOrThrow("_c10d_functional::all_reduce_", "");
    auto t0 = std::chrono::steady_clock::now();
    torch::jit::Stack stack{env[in_], c_.reduce_op, c_.group};
    all_reduce_.callBoxed(&stack);
    env[out_] = env[in_];
    debug::Metrics::get().time("collective all_reduce", ms_since(t0));
    return;
  }
  torch::jit::Stack stack{env[in_]};
  switch (c_.op) {
    case Op::AllReduce: stack.insert(stack.end(), {c_.reduce_op, c_.group}); break;
    case Op::AllGather: stack.insert(stack.end(), {c_.group_size, c_.group}); break;
    case Op::ReduceScatter: stack.insert(stack.end(), {c_.reduce_op, c_.group_size, c_.group}); break;
    case Op::Broadcast: stack.insert(stack.end(), {c_.src, c_.group}); break;
    case Op::Scatter:
    case Op::Gather: stack.insert(stack.end(), {c_.peer, c_.group}); break;
    case Op::Reduce: stack.insert(stack.end(), {c_.reduce_op, c_.peer, c_.group}); break;
    case Op::AllToAllSingle: stack.insert(stack.end(), {c_.output_splits, c_.input_splits, c_.group}); break;
    case Op::Send:
    case Op::Recv: stack.insert(stack.end(), {c_.peer, c_.tag, c_.group}); break;
  }
  start_op_.callBoxed(&stack);
  const c10::IValue& r = stack.at(0);
  if (r.isTensor() && r.toTensor().defined()) env[out_] = with_layout(r.toTensor(), out_type_);
}

void wait_collective(at::Tensor& t) {
  static const c10::OperatorHandle wait =
      c10::Dispatcher::singleton().findSchemaOrThrow("_c10d_functional::wait_tensor", "");
  auto t0 = std::chrono::steady_clock::now();
  torch::jit::Stack stack{t};
  wait.callBoxed(&stack);
  debug::Metrics::get().time("collective wait", ms_since(t0));
}

}  // namespace lazyjit::executor
