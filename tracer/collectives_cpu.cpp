// The kernels of the lazyjit_c10d ops (tracer/collectives.h): what a program's
// collective step runs, on the CPU buffers of its input, through the process
// group's CPU backend (Gloo). Each op has a `_start` form that returns with the
// collective in flight, its Work registered with the result, so that
// `_c10d_functional::wait_tensor` on the result waits for it
// (executor/collective_in_flight.cpp); the plain form waits before it returns
// (step mode, op-by-op runs). Also the ops' schemas and their meta kernels.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <chrono>
#include <string>
#include <vector>

#include "debug/metrics.h"
#include "tracer/collectives.h"

namespace lazyjit::tracer::collectives {
namespace {

using torch::jit::Stack;

// ---- Through _c10d_functional (Gloo's all_reduce, all_gather, reduce_scatter,
// broadcast, all_to_all_single) ---------------------------------------------------

at::Tensor all_reduce_cpu(const at::Tensor& t, c10::string_view op, c10::string_view group) {
  std::string o(op), g(group);
  if (o == "avg") {  // Gloo has no AVG
    at::Tensor r = run_functional("_c10d_functional::all_reduce", "all_reduce", {t, std::string("sum"), g});
    return r.div_(group_size_of(g));
  }
  return run_functional("_c10d_functional::all_reduce", "all_reduce", {t, o, g});
}

at::Tensor all_gather_cpu(const at::Tensor& t, int64_t size, c10::string_view group) {
  return run_functional("_c10d_functional::all_gather_into_tensor", "all_gather", {t.contiguous(), size, std::string(group)});
}

at::Tensor reduce_scatter_cpu(const at::Tensor& t, c10::string_view op, int64_t size, c10::string_view group) {
  std::string o(op), g(group);
  if (o == "avg") {
    at::Tensor r = run_functional("_c10d_functional::reduce_scatter_tensor", "reduce_scatter",
                                  {t.contiguous(), std::string("sum"), size, g});
    return r.div_(size);
  }
  return run_functional("_c10d_functional::reduce_scatter_tensor", "reduce_scatter", {t.contiguous(), o, size, g});
}

at::Tensor broadcast_cpu(const at::Tensor& t, int64_t src, c10::string_view group) {
  return run_functional("_c10d_functional::broadcast", "broadcast", {t, src, std::string(group)});
}

at::Tensor all_to_all_single_run(const at::Tensor& t, at::IntArrayRef out_splits, at::IntArrayRef in_splits,
                                 c10::string_view group, bool start_only) {
  return run_functional("_c10d_functional::all_to_all_single", "all_to_all_single",
                        {t.contiguous(), out_splits.vec(), in_splits.vec(), std::string(group)}, start_only);
}

at::Tensor all_to_all_single_cpu(const at::Tensor& t, at::IntArrayRef out_splits, at::IntArrayRef in_splits,
                                 c10::string_view group) {
  return all_to_all_single_run(t, out_splits, in_splits, group, false);
}

// The `_start` forms: the same, left in flight (avg divides once done: it waits;
// recording asks for sum and divides in the graph: collectives.cpp's divides_first).
at::Tensor all_reduce_start_cpu(const at::Tensor& t, c10::string_view op, c10::string_view group) {
  if (op == "avg") return all_reduce_cpu(t, op, group);
  return run_functional("_c10d_functional::all_reduce", "all_reduce", {t, std::string(op), std::string(group)}, true);
}

at::Tensor all_gather_start_cpu(const at::Tensor& t, int64_t size, c10::string_view group) {
  return run_functional("_c10d_functional::all_gather_into_tensor", "all_gather",
                        {t.contiguous(), size, std::string(group)}, true);
}

at::Tensor reduce_scatter_start_cpu(const at::Tensor& t, c10::string_view op, int64_t size, c10::string_view group) {
  if (op == "avg") return reduce_scatter_cpu(t, op, size, group);
  return run_functional("_c10d_functional::reduce_scatter_tensor", "reduce_scatter",
                        {t.contiguous(), std::string(op), size, std::string(group)}, true);
}

at::Tensor broadcast_start_cpu(const at::Tensor& t, int64_t src, c10::string_view group) {
  return run_functional("_c10d_functional::broadcast", "broadcast", {t, src, std::string(group)}, true);
}

at::Tensor all_to_all_single_start_cpu(const at::Tensor& t, at::IntArrayRef out_splits, at::IntArrayRef in_splits,
                                       c10::string_view group) {
  return all_to_all_single_run(t, out_splits, in_splits, group, true);
}

// ---- Through the ProcessGroup's own methods (no functional form: scatter,
// gather, reduce, send, recv) --------------------------------------------------

// Waits for `work` unless `start_only` (then wait_tensor on `result` waits);
// counts the time since `t0` under "collective <what>"; returns `result`.
at::Tensor finish(const c10::intrusive_ptr<c10d::Work>& work, const at::Tensor& result, bool start_only,
                  const char* what, std::chrono::steady_clock::time_point t0) {
  if (start_only)
    c10d::register_work(result, work);
  else
    work->wait();
  debug::Metrics::get().time(
      std::string("collective ") + what,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return result;
}

c10::intrusive_ptr<c10d::ProcessGroup> group_of(c10::string_view group) {
  return c10d::resolve_process_group(std::string(group));
}

at::Tensor scatter_run(const at::Tensor& chunks, int64_t src, c10::string_view group, bool start_only) {
  auto t0 = std::chrono::steady_clock::now();
  auto pg = group_of(group);
  std::vector<at::Tensor> out{at::empty(chunks.sizes().slice(1), chunks.options())};
  std::vector<std::vector<at::Tensor>> in;
  if (pg->getRank() == src) in.push_back(chunks.contiguous().unbind(0));
  c10d::ScatterOptions opts;
  opts.rootRank = src;
  return finish(pg->scatter(out, in, opts), out[0], start_only, "scatter", t0);
}

at::Tensor gather_run(const at::Tensor& t, int64_t dst, c10::string_view group, bool start_only) {
  auto t0 = std::chrono::steady_clock::now();
  auto pg = group_of(group);
  std::vector<at::Tensor> in{t.contiguous()};
  std::vector<std::vector<at::Tensor>> out;
  at::Tensor r = at::empty({0}, t.options());
  if (pg->getRank() == dst) {
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes.insert(sizes.begin(), pg->getSize());
    r = at::empty(sizes, t.options());
    out.push_back(r.unbind(0));  // each rank's part, written where it lies
  }
  c10d::GatherOptions opts;
  opts.rootRank = dst;
  return finish(pg->gather(out, in, opts), r, start_only, "gather", t0);
}

at::Tensor reduce_run(const at::Tensor& t, c10::string_view op, int64_t dst, c10::string_view group,
                      bool start_only) {
  auto t0 = std::chrono::steady_clock::now();
  auto pg = group_of(group);
  std::vector<at::Tensor> buf{t.clone(at::MemoryFormat::Contiguous)};
  c10d::ReduceOptions opts;
  opts.rootRank = dst;
  const bool avg = op == "avg";  // Gloo has no AVG: a sum, divided at the root once done (it waits)
  static const std::pair<const char*, c10d::ReduceOp::RedOpType> ops[] = {
      {"sum", c10d::ReduceOp::SUM}, {"avg", c10d::ReduceOp::SUM}, {"product", c10d::ReduceOp::PRODUCT},
      {"min", c10d::ReduceOp::MIN}, {"max", c10d::ReduceOp::MAX}, {"band", c10d::ReduceOp::BAND},
      {"bor", c10d::ReduceOp::BOR}, {"bxor", c10d::ReduceOp::BXOR}};
  bool known = false;
  for (const auto& [name, type] : ops)
    if (op == name) opts.reduceOp = c10d::ReduceOp(type), known = true;
  TORCH_CHECK(known, "lazyjit: reduce op '", std::string(op), "' is not supported on lazyjit tensors");
  at::Tensor r = finish(pg->reduce(buf, opts), buf[0], start_only && !avg, "reduce", t0);
  if (avg && pg->getRank() == dst) r.div_(pg->getSize());
  return r;
}

at::Tensor send_run(const at::Tensor& t, int64_t dst, int64_t tag, c10::string_view group, bool start_only) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<at::Tensor> buf{t.contiguous()};
  at::Tensor token = at::empty({0}, t.options());
  return finish(group_of(group)->send(buf, static_cast<int>(dst), static_cast<int>(tag)), token, start_only, "send",
                t0);
}

at::Tensor recv_run(const at::Tensor& like, int64_t src, int64_t tag, c10::string_view group, bool start_only) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<at::Tensor> buf{at::empty(like.sizes(), like.options())};
  return finish(group_of(group)->recv(buf, static_cast<int>(src), static_cast<int>(tag)), buf[0], start_only, "recv",
                t0);
}

template <bool kStart>
at::Tensor scatter_cpu(const at::Tensor& t, int64_t src, c10::string_view g) { return scatter_run(t, src, g, kStart); }
template <bool kStart>
at::Tensor gather_cpu(const at::Tensor& t, int64_t dst, c10::string_view g) { return gather_run(t, dst, g, kStart); }
template <bool kStart>
at::Tensor reduce_cpu(const at::Tensor& t, c10::string_view op, int64_t dst, c10::string_view g) {
  return reduce_run(t, op, dst, g, kStart);
}
template <bool kStart>
at::Tensor send_cpu(const at::Tensor& t, int64_t dst, int64_t tag, c10::string_view g) {
  return send_run(t, dst, tag, g, kStart);
}
template <bool kStart>
at::Tensor recv_cpu(const at::Tensor& t, int64_t src, int64_t tag, c10::string_view g) {
  return recv_run(t, src, tag, g, kStart);
}

// ---- Meta kernels (shapes; recording computes them itself) --------------------

at::Tensor same_meta(const at::Tensor& t, c10::string_view, c10::string_view) { return at::empty_like(t); }
at::Tensor all_gather_meta(const at::Tensor& t, int64_t size, c10::string_view) {
  return at::empty(scaled_dim0(t, size, 1, "all_gather_into_tensor"), t.options());
}
at::Tensor reduce_scatter_meta(const at::Tensor& t, c10::string_view, int64_t size, c10::string_view) {
  return at::empty(scaled_dim0(t, 1, size, "reduce_scatter_tensor"), t.options());
}
at::Tensor broadcast_meta(const at::Tensor& t, int64_t, c10::string_view) { return at::empty_like(t); }
at::Tensor scatter_meta(const at::Tensor& t, int64_t, c10::string_view) {
  return at::empty(t.sizes().slice(1), t.options());
}
at::Tensor gather_meta(const at::Tensor& t, int64_t dst, c10::string_view g) {
  std::string group(g);
  if (group_rank_of(group) != dst) return at::empty({0}, t.options());
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes.insert(sizes.begin(), group_size_of(group));
  return at::empty(sizes, t.options());
}
at::Tensor reduce_meta(const at::Tensor& t, c10::string_view, int64_t, c10::string_view) { return at::empty_like(t); }
at::Tensor all_to_all_single_meta(const at::Tensor& t, at::IntArrayRef out_splits, at::IntArrayRef,
                                  c10::string_view) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[0] = 0;
  for (int64_t s : out_splits) sizes[0] += s;
  return at::empty(sizes, t.options());
}
at::Tensor send_meta(const at::Tensor& t, int64_t, int64_t, c10::string_view) { return at::empty({0}, t.options()); }
at::Tensor recv_meta(const at::Tensor& t, int64_t, int64_t, c10::string_view) { return at::empty_like(t); }

}  // namespace
}  // namespace lazyjit::tracer::collectives

