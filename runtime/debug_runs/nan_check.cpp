#include "runtime/debug_runs/nan_check.h"

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

// A dense tensor's elements as one block of IEEE values (a complex one: two
// reals each), `width` bytes each, NaN/Inf when the bits under `exp` are all set.
struct Block {
  const void* data;
  int64_t n;
  int width;
  uint64_t exp;
};

bool as_block(const at::Tensor& t, Block* b) {
  // Read on the host: GPU memory (the CUDA target) takes ATen's test.
  if (!t.is_cpu() || !t.is_non_overlapping_and_dense()) return false;
  // Its numel elements fill one block from data_ptr.
  *b = Block{t.const_data_ptr(), t.numel() * (at::isComplexType(t.scalar_type()) ? 2 : 1), 0, 0};
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kComplexFloat: b->width = 4, b->exp = 0x7f800000u; return true;
    case at::kDouble:
    case at::kComplexDouble: b->width = 8, b->exp = 0x7ff0000000000000ull; return true;
    case at::kHalf:
    case at::kComplexHalf: b->width = 2, b->exp = 0x7c00; return true;
    case at::kBFloat16: b->width = 2, b->exp = 0x7f80; return true;
    default: return false;  // float8 kinds: ATen's test
  }
}

bool range_nonfinite(const Block& b, int64_t begin, int64_t end) {
  switch (b.width) {
    case 2: return bits_nonfinite(static_cast<const uint16_t*>(b.data) + begin, end - begin, static_cast<uint16_t>(b.exp));
    case 4: return bits_nonfinite(static_cast<const uint32_t*>(b.data) + begin, end - begin, static_cast<uint32_t>(b.exp));
    default: return bits_nonfinite(static_cast<const uint64_t*>(b.data) + begin, end - begin, b.exp);
  }
}

// Every block at once: small ones on this thread; else in chunks over oneTBB's
// threads (as the kernels run), one parallel pass for all of a sync's outputs.
// (ATen's reductions would wake its OpenMP pool, whose spinning threads then
// compete with the kernels' for the cores: 10x-100x a memory-bound step.)
bool blocks_nonfinite(const std::vector<Block>& blocks) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  int64_t total = 0;
  for (const Block& b : blocks) total += b.n;
  if (total <= 4 * kChunk) {
    for (const Block& b : blocks)
      if (range_nonfinite(b, 0, b.n)) return true;
    return false;
  }
  struct Chunk {
    const Block* block;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (const Block& b : blocks)
    for (int64_t at = 0; at < b.n; at += kChunk) chunks.push_back({&b, at, std::min(b.n, at + kChunk)});
  return tbb::parallel_reduce(
      tbb::blocked_range<size_t>(0, chunks.size()), false,
      [&](const tbb::blocked_range<size_t>& r, bool found) {
        for (size_t i = r.begin(); i < r.end() && !found; ++i)
          found = range_nonfinite(*chunks[i].block, chunks[i].begin, chunks[i].end);
        return found;
      },
      [](bool a, bool b) { return a || b; });
}

bool floating(const at::Tensor& t) {
  return t.defined() && (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()));
}

// ATen's test, for what is not one dense block.
bool aten_nonfinite(const at::Tensor& t) {
  // One read, no allocation: a sum of finite elements is finite unless it
  // overflows, which the exact test below then tells apart. (isfinite().all()
  // alone allocated a mask: 8x the time of a memory-bound kernel's output.)
  if (at::isFloatingType(t.scalar_type())) {
    at::ScalarType acc = at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
    if (std::isfinite(t.sum(acc).item<double>())) return false;
  }
  return !at::isfinite(t).all().item<bool>();
}

}  // namespace

bool has_nonfinite(const at::Tensor& t) {
  if (!floating(t)) return false;
  Block b;
  return as_block(t, &b) ? blocks_nonfinite({b}) : aten_nonfinite(t);
}

bool any_nonfinite(const std::vector<at::Tensor>& ts) {
  std::vector<Block> blocks;
  for (const at::Tensor& t : ts) {
    if (!floating(t)) continue;
    Block b;
    if (as_block(t, &b)) blocks.push_back(b);
    else if (aten_nonfinite(t)) return true;
  }
  return blocks_nonfinite(blocks);
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
    if (s.kind == lowering::Step::Kind::Kernel) return;  // an op-by-op plan has none
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
