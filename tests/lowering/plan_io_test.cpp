// Plan bytes: plans of real plan_graph results (fused elementwise kernels, row
// kernels, library and view steps, buffer plans) read back field for field
// against the graph read back with them; bad bytes are refused, never crash.
#include <gtest/gtest.h>

#include <random>

#include "graph_ir/graph_io.h"
#include "lowering/plan_io.h"

using namespace lazyjit;
using namespace lazyjit::ir;
using lowering::Access;
using lowering::FusedKernel;
using lowering::Plan;
using lowering::RowStep;
using lowering::PlanOptions;
using lowering::Step;

namespace {

TensorType f32(std::vector<int64_t> s) { return TensorType{DType::Float32, s, contiguous_strides(s)}; }
Attr dt() { return Attr{static_cast<int64_t>(DType::Float32)}; }
Attr shape_list(std::vector<int64_t> v) { return Attr{std::move(v), true}; }
Attr shape(int64_t v) { return Attr{v, true}; }
Attr reduce_dims(std::vector<int64_t> d) { return Attr{std::move(d)}; }

// A program's graph and plan as one byte string, as a cache would hold them.
std::string program_bytes(const Graph& g, const Plan& p) {
  ByteWriter w;
  write_graph(w, g);
  lowering::write_plan(w, p);
  return w.take();
}

struct Program {
  Graph g;
  Plan plan;
};

Program read_program(std::string_view bytes) {
  ByteReader r(bytes);
  Graph g = read_graph(r);
  Plan p = lowering::read_plan(r, g);
  r.expect_end("plan");
  return {std::move(g), std::move(p)};
}

void expect_same_access(const Access& a, const Access& b, const std::string& where) {
  EXPECT_EQ(a.operand, b.operand) << where;
  EXPECT_EQ(a.value, b.value) << where;
  EXPECT_EQ(a.dtype, b.dtype) << where;
  EXPECT_EQ(a.strides, b.strides) << where;
  EXPECT_EQ(a.offset, b.offset) << where;
  EXPECT_EQ(a.scalar_index, b.scalar_index) << where;
  EXPECT_EQ(a.piece, b.piece) << where;
}

void expect_same_kernel(const FusedKernel& a, const FusedKernel& b, const std::string& where) {
  EXPECT_EQ(a.sizes, b.sizes) << where;
  EXPECT_EQ(a.launch.str(a.row), b.launch.str(b.row)) << where;
  EXPECT_TRUE(a.launch == b.launch) << where;
  EXPECT_EQ(a.nodes, b.nodes) << where;
  ASSERT_EQ(a.loads.size(), b.loads.size()) << where;
  for (size_t i = 0; i < a.loads.size(); ++i)
    expect_same_access(a.loads[i], b.loads[i], where + " load " + std::to_string(i));
  EXPECT_EQ(a.stores, b.stores) << where;
  EXPECT_EQ(a.row, b.row) << where;
  EXPECT_EQ(a.reduce_rank, b.reduce_rank) << where;
  EXPECT_EQ(a.row_space, b.row_space) << where;
  EXPECT_EQ(a.name, b.name) << where;
  EXPECT_EQ(a.cat_dim, b.cat_dim) << where;
  EXPECT_EQ(a.cat_ends, b.cat_ends) << where;
  EXPECT_EQ(a.schedule.scratch, b.schedule.scratch) << where;
  ASSERT_EQ(a.schedule.steps.size(), b.schedule.steps.size()) << where;
  for (size_t i = 0; i < a.schedule.steps.size(); ++i) {
    const RowStep &x = a.schedule.steps[i], &y = b.schedule.steps[i];
    EXPECT_EQ(x.kind, y.kind) << where << " row step " << i;
    EXPECT_EQ(x.node, y.node) << where << " row step " << i;
    EXPECT_EQ(x.stores, y.stores) << where << " row step " << i;
    ASSERT_EQ(x.cols.has_value(), y.cols.has_value()) << where << " row step " << i;
    if (x.cols) {
      EXPECT_EQ(x.cols->reload, y.cols->reload) << where << " row step " << i;
      EXPECT_EQ(x.cols->compute, y.cols->compute) << where << " row step " << i;
      EXPECT_EQ(x.cols->keep, y.cols->keep) << where << " row step " << i;
    }
    ASSERT_EQ(x.blocks.has_value(), y.blocks.has_value()) << where << " row step " << i;
    if (x.blocks) {
      EXPECT_EQ(x.blocks->dim, y.blocks->dim) << where << " row step " << i;
      EXPECT_EQ(x.blocks->chunk, y.blocks->chunk) << where << " row step " << i;
    }
  }
}

void expect_same_plan(const Plan& a, const Plan& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].kind, b.steps[i].kind) << "step " << i;
    EXPECT_EQ(a.steps[i].node, b.steps[i].node) << "step " << i;
    EXPECT_EQ(a.steps[i].kernel, b.steps[i].kernel) << "step " << i;
  }
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i)
    expect_same_kernel(a.kernels[i], b.kernels[i], "kernel " + std::to_string(i));
  EXPECT_EQ(a.frees, b.frees);
  EXPECT_EQ(a.planned_peak_bytes, b.planned_peak_bytes);
  EXPECT_EQ(a.result_bytes, b.result_bytes);
}

