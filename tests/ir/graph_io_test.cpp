// Graph bytes: a graph read back is the graph written (numbering, str(), hashes,
// every field), and bytes that are cut short, tagged wrongly or corrupted are
// refused with std::runtime_error instead of crashing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "graph_ir/graph_io.h"

using namespace lazyjit::ir;

namespace {

TensorType f32(std::vector<int64_t> sizes) {
  return TensorType{DType::Float32, sizes, contiguous_strides(sizes)};
}
Attr dt(DType d) { return Attr{static_cast<int64_t>(d)}; }
Attr shape_list(std::vector<int64_t> v) { return Attr{std::move(v), true}; }
Attr shape(int64_t v) { return Attr{v, true}; }

std::string bytes_of(const Graph& g) {
  ByteWriter w;
  write_graph(w, g);
  return w.take();
}

Graph read_all(const std::string& bytes) {
  ByteReader r(bytes);
  Graph g = read_graph(r);
  r.expect_end("graph");
  return g;
}

void expect_same_graph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.str(), b.str());
  EXPECT_EQ(a.hashes(), b.hashes());
  EXPECT_EQ(a.inputs(), b.inputs());
  EXPECT_EQ(a.scalars(), b.scalars());
  EXPECT_EQ(a.outputs(), b.outputs());
  ASSERT_EQ(a.values().size(), b.values().size());
  for (size_t v = 0; v < a.values().size(); ++v) {
    EXPECT_EQ(a.values()[v].type, b.values()[v].type) << "%" << v;
    EXPECT_EQ(a.values()[v].node, b.values()[v].node) << "%" << v;
    EXPECT_EQ(a.values()[v].index, b.values()[v].index) << "%" << v;
  }
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = a.nodes()[i], &y = b.nodes()[i];
    EXPECT_EQ(x.kind, y.kind) << "node " << i;
    EXPECT_EQ(x.operands, y.operands) << "node " << i;
    EXPECT_EQ(x.attrs, y.attrs) << "node " << i;
    EXPECT_EQ(x.outputs, y.outputs) << "node " << i;
  }
}

Graph round_trip(const Graph& g) {
  std::string bytes = bytes_of(g);
  Graph back = read_all(bytes);
  expect_same_graph(g, back);
  EXPECT_EQ(bytes_of(back), bytes);  // and writing it again gives the same bytes
  return back;
}

