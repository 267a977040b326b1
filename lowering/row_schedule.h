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

// A float sum over more cols than this runs in blocks of at most this many
// cols (SumBlocks); shorter rows have one accumulator. Blocks sum in float64: a
// float32 sum's blocks are long, to spread the cost of combining them (their
// error is nil either way); a float64 sum's are short, because within a block
// each vector lane adds cols / (lanes x interleave) values in float64 (16 here),
// about what ATen's cascade_sum adds before carrying to its next level.
constexpr int64_t kSumBlockCols = 4096;
constexpr int64_t kSumBlockColsF64 = 512;

struct ColLoop {
  std::vector<int32_t> reload;   // positions read back from scratch, first
  std::vector<int32_t> compute;  // full-space positions computed per col, in node order
  std::vector<int32_t> keep;     // of `compute`: those written to scratch for later loops
};

// How a long float sum accumulates, so that its error does not grow with the
// row: the cols in blocks, each summed into a fresh float64 accumulator
// (vectorized, reassociated, like a short row), the block sums then added in col
// order into a compensated (Neumaier) float64 sum, rounded once to the sum's
// accumulate dtype. A block is
// `chunk` consecutive indices of col dim `dim` (the last may be shorter) times
// all of the col dims after it; the col dims before `dim` loop outside the blocks.
// The result depends only on the row, never on how rows are split over threads.
struct SumBlocks {
  int32_t dim = -1;   // a col dim of FusedKernel::sizes
  int64_t chunk = 0;  // indices of `dim` per block, 1 <= chunk < sizes[dim]
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
  std::optional<SumBlocks> blocks;  // Reduce: a float sum over more than kSumBlockCols cols
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
// std::runtime_error on a malformed row kernel. Float sums over more than
// kSumBlockCols cols (kSumBlockColsF64 for float64) get SumBlocks of at most
// that many cols.
RowSchedule schedule_row(const ir::Graph& g, const FusedKernel& k,
                         int64_t scratch_bytes = kRowScratchBytes);

}  // namespace lazyjit::lowering
