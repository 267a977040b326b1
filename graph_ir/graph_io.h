// A Graph as bytes (see bytes.h for the encoding), so a compiled program can be
// stored and loaded without tracing again.
//
// Layout (version kGraphFormatVersion):
//   "LJGR" u32 version
//   u32 node count, then per node:
//     u16 op kind, u32 operand count + u32 value ids,
//     u32 attr count + per attr: u8 AttrValue alternative, u8 shape_like, payload,
//     u32 output count + per output: u8 dtype, i64 list sizes, i64 list strides
//   u32 output count + u32 value ids
//   the hashes: u64 structure.lo, u64 structure.hi, u64 shape, u64 confirm
// Value ids are not stored: nodes are replayed in order, so each gets the ids it had.
//
// read_graph replays the nodes through add_input/add_scalar/add_node/add_output,
// so the graph it returns has the numbering, str() and hashes of the one written
// (the recorded hashes are compared, catching corruption and any change of the
// hashing since the bytes were written).
//
// Precondition of write_graph: every add_output came after the last node (as
// the tracer and the passes build graphs). The structure hash sees where each
// output was added and the bytes do not say; a graph built otherwise is written,
// but read_graph refuses it because its hashes differ. It validates ids, enum values and
// Input/Scalar nodes as it reads, runs Graph::verify() at the end, and throws
// std::runtime_error on anything wrong.
#pragma once
#include "graph_ir/bytes.h"
#include "graph_ir/graph.h"

namespace lazyjit::ir {

// Bump on any change to the layout above.
inline constexpr uint32_t kGraphFormatVersion = 1;

void write_graph(ByteWriter& w, const Graph& g);
Graph read_graph(ByteReader& r);

}  // namespace lazyjit::ir