// The graph of graph_test.cpp: inputs, a scalar, elementwise ops, a view.
Graph small_graph() {
  Graph g;
  ValueId x = g.add_input(f32({4, 8}));
  ValueId y = g.add_input(f32({4, 8}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId xs = g.add_node1(OpKind::Mul, {x, s}, {dt(DType::Float32)}, f32({4, 8}));
  ValueId a = g.add_node1(OpKind::Add, {xs, y}, {dt(DType::Float32)}, f32({4, 8}));
  ValueId v = g.add_node1(OpKind::AsStrided, {a}, {shape_list({2}), shape_list({1}), shape(3)}, f32({2}));
  g.add_output(g.add_node1(OpKind::Relu, {v}, {dt(DType::Float32)}, f32({2})));
  return g;
}

// Every attribute alternative, shape-like or not, on ATen nodes; a node with
// outputs of two dtypes and a non-contiguous layout; inputs and wrapped and
// plain scalars interleaved; outputs out of order and repeated.
Graph attr_graph() {
  Graph g;
  ValueId a = g.add_input(f32({3, 5}));
  ValueId s0 = g.add_scalar(DType::Float64, /*wrapped=*/true);
  ValueId b = g.add_input(TensorType{DType::BFloat16, {5, 3}, {1, 5}});  // transposed
  ValueId s1 = g.add_scalar(DType::Int64, /*wrapped=*/false);
  ValueId s2 = g.add_scalar(DType::Bool, /*wrapped=*/true);
  ValueId z = g.add_input(TensorType{DType::Int32, {}, {}});  // 0-d
  std::vector<ValueId> outs = g.add_node(
      OpKind::Aten, {a, b, s0},
      {{std::string("aten::fancy.overload")},
       {std::monostate{}},
       {true},
       {false, true},
       {int64_t{-7}},
       {int64_t{INT64_MIN}, true},
       {2.5},
       {std::numeric_limits<double>::infinity()},
       {std::string("")},
       {std::string("with \"quotes\" and \0 nul", 24)},
       {std::vector<int64_t>{}},
       {std::vector<int64_t>{1, -1, INT64_MAX}, true},
       {std::vector<double>{0.5, -1e300, 1e-310}},
       {OperandRef{0}},
       {OperandRef{2}},
       {OperandListRef{{1, -1, 0}}},
       {OperandListRef{{}}}},
      {f32({3, 5}), TensorType{DType::Int64, {2, 3}, {1, 2}}, TensorType{DType::Other, {0}, {1}}});
  ValueId single = g.add_node(OpKind::Aten, {outs[0]}, {{std::string("aten::neg")}, {OperandRef{0}}},
                              {f32({3, 5})})[0];
  g.add_output(outs[1]);
  g.add_output(single);
  g.add_output(s1);
  g.add_output(outs[1]);
  g.add_output(s2);
  g.add_output(z);
  return g;
}

// One node of every OpKind (checked by counting), all well formed.
Graph every_kind_graph(int* kinds_seen) {
  Graph g;
  const TensorType t = f32({2, 3});
  const Attr c = dt(DType::Float32);
  ValueId x = g.add_input(t);
  ValueId y = g.add_input(t);
  ValueId s = g.add_scalar(DType::Float64, true);
  *kinds_seen = 2;
  std::vector<ValueId> outs;
  for (int k = static_cast<int>(OpKind::Input); k <= static_cast<int>(kLastOpKind); ++k) {
    OpKind kind = static_cast<OpKind>(k);
    ValueId out = 0;
    if (kind == OpKind::Input || kind == OpKind::Scalar) continue;
    if (is_unary(kind)) out = g.add_node1(kind, {x}, {c}, t);
    else if (is_binary(kind)) out = g.add_node1(kind, {x, y}, {c}, t);
    else if (kind == OpKind::Where) out = g.add_node1(kind, {x, y, x}, {c}, t);
    else if (kind == OpKind::Clamp) out = g.add_node1(kind, {x, y, s}, {c, {int64_t{3}}}, t);
    else if (kind == OpKind::Fma) out = g.add_node1(kind, {x, s, y}, {c}, t);
    else if (kind == OpKind::Cat) out = g.add_node1(kind, {x, y, x}, {c, {int64_t{1}}}, f32({2, 9}));
    else if (kind == OpKind::Full) out = g.add_node1(kind, {s}, {c}, t);
    else if (kind == OpKind::AsStrided)
      out = g.add_node1(kind, {x}, {shape_list({3, 2}), shape_list({1, 3}), shape(0)}, f32({3, 2}));
    else if (kind == OpKind::AsStridedScatter)
      out = g.add_node1(kind, {x, y}, {shape_list({2}), shape_list({3}), shape(1)}, t);
    else if (is_reduction(kind))
      out = g.add_node1(kind, {x}, {c, {std::vector<int64_t>{1}}}, f32({2, 1}));
    else if (kind == OpKind::Aten)
      out = g.add_node(kind, {x}, {{std::string("aten::clone")}, {OperandRef{0}}, {}}, {t})[0];
    else
      ADD_FAILURE() << "no test node for " << op_name(kind);
    outs.push_back(out);
    ++*kinds_seen;
  }
  for (ValueId v : outs) g.add_output(v);
  return g;
}

}  // namespace

TEST(GraphIO, RoundTripKeepsNumberingTextAndHashes) {
  Graph g = small_graph();
  ASSERT_EQ(g.verify(), "");
  round_trip(g);
}

TEST(GraphIO, RoundTripKeepsEveryAttrAlternative) {
  Graph g = attr_graph();
  ASSERT_EQ(g.verify(), "");
  Graph back = round_trip(g);
  // Scalars keep their wrapped flag (attr 1) and argument index (attr 0).
  EXPECT_EQ(back.producer(back.scalars()[0]).attrs[1].value, AttrValue{true});
  EXPECT_EQ(back.producer(back.scalars()[1]).attrs[1].value, AttrValue{false});
  EXPECT_EQ(back.producer(back.scalars()[2]).attrs[0].value, AttrValue{int64_t{2}});
  EXPECT_EQ(back.inputs(), (std::vector<ValueId>{0, 2, 5}));
}

TEST(GraphIO, RoundTripCoversEveryOpKind) {
  int kinds = 0;
  Graph g = every_kind_graph(&kinds);
  EXPECT_EQ(kinds, static_cast<int>(kLastOpKind) + 1);
  ASSERT_EQ(g.verify(), "");
  round_trip(g);
}

// The structure hash sees when each output was added, and the bytes do not
// record it: the reader adds outputs after the last node, as the tracer and the
// passes do, and refuses a graph that was built otherwise.
TEST(GraphIO, OutputsAddedBeforeTheLastNodeAreRefused) {
  Graph g;
  ValueId x = g.add_input(f32({2}));
  g.add_output(x);
  g.add_output(g.add_node1(OpKind::Neg, {x}, {dt(DType::Float32)}, f32({2})));
  try {
    read_all(bytes_of(g));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("graph hashes differ"), std::string::npos) << e.what();
  }
}

