// torch.distributed's functional collectives (`_c10d_functional::*`, what
// DTensor and traced code call) on lazyjit tensors: PrivateUse1 kernels that
// record the collective (tracer/collectives.h); `wait_tensor` is the identity
// (the value is the graph's). The point-to-point ones (isend, irecv,
// batch_p2p_ops) raise, naming the op: they take global ranks, which a
// group's backend does not map.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "tracer/collectives.h"

namespace lazyjit::tracer::collectives {
namespace {

using torch::jit::Stack;

// Boxed kernels: the group argument is `Any`.
void functional_all_reduce(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  torch::jit::push(s, all_reduce(args[0].toTensor(), args[1].toStringRef(), group_name_of(args[2])));
}

void functional_all_reduce_(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  at::Tensor t = args[0].toTensor();
  t.copy_(all_reduce(t, args[1].toStringRef(), group_name_of(args[2])));
  torch::jit::push(s, t);
}

void functional_all_reduce_coalesced(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  std::string g = group_name_of(args[2]);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorVector()) out.push_back(all_reduce(t, args[1].toStringRef(), g));
  torch::jit::push(s, out);
}

void functional_all_reduce_coalesced_(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  std::string g = group_name_of(args[2]);
  std::vector<at::Tensor> ts = args[0].toTensorVector();
  for (at::Tensor& t : ts) t.copy_(all_reduce(t, args[1].toStringRef(), g));
  torch::jit::push(s, ts);
}

void functional_all_gather(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  torch::jit::push(s, all_gather(args[0].toTensor(), args[1].toInt(), group_name_of(args[2])));
}

void functional_all_gather_out(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  at::Tensor out = args[3].toTensor();
  at::Tensor r = all_gather(args[0].toTensor(), args[1].toInt(), group_name_of(args[2]));
  const char* out_what = "all_gather_into_tensor_out";
  TORCH_CHECK(out.sizes() == r.sizes(), "lazyjit: ", out_what, ": out has sizes ", out.sizes(), ", the result ",
              r.sizes());
  out.copy_(r);
  torch::jit::push(s, out);
}

void functional_all_gather_coalesced(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  std::string g = group_name_of(args[2]);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorVector()) out.push_back(all_gather(t, args[1].toInt(), g));
  torch::jit::push(s, out);
}

void functional_reduce_scatter(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  torch::jit::push(s, reduce_scatter(args[0].toTensor(), args[1].toStringRef(), args[2].toInt(), group_name_of(args[3])));
}

void functional_reduce_scatter_out(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 5);
  at::Tensor out = args[4].toTensor();
  at::Tensor r = reduce_scatter(args[0].toTensor(), args[1].toStringRef(), args[2].toInt(), group_name_of(args[3]));
  const char* out_what = "reduce_scatter_tensor_out";
  TORCH_CHECK(out.sizes() == r.sizes(), "lazyjit: ", out_what, ": out has sizes ", out.sizes(), ", the result ",
              r.sizes());
  out.copy_(r);
  torch::jit::push(s, out);
}

void functional_reduce_scatter_coalesced(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  std::string g = group_name_of(args[3]);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorVector())
    out.push_back(reduce_scatter(t, args[1].toStringRef(), args[2].toInt(), g));
  torch::jit::push(s, out);
}

void functional_broadcast(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  torch::jit::push(s, broadcast(args[0].toTensor(), args[1].toInt(), group_name_of(args[2])));
}

void functional_broadcast_(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  at::Tensor t = args[0].toTensor();
  t.copy_(broadcast(t, args[1].toInt(), group_name_of(args[2])));
  torch::jit::push(s, t);
}

void functional_all_to_all_single(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  auto ints = [](const c10::IValue& v) {
    std::vector<int64_t> r;
    for (const c10::IValue& e : v.toListRef()) r.push_back(e.isSymInt() ? e.toSymInt().expect_int() : e.toInt());
    return r;
  };
  torch::jit::push(s, all_to_all_single(args[0].toTensor(), ints(args[1]), ints(args[2]), group_name_of(args[3])));
}

// The value a recorded collective made is already the graph's: nothing to wait for.
void functional_wait_tensor(const c10::OperatorHandle&, Stack*) {}

void functional_unsupported(const c10::OperatorHandle& op, Stack*) {
  TORCH_CHECK(false, "lazyjit: ", op.schema().name(),
              " on lazyjit tensors is not supported (supported functional collectives: all_reduce, "
              "all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single, and their coalesced and "
              "in-place forms; for point-to-point, torch.distributed's send, recv, isend, irecv)");
}

}  // namespace
}  // namespace lazyjit::tracer::collectives

TORCH_LIBRARY_IMPL(_c10d_functional, PrivateUse1, m) {
  using namespace lazyjit::tracer::collectives;
  using torch::CppFunction;
  m.impl("all_reduce", CppFunction::makeFromBoxedFunction<&functional_all_reduce>());
  m.impl("all_reduce_", CppFunction::makeFromBoxedFunction<&functional_all_reduce_>());
  m.impl("all_reduce_coalesced", CppFunction::makeFromBoxedFunction<&functional_all_reduce_coalesced>());
  m.impl("all_reduce_coalesced_", CppFunction::makeFromBoxedFunction<&functional_all_reduce_coalesced_>());
  m.impl("all_gather_into_tensor", CppFunction::makeFromBoxedFunction<&functional_all_gather>());
  m.impl("all_gather_into_tensor_out", CppFunction::makeFromBoxedFunction<&functional_all_gather_out>());
  m.impl("all_gather_into_tensor_coalesced", CppFunction::makeFromBoxedFunction<&functional_all_gather_coalesced>());
  m.impl("reduce_scatter_tensor", CppFunction::makeFromBoxedFunction<&functional_reduce_scatter>());
  m.impl("reduce_scatter_tensor_out", CppFunction::makeFromBoxedFunction<&functional_reduce_scatter_out>());
  m.impl("reduce_scatter_tensor_coalesced",
         CppFunction::makeFromBoxedFunction<&functional_reduce_scatter_coalesced>());
  m.impl("broadcast", CppFunction::makeFromBoxedFunction<&functional_broadcast>());
  m.impl("broadcast_", CppFunction::makeFromBoxedFunction<&functional_broadcast_>());
  m.impl("wait_tensor", CppFunction::makeFromBoxedFunction<&functional_wait_tensor>());
  m.impl("all_to_all_single", CppFunction::makeFromBoxedFunction<&functional_all_to_all_single>());
  m.impl("isend", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
  m.impl("irecv", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
  m.impl("batch_p2p_ops", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
}

