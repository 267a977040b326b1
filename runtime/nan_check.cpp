#include "runtime/nan_check.h"

#include <ATen/ATen.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "bridge/aten_ir.h"

namespace lazyjit::runtime {

namespace {

// Whether one of n IEEE values holds a NaN or an Inf: its exponent bits all
// ones. In 16-byte vectors (GCC/Clang vector extensions: SSE2's compare, no
// wider ISA assumed), four at a time, ORing each lane's test; no branch.
template <class U>
bool bits_nonfinite(const U* p, int64_t n, U exp) {
  typedef U V __attribute__((vector_size(16)));
  constexpr int64_t kLanes = 16 / sizeof(U);
  V a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t i = 0;
  auto test = [&](int64_t at) {
    V v;
    std::memcpy(&v, p + at, sizeof v);
    return (V)((v & exp) == exp);
  };
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    a0 |= test(i);
    a1 |= test(i + kLanes);
    a2 |= test(i + 2 * kLanes);
    a3 |= test(i + 3 * kLanes);
  }
  V any = a0 | a1 | a2 | a3;
  U found = 0;
  for (int64_t j = 0; j < kLanes; ++j) found |= any[j];
  for (; i < n; ++i) found |= (p[i] & exp) == exp;
  return found != 0;
}

// The same over a dense block, split over oneTBB's threads (as the kernels
// run): ATen's reductions would wake its OpenMP pool, whose spinning threads
// then compete with the kernels' for the cores.
template <class U>
bool dense_nonfinite(const void* data, int64_t n, U inf) {
  const U* p = static_cast<const U*>(data);
  constexpr int64_t kGrain = int64_t{1} << 16;
  if (n <= kGrain) return bits_nonfinite(p, n, inf);
  return tbb::parallel_reduce(
      tbb::blocked_range<int64_t>(0, n, kGrain), false,
      [&](const tbb::blocked_range<int64_t>& r, bool found) {
        return found || bits_nonfinite(p + r.begin(), r.end() - r.begin(), inf);
      },
      [](bool a, bool b) { return a || b; });
}

}  // namespace

bool has_nonfinite(const at::Tensor& t) {
  if (!t.defined() || !(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()))) return false;
  if (t.is_non_overlapping_and_dense()) {
    // Its numel elements fill one block from data_ptr (a complex one: two reals each).
    const void* d = t.const_data_ptr();
    const int64_t n = t.numel() * (at::isComplexType(t.scalar_type()) ? 2 : 1);
    switch (t.scalar_type()) {
      case at::kFloat:
      case at::kComplexFloat: return dense_nonfinite<uint32_t>(d, n, 0x7f800000u);
      case at::kDouble:
      case at::kComplexDouble: return dense_nonfinite<uint64_t>(d, n, 0x7ff0000000000000ull);
      case at::kHalf:
      case at::kComplexHalf: return dense_nonfinite<uint16_t>(d, n, 0x7c00);
      case at::kBFloat16: return dense_nonfinite<uint16_t>(d, n, 0x7f80);
      default: break;  // float8 kinds: ATen below
    }
  }
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
