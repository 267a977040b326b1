#include "lowering/gemm_epilogue.h"

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "lowering/graph_rewriter.h"

namespace lazyjit::lowering {

using ir::Attr;
using ir::Graph;
using ir::Node;
using ir::OpKind;
using ir::OperandRef;
using ir::TensorType;
using ir::ValueId;

namespace {


// An mm or addmm not yet written to the new graph: its one reader may take it
// in. Operands are new-graph values; `view` is the reshape its reader sees.
struct PendingGemm {
  ValueId gemm = 0;                  // the old graph's product
  bool fused = false;                // a neighbour taken in: `gemm` is no longer computed
  bool addmm = false;                // else mm
  std::optional<bool> use_gelu;      // set: _addmm_activation
  ValueId self = 0, a = 0, b = 0;    // self: addmm only
  Attr beta{int64_t{1}}, alpha{int64_t{1}};  // a ref to a scalar argument, or a constant
  std::optional<ValueId> beta_v, alpha_v;    // the scalar operands behind the refs
  TensorType type;                           // [M, N], contiguous
  std::optional<std::vector<Attr>> view;     // a row reshape the reader sees (as_strided attrs)
  TensorType view_type;
};

const std::string* aten_name(const Node& n) {
  if (n.kind != OpKind::Aten || n.attrs.empty()) return nullptr;
  return std::get_if<std::string>(&n.attrs[0].value);
}

// The operand an ATen node's schema argument `i` (1-based attr) refers to.
std::optional<ValueId> arg_operand(const Node& n, size_t attr) {
  if (attr >= n.attrs.size()) return std::nullopt;
  const auto* ref = std::get_if<OperandRef>(&n.attrs[attr].value);
  if (!ref || ref->index < 0 || static_cast<size_t>(ref->index) >= n.operands.size()) return std::nullopt;
  return n.operands[ref->index];
}

// A view that reads all of a contiguous operand in order, as another shape
// with the same last dim: a reshape that keeps rows whole.
bool is_row_reshape(const Graph& g, const Node& n) {
  if (n.kind != OpKind::AsStrided || n.attrs.size() < 3) return false;
  const TensorType& src = g.value(n.operands[0]).type;
  const TensorType& out = g.value(n.outputs[0]).type;
  const auto* sizes = std::get_if<std::vector<int64_t>>(&n.attrs[0].value);
  const auto* strides = std::get_if<std::vector<int64_t>>(&n.attrs[1].value);
  const auto* offset = std::get_if<int64_t>(&n.attrs[2].value);
  if (!sizes || !strides || !offset || *offset != 0 || sizes->empty() || src.sizes.empty()) return false;
  if (!src.is_contiguous() || !out.is_contiguous() || out.numel() != src.numel()) return false;
  if (*strides != ir::contiguous_strides(*sizes) && out.numel() > 1) return false;
  return sizes->back() == src.sizes.back();
}

class Fuser {
 public:
  Fuser(const Graph& g, const GemmEpilogueRules& rules)
      : g_(g), rules_(rules), rw_(g), out_(rw_.graph()), readers_(g.values().size(), 0),
        pending_(g.values().size()) {
    for (const Node& n : g.nodes())
      for (ValueId v : n.operands) ++readers_[v];
    for (ValueId v : g.outputs()) readers_[v] += 2;  // an output is a reader no rewrite may drop
  }

  Graph run(ValueMap* map_out) {
    for (const Node& n : g_.nodes()) {
      if (n.kind == OpKind::Input || n.kind == OpKind::Scalar) continue;
      if (defer_gemm(n) || defer_view(n) || fuse(n)) continue;
      copy(n);
    }
    return rw_.finish(map_out);  // kUnmapped is kDropped: a value a fused op took in
  }

 private:
  // The new value of `v`; a held-back GEMM behind it is written first.
  ValueId map(ValueId v) {
    if (pending_[v]) flush(v);
    return rw_.map(v);
  }
  bool single_reader(ValueId v) const { return readers_[v] == 1; }

  void copy(const Node& n) {
    for (ValueId v : n.operands)
      if (pending_[v]) flush(v);
    rw_.copy(n);
  }

