#include "graph_ir/graph_io.h"

#include <stdexcept>
#include <string>

namespace lazyjit::ir {

namespace {

constexpr std::string_view kGraphTag = "LJGR";

// Attribute alternatives are stored by their index in AttrValue, which the
// hashes already fix: a new alternative goes at the end, and both the writer
// and the reader below must learn it.
static_assert(std::variant_size_v<AttrValue> == 9, "teach graph_io the new AttrValue alternative");

// Smallest encodings, so a count can be checked against the bytes left.
constexpr size_t kMinAttrBytes = 2;                   // tag, shape_like
constexpr size_t kMinTypeBytes = 1 + 4 + 4;           // dtype, two empty lists
constexpr size_t kMinNodeBytes = 2 + 4 + 4 + 4;       // kind, three empty lists

// --- writing ---------------------------------------------------------------------

void write_type(ByteWriter& w, const TensorType& t) {
  w.u8(static_cast<uint8_t>(t.dtype));
  w.i64s(t.sizes);
  w.i64s(t.strides);
}

void write_attr(ByteWriter& w, const Attr& a) {
  w.u8(static_cast<uint8_t>(a.value.index()));
  w.boolean(a.shape_like);
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
        } else if constexpr (std::is_same_v<T, bool>) {
          w.boolean(x);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          w.i64(x);
        } else if constexpr (std::is_same_v<T, double>) {
          w.f64(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          w.str(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          w.i64s(x);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          w.f64s(x);
        } else if constexpr (std::is_same_v<T, OperandRef>) {
          w.i32(x.index);
        } else if constexpr (std::is_same_v<T, OperandListRef>) {
          w.i32s(x.indices);
        } else {
          static_assert(sizeof(T) == 0, "unhandled AttrValue alternative");
        }
      },
      a.value);
}

void write_node(ByteWriter& w, const Graph& g, const Node& n) {
  w.u16(static_cast<uint16_t>(n.kind));
  w.u32s(n.operands);
  w.count(n.attrs.size());
  for (const Attr& a : n.attrs) write_attr(w, a);
  w.count(n.outputs.size());
  for (ValueId v : n.outputs) write_type(w, g.value(v).type);
}

// --- reading ---------------------------------------------------------------------

// Reads one node and appends it to `g` through the public builders, checking
// everything later code indexes by (ids, enum values, the attrs verify() reads
// without checking) so that a corrupt input throws instead of misbehaving.
class NodeReader {
 public:
  NodeReader(ByteReader& r, Graph& g) : r_(r), g_(g) {}

  void read_node() {
    node_ = g_.nodes().size();
    uint16_t kind_raw = r_.u16();
    if (kind_raw > static_cast<uint16_t>(kLastOpKind)) bad("op kind " + std::to_string(kind_raw));
    OpKind kind = static_cast<OpKind>(kind_raw);
    std::vector<ValueId> operands = r_.u32s();
    for (ValueId v : operands)
      if (v >= g_.values().size()) bad("operand %" + std::to_string(v) + " is not defined before use");
    std::vector<Attr> attrs(r_.count(kMinAttrBytes, "attr"));
    for (Attr& a : attrs) a = read_attr(operands.size());
    std::vector<TensorType> types(r_.count(kMinTypeBytes, "output"));
    for (TensorType& t : types) t = read_type();

    switch (kind) {
      case OpKind::Input: {
        // add_input numbers inputs itself; the bytes must agree with it.
        std::vector<Attr> want{{static_cast<int64_t>(g_.inputs().size())}};
        if (!operands.empty() || types.size() != 1 || attrs != want)
          bad("input node is not input #" + std::to_string(g_.inputs().size()) + " as add_input makes it");
        g_.add_input(types[0]);
        return;
      }
      case OpKind::Scalar: {
        if (!operands.empty() || types.size() != 1 || !types[0].sizes.empty() ||
            !types[0].strides.empty() || attrs.size() != 2 ||
            !std::holds_alternative<bool>(attrs[1].value))
          bad("scalar node is not as add_scalar makes it");
        bool wrapped = std::get<bool>(attrs[1].value);
        std::vector<Attr> want{{static_cast<int64_t>(g_.scalars().size())}, {wrapped}};
        if (attrs != want)
          bad("scalar node is not scalar #" + std::to_string(g_.scalars().size()) + " as add_scalar makes it");
        g_.add_scalar(types[0].dtype, wrapped);
        return;
      }
      default:
        break;
    }
    // verify() reads these without checking their alternatives or output count.
    if ((is_elementwise(kind) || is_reduction(kind)) && types.size() != 1)
      bad(std::string(op_name(kind)) + " must have one output");
    if ((is_elementwise(kind) || is_reduction(kind)) && !attrs.empty())
      if (auto* d = std::get_if<int64_t>(&attrs[0].value))
        if (*d < 0 || *d > static_cast<int64_t>(DType::Other)) bad("compute dtype " + std::to_string(*d));
    if ((kind == OpKind::AsStrided || kind == OpKind::AsStridedScatter) && attrs.size() == 3 &&
        (!std::holds_alternative<std::vector<int64_t>>(attrs[0].value) ||
         !std::holds_alternative<std::vector<int64_t>>(attrs[1].value) ||
         !std::holds_alternative<int64_t>(attrs[2].value)))
      bad("as_strided attrs must be sizes, strides, offset");
    g_.add_node(kind, std::move(operands), std::move(attrs), std::move(types));
  }

