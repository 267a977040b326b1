// choose_launch_shape (launch_shape.h): the launch a GPU target gives a kernel.
#include "lowering/launch_shape.h"

#include <algorithm>

#include "lowering/plan.h"

namespace lazyjit::lowering {

namespace {

constexpr int32_t kVectorBytes = 16;  // the widest access a thread makes (ld.global.v4.f32)
constexpr int64_t kSmallThreads = int64_t{1} << 15;
constexpr int64_t kLargeThreads = int64_t{1} << 22;

int64_t product(const std::vector<int64_t>& v, size_t first, size_t last) {
  int64_t n = 1;
  for (size_t i = first; i < last; ++i) n *= std::max<int64_t>(v[i], 0);
  return n;
}

// The vector width a plain kernel wants at its traced strides (launch_shape.h).
int32_t wanted_vector_width(const ir::Graph& g, const FusedKernel& k, int64_t total) {
  if (k.row || k.cat_dim >= 0 || k.stores.empty()) return 1;
  const size_t rank = k.sizes.size();
  std::vector<int64_t> contiguous(rank, 1);
  int64_t run = 1;
  for (size_t d = rank; d-- > 0;) {
    contiguous[d] = run;
    run *= std::max<int64_t>(k.sizes[d], 0);
  }
  int64_t widest = 0;
  for (ValueId v : k.stores) widest = std::max(widest, ir::element_size(g.value(v).type.dtype));
  for (const Access& a : k.loads) {
    if (a.scalar_index >= 0) continue;
    bool broadcast = true, contiguous_load = true;
    for (size_t d = 0; d < rank; ++d) {
      if (k.sizes[d] == 1) continue;  // any stride
      const int64_t s = d < a.strides.size() ? a.strides[d] : 0;
      broadcast &= s == 0;
      contiguous_load &= s == contiguous[d];
    }
    if (broadcast) continue;
    if (!contiguous_load) return 1;
    widest = std::max(widest, ir::element_size(a.dtype));
  }
  if (widest <= 0 || widest > kVectorBytes) return 1;
  int32_t v = kVectorBytes / static_cast<int32_t>(widest);
  const size_t nodes = std::max<size_t>(k.nodes.size(), 1);
  while (v > 1 && static_cast<size_t>(v) * nodes > kMaxLaneNodes) v /= 2;
  if (total < v) return 1;  // not one full vector
  return v;
}

}  // namespace

std::string LaunchShape::str(bool row) const {
  std::string s = "block=" + std::to_string(block);
  if (row) return s + (rows == Rows::Warp ? " rows=warp" : " rows=block");
  return s + " ept=" + std::to_string(elements_per_thread) + " vec=" + std::to_string(vector_width);
}

std::string LaunchShape::invalid(bool row) const {
  if (block < 32 || block > 1024 || block % 32 != 0)
    return "block of " + std::to_string(block) + " threads (want a multiple of 32 in [32, 1024])";
  if (vector_width < 1 || vector_width > 16 || (vector_width & (vector_width - 1)) != 0)
    return "vector width " + std::to_string(vector_width) + " (want a power of two in [1, 16])";
  if (elements_per_thread < 1 || elements_per_thread > 64 || elements_per_thread % vector_width != 0)
    return std::to_string(elements_per_thread) + " elements per thread (want a multiple of the vector width " +
           std::to_string(vector_width) + " in [1, 64])";
  if (vector_width == 1 && elements_per_thread != 1)
    return std::to_string(elements_per_thread) + " elements per thread of a scalar (vector width 1) kernel";
  if (row && (vector_width != 1 || elements_per_thread != 1))
    return "a row kernel with vector width " + std::to_string(vector_width) + " and " +
           std::to_string(elements_per_thread) + " elements per thread (row kernels take 1)";
  if (!row && rows != Rows::Block) return "warp rows for a plain kernel";
  return "";
}

LaunchShape choose_launch_shape(const ir::Graph& g, const FusedKernel& k) {
  LaunchShape s;
  if (k.row) {
    const size_t rank = k.sizes.size();
    const size_t ncol = std::min<size_t>(static_cast<size_t>(std::max(k.reduce_rank, 0)), rank);
    const int64_t cols = product(k.sizes, rank - ncol, rank);
    const int64_t rows = product(k.sizes, 0, rank - ncol);
    const bool few_long_rows = rows < kWarpRowsPerBlock && cols > kFewRowsMaxCols;
    if (cols <= kWarpRowMaxCols && !few_long_rows) {
      s.rows = LaunchShape::Rows::Warp;
      s.block = 32 * static_cast<int32_t>(std::clamp<int64_t>(rows, 1, kWarpRowsPerBlock));
    } else {
      const int64_t want = (cols + kBlockRowColsPerThread - 1) / kBlockRowColsPerThread;
      int32_t b = 32;
      while (b < 1024 && b < want) b *= 2;
      s.block = b;
    }
    return s;
  }
  const int64_t total = product(k.sizes, 0, k.sizes.size());
  s.vector_width = wanted_vector_width(g, k, total);
  s.elements_per_thread = s.vector_width;
  const int64_t threads = (total + s.elements_per_thread - 1) / s.elements_per_thread;
  s.block = threads < kSmallThreads ? 128 : threads >= kLargeThreads ? 512 : 256;
  return s;
}

}  // namespace lazyjit::lowering
