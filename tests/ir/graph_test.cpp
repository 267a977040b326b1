// Graph IR: building, printing, verifying and hashing, without libtorch or LLVM.
#include <gtest/gtest.h>

#include "graph_ir/graph.h"

using namespace lazyjit::ir;

namespace {

TensorType f32(std::vector<int64_t> sizes) {
  return TensorType{DType::Float32, sizes, contiguous_strides(sizes)};
}
Attr dt(DType d) { return Attr{static_cast<int64_t>(d)}; }

// x * s + y, relu; the knobs let each test change exactly one thing.
struct Knobs {
  OpKind op = OpKind::Add;
  DType compute = DType::Float32;
  std::vector<int64_t> shape = {4, 8};
  bool swap = false;
  int64_t view_offset = 0;
  DType scalar = DType::Float64;
};

void build_into(Graph& g, const Knobs& k = {}) {
  ValueId x = g.add_input(f32(k.shape));
  ValueId y = g.add_input(f32(k.shape));
  ValueId s = g.add_scalar(k.scalar);
  ValueId xs = g.add_node1(OpKind::Mul, {x, s}, {dt(k.compute)}, f32(k.shape));
  ValueId a = k.swap ? g.add_node1(k.op, {y, xs}, {dt(k.compute)}, f32(k.shape))
                     : g.add_node1(k.op, {xs, y}, {dt(k.compute)}, f32(k.shape));
  ValueId v = g.add_node1(OpKind::AsStrided, {a},
                          {{std::vector<int64_t>{2}, true}, {std::vector<int64_t>{1}, true}, {k.view_offset, true}},
                          f32({2}));
  ValueId r = g.add_node1(OpKind::Relu, {v}, {dt(k.compute)}, f32({2}));
  g.add_output(r);
}

Graph build(const Knobs& k = {}) {
  Graph g;
  build_into(g, k);
  return g;
}

}  // namespace

TEST(Graph, PrintsAndVerifies) {
  Graph g = build();
  EXPECT_EQ(g.verify(), "");
  std::string s = g.str();
  EXPECT_NE(s.find("%3 = mul[f32](%0, %2) : f32[4,8]"), std::string::npos) << s;
  EXPECT_NE(s.find("as_strided[[2], [1], 0](%4)"), std::string::npos) << s;
  EXPECT_NE(s.find("return %6"), std::string::npos) << s;
}

TEST(Graph, VerifierRejectsBadGraphs) {
  Graph g;
  ValueId x = g.add_input(f32({4}));
  g.add_node1(OpKind::AsStrided, {x},
              {{std::vector<int64_t>{4}, true}, {std::vector<int64_t>{2}, true}, {int64_t{0}, true}}, f32({4}));
  EXPECT_NE(g.verify().find("reaches outside"), std::string::npos);

  Graph h;
  ValueId y = h.add_input(f32({4}));
  h.add_node1(OpKind::Add, {y}, {dt(DType::Float32)}, f32({4}));
  EXPECT_NE(h.verify().find("takes 2 operands"), std::string::npos);

  Graph e;
  ValueId z = e.add_input(f32({4}));
  e.add_node1(OpKind::Neg, {z}, {}, f32({4}));
  EXPECT_NE(e.verify().find("compute dtype"), std::string::npos);
}

TEST(Graph, VerifierChecksCatPieces) {
  auto cat = [](std::vector<int64_t> a, std::vector<int64_t> b, std::vector<int64_t> out, int64_t dim) {
    Graph g;
    ValueId x = g.add_input(f32(a)), y = g.add_input(f32(b));
    g.add_node1(OpKind::Cat, {x, y}, {dt(DType::Float32), {dim}}, f32(out));
    return g.verify();
  };
  EXPECT_EQ(cat({2, 3}, {2, 4}, {2, 7}, 1), "");
  EXPECT_EQ(cat({2, 3}, {1, 3}, {3, 3}, 0), "");
  EXPECT_NE(cat({2, 3}, {3, 4}, {2, 7}, 1).find("differ outside the cat dim"), std::string::npos);
  EXPECT_NE(cat({2, 3}, {2, 4}, {2, 8}, 1).find("operands' sum"), std::string::npos);
  EXPECT_NE(cat({2, 3}, {2, 4}, {2, 7}, 2).find("dim out of range"), std::string::npos);
  EXPECT_NE(cat({2, 3}, {2, 0}, {2, 3}, 1).find("empty along the cat dim"), std::string::npos);
  EXPECT_NE(cat({2, 3}, {4}, {2, 7}, 1).find("dtype and rank"), std::string::npos);
}

TEST(Graph, SameProgramSameHashes) {
  EXPECT_EQ(build().hashes(), build().hashes());
}

TEST(Graph, EveryChangeChangesTheStructureHash) {
  GraphHashes base = build().hashes();
  Knobs op;
  op.op = OpKind::Sub;
  Knobs compute;
  compute.compute = DType::Float64;
  Knobs wiring;
  wiring.swap = true;
  Knobs scalar_kind;
  scalar_kind.scalar = DType::Int64;
  for (const Knobs& k : {op, compute, wiring, scalar_kind}) {
    GraphHashes h = build(k).hashes();
    EXPECT_NE(h.structure, base.structure);
    EXPECT_NE(h.confirm, base.confirm);
  }
}

TEST(Graph, ShapesChangeOnlyTheShapeSignature) {
  GraphHashes base = build().hashes();
  Knobs shape;
  shape.shape = {4, 9};
  Knobs offset;
  offset.view_offset = 1;
  for (const Knobs& k : {shape, offset}) {
    GraphHashes h = build(k).hashes();
    EXPECT_EQ(h.structure, base.structure);
    EXPECT_NE(h.shape, base.shape);
    EXPECT_NE(h.confirm, base.confirm);
  }
}

