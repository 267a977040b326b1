#include "lowering/op_by_op_groups.h"

namespace lazyjit::lowering {

using ir::Node;
using ir::OpKind;
using ir::ValueId;

namespace {

// The graph's nodes from `i` on, as the tracer's RowBuilder adds a layer norm
// (tracer/aten_to_ir_reductions.cpp, try_reduction):
//   s1 = ReduceSum(x); mean = Mul(s1, inv_n); d = Sub(x, mean); dd = Mul(d, d);
//   s2 = ReduceSum(dd); var = Mul(s2, inv_n); ve = Add(var, eps); rstd = Rsqrt(ve);
//   y = Mul(d, rstd); [y = Mul(y, weight);] [y = Add(y, bias);]
//   Cast(y); Cast(mean); Cast(rstd)
class Matcher {
 public:
  Matcher(const ir::Graph& g, uint32_t i) : g_(g), i_(i) {}

  bool match(OpByOpLayerNorm* ln) {
    const Node* s1 = next(OpKind::ReduceSum, 1);
    if (!s1) return false;
    const ValueId x = s1->operands[0];
    const Node* mean = next(OpKind::Mul, 2);
    if (!mean || mean->operands[0] != out(s1) || !is_scalar(mean->operands[1])) return false;
    const ValueId inv_n = mean->operands[1];
    const Node* d = next(OpKind::Sub, 2);
    if (!d || d->operands[0] != x || d->operands[1] != out(mean)) return false;
    const Node* dd = next(OpKind::Mul, 2);
    if (!dd || dd->operands[0] != out(d) || dd->operands[1] != out(d)) return false;
    const Node* s2 = next(OpKind::ReduceSum, 1);
    if (!s2 || s2->operands[0] != out(dd) || s2->attrs != s1->attrs) return false;
    const Node* var = next(OpKind::Mul, 2);
    if (!var || var->operands[0] != out(s2) || var->operands[1] != inv_n) return false;
    const Node* ve = next(OpKind::Add, 2);
    if (!ve || ve->operands[0] != out(var) || !is_scalar(ve->operands[1])) return false;
    const Node* rstd = next(OpKind::Rsqrt, 1);
    if (!rstd || rstd->operands[0] != out(ve)) return false;
    const Node* y = next(OpKind::Mul, 2);
    if (!y || y->operands[0] != out(d) || y->operands[1] != out(rstd)) return false;
    ValueId weight = OpByOpLayerNorm::kNone, bias = OpByOpLayerNorm::kNone;
    if (const Node* n = peek(OpKind::Mul, 2); n && n->operands[0] == out(y) && !inside(n->operands[1])) {
      weight = n->operands[1];
      y = next(OpKind::Mul, 2);
    }
    if (const Node* n = peek(OpKind::Add, 2); n && n->operands[0] == out(y) && !inside(n->operands[1])) {
      bias = n->operands[1];
      y = next(OpKind::Add, 2);
    }
    const Node* out_cast = next(OpKind::Cast, 1);
    const Node* mean_cast = next(OpKind::Cast, 1);
    const Node* rstd_cast = next(OpKind::Cast, 1);
    if (!out_cast || out_cast->operands[0] != out(y) || !mean_cast || mean_cast->operands[0] != out(mean) ||
        !rstd_cast || rstd_cast->operands[0] != out(rstd))
      return false;
    // The reduced dims are x's trailing ones.
    const auto& dims = std::get<std::vector<int64_t>>(s1->attrs.at(1).value);
    const int64_t rank = static_cast<int64_t>(g_.value(x).type.sizes.size());
    for (size_t k = 0; k < dims.size(); ++k)
      if (dims[k] != rank - static_cast<int64_t>(dims.size()) + static_cast<int64_t>(k)) return false;
    ln->input = x;
    ln->weight = weight;
    ln->bias = bias;
    ln->eps = ve->operands[1];
    ln->inv_n = inv_n;
    ln->normalized_dims = static_cast<int64_t>(dims.size());
    ln->out = out(out_cast);
    ln->mean = out(mean_cast);
    ln->rstd = out(rstd_cast);
    ln->nodes = nodes_;
    return true;
  }

 private:
  static ValueId out(const Node* n) { return n->outputs[0]; }
  bool is_scalar(ValueId v) const { return g_.producer(v).kind == OpKind::Scalar; }
  bool inside(ValueId v) const {
    for (uint32_t n : nodes_)
      if (g_.value(v).node == n) return true;
    return false;
  }
  const Node* peek(OpKind kind, size_t operands) const {
    if (i_ >= g_.nodes().size()) return nullptr;
    const Node& n = g_.nodes()[i_];
    if (n.kind != kind || n.operands.size() != operands || n.outputs.size() != 1) return nullptr;
    return &n;
  }
  const Node* next(OpKind kind, size_t operands) {
    const Node* n = peek(kind, operands);
    if (n) nodes_.push_back(i_++);
    return n;
  }

  const ir::Graph& g_;
  uint32_t i_;
  std::vector<uint32_t> nodes_;
};

}  // namespace

std::vector<OpByOpLayerNorm> find_layer_norms(const ir::Graph& g) {
  std::vector<OpByOpLayerNorm> found;
  std::vector<uint32_t> count(g.values().size(), 0);
  for (const Node& n : g.nodes())
    for (ValueId v : n.operands) ++count[v];
  std::vector<bool> is_output(g.values().size(), false);
  for (ValueId v : g.outputs()) is_output[v] = true;
  for (uint32_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].kind != OpKind::ReduceSum) continue;
    OpByOpLayerNorm ln;
    if (!Matcher(g, i).match(&ln)) continue;
    // Only its results leave it: every read of a value made inside is from inside.
    std::vector<uint32_t> inner_reads(g.values().size(), 0);
    for (uint32_t n : ln.nodes)
      for (ValueId v : g.nodes()[n].operands) ++inner_reads[v];
    bool closed = true;
    for (uint32_t n : ln.nodes)
      for (ValueId v : g.nodes()[n].outputs)
        if (v != ln.out && v != ln.mean && v != ln.rstd && (is_output[v] || count[v] != inner_reads[v])) closed = false;
    if (!closed) continue;
    i = ln.nodes.back();
    found.push_back(std::move(ln));
  }
  return found;
}

}  // namespace lazyjit::lowering