TEST(GraphIO, EmptyGraphRoundTrips) { round_trip(Graph{}); }

TEST(GraphIO, DoublesKeepTheirBitPatterns) {
  Graph g;
  ValueId x = g.add_input(f32({2}));
  const double nan = std::bit_cast<double>(uint64_t{0x7ff8dead0000beefull});
  g.add_output(g.add_node(OpKind::Aten, {x},
                          {{std::string("aten::f")}, {-0.0}, {nan}, {std::vector<double>{nan, -0.0}}},
                          {f32({2})})[0]);
  Graph back = read_all(bytes_of(g));
  EXPECT_EQ(back.hashes(), g.hashes());  // the hashes see the bit patterns
  const auto& attrs = back.nodes()[1].attrs;
  EXPECT_EQ(std::bit_cast<uint64_t>(std::get<double>(attrs[1].value)), std::bit_cast<uint64_t>(-0.0));
  EXPECT_EQ(std::bit_cast<uint64_t>(std::get<double>(attrs[2].value)), 0x7ff8dead0000beefull);
  EXPECT_EQ(std::bit_cast<uint64_t>(std::get<std::vector<double>>(attrs[3].value)[0]),
            0x7ff8dead0000beefull);
}

TEST(GraphIO, GraphIsFollowedByWhateverComesNext) {
  ByteWriter w;
  write_graph(w, small_graph());
  w.u32(0xabcdef01u);
  ByteReader r(w.bytes());
  Graph g = read_graph(r);
  EXPECT_EQ(r.u32(), 0xabcdef01u);
  r.expect_end("test");
  EXPECT_EQ(g.str(), small_graph().str());
}

TEST(GraphIO, EveryTruncationThrows) {
  for (const Graph& g : {small_graph(), attr_graph()}) {
    std::string bytes = bytes_of(g);
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::string cut(bytes, 0, n);  // its own allocation, exactly n bytes
      ByteReader r(cut);
      EXPECT_THROW(read_graph(r), std::runtime_error) << "prefix of " << n << " bytes";
    }
  }
}

TEST(GraphIO, TruncationMessageSaysWhere) {
  std::string bytes = bytes_of(small_graph());
  ByteReader r(std::string_view(bytes).substr(0, 6));
  try {
    read_graph(r);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "lazyjit: truncated program bytes (wanted 4 bytes at offset 4 of 6)");
  }
}