Program round_trip(const Graph& g, const Plan& p) {
  std::string bytes = program_bytes(g, p);
  Program back = read_program(bytes);
  EXPECT_EQ(back.g.str(), g.str());
  EXPECT_EQ(back.g.hashes(), g.hashes());
  EXPECT_EQ(back.plan.str(back.g), p.str(g));
  expect_same_plan(p, back.plan);
  EXPECT_TRUE(back.plan.kernel_fns.empty());  // filled when object code is loaded
  EXPECT_EQ(program_bytes(back.g, back.plan), bytes);
  return back;
}

// --- graphs --------------------------------------------------------------------------

// Elementwise chain with a scalar, a broadcast, a transposed read and a folded
// view at an offset: one kernel whose loads carry strides, offset, scalar slot.
Graph elementwise_graph() {
  Graph g;
  ValueId x = g.add_input(f32({6, 4}));
  ValueId row = g.add_input(f32({4}));
  ValueId t = g.add_input(TensorType{DType::Float32, {6, 4}, {1, 6}});
  ValueId s = g.add_scalar(DType::Float64, true);
  ValueId big = g.add_input(f32({40}));
  ValueId v = g.add_node1(OpKind::AsStrided, {big}, {shape_list({6, 4}), shape_list({4, 1}), shape(5)}, f32({6, 4}));
  ValueId a = g.add_node1(OpKind::Add, {x, row}, {dt()}, f32({6, 4}));
  ValueId b = g.add_node1(OpKind::Mul, {a, s}, {dt()}, f32({6, 4}));
  ValueId c = g.add_node1(OpKind::Sub, {b, t}, {dt()}, f32({6, 4}));
  ValueId d = g.add_node1(OpKind::Add, {c, v}, {dt()}, f32({6, 4}));
  g.add_output(d);
  g.add_output(a);
  return g;
}

// Kernels around two library steps, a materialized view (a graph output) and a
// scatter, so the buffer plan frees values between steps.
Graph library_graph() {
  Graph g;
  ValueId x = g.add_input(f32({4, 4}));
  ValueId a = g.add_node1(OpKind::Relu, {x}, {dt()}, f32({4, 4}));
  ValueId m = g.add_node(OpKind::Aten, {a, a}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}},
                         {f32({4, 4})})[0];
  ValueId b = g.add_node1(OpKind::Exp, {m}, {dt()}, f32({4, 4}));
  ValueId m2 = g.add_node(OpKind::Aten, {b, m},
                          {{std::string("aten::addmm")}, {OperandRef{1}}, {OperandRef{0}}, {OperandRef{0}},
                           {int64_t{1}}, {1.0}},
                          {f32({4, 4})})[0];
  ValueId view = g.add_node1(OpKind::AsStrided, {m2}, {shape_list({4}), shape_list({5}), shape(0)}, f32({4}));
  ValueId diag = g.add_node1(OpKind::Neg, {view}, {dt()}, f32({4}));
  ValueId sc = g.add_node1(OpKind::AsStridedScatter, {m2, diag}, {shape_list({4}), shape_list({5}), shape(0)}, f32({4, 4}));
  ValueId out = g.add_node1(OpKind::Add, {sc, x}, {dt()}, f32({4, 4}));
  g.add_output(out);
  g.add_output(view);
  return g;
}

