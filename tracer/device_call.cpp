#include "tracer/device_call.h"

#include <algorithm>
#include <mutex>
#include <string>

#include <ATen/core/TensorBody.h>
#include <c10/core/TensorImpl.h>

#include "tracer/lazy_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit {

using tracer::TraceContext;

using tracer::data_alias;

std::vector<at::Tensor> data_views(const std::vector<at::Tensor>& args) {
  TraceContext& ctx = TraceContext::get();
  bool any = std::any_of(args.begin(), args.end(), [](const at::Tensor& t) { return tracer::is_lazy(t); });
  // The call site only when a sync needs it, and before the lock: it takes the GIL.
  std::string site;
  if (any) {
    std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
    any = ctx.has_pending();
  }
  if (any) site = TraceContext::call_site();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  if (any && ctx.has_pending()) ctx.sync("torch.compile call on lazyjit tensors", site);
  std::vector<at::Tensor> out;
  out.reserve(args.size());
  for (const at::Tensor& t : args) {
    if (!tracer::is_lazy(t)) {
      out.push_back(t);
      continue;
    }
    ctx.prepare_write(t);
    if (std::optional<at::Tensor> v = TraceContext::on_hand_view(t)) out.push_back(std::move(*v));
    else  // pending in another thread's graph, never written, or another dtype over its bytes
      out.push_back(ctx.cpu_view(t, "torch.compile call on lazyjit tensors"));
  }
  return out;
}

namespace {

at::Tensor lazy_result(const at::Tensor& out, const std::vector<at::Tensor>& args,
                       const std::vector<at::Tensor>& data) {
  if (!out.defined() || tracer::is_lazy(out)) return out;
  const c10::StorageImpl* mem = out.storage().unsafeGetStorageImpl();
  for (size_t i = 0; i < args.size() && i < data.size(); ++i) {
    if (!tracer::is_lazy(args[i]) || !data[i].defined()) continue;
    if (data[i].storage().unsafeGetStorageImpl() != mem) continue;
    tracer::LazyStorage& s = tracer::storage_of(args[i]);
    if (!s.data.defined() || s.data.storage().unsafeGetStorageImpl() != mem ||
        s.dtype != out.scalar_type() || out.storage_offset() < s.data.storage_offset())
      break;  // another dtype over the same bytes: a copy of its own below
    return tracer::make_tensor(args[i].storage(), out.scalar_type(), out.sizes(), out.strides(),
                               out.storage_offset() - s.data.storage_offset());
  }
  // The elements `out` spans, from its offset on: its own storage from then on.
  int64_t span = 1;
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) == 0) {
      span = 0;
      break;
    }
    span += (out.size(d) - 1) * out.stride(d);
  }
  bool simple = std::all_of(out.strides().begin(), out.strides().end(), [](int64_t s) { return s >= 0; });
  at::Tensor own = simple ? out : out.contiguous();
  if (!simple) span = own.numel();
  at::Tensor t = tracer::make_tensor(tracer::make_storage(span, own.scalar_type()), own.scalar_type(), own.sizes(),
                                     own.strides(), 0);
  // A new storage: nothing records it, so its data is set as assign_data would.
  tracer::LazyStorage& s = tracer::storage_of(t);
  s.data = data_alias(own, {span}, {1}, own.storage_offset());
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  s.owner = &TraceContext::get();
  return t;
}

}  // namespace

std::vector<at::Tensor> lazy_results(std::vector<at::Tensor> outs, const std::vector<at::Tensor>& args,
                                     const std::vector<at::Tensor>& data) {
  for (at::Tensor& o : outs) o = lazy_result(o, args, data);
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  TraceContext::get().note_program_call();  // the code around it runs eagerly (trace_context.h)
  return outs;
}

}  // namespace lazyjit