TEST(GraphIO, WrongTagOrVersionIsRefused) {
  std::string bytes = bytes_of(small_graph());
  std::string tag = bytes, version = bytes;
  tag[0] ^= 0x20;
  version[4] = static_cast<char>(kGraphFormatVersion + 1);
  auto message = [](const std::string& b) {
    try {
      read_all(b);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(tag).find("not lazyjit graph bytes"), std::string::npos) << message(tag);
  EXPECT_NE(message(version).find("format version " + std::to_string(kGraphFormatVersion + 1)),
            std::string::npos)
      << message(version);
}

// Random corruptions either throw std::runtime_error or give a graph that
// verifies; nothing else escapes and nothing crashes.
TEST(GraphIO, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(1234);
  int refused = 0, read = 0;
  for (const Graph& g : {small_graph(), attr_graph()}) {
    const std::string bytes = bytes_of(g);
    for (int trial = 0; trial < 3000; ++trial) {
      std::string bad = bytes;
      int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        size_t at = rng() % bad.size();
        // Half the time a small change, as from a bit flip; half a random byte.
        bad[at] = (rng() & 1) ? static_cast<char>(bad[at] ^ (1 << (rng() % 8))) : static_cast<char>(rng());
      }
      try {
        ByteReader r(bad);
        Graph back = read_graph(r);
        EXPECT_EQ(back.verify(), "");
        ++read;
      } catch (const std::runtime_error&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
  SUCCEED() << refused << " refused, " << read << " read";
}

// Every field is hashed or checked, so the recorded hashes refuse every
// single-bit change.
TEST(GraphIO, EverySingleBitFlipIsRefused) {
  for (const Graph& g : {small_graph(), attr_graph()}) {
    const std::string bytes = bytes_of(g);
    for (size_t at = 0; at < bytes.size(); ++at)
      for (int bit = 0; bit < 8; ++bit) {
        std::string bad = bytes;
        bad[at] ^= static_cast<char>(1 << bit);
        EXPECT_THROW(read_all(bad), std::runtime_error) << "byte " << at << " bit " << bit;
      }
  }
}

// Ill-formed graphs can be built (the builders do not check) and written; the
// reader names what is wrong.
TEST(GraphIO, ReaderNamesWhatIsWrong) {
  auto message = [](const Graph& g) {
    try {
      read_all(bytes_of(g));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    Graph g;
    g.add_input(f32({2}));
    g.add_node1(OpKind::Neg, {7}, {dt(DType::Float32)}, f32({2}));
    EXPECT_NE(message(g).find("node 1: operand %7 is not defined before use"), std::string::npos) << message(g);
  }
  {
    Graph g;
    g.add_input(TensorType{static_cast<DType>(200), {2}, {1}});
    EXPECT_NE(message(g).find("node 0: dtype 200"), std::string::npos) << message(g);
  }
  {
    Graph g;
    ValueId x = g.add_input(f32({2}));
    g.add_node1(static_cast<OpKind>(999), {x}, {}, f32({2}));
    EXPECT_NE(message(g).find("node 1: op kind 999"), std::string::npos) << message(g);
  }
  {
    Graph g;
    ValueId x = g.add_input(f32({2}));
    g.add_node1(OpKind::Aten, {x}, {{std::string("aten::neg")}, {OperandRef{1}}}, f32({2}));
    EXPECT_NE(message(g).find("operand reference $1 of a node with 1 operands"), std::string::npos) << message(g);
  }
  {
    Graph g;  // an input not made by add_input
    g.add_node1(OpKind::Input, {}, {{int64_t{3}}}, f32({2}));
    EXPECT_NE(message(g).find("not input #0"), std::string::npos) << message(g);
  }
  {
    Graph g;
    ValueId x = g.add_input(f32({2}));
    g.add_node(OpKind::ReduceSum, {x}, {dt(DType::Float32), {std::vector<int64_t>{0}}}, {});
    EXPECT_NE(message(g).find("must have one output"), std::string::npos) << message(g);
  }
  {
    Graph g;  // well formed as bytes, but not a valid graph
    ValueId x = g.add_input(f32({2}));
    g.add_node1(OpKind::Add, {x}, {dt(DType::Float32)}, f32({2}));
    EXPECT_NE(message(g).find("invalid graph: node 1: add takes 2 operands"), std::string::npos) << message(g);
  }
}

TEST(GraphIO, CorruptLengthDoesNotAllocate) {
  // A node count of 2^32-1 in an otherwise short input is refused up front.
  ByteWriter w;
  w.header("LJGR", kGraphFormatVersion);
  w.u32(0xffffffffu);
  ByteReader r(w.bytes());
  try {
    read_graph(r);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("node count 4294967295 exceeds the 0 bytes left"), std::string::npos)
        << e.what();
  }
}