// Each op and its `_start` form: what a program's step runs, in flight on
// return (executor/collective_in_flight.cpp waits).
TORCH_LIBRARY_FRAGMENT(lazyjit_c10d, m) {
  const char* schemas[] = {
      "all_reduce{}(Tensor input, str reduce_op, str group_name) -> Tensor",
      "all_gather_into_tensor{}(Tensor input, int group_size, str group_name) -> Tensor",
      "reduce_scatter_tensor{}(Tensor input, str reduce_op, int group_size, str group_name) -> Tensor",
      "broadcast{}(Tensor input, int src, str group_name) -> Tensor",
      // input: [group size, *shape], the chunks at src (read nowhere else); the result [*shape]
      "scatter{}(Tensor input, int src, str group_name) -> Tensor",
      // the result: [group size, *input] at dst, [0] elsewhere
      "gather{}(Tensor input, int dst, str group_name) -> Tensor",
      "reduce{}(Tensor input, str reduce_op, int dst, str group_name) -> Tensor",
      "all_to_all_single{}(Tensor input, int[] output_split_sizes, int[] input_split_sizes, str group_name) -> Tensor",
      // the result: [0], the send done
      "send{}(Tensor input, int dst, int tag, str group_name) -> Tensor",
      // input: a tensor shaped as what arrives (not read)
      "recv{}(Tensor input, int src, int tag, str group_name) -> Tensor",
  };
  static auto* defs = new std::vector<std::string>;  // the schemas' text, kept for the registration's life
  for (const char* s : schemas) {
    std::string schema(s);
    auto at = schema.find("{}");
    defs->push_back(schema.substr(0, at) + schema.substr(at + 2));
    m.def(defs->back().c_str());
    defs->push_back(schema.substr(0, at) + "_start" + schema.substr(at + 2));
    m.def(defs->back().c_str());
  }
}

