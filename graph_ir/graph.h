// A typed SSA graph recorded op by op, with its hashes kept up to date as it grows.
//
// Two hashes, so that a cache miss on a known structure can be explained and
// dynamic dims can later become a policy:
//  - structure: op kinds, dtypes, wiring (by value number), non-shape attributes,
//    the kinds of scalar arguments (not their values), and the outputs;
//  - shape signature: every size, stride and shape-like attribute.
// Inputs are numbered by first use, so the same program gives the same hashes in
// any process. A third, independent hash of both streams confirms a cache hit.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "graph_ir/dtype.h"
#include "graph_ir/hash.h"
#include "graph_ir/op_kind.h"

namespace lazyjit::ir {

using ValueId = uint32_t;

struct TensorType {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // dense: a permutation of the contiguous strides
  int64_t numel() const;
  bool is_contiguous() const;
  std::string str() const;
  bool operator==(const TensorType&) const = default;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

// An operand reference inside an attribute (ATen ops keep their schema's
// argument order; tensor arguments point at the node's operands).
struct OperandRef {
  int32_t index;
  bool operator==(const OperandRef&) const = default;
};
// A list of operands; -1 stands for None in a `Tensor?[]` list.
struct OperandListRef {
  std::vector<int32_t> indices;
  bool operator==(const OperandListRef&) const = default;
};

using AttrValue = std::variant<std::monostate, bool, int64_t, double, std::string,
                               std::vector<int64_t>, std::vector<double>, OperandRef,
                               OperandListRef>;

struct Attr {
  AttrValue value;
  bool shape_like = false;  // hashed into the shape signature, not the structure
  bool operator==(const Attr&) const = default;
};

struct Node {
  OpKind kind;
  std::vector<ValueId> operands;
  std::vector<Attr> attrs;
  std::vector<ValueId> outputs;  // consecutive value ids
};

struct Value {
  TensorType type;
  uint32_t node;   // producing node
  uint32_t index;  // which output of it
};

struct GraphHashes {
  Hash128 structure;
  uint64_t shape = 0;
  uint64_t confirm = 0;  // independent hash over both streams
  bool operator==(const GraphHashes&) const = default;
};

class Graph {
 public:
  Graph();
  // Makes this graph equal to a new one (same hashes, no nodes), keeping the
  // memory of its node and value lists: a recorder records a graph per sync,
  // each about the size of the last.
  void clear();

  // Sources.
  ValueId add_input(const TensorType& type);                     // numbered by call order
  // `wrapped`: a Python number wrapped as a 0-d tensor (it promotes like one).
  ValueId add_scalar(DType dtype, bool wrapped = false);         // numbered by call order
  // Any other op; the output types come from the caller (shape inference lives in
  // the tracer, which has PyTorch's meta kernels).
  std::vector<ValueId> add_node(OpKind kind, std::vector<ValueId> operands,
                                std::vector<Attr> attrs, std::vector<TensorType> output_types);
  ValueId add_node1(OpKind kind, std::vector<ValueId> operands, std::vector<Attr> attrs,
                    TensorType output_type);
  void add_output(ValueId v);
  // The graph before its outputs were added: a sync adds them last, and a sync
  // that is interrupted takes them back (rewind_outputs) to record on.
  struct OutputMark {
    size_t count;
    StreamHasher structure, confirm;
  };
  OutputMark output_mark() const { return {outputs_.size(), structure_, confirm_}; }
  void rewind_outputs(const OutputMark& m);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Value>& values() const { return values_; }
  const Value& value(ValueId v) const { return values_.at(v); }
  const Node& producer(ValueId v) const { return nodes_.at(values_.at(v).node); }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }    // by input index
  const std::vector<ValueId>& scalars() const { return scalars_; }  // by argument index

  // O(1): the digests of the streams kept up to date by every add_*.
  GraphHashes hashes() const;

  std::string str() const;
  // Empty when the graph is well formed; otherwise the first problem found.
  std::string verify() const;

 private:
  void hash_node(const Node& n);

  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<ValueId> inputs_, scalars_, outputs_;
  StreamHasher structure_, shape_, confirm_;
};

// Per node: whether some graph output depends on it.
std::vector<bool> live_nodes(const Graph& g);
// Per node: whether one of `roots` depends on it.
std::vector<bool> live_nodes(const Graph& g, const std::vector<ValueId>& roots);

}  // namespace lazyjit::ir
