// Collectives on lazyjit tensors, shared by the files of their concerns:
// recording (collectives.cpp, collectives_rooted.cpp), the kernels a
// program's steps run (collectives_cpu.cpp), `_c10d_functional` on lazyjit
// tensors (collectives_functional.cpp) and the c10d backend of the lazyjit
// device (collectives_backend.cpp). Internal to the tracer.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace lazyjit::tracer::collectives {

// Throws unless `op` is a reduce op (_c10d_functional's string form) lazyjit
// runs on `t`'s dtype.
void check_reduce_op(const std::string& op, const at::Tensor& t);
// c10d's ReduceOp as that string; throws on PREMUL_SUM.
std::string reduce_op_name(const c10d::ReduceOp& op);
// A group argument of _c10d_functional (`Any`): its name, or the name of the
// ProcessGroup object passed; throws when there is no such group.
std::string group_name_of(const c10::IValue& g);
int64_t group_size_of(const std::string& group);
// This process's rank in `group`.
int64_t group_rank_of(const std::string& group);
// The operator `name` ("ns::op" or "ns::op.overload"), looked up once.
const c10::OperatorHandle& handle(const char* name);
// Throws unless `t` is a defined, strided lazyjit tensor; `what` names the collective.
void check_lazy(const at::Tensor& t, const char* what);
// Throws unless `rank` is a rank of `group`; `role` says which ("source").
void check_rank(int64_t rank, const std::string& group, const char* what, const char* role);
// `t`'s sizes with dim 0 times `num` / `den`; throws when it does not divide.
std::vector<int64_t> scaled_dim0(const at::Tensor& t, int64_t num, int64_t den, const char* what);

// Records collective `op_name` (a lazyjit_c10d op) on `args` (its first one the
// lazyjit input) with a result of `sizes` (the input's dtype), and returns the
// result; in step mode runs it at once. The node is never dead code
// (ir::has_effects): it runs at the next sync whether or not its result is read.
at::Tensor record_collective(const char* op_name, torch::jit::Stack args, at::IntArrayRef sizes);

// Runs _c10d_functional op `name` on `args` and, unless `start_only`, waits for
// it; the time is counted under "collective <what>".
at::Tensor run_functional(const char* name, const char* what, torch::jit::Stack args, bool start_only = false);

// ---- What each records: one node, its result a lazyjit tensor --------------
at::Tensor all_reduce(const at::Tensor& t, const std::string& op, const std::string& group);
at::Tensor all_gather(const at::Tensor& t, int64_t size, const std::string& group);
at::Tensor reduce_scatter(const at::Tensor& t, const std::string& op, int64_t size, const std::string& group);
at::Tensor broadcast(const at::Tensor& t, int64_t src, const std::string& group);
// `chunks` is [group size, *shape]: at `src` the chunk for each rank, elsewhere
// any values (they are not read); the result is this rank's chunk, [*shape].
at::Tensor scatter(const at::Tensor& chunks, int64_t src, const std::string& group);
// At `dst`, every rank's `t` stacked ([group size, *t]); elsewhere an empty [0].
at::Tensor gather(const at::Tensor& t, int64_t dst, const std::string& group);
// At `dst`, the reduction of every rank's `t`; elsewhere what the transport
// left in this rank's buffer (as c10d's reduce leaves it on the CPU).
at::Tensor reduce(const at::Tensor& t, const std::string& op, int64_t dst, const std::string& group);
// Rows of `t` (dim 0) split by `in_splits` go to each rank; the result holds
// the rows each rank sent here, `out_splits` of them (empty lists: even splits).
at::Tensor all_to_all_single(const at::Tensor& t, std::vector<int64_t> out_splits, std::vector<int64_t> in_splits,
                             const std::string& group);
// Sends `t` to `dst`; the result is an empty [0] (nothing reads it: the send runs at the next sync).
at::Tensor send(const at::Tensor& t, int64_t dst, int64_t tag, const std::string& group);
// What `src` sent, shaped as `like` (whose values are not read).
at::Tensor recv(const at::Tensor& like, int64_t src, int64_t tag, const std::string& group);

}  // namespace lazyjit::tracer::collectives