TORCH_LIBRARY_IMPL(lazyjit_c10d, CPU, m) {
  using namespace lazyjit::tracer::collectives;
  m.impl("all_reduce", all_reduce_cpu);
  m.impl("all_gather_into_tensor", all_gather_cpu);
  m.impl("reduce_scatter_tensor", reduce_scatter_cpu);
  m.impl("broadcast", broadcast_cpu);
  m.impl("all_to_all_single", all_to_all_single_cpu);
  m.impl("scatter", scatter_cpu<false>);
  m.impl("gather", gather_cpu<false>);
  m.impl("reduce", reduce_cpu<false>);
  m.impl("send", send_cpu<false>);
  m.impl("recv", recv_cpu<false>);
  m.impl("all_reduce_start", all_reduce_start_cpu);
  m.impl("all_gather_into_tensor_start", all_gather_start_cpu);
  m.impl("reduce_scatter_tensor_start", reduce_scatter_start_cpu);
  m.impl("broadcast_start", broadcast_start_cpu);
  m.impl("all_to_all_single_start", all_to_all_single_start_cpu);
  m.impl("scatter_start", scatter_cpu<true>);
  m.impl("gather_start", gather_cpu<true>);
  m.impl("reduce_start", reduce_cpu<true>);
  m.impl("send_start", send_cpu<true>);
  m.impl("recv_start", recv_cpu<true>);
}

TORCH_LIBRARY_IMPL(lazyjit_c10d, Meta, m) {
  using namespace lazyjit::tracer::collectives;
  m.impl("all_reduce", same_meta);
  m.impl("all_gather_into_tensor", all_gather_meta);
  m.impl("reduce_scatter_tensor", reduce_scatter_meta);
  m.impl("broadcast", broadcast_meta);
  m.impl("scatter", scatter_meta);
  m.impl("gather", gather_meta);
  m.impl("reduce", reduce_meta);
  m.impl("all_to_all_single", all_to_all_single_meta);
  m.impl("send", send_meta);
  m.impl("recv", recv_meta);
}
