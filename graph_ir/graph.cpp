#include "graph_ir/graph.h"

#include "graph_ir/attr_hash.h"
#include "graph_ir/effects.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace lazyjit::ir {

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

bool TensorType::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != acc) return false;
    acc *= sizes[i];
  }
  return true;
}

static void join(std::ostringstream& os, const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
}

std::string TensorType::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  join(os, sizes);
  os << "]";
  if (!is_contiguous()) {
    os << "{";
    join(os, strides);
    os << "}";
  }
  return os.str();
}

namespace {
constexpr uint64_t kStructureSeed = 0x6c617a796a6974ull, kShapeSeed = 0x7368617065ull,
                   kConfirmSeed = 0x636f6e6669726dull;
}  // namespace

Graph::Graph()
    : structure_(StreamHasher::Algo::Xxh3_128, kStructureSeed),
      shape_(StreamHasher::Algo::Xxh3_64, kShapeSeed),
      confirm_(StreamHasher::Algo::Xxh64, kConfirmSeed) {}

void Graph::clear() {
  nodes_.clear();
  values_.clear();
  inputs_.clear();
  scalars_.clear();
  outputs_.clear();
  structure_.reset(kStructureSeed);
  shape_.reset(kShapeSeed);
  confirm_.reset(kConfirmSeed);
}

ValueId Graph::add_input(const TensorType& type) {
  int64_t index = static_cast<int64_t>(inputs_.size());
  ValueId v = add_node1(OpKind::Input, {}, {{index}}, type);
  inputs_.push_back(v);
  return v;
}

ValueId Graph::add_scalar(DType dtype, bool wrapped) {
  int64_t index = static_cast<int64_t>(scalars_.size());
  ValueId v = add_node1(OpKind::Scalar, {}, {{index}, {wrapped}}, TensorType{dtype, {}, {}});
  scalars_.push_back(v);
  return v;
}

std::vector<ValueId> Graph::add_node(OpKind kind, std::vector<ValueId> operands,
                                     std::vector<Attr> attrs,
                                     std::vector<TensorType> output_types) {
  Node n{kind, std::move(operands), std::move(attrs), {}};
  uint32_t node_index = static_cast<uint32_t>(nodes_.size());
  n.outputs.reserve(output_types.size());
  for (uint32_t i = 0; i < output_types.size(); ++i) {
    n.outputs.push_back(static_cast<ValueId>(values_.size()));
    values_.push_back(Value{std::move(output_types[i]), node_index, i});
  }
  hash_node(n);
  nodes_.push_back(std::move(n));
  return nodes_.back().outputs;
}

// The one-output case without the temporary vectors of add_node.
ValueId Graph::add_node1(OpKind kind, std::vector<ValueId> operands, std::vector<Attr> attrs,
                         TensorType output_type) {
  uint32_t node_index = static_cast<uint32_t>(nodes_.size());
  ValueId v = static_cast<ValueId>(values_.size());
  Node n{kind, std::move(operands), std::move(attrs), {v}};
  values_.push_back(Value{std::move(output_type), node_index, 0});
  hash_node(n);
  nodes_.push_back(std::move(n));
  return v;
}

void Graph::add_output(ValueId v) {
  structure_.update_i64(-1);
  structure_.update_i64(v);
  confirm_.update_i64(-1);
  confirm_.update_i64(v);
  outputs_.push_back(v);
}

void Graph::rewind_outputs(const OutputMark& m) {
  outputs_.resize(m.count);
  structure_ = m.structure;
  confirm_ = m.confirm;
}

namespace {
// Feeds one attribute into a hasher; every alternative is tagged by its index so
// that e.g. int 1 and bool true differ.
template <class H>
void hash_attr(H& h, const AttrValue& a) {
  h.update_i64(static_cast<int64_t>(a.index()));
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
        } else if constexpr (std::is_same_v<T, bool>) {
          h.update_i64(x);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          h.update_i64(x);
        } else if constexpr (std::is_same_v<T, double>) {
          h.update(&x, sizeof x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          h.update_str(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>>) {
          h.update_i64(static_cast<int64_t>(x.size()));
          h.update(x.data(), x.size() * sizeof(x[0]));
        } else if constexpr (std::is_same_v<T, OperandRef>) {
          h.update_i64(x.index);
        } else if constexpr (std::is_same_v<T, OperandListRef>) {
          h.update_i64(static_cast<int64_t>(x.indices.size()));
          h.update(x.indices.data(), x.indices.size() * sizeof(int32_t));
        }
      },
      a);
}
}  // namespace

