// How a row kernel runs one row: the target-independent schedule a codegen
// follows step by step. Decided here, not while emitting, so that plan dumps
// show it and tests check it without a compiler.
//
// Positions ("#i") index FusedKernel::nodes. A row runs its steps in order; each
// col loop walks the row's cols once, computing the full-space nodes it lists
// (in node order) and reading back those an earlier col loop of the same row
// kept in the row's scratch array. Values a col loop makes are gone after it,
// except what it keeps in scratch.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph_ir/graph.h"

namespace lazyjit::lowering {

struct FusedKernel;

// Scratch is one array per kept node, of one element per col, sized at 8 bytes
// an element whatever the dtype. Rows are short enough to stay in L1/L2 up to
// this many bytes of scratch; past it a row recomputes instead of keeping.
constexpr int64_t kRowScratchBytes = 64 << 10;

struct ColLoop {
  std::vector<int32_t> reload;   // positions read back from scratch, first
  std::vector<int32_t> compute;  // full-space positions computed per col, in node order
  std::vector<int32_t> keep;     // of `compute`: those written to scratch for later loops
};

struct RowStep {
  enum class Kind {
    Node,       // a row-space elementwise node, computed once per row
    Reduce,     // a reduction: its identity, then `cols` accumulating into it
    StoreRows,  // the row-space stores (one element per row)
    StoreCols,  // `cols`, then the full-space stores
  };
  Kind kind;
  int32_t node = -1;             // Node, Reduce: its position
  std::optional<ColLoop> cols;   // Reduce, StoreCols; none when the cols are empty
  std::vector<int32_t> stores;   // StoreRows, StoreCols: indices into FusedKernel::stores
};

struct RowSchedule {
  std::vector<RowStep> steps;    // one row's work, in order
  std::vector<int32_t> scratch;  // positions kept per row, ascending
  // Plan dump lines, each indented by two spaces and ending in a newline.
  std::string str(const ir::Graph& g, const FusedKernel& k) const;
};

// Before: `k` is a coalesced row kernel (plan.h). After: a schedule that
// computes every reduction and store of `k`, keeping in scratch exactly the
// full-space nodes that a later col loop of the row needs again after an
// earlier one computed them (a softmax's exp(x - max) is computed for the sum
// and read back for the output), unless that passes `scratch_bytes` or the
// cols are empty, when nothing is kept and later loops recompute. Throws
// std::runtime_error on a malformed row kernel.
RowSchedule schedule_row(const ir::Graph& g, const FusedKernel& k,
                         int64_t scratch_bytes = kRowScratchBytes);

}  // namespace lazyjit::lowering