  // An mm/addmm with a 2-D contiguous result read once: held back, for its
  // reader to take in.
  bool defer_gemm(const Node& n) {
    const std::string* name = aten_name(n);
    if (!name || n.outputs.size() != 1 || !single_reader(n.outputs[0])) return false;
    const bool addmm = *name == "aten::addmm";
    if (!addmm && *name != "aten::mm") return false;
    if (n.attrs.size() != (addmm ? 6u : 3u)) return false;
    const TensorType& t = g_.value(n.outputs[0]).type;
    if (t.sizes.size() != 2 || !t.is_contiguous()) return false;
    auto a = arg_operand(n, addmm ? 2 : 1), b = arg_operand(n, addmm ? 3 : 2);
    auto self = arg_operand(n, 1);
    if (!a || !b || (addmm && !self)) return false;
    auto p = std::make_unique<PendingGemm>();
    p->gemm = n.outputs[0];
    p->addmm = addmm;
    p->type = t;
    p->a = map(*a);
    p->b = map(*b);
    if (addmm) {
      p->self = map(*self);
      p->beta = n.attrs[4];
      p->alpha = n.attrs[5];
      if (auto beta = arg_operand(n, 4)) p->beta_v = map(*beta);
      if (auto alpha = arg_operand(n, 5)) p->alpha_v = map(*alpha);
    }
    pending_[n.outputs[0]] = std::move(p);
    return true;
  }

  // A row reshape of a held-back GEMM, itself read once: held back with it.
  bool defer_view(const Node& n) {
    if (n.kind != OpKind::AsStrided || !pending_[n.operands[0]] || pending_[n.operands[0]]->view) return false;
    if (!single_reader(n.outputs[0]) || !is_row_reshape(g_, n)) return false;
    std::unique_ptr<PendingGemm> p = std::move(pending_[n.operands[0]]);
    p->view = n.attrs;
    p->view_type = g_.value(n.outputs[0]).type;
    pending_[n.outputs[0]] = std::move(p);
    return true;
  }

  // Writes the held-back GEMM behind `v` (and its view) unfused.
  void flush(ValueId v) {
    std::unique_ptr<PendingGemm> p = std::move(pending_[v]);
    ValueId out = emit(*p);
    if (p->view) {
      if (!p->fused) rw_.alias(p->gemm, out);
      out = out_.add_node1(OpKind::AsStrided, {out}, *p->view, p->view_type);
    }
    rw_.alias(v, out);
  }

  // mm, addmm or _addmm_activation of `p`'s operands; beta and alpha as
  // recorded (scalar arguments) or 1.
  ValueId emit(const PendingGemm& p) {
    if (!p.addmm)
      return out_.add_node1(OpKind::Aten, {p.a, p.b}, {{std::string("aten::mm")}, {OperandRef{0}}, {OperandRef{1}}},
                            p.type);
    std::vector<ValueId> ops{p.self, p.a, p.b};
    std::vector<Attr> attrs{{std::string(p.use_gelu ? "aten::_addmm_activation" : "aten::addmm")},
                            {OperandRef{0}},
                            {OperandRef{1}},
                            {OperandRef{2}}};
    auto scalar = [&](const std::optional<ValueId>& v, const Attr& a) {
      if (!v) return attrs.push_back(a);
      attrs.push_back({OperandRef{static_cast<int32_t>(ops.size())}});
      ops.push_back(*v);
    };
    scalar(p.beta_v, p.beta);
    scalar(p.alpha_v, p.alpha);
    if (p.use_gelu) attrs.push_back({*p.use_gelu});
    return out_.add_node1(OpKind::Aten, std::move(ops), std::move(attrs), p.type);
  }

  // The product as its reader sees it: [M, N], or the view's shape.
  static const TensorType& seen_type(const PendingGemm& p) { return p.view ? p.view_type : p.type; }

  // `n` reading a held-back GEMM as one of the rewrites: taken in.
  bool fuse(const Node& n) {
    if (n.outputs.size() != 1) return false;
    for (size_t k = 0; k < n.operands.size(); ++k) {
      ValueId m = n.operands[k];
      if (!pending_[m] || pending_[m]->use_gelu) continue;  // an activation ends the chain
      // The neighbour's result is the GEMM's, element for element.
      if (g_.value(n.outputs[0]).type != seen_type(*pending_[m])) continue;
      if (try_activation(n, m) || try_add(n, k)) return true;
    }
    return false;
  }

