// Plan::str (plan.h): a plan as text, one line per step (a kernel's sizes,
// loads and stores, its launch shape, and a row kernel's schedule), the values freed after it,
// then the buffer plan's bytes.
#include <sstream>

#include "lowering/plan.h"

namespace lazyjit::lowering {

using ir::Graph;
using ir::Node;
using ir::OpKind;

std::string Plan::str(const Graph& g) const {
  std::ostringstream os;
  for (size_t si = 0; si < steps.size(); ++si) {
    const Step& s = steps[si];
    switch (s.kind) {
      case Step::Kind::Kernel: {
        const FusedKernel& k = kernels[s.kernel];
        os << k.name << " sizes=[";
        for (size_t i = 0; i < k.sizes.size(); ++i) os << (i ? "," : "") << k.sizes[i];
        os << "]";
        if (k.row) os << " reduce_rank=" << k.reduce_rank;
        if (k.cat_dim >= 0) {
          os << " cat_dim=" << k.cat_dim << " cat_ends=[";
          for (size_t i = 0; i < k.cat_ends.size(); ++i) os << (i ? "," : "") << k.cat_ends[i];
          os << "]";
        }
        os << " nodes=" << k.nodes.size() << " loads=";
        for (const Access& a : k.loads)
          os << (a.scalar_index >= 0 ? "s" : "%") << (a.scalar_index >= 0 ? a.scalar_index : a.value)
             << (a.piece >= 0 ? "@" + std::to_string(a.piece) : "") << " ";
        os << "stores=";
        for (ValueId v : k.stores) os << "%" << v << " ";
        os << "\n  launch " << k.launch.str(k.row) << "\n";
        if (k.row) os << k.schedule.str(g, k);
        break;
      }
      default: {
        const Node& n = g.nodes()[s.node];
        os << ir::op_name(n.kind);
        if (n.kind == OpKind::Aten) os << " " << std::get<std::string>(n.attrs[0].value);
        os << " -> %" << n.outputs[0] << "\n";
      }
    }
    if (si < frees.size() && !frees[si].empty()) {
      os << "  free";
      for (ValueId v : frees[si]) os << " %" << v;
      os << "\n";
    }
  }
  if (!frees.empty())
    os << "buffers: peak " << planned_peak_bytes << " bytes of " << result_bytes << " made\n";
  return os.str();
}

}  // namespace lazyjit::lowering