// softmax over the last dim: max, exp(x - max), sum, divide: one row kernel
// (rows longer than kSumBlockCols sum in blocks).
Graph softmax_graph(int64_t cols = 33) {
  Graph g;
  std::vector<int64_t> full{7, cols}, row{7, 1};
  ValueId x = g.add_input(f32(full));
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(), reduce_dims({1})}, f32(row));
  ValueId d = g.add_node1(OpKind::Sub, {x, m}, {dt()}, f32(full));
  ValueId e = g.add_node1(OpKind::Exp, {d}, {dt()}, f32(full));
  ValueId s = g.add_node1(OpKind::ReduceSum, {e}, {dt(), reduce_dims({1})}, f32(row));
  g.add_output(g.add_node1(OpKind::Div, {e, s}, {dt()}, f32(full)));
  return g;
}

// layer_norm with a residual over two trailing dims, as reduce_test.cpp builds
// it: full-space and row-space nodes mixed in one row kernel, four stores.
Graph layer_norm_graph() {
  Graph g;
  std::vector<int64_t> full{4, 3, 17}, row{4, 1, 1}, cols{3, 17};
  auto fop = [&](OpKind k, std::vector<ValueId> in) { return g.add_node1(k, std::move(in), {dt()}, f32(full)); };
  auto rop = [&](OpKind k, std::vector<ValueId> in) { return g.add_node1(k, std::move(in), {dt()}, f32(row)); };
  auto sum = [&](ValueId v) {
    return g.add_node1(OpKind::ReduceSum, {v}, {dt(), reduce_dims({1, 2})}, f32(row));
  };
  ValueId x = g.add_input(f32(full));
  ValueId res = g.add_input(f32(full));
  ValueId w = g.add_input(f32(cols));
  ValueId bias = g.add_input(f32(cols));
  ValueId inv = g.add_scalar(DType::Float64, true);
  ValueId eps = g.add_scalar(DType::Float64, true);
  ValueId h = fop(OpKind::Add, {x, res});
  ValueId mean = rop(OpKind::Mul, {sum(h), inv});
  ValueId d = fop(OpKind::Sub, {h, mean});
  ValueId var = rop(OpKind::Mul, {sum(fop(OpKind::Mul, {d, d})), inv});
  ValueId rstd = rop(OpKind::Rsqrt, {rop(OpKind::Add, {var, eps})});
  ValueId y = fop(OpKind::Add, {fop(OpKind::Mul, {fop(OpKind::Mul, {d, rstd}), w}), bias});
  g.add_output(y);
  g.add_output(mean);
  g.add_output(rstd);
  g.add_output(h);
  return g;
}

// rotate_half and the rotary multiply-add: a Cat of a negated half and a view
// (pieces, shifted loads) in the kernel of its consumers.
Graph cat_graph() {
  Graph g;
  ValueId q = g.add_input(f32({3, 8}));
  ValueId cs = g.add_input(f32({3, 8}));
  auto half = [&](int64_t off) {
    return g.add_node1(OpKind::AsStrided, {q}, {shape_list({3, 4}), shape_list({8, 1}), shape(off)}, f32({3, 4}));
  };
  ValueId neg = g.add_node1(OpKind::Neg, {half(4)}, {dt()}, f32({3, 4}));
  ValueId rot = g.add_node1(OpKind::Cat, {neg, half(0)}, {dt(), Attr{int64_t{1}}}, f32({3, 8}));
  ValueId a = g.add_node1(OpKind::Mul, {q, cs}, {dt()}, f32({3, 8}));
  g.add_output(g.add_node1(OpKind::Add, {a, g.add_node1(OpKind::Mul, {rot, cs}, {dt()}, f32({3, 8}))}, {dt()},
                           f32({3, 8})));
  return g;
}

struct Case {
  std::string name;
  Graph g;
  Plan plan;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](std::string name, Graph g, PlanOptions o = {}) {
    EXPECT_EQ(g.verify(), "") << name;
    Plan p = lowering::plan_graph(g, o);
    out.push_back({std::move(name), std::move(g), std::move(p)});
  };
  add("elementwise", elementwise_graph());
  add("library", library_graph());
  add("softmax", softmax_graph());
  add("long_softmax", softmax_graph(lowering::kSumBlockCols + 1));
  add("layer_norm", layer_norm_graph());
  add("cat", cat_graph());
  {  // a Cat over no rows: its kernel never iterates (no cat dim), its loads are still pieces
    Graph g;
    ValueId a = g.add_input(f32({0, 3})), b = g.add_input(f32({0, 4}));
    g.add_output(g.add_node1(OpKind::Cat, {a, b}, {dt(), Attr{int64_t{1}}}, f32({0, 7})));
    add("empty_cat", std::move(g));
  }
  add("unfused", library_graph(), PlanOptions{.fuse = false});
  add("no_buffer_plan", layer_norm_graph(), PlanOptions{.buffers = false});
  return out;
}

