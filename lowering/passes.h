// Graph-to-graph passes, run by name before planning.
//
// Every pass returns a new graph that computes the same outputs from the same
// program arguments. Its inputs and scalars keep their numbering (the executor
// binds them by index), and its outputs keep their order, though two outputs may
// become one value. Passes never read argument values: a scalar is a runtime
// argument by design, so a changed learning rate never recompiles. Constant
// folding therefore works on what the structure alone decides, and loop-invariant
// scalar arithmetic is hoisted out of kernel loops by the code generator.
//
// The pipeline (lower.cpp) is: dce, fold, cse, dce, gemm_epilogue
// (gemm_epilogue.h), then planning (fuse, buffers; plan.h). LAZYJIT_DUMP writes the graph after every pass;
// LAZYJIT_DISABLE_PASSES=fold,cse,... skips passes by name, for bisecting.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lowering/pass_rules.h"

#include "graph_ir/graph.h"

namespace lazyjit::lowering {

// Where a pass put each value of the graph it ran on: per value, the value of
// its result that computes it (itself renamed, or what it was merged or folded
// into), or kDropped when no output depends on it.
inline constexpr ir::ValueId kDropped = ~ir::ValueId{0};
using ValueMap = std::vector<ir::ValueId>;

// Drops nodes no output depends on (sources are kept: they are the interface).
ir::Graph eliminate_dead_code(const ir::Graph& g, ValueMap* map = nullptr);

// Merges nodes with the same op, operands, attributes and result types. Every
// node kind is pure (random draws happen at trace time; ATen nodes that mutate
// work on clones), so this is legal for ATen steps too.
ir::Graph eliminate_common_subexpressions(const ir::Graph& g, ValueMap* map = nullptr);

// Constant folding and identities decided by the structure alone:
//  - casts that change nothing, and round trips through a wider type
//    (bf16 -> f32 -> bf16, f32 -> f64 -> f32, int32 -> int64 -> int32, ...);
//  - views that read their whole operand in its own layout (view_is_identity);
//  - neg(neg(x)), logical_not(logical_not(bool x)), where(c, x, x),
//    maximum(x, x), minimum(x, x), clamp with no bounds.
// A rewrite applies only when the result's type (dtype, sizes, strides) equals
// the replaced value's.
ir::Graph fold_constants(const ir::Graph& g, ValueMap* map = nullptr);

// Whether an AsStrided view of `src` (its node's `attrs`: sizes, strides,
// offset) reads all of src in src's own layout, so that fold replaces it by
// src. A size-1 dim is never stepped: its stride does not matter. (The shape
// binder asks the same of a fold at new sizes.)
bool view_is_identity(const ir::TensorType& src, const std::vector<ir::Attr>& attrs);

struct GraphPass {
  const char* name;
  ir::Graph (*run)(const ir::Graph&, const PassRules&, ValueMap*);
};
// The graph passes in pipeline order.
const std::vector<GraphPass>& graph_pipeline();


// Runs the pipeline, skipping `disabled` names, calling `after` with each
// pass's name and result (for dumps). `map`, when not null, gets where each
// value of `g` went in the result (all passes composed). `rules`: those of
// where the program's ATen steps will run (pass_rules.h).
ir::Graph run_graph_passes(
    ir::Graph g, const std::vector<std::string>& disabled,
    const std::function<void(const std::string& pass, const ir::Graph&)>& after = {}, ValueMap* map = nullptr,
    const PassRules& rules = cpu_library_rules());

}  // namespace lazyjit::lowering