void hash_attr(BufferHasher& h, const AttrValue& a) { hash_attr<BufferHasher>(h, a); }

namespace {
// Appends to memory sized beforehand (see node_bytes_bound): no checks, inlined.
struct Writer {
  unsigned char* p;
  void update(const void* d, size_t len) {
    if (len) std::memcpy(p, d, len);
    p += len;
  }
  void update_i64(int64_t v) { update(&v, sizeof v); }
  void update_str(std::string_view s) {
    update_i64(static_cast<int64_t>(s.size()));
    update(s.data(), s.size());
  }
};

size_t attr_bytes_bound(const AttrValue& a) {
  size_t payload = 8;
  if (auto* s = std::get_if<std::string>(&a)) payload += s->size();
  else if (auto* v = std::get_if<std::vector<int64_t>>(&a)) payload += v->size() * sizeof(int64_t);
  else if (auto* d = std::get_if<std::vector<double>>(&a)) payload += d->size() * sizeof(double);
  else if (auto* l = std::get_if<OperandListRef>(&a)) payload += l->indices.size() * sizeof(int32_t);
  return 24 + payload;  // separator, alternative tag, length or value, payload
}
}  // namespace

// A node's bytes are gathered per stream first, then fed in one update each:
// streaming hashers pay a fixed cost per update, and a node has dozens of fields.
// The bytes (and so the digests) are exactly those of one update per field.
void Graph::hash_node(const Node& n) {
  size_t bound = 24 + n.operands.size() * sizeof(int64_t);
  for (const Attr& a : n.attrs) bound += attr_bytes_bound(a.value);
  for (ValueId v : n.outputs) bound += 48 + 16 * values_[v].type.sizes.size() + 16 * values_[v].type.strides.size();
  // Per thread, not per graph: a recorder makes a graph per sync, and a fresh
  // 12 KB buffer each time cost an allocation that made glibc consolidate
  // every small block the last graph freed.
  thread_local std::vector<unsigned char> scratch;
  if (scratch.size() < 3 * bound) scratch.resize(std::max(3 * bound, size_t{4096}));
  unsigned char* const st0 = scratch.data();
  unsigned char* const sh0 = st0 + bound;
  unsigned char* const cf0 = sh0 + bound;
  Writer st{st0}, sh{sh0}, cf{cf0};
  int64_t head[3] = {static_cast<int64_t>(n.kind), static_cast<int64_t>(n.operands.size()),
                     static_cast<int64_t>(n.outputs.size())};
  st.update(head, sizeof head);
  cf.update(head, sizeof head);
  for (ValueId v : n.operands) {
    st.update_i64(v);
    cf.update_i64(v);
  }
  for (const Attr& a : n.attrs) {
    Writer& h = a.shape_like ? sh : st;
    h.update_i64(-2);
    hash_attr(h, a.value);
    hash_attr(cf, a.value);
  }
  for (ValueId v : n.outputs) {
    const TensorType& t = values_[v].type;
    st.update_i64(static_cast<int64_t>(t.dtype));
    st.update_i64(static_cast<int64_t>(t.sizes.size()));
    cf.update_i64(static_cast<int64_t>(t.dtype));
    for (const auto* vec : {&t.sizes, &t.strides}) {
      sh.update_i64(static_cast<int64_t>(vec->size()));
      sh.update(vec->data(), vec->size() * sizeof(int64_t));
      cf.update(vec->data(), vec->size() * sizeof(int64_t));
    }
  }
  structure_.update(st0, st.p - st0);
  if (sh.p != sh0) shape_.update(sh0, sh.p - sh0);
  confirm_.update(cf0, cf.p - cf0);
}

GraphHashes Graph::hashes() const {
  return GraphHashes{structure_.digest128(), shape_.digest64(), confirm_.digest64()};
}