std::string error_of(std::string_view bytes) {
  try {
    read_program(bytes);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// The cases hold what they are meant to, so the round trips below cover them.
TEST(PlanIO, CasesCoverEveryKindOfStepAndKernel) {
  bool row = false, plain = false, offset = false, scalar = false, frees = false, blocks = false, pieces = false;
  std::vector<bool> step_kinds(4, false);
  for (const Case& c : cases()) {
    for (const Step& s : c.plan.steps) step_kinds[static_cast<int>(s.kind)] = true;
    for (const FusedKernel& k : c.plan.kernels) {
      (k.row ? row : plain) = true;
      pieces |= k.cat_dim >= 0;
      for (const RowStep& st : k.schedule.steps) blocks |= st.blocks.has_value();
      for (const Access& a : k.loads) {
        offset |= a.offset != 0;
        scalar |= a.scalar_index >= 0;
      }
    }
    for (const auto& f : c.plan.frees) frees |= !f.empty();
  }
  EXPECT_TRUE(row && plain && offset && scalar && frees && blocks && pieces);
  EXPECT_EQ(step_kinds, std::vector<bool>(4, true));
}

TEST(PlanIO, RealPlansRoundTripFieldForField) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    round_trip(c.g, c.plan);
  }
}

TEST(PlanIO, RowKernelKeepsItsRowSpace) {
  Graph g = layer_norm_graph();
  Plan p = lowering::plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  ASSERT_TRUE(p.kernels[0].row);
  Program back = round_trip(g, p);
  EXPECT_EQ(back.plan.kernels[0].row_space, p.kernels[0].row_space);
  EXPECT_EQ(back.plan.kernels[0].reduce_rank, p.kernels[0].reduce_rank);
}

TEST(PlanIO, KernelFunctionsAreNotStored) {
  Graph g = softmax_graph();
  Plan p = lowering::plan_graph(g);
  std::string without = program_bytes(g, p);
  p.kernel_fns.assign(p.kernels.size(), reinterpret_cast<lowering::KernelFn>(uintptr_t{0x1234}));
  EXPECT_EQ(program_bytes(g, p), without);
}

TEST(PlanIO, EveryTruncationThrows) {
  for (const Case& c : cases()) {
    std::string bytes = program_bytes(c.g, c.plan);
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::string cut(bytes, 0, n);  // its own allocation, exactly n bytes
      EXPECT_THROW(read_program(cut), std::runtime_error) << c.name << ": prefix of " << n << " bytes";
    }
  }
}

TEST(PlanIO, WrongTagOrVersionIsRefused) {
  Graph g = softmax_graph();
  Plan p = lowering::plan_graph(g);
  ByteWriter w;
  write_graph(w, g);
  size_t at = w.bytes().size();
  std::string bytes = program_bytes(g, p);
  std::string tag = bytes, version = bytes;
  tag[at + 1] ^= 0x01;
  version[at + 4] = static_cast<char>(lowering::kPlanFormatVersion + 1);
  EXPECT_NE(error_of(tag).find("not lazyjit plan bytes"), std::string::npos) << error_of(tag);
  EXPECT_NE(error_of(version).find("plan bytes have format version"), std::string::npos) << error_of(version);
  // Version 5 (before launch shapes): refused, not read as if it had them.
  std::string v5 = bytes;
  v5[at + 4] = 5;
  EXPECT_NE(error_of(v5).find("plan bytes have format version 5; this build reads version 6"), std::string::npos)
      << error_of(v5);
}

// A launch shape other than the one planned (a warp-row row kernel, a plain
// kernel taking 8 elements in vectors of 4) reads back as written; one that is
// not valid (a block of 100 threads) is refused naming the kernel.
TEST(PlanIO, LaunchShapesRoundTripAndInvalidOnesAreRefused) {
  Graph g = softmax_graph();
  Plan p = lowering::plan_graph(g);
  ASSERT_FALSE(p.kernels.empty());
  lowering::FusedKernel& k = p.kernels[0];
  ASSERT_TRUE(k.row);
  k.launch.rows = lowering::LaunchShape::Rows::Warp;
  k.launch.block = 96;
  Program back = read_program(program_bytes(g, p));
  EXPECT_EQ(back.plan.kernels[0].launch.rows, lowering::LaunchShape::Rows::Warp);
  EXPECT_EQ(back.plan.kernels[0].launch.block, 96);
  EXPECT_EQ(back.plan.kernels[0].launch.rows_per_block(), 3);
  k.launch.block = 100;
  std::string bad = error_of(program_bytes(g, p));
  EXPECT_NE(bad.find("kernel 0: launch shape: block of 100 threads"), std::string::npos) << bad;
}

