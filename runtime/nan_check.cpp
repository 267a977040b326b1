#include "runtime/nan_check.h"

#include <ATen/ATen.h>

#include <cmath>
#include <sstream>

#include "bridge/aten_ir.h"

namespace lazyjit::runtime {

bool has_nonfinite(const at::Tensor& t) {
  if (!t.defined() || !(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()))) return false;
  // One read, no allocation: a sum of finite elements is finite unless it
  // overflows, which the exact test below then tells apart. (isfinite().all()
  // alone allocated a mask: 8x the time of a memory-bound kernel's output.)
  if (at::isFloatingType(t.scalar_type())) {
    at::ScalarType acc = at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
    if (std::isfinite(t.sum(acc).item<double>())) return false;
  }
  return !at::isfinite(t).all().item<bool>();
}

std::string tensor_stats(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.scalar_type();
  if (!at::isFloatingType(t.scalar_type()) || t.numel() == 0) return os.str();
  at::Tensor f = t.to(at::kDouble);
  int64_t nan = at::isnan(f).sum().item<int64_t>(), inf = at::isinf(f).sum().item<int64_t>();
  at::Tensor fin = f.masked_select(at::isfinite(f));
  if (fin.numel() > 0)
    os << ": min " << fin.min().item<double>() << ", max " << fin.max().item<double>() << ", mean "
       << fin.mean().item<double>() << ",";
  else
    os << ": no finite element,";
  os << " " << nan << " NaN, " << inf << " Inf";
  return os.str();
}

std::string find_first_nonfinite(const executor::Executable& program, const executor::Bindings& bindings,
                                 int threads, const std::function<std::string(uint32_t node)>& where) {
  const lowering::Program& p = program.program();
  const ir::Graph& g = p.graph;
  for (size_t i = 0; i < bindings.inputs.size(); ++i)
    if (has_nonfinite(bindings.inputs[i]))
      return "graph input " + std::to_string(i) + " already holds one when the graph starts: " +
             tensor_stats(bindings.inputs[i]) + " (it was computed by an earlier sync, or given)";
  std::string report;
  program.run(bindings, threads, [&](size_t si, const std::vector<at::Tensor>& env) {
    if (!report.empty()) return;
    const lowering::Step& s = p.plan.steps[si];
    if (s.kind == lowering::Step::Kind::Kernel) return;  // an eager plan has none
    const ir::Node& n = g.nodes()[s.node];
    for (ir::ValueId v : n.outputs) {
      if (!has_nonfinite(env[v])) continue;
      std::ostringstream os;
      os << where(s.node) << " made it: its result " << tensor_stats(env[v]) << "; its inputs:";
      size_t k = 0;
      for (ir::ValueId o : n.operands) {
        os << (k++ ? ";" : "") << " ";
        const ir::Node& src = g.producer(o);
        if (src.kind == ir::OpKind::Scalar) {
          ir::DType t = g.value(o).type.dtype;
          os << "scalar " << bridge::scalar_from_slot(bindings.scalars.at(std::get<int64_t>(src.attrs[0].value)), t);
        } else if (env[o].defined()) {
          os << tensor_stats(env[o]);
        } else {
          os << "(freed)";
        }
      }
      report = os.str();
      return;
    }
  });
  return report;
}

}  // namespace lazyjit::runtime