namespace {
void print_attr(std::ostringstream& os, const AttrValue& a) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          os << "none";
        } else if constexpr (std::is_same_v<T, bool>) {
          os << (x ? "true" : "false");
        } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          os << x;
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << '"' << x << '"';
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>>) {
          os << "[";
          for (size_t i = 0; i < x.size(); ++i) os << (i ? "," : "") << x[i];
          os << "]";
        } else if constexpr (std::is_same_v<T, OperandRef>) {
          os << "$" << x.index;
        } else if constexpr (std::is_same_v<T, OperandListRef>) {
          os << "[";
          for (size_t i = 0; i < x.indices.size(); ++i)
            os << (i ? "," : "") << (x.indices[i] < 0 ? std::string("none") : "$" + std::to_string(x.indices[i]));
          os << "]";
        }
      },
      a);
}
}  // namespace

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph(inputs=" << inputs_.size() << ", scalars=" << scalars_.size() << ") {\n";
  for (const Node& n : nodes_) {
    os << "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << "%" << n.outputs[i];
    os << " = " << op_name(n.kind);
    if (!n.attrs.empty()) {
      os << "[";
      for (size_t i = 0; i < n.attrs.size(); ++i) {
        if (i) os << ", ";
        // Elementwise ops keep their compute dtype in attr 0.
        if (i == 0 && is_elementwise(n.kind) && std::holds_alternative<int64_t>(n.attrs[0].value))
          os << dtype_name(static_cast<DType>(std::get<int64_t>(n.attrs[0].value)));
        else
          print_attr(os, n.attrs[i].value);
      }
      os << "]";
    }
    os << "(";
    for (size_t i = 0; i < n.operands.size(); ++i) os << (i ? ", " : "") << "%" << n.operands[i];
    os << ") : ";
    for (size_t i = 0; i < n.outputs.size(); ++i)
      os << (i ? ", " : "") << values_[n.outputs[i]].type.str();
    os << "\n";
  }
  os << "  return";
  for (size_t i = 0; i < outputs_.size(); ++i) os << (i ? ", %" : " %") << outputs_[i];
  os << "\n}\n";
  return os.str();
}