  bool try_activation(const Node& n, ValueId m) {
    if (!rules_.activation || !pending_[m]->addmm) return false;
    bool gelu;
    if (n.kind == OpKind::Relu) gelu = false;
    else if ((n.kind == OpKind::Gelu || n.kind == OpKind::GeluTanh) && n.kind == rules_.gelu) gelu = true;
    else return false;
    std::unique_ptr<PendingGemm> p = std::move(pending_[m]);
    p->use_gelu = gelu;
    take_in(n, std::move(p));
    return true;
  }

  // mm + bias, mm + r (either order).
  bool try_add(const Node& n, size_t k) {
    if (n.kind != OpKind::Add || n.operands.size() != 2) return false;
    ValueId m = n.operands[k], other = n.operands[1 - k];
    const PendingGemm& p = *pending_[m];
    if (p.addmm || other == m) return false;
    const TensorType& o = g_.value(other).type;
    if (g_.producer(other).kind == OpKind::Scalar || o.dtype != p.type.dtype) return false;
    std::optional<ValueId> self;
    if (rules_.bias && o.sizes == std::vector<int64_t>{p.type.sizes[1]} && dense_at_run_time(other))
      self = map(other);
    else if (rules_.residual && o.sizes == seen_type(p).sizes)
      self = residual_as_matrix(other, p);
    if (!self) return false;
    std::unique_ptr<PendingGemm> q = std::move(pending_[m]);
    q->addmm = true;
    q->self = *self;
    take_in(n, std::move(q));
    return true;
  }

  // A value ATen gets as a dense tensor: not a view with steps (a 1-D bias
  // sliced with a step stays a strided view at run time, and cuBLASLt's bias
  // epilogue needs it contiguous).
  bool dense_at_run_time(ValueId v) const {
    const Node& p = g_.producer(v);
    if (p.kind != OpKind::AsStrided) return true;
    const auto* strides = std::get_if<std::vector<int64_t>>(&p.attrs[1].value);
    const TensorType& t = g_.value(v).type;
    return strides && (t.numel() <= 1 || *strides == ir::contiguous_strides(t.sizes));
  }

  // The residual as [M, N]: itself when the product is not viewed, the matrix
  // it is a row reshape of, or a new row reshape of it.
  std::optional<ValueId> residual_as_matrix(ValueId r, const PendingGemm& p) {
    if (!p.view) return dense_at_run_time(r) ? std::optional<ValueId>(map(r)) : std::nullopt;
    const Node& prod = g_.producer(r);
    if (is_row_reshape(g_, prod) && g_.value(prod.operands[0]).type == p.type) return map(prod.operands[0]);
    if (!g_.value(r).type.is_contiguous() || !dense_at_run_time(r)) return std::nullopt;
    const std::vector<int64_t> strides = ir::contiguous_strides(p.type.sizes);
    return out_.add_node1(OpKind::AsStrided, {map(r)}, {{p.type.sizes, true}, {strides, true}, {int64_t{0}, true}},
                          p.type);
  }

  // `n`'s result is now the fused GEMM's: held back again when read once (a
  // chain: mm + bias |> relu), else written.
  void take_in(const Node& n, std::unique_ptr<PendingGemm> p) {
    p->fused = true;
    for (ValueId v : n.operands)
      if (v != p->gemm && pending_[v]) flush(v);
    const ValueId r = n.outputs[0];
    pending_[r] = std::move(p);
    if (!single_reader(r)) flush(r);
  }

  const Graph& g_;
  const GemmEpilogueRules& rules_;
  Rewriter rw_;
  Graph& out_;  // rw_'s graph
  std::vector<int> readers_;
  std::vector<std::unique_ptr<PendingGemm>> pending_;
};

}  // namespace

Graph fuse_gemm_epilogues(const Graph& g, const GemmEpilogueRules& rules, ValueMap* map) {
  return Fuser(g, rules).run(map);
}

}  // namespace lazyjit::lowering
