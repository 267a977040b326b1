// A plan made for one graph, re-derived for another of the same structure with
// other sizes, without fusing again: the same steps, and each kernel the same
// nodes, loads and stores, with its iteration space, strides and offsets taken
// from the new graph's types and coalesced as plan_graph coalesces (plan.h),
// its row schedule made again, and the buffer plan redone. Defined in
// plan_bind.cpp, with the planner's loads and coalescing (plan_internal.h).
//
// The result keeps `plan`'s kernel_fns: they are valid for it only when each
// kernel's generic key (kernel_key.h) is unchanged and its code is
// shape-generic; the caller checks (runtime/shape_binder.h).
#pragma once
#include <optional>

#include "graph_ir/graph.h"
#include "lowering/plan.h"

namespace lazyjit::lowering {

// Before: `g` has the structure of the graph `plan` was made for (after the
// graph passes, the same nodes and wiring). nullopt when the fusion no longer
// holds at g's sizes: a node's sizes no longer match its kernel's iteration
// space (or row space), or a kernel has a zero-size dim.
std::optional<Plan> bind_plan(const ir::Graph& g, const Plan& plan);

}  // namespace lazyjit::lowering