std::string Graph::verify() const {
  auto bad = [](size_t node, const std::string& what) {
    return "node " + std::to_string(node) + ": " + what;
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    for (ValueId v : n.operands) {
      if (v >= values_.size() || values_[v].node >= i)
        return bad(i, "operand %" + std::to_string(v) + " is not defined before use");
    }
    for (ValueId v : n.outputs) {
      const TensorType& t = values_[v].type;
      if (t.sizes.size() != t.strides.size()) return bad(i, "sizes and strides differ in rank");
      for (int64_t s : t.sizes)
        if (s < 0) return bad(i, "negative size");
    }
    size_t want = (is_unary(n.kind) || is_reduction(n.kind)) ? 1 : is_binary(n.kind) ? 2
                  : is_ternary(n.kind) ? 3
                  : (n.kind == OpKind::Input || n.kind == OpKind::Scalar) ? 0
                  : (n.kind == OpKind::Full || n.kind == OpKind::AsStrided) ? 1
                  : n.kind == OpKind::AsStridedScatter ? 2 : n.operands.size();
    if (n.operands.size() != want)
      return bad(i, std::string(op_name(n.kind)) + " takes " + std::to_string(want) + " operands, got " +
                        std::to_string(n.operands.size()));
    if (is_elementwise(n.kind)) {
      if (n.outputs.size() != 1) return bad(i, "elementwise op must have one output");
      if (n.attrs.empty() || !std::holds_alternative<int64_t>(n.attrs[0].value))
        return bad(i, "elementwise op needs its compute dtype as attr 0");
    }
    if (is_reduction(n.kind)) {
      if (n.attrs.size() != 2 || !std::holds_alternative<int64_t>(n.attrs[0].value) ||
          !std::holds_alternative<std::vector<int64_t>>(n.attrs[1].value))
        return bad(i, "reduction needs its accumulate dtype and reduced dims");
      const auto& in = values_[n.operands[0]].type.sizes;
      const auto& out = values_[n.outputs[0]].type.sizes;
      const auto& dims = std::get<std::vector<int64_t>>(n.attrs[1].value);
      if (in.size() != out.size()) return bad(i, "reduction must keep the reduced dims");
      for (size_t k = 0; k < dims.size(); ++k)
        if (dims[k] != static_cast<int64_t>(in.size() - dims.size() + k))
          return bad(i, "reduction dims must be the trailing dims");
      for (size_t d = 0; d < in.size(); ++d)
        if (out[d] != (d + dims.size() >= in.size() ? 1 : in[d]))
          return bad(i, "reduction output must be the input with reduced dims of size 1");
    }
    if (n.kind == OpKind::Cat) {
      if (n.attrs.size() != 2 || !std::holds_alternative<int64_t>(n.attrs[1].value))
        return bad(i, "cat needs its compute dtype and dim");
      const TensorType& out = values_[n.outputs[0]].type;
      const int64_t dim = std::get<int64_t>(n.attrs[1].value), rank = static_cast<int64_t>(out.sizes.size());
      if (dim < 0 || dim >= rank) return bad(i, "cat dim out of range");
      if (n.operands.size() < 2) return bad(i, "cat takes at least 2 operands");
      int64_t total = 0;
      for (ValueId v : n.operands) {
        const TensorType& t = values_[v].type;
        if (t.dtype != out.dtype || t.sizes.size() != out.sizes.size())
          return bad(i, "cat operands must have the output's dtype and rank");
        for (int64_t d = 0; d < rank; ++d)
          if (d != dim && t.sizes[d] != out.sizes[d]) return bad(i, "cat operands differ outside the cat dim");
        if (t.sizes[dim] < 1) return bad(i, "cat operand empty along the cat dim");
        total += t.sizes[dim];
      }
      if (total != out.sizes[dim]) return bad(i, "cat output size is not the operands' sum");
    }
    if (n.kind == OpKind::AsStrided || n.kind == OpKind::AsStridedScatter) {
      if (n.attrs.size() != 3) return bad(i, "as_strided needs sizes, strides, offset");
      const auto& sz = std::get<std::vector<int64_t>>(n.attrs[0].value);
      const auto& st = std::get<std::vector<int64_t>>(n.attrs[1].value);
      int64_t off = std::get<int64_t>(n.attrs[2].value);
      if (sz.size() != st.size()) return bad(i, "as_strided sizes and strides differ in rank");
      int64_t last = off;
      bool empty = false;
      for (size_t d = 0; d < sz.size(); ++d) {
        if (sz[d] == 0) empty = true;
        else last += (sz[d] - 1) * st[d];
      }
      if (!empty && (off < 0 || last >= values_[n.operands[0]].type.numel()))
        return bad(i, "as_strided view reaches outside its operand");
    }
  }
  for (ValueId v : outputs_)
    if (v >= values_.size()) return "output %" + std::to_string(v) + " is not defined";
  return {};
}

std::vector<bool> live_nodes(const Graph& g) { return live_nodes(g, g.outputs()); }

bool has_effects(const Node& n) {
  if (n.kind != OpKind::Aten || n.attrs.empty()) return false;
  const auto* name = std::get_if<std::string>(&n.attrs[0].value);
  return name && name->find("c10d::") != std::string::npos;
}

bool holds_effects(const Graph& g) {
  for (const Node& n : g.nodes())
    if (has_effects(n)) return true;
  return false;
}

// Live: what an output (or root) reads, and every node with effects
// (effects.h) with what it reads.
std::vector<bool> live_nodes(const Graph& g, const std::vector<ValueId>& roots) {
  std::vector<bool> live(g.nodes().size(), false);
  std::vector<uint32_t> work;
  for (ValueId v : roots) work.push_back(g.value(v).node);
  for (uint32_t n = 0; n < g.nodes().size(); ++n)
    if (has_effects(g.nodes()[n])) work.push_back(n);
  while (!work.empty()) {
    uint32_t n = work.back();
    work.pop_back();
    if (live[n]) continue;
    live[n] = true;
    for (ValueId v : g.nodes()[n].operands) work.push_back(g.value(v).node);
  }
  return live;
}

}  // namespace lazyjit::ir
