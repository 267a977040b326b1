#include "targets/cpu/kernel_launch.h"

#include <ATen/EmptyTensor.h>
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "bridge/aten_ir.h"
#include "executor/buffer_pool.h"
#include "executor/tensor_layout.h"

namespace lazyjit::executor {

void launch_kernel(const lowering::FusedKernel& k, lowering::KernelFn fn, const int64_t* dims, const ir::Graph& g,
                   std::vector<at::Tensor>& env, const std::vector<int64_t>& scalars, int threads,
                   const std::vector<std::pair<ir::ValueId, at::Tensor>>& into) {
  // The CUDA target leaves kernel_fns null: its kernels run through
  // CompiledCode::kernel(i), and one without it (not loaded) has no code to run here.
  if (!fn)
    throw std::runtime_error("lazyjit: kernel " + k.name +
                             " has no CPU code and no loaded device kernel: its program was compiled for a GPU "
                             "target whose kernel is not loaded here, so it cannot run");
  std::vector<void*> bufs;
  bufs.reserve(k.loads.size() + k.stores.size());
  std::vector<at::Tensor> converted;
  for (const lowering::Access& a : k.loads) {
    if (a.scalar_index >= 0) continue;
    const ir::TensorType& type = g.value(a.value).type;
    if (type.dtype != ir::DType::Other && env[a.value].scalar_type() != bridge::to_aten(type.dtype)) {
      // The kernel reads the bytes as its type's dtype: a value of another
      // dtype (an ATen step whose kernel returned another dtype than its meta
      // kernel said) is read converted, never past the end of a smaller
      // buffer. The steps that take it as an ATen operand still get it as is.
      converted.push_back(with_layout(env[a.value].to(bridge::to_aten(type.dtype)), type));
      bufs.push_back(converted.back().data_ptr());
      continue;
    }
    const at::Tensor& t = env[a.value] = with_layout(env[a.value], type);
    bufs.push_back(t.data_ptr());
  }
  int64_t numel = 1;
  for (int64_t s : k.sizes) numel *= s;
  for (ir::ValueId v : k.stores) {
    const ir::TensorType& t = g.value(v).type;
    auto dest = std::find_if(into.begin(), into.end(), [&](const auto& d) { return d.first == v; });
    if (dest != into.end() && dest->second.defined() && dest->second.is_contiguous() &&
        dest->second.sizes().equals(t.sizes) && dest->second.scalar_type() == bridge::to_aten(t.dtype))
      env[v] = dest->second;
    else
      env[v] = at::detail::empty_generic(t.sizes, buffer_pool(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                         bridge::to_aten(t.dtype), std::nullopt);
    bufs.push_back(env[v].data_ptr());
  }
  // A row kernel over empty rows still writes its row results (sum 0, max -inf).
  if (k.sizes[0] == 0 || (numel == 0 && !k.row)) return;
  int64_t outer = k.sizes[0];
  int64_t inner = std::max<int64_t>(numel / outer, 1);
  constexpr int64_t kMinElemsPerTask = 1 << 15;
  if (threads <= 1 || numel < 2 * kMinElemsPerTask || outer < 2) {
    fn(bufs.data(), scalars.data(), 0, outer, dims);
    return;
  }
  // On ATen's OpenMP pool (this file is built with -fopenmp against the wheel's
  // libgomp): the threads ATen's ops and library steps run on stay hot between
  // a GEMM and the kernel after it, and no second pool spins against them for
  // the cores (docs/design.md, "Execution").
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(inner, 1));
  const int64_t pieces = (outer + grain - 1) / grain;  // of `grain` rows
  const int64_t tasks = std::min<int64_t>(threads, pieces);
  if (tasks <= 1 || omp_in_parallel()) {
    fn(bufs.data(), scalars.data(), 0, outer, dims);
    return;
  }
  // Chunks of at least `grain` rows, several per thread, handed out as threads
  // come free: a thread the machine delays for a while (another process, a
  // steal on a VM) leaves its rows to the others instead of holding up the
  // kernel (halves per thread measured ~30% slower on the softmax bench).
  const int64_t chunks = std::min<int64_t>(pieces, 8 * tasks);
  const int64_t rows = (outer + chunks - 1) / chunks;
#pragma omp parallel for num_threads(static_cast<int>(tasks)) schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * rows, end = std::min(outer, begin + rows);
    if (begin < end) fn(bufs.data(), scalars.data(), begin, end, dims);
  }
}

}  // namespace lazyjit::executor