 private:
  [[noreturn]] void bad(const std::string& what) { r_.fail("node " + std::to_string(node_) + ": " + what); }

  TensorType read_type() {
    TensorType t;
    uint8_t d = r_.u8();
    if (d > static_cast<uint8_t>(DType::Other)) bad("dtype " + std::to_string(d));
    t.dtype = static_cast<DType>(d);
    t.sizes = r_.i64s();
    t.strides = r_.i64s();
    // numel() multiplies the sizes; keep that product defined.
    int64_t n = 1;
    for (int64_t s : t.sizes)
      if (s >= 0 && __builtin_mul_overflow(n, s, &n)) bad("output has more than 2^63 elements");
    return t;
  }

  Attr read_attr(size_t n_operands) {
    Attr a;
    uint8_t tag = r_.u8();
    a.shape_like = r_.boolean();
    auto operand_index = [&](int32_t i, bool none_ok) {
      if (i >= static_cast<int64_t>(n_operands) || i < (none_ok ? -1 : 0))
        bad("operand reference $" + std::to_string(i) + " of a node with " +
            std::to_string(n_operands) + " operands");
    };
    switch (tag) {
      case 0: a.value = std::monostate{}; break;
      case 1: a.value = r_.boolean(); break;
      case 2: a.value = r_.i64(); break;
      case 3: a.value = r_.f64(); break;
      case 4: a.value = r_.str(); break;
      case 5: a.value = r_.i64s(); break;
      case 6: a.value = r_.f64s(); break;
      case 7: {
        OperandRef ref{r_.i32()};
        operand_index(ref.index, /*none_ok=*/false);
        a.value = ref;
        break;
      }
      case 8: {
        OperandListRef list{r_.i32s()};
        for (int32_t i : list.indices) operand_index(i, /*none_ok=*/true);
        a.value = std::move(list);
        break;
      }
      default: bad("attr alternative " + std::to_string(tag));
    }
    return a;
  }

  ByteReader& r_;
  Graph& g_;
  size_t node_ = 0;
};

}  // namespace

void write_graph(ByteWriter& w, const Graph& g) {
  w.header(kGraphTag, kGraphFormatVersion);
  w.count(g.nodes().size());
  for (const Node& n : g.nodes()) write_node(w, g, n);
  w.u32s(g.outputs());
  GraphHashes h = g.hashes();
  w.u64(h.structure.lo);
  w.u64(h.structure.hi);
  w.u64(h.shape);
  w.u64(h.confirm);
}

Graph read_graph(ByteReader& r) {
  r.expect_header(kGraphTag, kGraphFormatVersion, "graph");
  Graph g;
  size_t n_nodes = r.count(kMinNodeBytes, "node");
  NodeReader nodes(r, g);
  for (size_t i = 0; i < n_nodes; ++i) nodes.read_node();
  for (ValueId v : r.u32s()) {
    if (v >= g.values().size()) r.fail("graph output %" + std::to_string(v) + " is not defined");
    g.add_output(v);
  }
  GraphHashes recorded;
  recorded.structure.lo = r.u64();
  recorded.structure.hi = r.u64();
  recorded.shape = r.u64();
  recorded.confirm = r.u64();
  if (g.hashes() != recorded)
    r.fail("graph hashes differ from the recorded ones (corrupt bytes, a change of the hashing, "
           "or outputs added before the last node)");
  if (std::string problem = g.verify(); !problem.empty())
    throw std::runtime_error("lazyjit: program bytes hold an invalid graph: " + problem);
  return g;
}

}  // namespace lazyjit::ir
