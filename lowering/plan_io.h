// A Plan as bytes (see graph_ir/bytes.h for the encoding), stored next to its
// graph so a compiled program loads without planning again.
//
// Layout (version kPlanFormatVersion):
//   "LJPL" u32 version
//   u32 kernel count, then per FusedKernel (write_kernel in plan_io.cpp):
//     i64 list sizes, u32 list nodes, u32 load count + per Access (u32 operand,
//     u32 value, u8 dtype, i64 list strides, i64 offset, i32 scalar_index, i32 piece),
//     u32 list stores, u8 row, i32 reduce_rank, u32 count + u8 per row_space
//     entry, string name, then the RowSchedule (no steps for plain kernels): u32 step count +
//     per step (u8 kind, i32 node, u8 has cols [+ i32 lists reload, compute,
//     keep], u8 has blocks [+ i32 dim, i64 chunk], i32 list stores), i32 list
//     scratch, then i32 cat_dim, i64 list cat_ends, then the LaunchShape:
//     i32 block, i32 elements_per_thread, i32 vector_width, u8 rows (0: Block, 1: Warp)
//   u32 step count, then per Step: u8 kind, u32 node, i32 kernel
//   u32 frees count + u32 list per step
//   i64 planned_peak_bytes, i64 result_bytes, u8 check_stores
//   u64 XXH3-64 of all the plan's bytes above, "LJPL" included
//
// kernel_fns are not stored: they point into loaded object code, and whoever
// loads that code fills them (read_plan leaves them empty).
//
// read_plan validates the plan against the graph it was made from (node, value,
// scalar and kernel indices in range; each step's node of the step's kind; kernel
// nodes elementwise or reductions; per-dim vectors of the kernel's rank), checks
// the checksum (geometry such as strides cannot be validated without planning
// again), and throws std::runtime_error on anything wrong.
#pragma once
#include "graph_ir/bytes.h"
#include "graph_ir/graph.h"
#include "lowering/plan.h"

namespace lazyjit::lowering {

// Bump on any change to the layout above (a new field of FusedKernel included).
// 2: row schedules, 3: their sum blocks, 4: check_stores, 5: cat pieces, 6: launch shapes.
// Other versions are refused (read_plan throws), never misread.
inline constexpr uint32_t kPlanFormatVersion = 6;

void write_plan(ir::ByteWriter& w, const Plan& plan);
Plan read_plan(ir::ByteReader& r, const ir::Graph& g);

}  // namespace lazyjit::lowering