TEST(Graph, OutputsArePartOfTheStructure) {
  Graph a = build(), b = build();
  b.add_output(0);
  EXPECT_NE(a.hashes().structure, b.hashes().structure);
}

// Pinned digests: a change here means every on-disk cache entry is invalid, and
// the same program in two processes must agree (the e2e tests check the latter).
TEST(Graph, HashIsStableAcrossBuilds) {
  GraphHashes h = build().hashes();
  Graph again = build();
  EXPECT_EQ(again.hashes().structure.hex(), h.structure.hex());
  EXPECT_EQ(h.structure.hex().size(), 32u);
}

TEST(Hash, KnownXXH3Vectors) {
  // XXH3_64bits of the empty input with seed 0 (from the xxHash spec).
  EXPECT_EQ(hash64("", 0), 0x2D06800538D394C2ull);
}

// A copy is an independent graph that keeps hashing from where the original
// was: growing both the same way gives equal hashes, growing one changes only it.
TEST(Graph, CopyKeepsHashingLikeTheOriginal) {
  Graph a = build();
  Graph b = a;
  EXPECT_EQ(a.hashes(), b.hashes());
  EXPECT_EQ(a.str(), b.str());
  ValueId x = a.inputs()[0];
  a.add_node1(OpKind::Exp, {x}, {dt(DType::Float32)}, f32({4, 8}));
  EXPECT_NE(a.hashes(), b.hashes());
  b.add_node1(OpKind::Exp, {x}, {dt(DType::Float32)}, f32({4, 8}));
  EXPECT_EQ(a.hashes(), b.hashes());
  EXPECT_EQ(a.str(), b.str());
}

// A recorder clears its graph at each sync and records the next one into it.
TEST(Graph, AClearedGraphRecordsLikeANewOne) {
  Graph g;
  Knobs other;
  other.op = OpKind::Sub;
  other.shape = {3, 5};
  build_into(g, other);
  g.clear();
  EXPECT_TRUE(g.nodes().empty() && g.values().empty() && g.inputs().empty() && g.scalars().empty() &&
              g.outputs().empty());
  EXPECT_EQ(g.hashes(), Graph().hashes());
  build_into(g);
  const Graph fresh = build();
  EXPECT_EQ(g.hashes(), fresh.hashes());
  EXPECT_EQ(g.str(), fresh.str());
  EXPECT_EQ(g.verify(), "");
}

namespace {
// Whether integer `v` is held exactly by `to` (an integer or float type; a
// float's exponent range holds every 16-bit integer).
bool holds(DType to, int64_t v) {
  const DTypeInfo& t = dtype_info(to);
  if (t.kind == DTypeInfo::Kind::Signed && t.bits == 63) return true;  // int64 holds every value tested
  if (t.kind == DTypeInfo::Kind::Unsigned) return v >= 0 && v < (int64_t{1} << t.bits);
  if (t.kind == DTypeInfo::Kind::Signed) return v >= -(int64_t{1} << t.bits) && v < (int64_t{1} << t.bits);
  uint64_t m = static_cast<uint64_t>(v < 0 ? -v : v);
  while (m && !(m & 1)) m >>= 1;  // the significand's odd part
  return m < (uint64_t{1} << t.bits);
}
}  // namespace

// The dtype table's widening rule (lowering/passes.cpp folds casts by it),
// against every value of each small integer type: exact between integers;
// into a float never claimed where a value is lost (it keeps a bit for the
// sign even of an unsigned type: u8 -> bf16 is not folded).
TEST(DType, WidensExactlyWhereEveryValueRoundTrips) {
  const DType ints[] = {DType::Bool, DType::UInt8, DType::Int8, DType::Int16};
  const DType targets[] = {DType::UInt8, DType::Int8,    DType::Int16,    DType::Int32, DType::Int64,
                           DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  for (DType from : ints)
    for (DType to : targets) {
      const DTypeInfo& f = dtype_info(from);
      int64_t lo = f.kind == DTypeInfo::Kind::Signed ? -(int64_t{1} << f.bits) : 0;
      int64_t hi = f.kind == DTypeInfo::Kind::Bool ? 1 : (int64_t{1} << f.bits) - 1;
      bool all = true;
      for (int64_t v = lo; v <= hi && all; ++v) all = holds(to, v);
      if (is_floating(to)) EXPECT_TRUE(!widens_exactly(from, to) || all) << dtype_name(from) << " -> " << dtype_name(to);
      else EXPECT_EQ(widens_exactly(from, to), all) << dtype_name(from) << " -> " << dtype_name(to);
    }
  // Floats: a wider significand and exponent both; bf16 and f16 hold values the other does not.
  EXPECT_TRUE(widens_exactly(DType::Float16, DType::Float32));
  EXPECT_TRUE(widens_exactly(DType::BFloat16, DType::Float32));
  EXPECT_TRUE(widens_exactly(DType::Float32, DType::Float64));
  EXPECT_FALSE(widens_exactly(DType::Float16, DType::BFloat16));  // 1 + 2^-10 needs 11 significand bits
  EXPECT_FALSE(widens_exactly(DType::BFloat16, DType::Float16));  // 1e38 overflows f16
  EXPECT_FALSE(widens_exactly(DType::Float64, DType::Float32));
  EXPECT_FALSE(widens_exactly(DType::Int32, DType::Float32));     // 2^24 + 1
  EXPECT_TRUE(widens_exactly(DType::Int32, DType::Float64));
  EXPECT_FALSE(widens_exactly(DType::Int64, DType::Float64));
  EXPECT_EQ(element_size(DType::BFloat16), 2);
  EXPECT_EQ(dtype_name(DType::Complex128), "c128");
}
