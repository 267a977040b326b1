#include "lowering/plan_io.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "graph_ir/hash.h"

namespace lazyjit::lowering {

using ir::ByteReader;
using ir::ByteWriter;
using ir::Graph;
using ir::OpKind;

namespace {

constexpr std::string_view kPlanTag = "LJPL";

// Smallest encodings, so a count can be checked against the bytes left.
constexpr size_t kMinAccessBytes = 4 + 4 + 1 + 4 + 8 + 4 + 4;
constexpr size_t kMinKernelBytes = 4 + 4 + 4 + 4 + 1 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 1;
constexpr size_t kMinStepBytes = 1 + 4 + 4;

// Everything read_* check against: the graph the plan was made from.
struct Reading {
  ByteReader& r;
  const Graph& g;
  std::string where;  // "kernel 3", "step 7": the prefix of error messages

  [[noreturn]] void bad(const std::string& what) const { r.fail(where + ": " + what); }
  ValueId value(ValueId v, const char* role) const {
    if (v >= g.values().size())
      bad(std::string(role) + " %" + std::to_string(v) + " is not a value of the graph (" +
          std::to_string(g.values().size()) + " values)");
    return v;
  }
  uint32_t node(uint32_t n) const {
    if (n >= g.nodes().size())
      bad("node " + std::to_string(n) + " is not in the graph (" + std::to_string(g.nodes().size()) +
          " nodes)");
    return n;
  }
};

// --- Access ------------------------------------------------------------------------

void write_access(ByteWriter& w, const Access& a) {
  w.u32(a.operand);
  w.u32(a.value);
  w.u8(static_cast<uint8_t>(a.dtype));
  w.i64s(a.strides);
  w.i64(a.offset);
  w.i32(a.scalar_index);
  w.i32(a.piece);
}

Access read_access(const Reading& in, size_t rank) {
  Access a;
  a.operand = in.value(in.r.u32(), "load operand");
  a.value = in.value(in.r.u32(), "load value");
  uint8_t d = in.r.u8();
  if (d > static_cast<uint8_t>(DType::Other)) in.bad("load dtype " + std::to_string(d));
  a.dtype = static_cast<DType>(d);
  a.strides = in.r.i64s();
  if (a.strides.size() != rank)
    in.bad("load of %" + std::to_string(a.value) + " has " + std::to_string(a.strides.size()) +
           " strides for " + std::to_string(rank) + " dims");
  a.offset = in.r.i64();
  a.scalar_index = in.r.i32();
  if (a.scalar_index < -1 || a.scalar_index >= static_cast<int64_t>(in.g.scalars().size()))
    in.bad("scalar index " + std::to_string(a.scalar_index) + " of a graph with " +
           std::to_string(in.g.scalars().size()) + " scalars");
  a.piece = in.r.i32();
  if (a.piece < -1 || (a.piece >= 0 && a.scalar_index >= 0)) in.bad("load piece " + std::to_string(a.piece));
  return a;
}

// --- RowSchedule (positions index the kernel's nodes) -----------------------------

void write_cols(ByteWriter& w, const std::optional<ColLoop>& c) {
  w.boolean(c.has_value());
  if (!c) return;
  w.i32s(c->reload);
  w.i32s(c->compute);
  w.i32s(c->keep);
}

std::optional<ColLoop> read_cols(const Reading& in, size_t n_nodes) {
  if (!in.r.boolean()) return std::nullopt;
  ColLoop c;
  auto positions = [&](const char* what) {
    std::vector<int32_t> v = in.r.i32s();
    for (int32_t p : v)
      if (p < 0 || static_cast<size_t>(p) >= n_nodes) in.bad(std::string(what) + " position " + std::to_string(p));
    return v;
  };
  c.reload = positions("reload");
  c.compute = positions("compute");
  c.keep = positions("keep");
  return c;
}

void write_schedule(ByteWriter& w, const RowSchedule& s) {
  w.count(s.steps.size());
  for (const RowStep& st : s.steps) {
    w.u8(static_cast<uint8_t>(st.kind));
    w.i32(st.node);
    write_cols(w, st.cols);
    w.boolean(st.blocks.has_value());
    if (st.blocks) {
      w.i32(st.blocks->dim);
      w.i64(st.blocks->chunk);
    }
    w.i32s(st.stores);
  }
  w.i32s(s.scratch);
}

RowSchedule read_schedule(const Reading& in, const FusedKernel& k) {
  RowSchedule s;
  s.steps.resize(in.r.count(7, "row step"));
  for (RowStep& st : s.steps) {
    uint8_t kind = in.r.u8();
    if (kind > static_cast<uint8_t>(RowStep::Kind::StoreCols)) in.bad("row step kind " + std::to_string(kind));
    st.kind = static_cast<RowStep::Kind>(kind);
    st.node = in.r.i32();
    if (st.node < -1 || st.node >= static_cast<int64_t>(k.nodes.size())) in.bad("row step node " + std::to_string(st.node));
    st.cols = read_cols(in, k.nodes.size());
    if (in.r.boolean()) {
      SumBlocks b;
      b.dim = in.r.i32();
      b.chunk = in.r.i64();
      const auto rank = static_cast<int32_t>(k.sizes.size());
      if (st.kind != RowStep::Kind::Reduce || b.dim < rank - k.reduce_rank || b.dim >= rank ||
          b.chunk < 1 || b.chunk >= k.sizes[b.dim])
        in.bad("sum blocks of " + std::to_string(b.chunk) + " along dim " + std::to_string(b.dim));
      st.blocks = b;
    }
    st.stores = in.r.i32s();
    for (int32_t i : st.stores)
      if (i < 0 || static_cast<size_t>(i) >= k.stores.size()) in.bad("row step store " + std::to_string(i));
  }
  s.scratch = in.r.i32s();
  for (int32_t p : s.scratch)
    if (p < 0 || static_cast<size_t>(p) >= k.nodes.size()) in.bad("scratch position " + std::to_string(p));
  return s;
}

// --- FusedKernel (kernel_fns are not stored: see plan_io.h) -------------------------

void write_kernel(ByteWriter& w, const FusedKernel& k) {
  w.i64s(k.sizes);
  w.u32s(k.nodes);
  w.count(k.loads.size());
  for (const Access& a : k.loads) write_access(w, a);
  w.u32s(k.stores);
  w.boolean(k.row);
  w.i32(k.reduce_rank);
  w.count(k.row_space.size());
  for (bool b : k.row_space) w.boolean(b);
  w.str(k.name);
  write_schedule(w, k.schedule);
  w.i32(k.cat_dim);
  w.i64s(k.cat_ends);
  w.i32(k.launch.block);
  w.i32(k.launch.elements_per_thread);
  w.i32(k.launch.vector_width);
  w.u8(static_cast<uint8_t>(k.launch.rows));
}

FusedKernel read_kernel(const Reading& in) {
  FusedKernel k;
  k.sizes = in.r.i64s();
  if (k.sizes.empty()) in.bad("an iteration space of rank 0");
  for (int64_t s : k.sizes)
    if (s < 0) in.bad("negative size " + std::to_string(s));
  k.nodes = in.r.u32s();
  for (uint32_t n : k.nodes) {
    OpKind kind = in.g.nodes()[in.node(n)].kind;
    if (!ir::is_elementwise(kind) && !ir::is_reduction(kind))
      in.bad("node " + std::to_string(n) + " (" + std::string(ir::op_name(kind)) +
             ") cannot run in a kernel");
  }
  k.loads.resize(in.r.count(kMinAccessBytes, "load"));
  for (Access& a : k.loads) a = read_access(in, k.sizes.size());
  k.stores = in.r.u32s();
  for (ValueId v : k.stores) in.value(v, "store");
  k.row = in.r.boolean();
  k.reduce_rank = in.r.i32();
  if (k.row ? (k.reduce_rank < 1 || k.reduce_rank >= static_cast<int64_t>(k.sizes.size()))
            : k.reduce_rank != 0)
    in.bad("reduce_rank " + std::to_string(k.reduce_rank) + " of a " + (k.row ? "row" : "plain") +
           " kernel of rank " + std::to_string(k.sizes.size()));
  k.row_space.resize(in.r.count(1, "row_space entry"));
  for (size_t i = 0; i < k.row_space.size(); ++i) k.row_space[i] = in.r.boolean();
  if (k.row_space.size() != (k.row ? k.nodes.size() : 0))
    in.bad(std::to_string(k.row_space.size()) + " row_space entries for " +
           std::to_string(k.nodes.size()) + " nodes");
  k.name = in.r.str();
  k.schedule = read_schedule(in, k);
  if (!k.row && !k.schedule.steps.empty()) in.bad("a row schedule for a plain kernel");
  k.cat_dim = in.r.i32();
  k.cat_ends = in.r.i64s();
  if (k.cat_dim < -1 || k.cat_dim >= static_cast<int64_t>(k.sizes.size()) || (k.cat_dim >= 0 && k.row) ||
      (k.cat_dim < 0) != k.cat_ends.empty())
    in.bad("cat dim " + std::to_string(k.cat_dim) + " with " + std::to_string(k.cat_ends.size()) + " pieces");
  k.launch.block = in.r.i32();
  k.launch.elements_per_thread = in.r.i32();
  k.launch.vector_width = in.r.i32();
  uint8_t rows = in.r.u8();
  if (rows > static_cast<uint8_t>(LaunchShape::Rows::Warp)) in.bad("launch row mode " + std::to_string(rows));
  k.launch.rows = static_cast<LaunchShape::Rows>(rows);
  if (std::string why = k.launch.invalid(k.row); !why.empty()) in.bad("launch shape: " + why);
  // The code reads each Cat operand through its piece's load (a kernel that
  // does not iterate has no cat_ends: its code never runs, but its loads are
  // still the Cats' pieces).
  size_t pieces = 0;
  for (uint32_t n : k.nodes) {
    const ir::Node& node = in.g.nodes()[n];
    if (node.kind != OpKind::Cat) continue;
    pieces = std::max(pieces, node.operands.size());
    if (k.cat_dim >= 0 && node.operands.size() != k.cat_ends.size())
      in.bad("cat node " + std::to_string(n) + " has " + std::to_string(node.operands.size()) + " operands for " +
             std::to_string(k.cat_ends.size()) + " pieces");
    for (size_t j = 0; j < node.operands.size(); ++j)
      if (k.load_of(node.operands[j], static_cast<int32_t>(j)) < 0)
        in.bad("cat node " + std::to_string(n) + " has no load for operand " + std::to_string(j));
  }
  for (const Access& a : k.loads)
    if (a.piece >= static_cast<int64_t>(pieces))
      in.bad("load piece " + std::to_string(a.piece) + " of a kernel whose cats have " + std::to_string(pieces));
  return k;
}

// --- Step --------------------------------------------------------------------------

void write_step(ByteWriter& w, const Step& s) {
  w.u8(static_cast<uint8_t>(s.kind));
  w.u32(s.node);
  w.i32(s.kernel);
}

Step read_step(const Reading& in, size_t n_kernels) {
  Step s;
  uint8_t kind = in.r.u8();
  if (kind > static_cast<uint8_t>(Step::Kind::AsStridedScatter)) in.bad("step kind " + std::to_string(kind));
  s.kind = static_cast<Step::Kind>(kind);
  s.node = in.r.u32();
  s.kernel = in.r.i32();
  if (s.kind == Step::Kind::Kernel) {
    if (s.kernel < 0 || s.kernel >= static_cast<int64_t>(n_kernels))
      in.bad("kernel " + std::to_string(s.kernel) + " of " + std::to_string(n_kernels));
    return s;
  }
  // The executor and Plan::str read the node's outputs (and an Aten node's
  // schema name) without checking.
  const ir::Node& n = in.g.nodes()[in.node(s.node)];
  OpKind want = s.kind == Step::Kind::Aten        ? OpKind::Aten
                : s.kind == Step::Kind::AsStrided ? OpKind::AsStrided
                                                  : OpKind::AsStridedScatter;
  if (n.kind != want)
    in.bad("node " + std::to_string(s.node) + " is " + std::string(ir::op_name(n.kind)) + ", not " +
           std::string(ir::op_name(want)));
  if (n.outputs.empty()) in.bad("node " + std::to_string(s.node) + " has no outputs");
  if (want == OpKind::Aten && (n.attrs.empty() || !std::holds_alternative<std::string>(n.attrs[0].value)))
    in.bad("aten node " + std::to_string(s.node) + " has no schema name");
  return s;
}

}  // namespace

// --- Plan --------------------------------------------------------------------------

void write_plan(ByteWriter& w, const Plan& plan) {
  const size_t start = w.size();
  w.header(kPlanTag, kPlanFormatVersion);
  w.count(plan.kernels.size());
  for (const FusedKernel& k : plan.kernels) write_kernel(w, k);
  w.count(plan.steps.size());
  for (const Step& s : plan.steps) write_step(w, s);
  w.count(plan.frees.size());
  for (const auto& f : plan.frees) w.u32s(f);
  w.i64(plan.planned_peak_bytes);
  w.i64(plan.result_bytes);
  w.boolean(plan.check_stores);
  w.u64(ir::hash64(w.bytes().data() + start, w.size() - start));
}

Plan read_plan(ByteReader& r, const Graph& g) {
  const size_t start = r.offset();
  r.expect_header(kPlanTag, kPlanFormatVersion, "plan");
  Plan plan;
  Reading in{r, g, {}};
  plan.kernels.resize(r.count(kMinKernelBytes, "kernel"));
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    in.where = "kernel " + std::to_string(i);
    plan.kernels[i] = read_kernel(in);
  }
  plan.steps.resize(r.count(kMinStepBytes, "step"));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    in.where = "step " + std::to_string(i);
    plan.steps[i] = read_step(in, plan.kernels.size());
  }
  in.where = "frees";
  plan.frees.resize(r.count(4, "frees list"));
  if (!plan.frees.empty() && plan.frees.size() != plan.steps.size())
    in.bad(std::to_string(plan.frees.size()) + " lists for " + std::to_string(plan.steps.size()) + " steps");
  for (auto& f : plan.frees) {
    f = r.u32s();
    for (ValueId v : f) in.value(v, "freed value");
  }
  plan.planned_peak_bytes = r.i64();
  plan.result_bytes = r.i64();
  if (plan.planned_peak_bytes < 0 || plan.result_bytes < 0)
    r.fail("negative byte counts");
  plan.check_stores = r.boolean();
  // The checks above keep every index in range, but sizes, strides and offsets
  // cannot be checked against the buffers without planning again, and a wrong
  // stride makes a kernel read out of bounds: accidental corruption is caught
  // by the checksum instead.
  std::string_view body = r.read_since(start);
  if (r.u64() != ir::hash64(body.data(), body.size())) r.fail("plan checksum mismatch");
  return plan;
}

}  // namespace lazyjit::lowering