// Random corruptions of the plan part either throw std::runtime_error or give
// a plan whose indices all hold (str() walks them); with the checksum, reading
// one is a 2^-64 event, so this mostly checks that nothing crashes first.
TEST(PlanIO, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(99);
  int refused = 0;
  for (const Case& c : cases()) {
    ByteWriter w;
    write_graph(w, c.g);
    const size_t plan_at = w.bytes().size();
    const std::string bytes = program_bytes(c.g, c.plan);
    for (int trial = 0; trial < 1500; ++trial) {
      std::string bad = bytes;
      int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        size_t at = plan_at + rng() % (bad.size() - plan_at);
        bad[at] = (rng() & 1) ? static_cast<char>(bad[at] ^ (1 << (rng() % 8))) : static_cast<char>(rng());
      }
      try {
        Program p = read_program(bad);
        EXPECT_FALSE(p.plan.str(p.g).empty());
      } catch (const std::runtime_error&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
}

// A flipped bit in a stride would pass every index check and make a kernel read
// out of bounds; the checksum refuses every single-bit change.
TEST(PlanIO, EverySingleBitFlipIsRefused) {
  Graph g = layer_norm_graph();
  Plan p = lowering::plan_graph(g);
  ByteWriter w;
  write_graph(w, g);
  const size_t plan_at = w.size();
  const std::string bytes = program_bytes(g, p);
  for (size_t at = plan_at; at < bytes.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[at] ^= static_cast<char>(1 << bit);
      EXPECT_THROW(read_program(bad), std::runtime_error) << "byte " << at << " bit " << bit;
    }
  std::string last = bytes;
  last.back() ^= 1;
  EXPECT_NE(error_of(last).find("plan checksum mismatch"), std::string::npos) << error_of(last);
}

TEST(PlanIO, ReaderChecksThePlanAgainstTheGraph) {
  Graph g = library_graph();
  Plan good = lowering::plan_graph(g);
  auto error = [&](const Plan& p, const Graph& against) {
    ByteWriter w;
    lowering::write_plan(w, p);
    try {
      ByteReader r(w.bytes());
      lowering::read_plan(r, against);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(good, g), "no error");
  // A plan read against another (smaller) graph.
  EXPECT_NE(error(good, softmax_graph()).find("is not"), std::string::npos) << error(good, softmax_graph());
  {
    Plan p = good;
    p.steps[0].kind = Step::Kind::Kernel;
    p.steps[0].kernel = 9;
    EXPECT_NE(error(p, g).find("step 0: kernel 9 of"), std::string::npos) << error(p, g);
  }
  {
    Plan p = good;
    size_t aten = 0;
    while (p.steps[aten].kind != Step::Kind::Aten) ++aten;
    p.steps[aten].node = 1;  // the relu
    EXPECT_NE(error(p, g).find("node 1 is relu, not aten"), std::string::npos) << error(p, g);
  }
  {
    Plan p = good;
    p.kernels[0].nodes.push_back(2);  // the mm
    EXPECT_NE(error(p, g).find("kernel 0: node 2 (aten) cannot run in a kernel"), std::string::npos)
        << error(p, g);
  }
  {
    Plan p = good;
    p.kernels[0].loads[0].strides.push_back(0);
    EXPECT_NE(error(p, g).find("strides for"), std::string::npos) << error(p, g);
  }
  {
    Plan p = good;
    p.kernels[0].loads[0].scalar_index = 3;
    EXPECT_NE(error(p, g).find("scalar index 3 of a graph with 0 scalars"), std::string::npos) << error(p, g);
  }
  {
    Plan p = good;
    p.frees.pop_back();
    EXPECT_NE(error(p, g).find("lists for"), std::string::npos) << error(p, g);
  }
  {
    Plan p = good;
    p.kernels[0].stores.push_back(1000);
    EXPECT_NE(error(p, g).find("store %1000 is not a value of the graph"), std::string::npos) << error(p, g);
  }
}
