#include "runtime/debug_runs/graph_check.h"

#include <ATen/ATen.h>

#include <sstream>

#include "executor/op_by_op_node.h"
#include "runtime/debug_runs/nan_check.h"

namespace lazyjit::runtime {

namespace {

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return {1e-7, 1e-7};
    case at::kFloat: return {1e-4, 1e-5};
    case at::kHalf: return {2e-3, 1e-5};
    case at::kBFloat16: return {1.6e-2, 1e-5};
    default: return {0, 0};
  }
}

std::string index_text(int64_t flat, at::IntArrayRef sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = sizes[d] ? flat % sizes[d] : 0;
    flat = sizes[d] ? flat / sizes[d] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < idx.size(); ++i) os << (i ? ", " : "") << idx[i];
  os << "]";
  return os.str();
}

// "" when `got` matches `want`; else what differs. `scale`: per element, what
// rtol is relative to (|want|, or for a sum the sum of |x|).
std::string compare(const at::Tensor& got, const at::Tensor& want, const at::Tensor& scale) {
  if (got.sizes() != want.sizes()) {
    std::ostringstream os;
    os << "compiled shape " << got.sizes() << ", eager " << want.sizes();
    return os.str();
  }
  if (got.numel() == 0) return "";
  at::Tensor g = got.to(at::kDouble).reshape(-1), w = want.to(at::kDouble).reshape(-1);
  Tolerance tol = tolerance(want.scalar_type());
  at::Tensor s = scale.defined() ? scale.to(at::kDouble).expand(want.sizes()).reshape(-1) : w.abs();
  at::Tensor same = (g == w) | (at::isnan(g) & at::isnan(w));
  at::Tensor bad = same.logical_not();
  if (at::isFloatingType(want.scalar_type())) bad = bad & ((g - w).abs() > tol.atol + tol.rtol * s).logical_or(at::isnan(g) != at::isnan(w));
  int64_t nbad = bad.sum().item<int64_t>();
  if (nbad == 0) return "";
  int64_t first = bad.to(at::kByte).argmax().item<int64_t>();
  at::Tensor fin = at::isfinite(g) & at::isfinite(w);
  at::Tensor err = at::where(fin, (g - w).abs(), at::zeros_like(g));
  double max_abs = err.max().item<double>();
  double max_rel = (err / w.abs().clamp_min(1e-30)).masked_select(fin).max().item<double>();
  std::ostringstream os;
  os << nbad << " of " << g.numel() << " elements differ (rtol " << tol.rtol << ", atol " << tol.atol << "); first at "
     << index_text(first, want.sizes()) << ": compiled " << g[first].item<double>() << ", eager "
     << w[first].item<double>() << "; max abs error " << max_abs << ", max rel error " << max_rel;
  return os.str();
}

}  // namespace

Mismatch check_against_eager(const ObservedRun& run, const std::vector<int64_t>& scalars, c10::Device device,
                             const std::function<std::string(uint32_t node)>& where) {
  const ir::Graph& g = *run.graph;
  std::vector<at::Tensor> env = run.values;
  for (uint32_t ni = 0; ni < g.nodes().size(); ++ni) {
    const ir::Node& n = g.nodes()[ni];
    int32_t s = run.step[ni];
    if (s < 0 || !run.step_is_kernel[s]) continue;  // ATen steps and views run eager's own code
    if (!ir::is_elementwise(n.kind) && !ir::is_reduction(n.kind)) continue;
    const ir::ValueId out = n.outputs[0];
    const at::Tensor got = run.values[out];
    if (!got.defined()) continue;
    bool operands = true;
    for (ir::ValueId v : n.operands)
      operands = operands && (g.producer(v).kind == ir::OpKind::Scalar || env[v].defined());
    if (!operands) continue;
    executor::run_op_by_op_node(g, n, env, scalars, device);
    at::Tensor want = env[out];
    env[out] = got;  // later ops read the program's values
    at::Tensor scale;
    if (n.kind == ir::OpKind::ReduceSum && at::isFloatingType(want.scalar_type())) {
      const auto& dims = std::get<std::vector<int64_t>>(n.attrs.at(1).value);
      scale = env[n.operands[0]].to(at::kDouble).abs().sum(dims, /*keepdim=*/true);
    }
    std::string diff = compare(got, want, scale);
    if (diff.empty()) continue;
    std::ostringstream os;
    os << where(ni) << ", computed by generated kernel " << run.step_name[s] << " [" << run.step_ops[s]
       << "], differs from eager on the same inputs: " << diff << "; its inputs:";
    size_t k = 0;
    for (ir::ValueId v : n.operands) {
      os << (k++ ? ";" : "") << " ";
      if (g.producer(v).kind == ir::OpKind::Scalar) os << "scalar " << run.values[v].item();
      else os << tensor_stats(env[v]);
    }
    return {static_cast<int64_t>(ni), os.str()};
  }
  return {};
}

}  // namespace lazyjit::runtime
