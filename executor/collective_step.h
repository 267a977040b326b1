// A collective step: an ATen library node of one of the ops tracer/collectives.h
// records (`lazyjit_c10d::all_reduce`, ...), decoded once, when the Executable
// is prepared, into typed attributes, then run as its `_start` form, which hands
// the buffer to the process group's backend and returns without waiting. The
// steps after it that do not read its result run while it is in flight
// (collective_in_flight.h waits). Programs keep collectives in recorded order,
// so every rank starts them in the same order.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::executor {

// What a collective node computes: its op's arguments after the input tensor.
struct Collective {
  enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Scatter, Gather, Reduce, AllToAllSingle, Send, Recv };
  Op op = Op::AllReduce;
  std::string reduce_op;   // AllReduce, ReduceScatter, Reduce: "sum", "avg", ... (_c10d_functional's names)
  int64_t group_size = 0;  // AllGather, ReduceScatter
  int64_t src = 0;         // Broadcast: the source rank
  std::string group;       // the process group, by name
  // Scatter: the source rank; Gather, Reduce: the destination; Send: where it
  // goes; Recv: where it comes from.
  int64_t peer = 0;
  int64_t tag = 0;  // Send, Recv
  std::vector<int64_t> output_splits, input_splits;  // AllToAllSingle: rows from and to each rank
};

// The collective node `n` records, or nullopt when it is not one (any other
// node runs as an AtenCall).
std::optional<Collective> decode_collective(const ir::Graph& g, const ir::Node& n);

class CollectiveStep {
 public:
  // Throws (c10::Error) when the collective's `_start` op is not registered.
  CollectiveStep(const ir::Graph& g, const ir::Node& n, Collective c);

  ir::ValueId input() const { return in_; }
  // Whether it may reduce its input's buffer in place (an all_reduce, not avg,
  // whose result is laid out as its input): when no later step reads the input.
  bool may_reuse_input() const { return may_reuse_input_; }
  // Starts it: env[output] is in flight on return, until wait_collective.
  // `reuse_input`: may_reuse_input() and the input is this step's to overwrite
  // (a dead, contiguous step result): `_c10d_functional::all_reduce_` reduces
  // it where it lies (DDP's bucket, divided by the group size) instead of a copy.
  void start(std::vector<at::Tensor>& env, bool reuse_input) const;

 private:
  Collective c_;
  c10::OperatorHandle start_op_;
  ir::ValueId in_, out_;
  ir::TensorType out_type_;
  bool may_reuse_input_ = false;
};

// Waits for a collective's result (`_c10d_functional::wait_tensor`), timed
// under "collective wait".
void wait_collective(at::Tensor& t);

}  // namespace lazyjit::executor
