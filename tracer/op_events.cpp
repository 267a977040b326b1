#include "tracer/op_events.h"

#include "graph_ir/node_name.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

namespace lazyjit::tracer {

namespace {

c10::IValue as_ivalue(const ir::Graph& g, ir::ValueId v, const at::Tensor& t, bool copy) {
  if (!t.defined()) return c10::IValue();
  if (g.producer(v).kind == ir::OpKind::Scalar) return c10::IValue(t.item());
  return c10::IValue(copy ? t.clone() : t);
}

}  // namespace

std::vector<OpEvent> op_events(const runtime::ObservedRun& run, const std::function<NodeOp(uint32_t node)>& op_of,
                               bool copy) {
  const ir::Graph& g = *run.graph;
  const auto nn = static_cast<uint32_t>(g.nodes().size());
  // Nodes grouped by the op that recorded them (consecutive nodes of one op).
  struct Group {
    std::vector<uint32_t> nodes;
    NodeOp op;
  };
  std::vector<Group> groups;
  std::vector<int64_t> group(nn, -1);
  for (uint32_t n = 0; n < nn; ++n) {
    ir::OpKind k = g.nodes()[n].kind;
    if (k == ir::OpKind::Input || k == ir::OpKind::Scalar) continue;
    NodeOp o = op_of(n);
    if (groups.empty() || o.first < 0 || groups.back().op.first != o.first) groups.push_back({{}, o});
    group[n] = static_cast<int64_t>(groups.size() - 1);
    groups.back().nodes.push_back(n);
  }
  std::vector<bool> read_outside(g.values().size(), false);
  for (uint32_t n = 0; n < nn; ++n)
    for (ir::ValueId v : g.nodes()[n].operands)
      if (group[g.value(v).node] != group[n]) read_outside[v] = true;
  for (ir::ValueId v : g.outputs()) read_outside[v] = true;
  // How many ops share each step, to split its time.
  std::vector<int32_t> step_ops(run.step_ms.size(), 0);
  std::vector<std::set<int32_t>> steps(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (uint32_t n : groups[gi].nodes)
      if (run.step[n] >= 0) steps[gi].insert(run.step[n]);
    for (int32_t s : steps[gi]) ++step_ops[s];
  }

  std::vector<OpEvent> events(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& gr = groups[gi];
    OpEvent& e = events[gi];
    e.lazy = true;
    e.index = gr.nodes.front();  // the "op #N" of the NaN, check and recompile reports
    e.op = gr.op.op.empty() ? ir::node_op_name(g.nodes()[gr.nodes.front()], "lazyjit::") : gr.op.op;
    e.site = gr.op.site;
    std::set<ir::ValueId> seen;
    for (uint32_t n : gr.nodes)
      for (ir::ValueId v : g.nodes()[n].operands)
        if (group[g.value(v).node] != static_cast<int64_t>(gi) && seen.insert(v).second)
          e.inputs.push_back(as_ivalue(g, v, run.values[v], copy));
    for (uint32_t n : gr.nodes)
      for (ir::ValueId v : g.nodes()[n].outputs)
        if (read_outside[v]) e.outputs.push_back(as_ivalue(g, v, run.values[v], copy));
    if (e.outputs.empty()) {
      ir::ValueId v = g.nodes()[gr.nodes.back()].outputs.at(0);
      e.outputs.push_back(as_ivalue(g, v, run.values[v], copy));
    }
    for (int32_t s : steps[gi]) {
      e.kernel += (e.kernel.empty() ? "" : ", ") + run.step_name[s] +
                  (run.step_ops[s].empty() ? "" : " [" + run.step_ops[s] + "]");
      e.kernel_ms += run.step_ms[s];
      e.duration_ms += run.step_ms[s] / step_ops[s];
    }
  }
  return events;
}

namespace {

struct Row {
  int64_t calls = 0;
  double ms = 0;
  std::set<std::string> sites;
};
std::mutex table_mu;
std::map<std::string, Row>* table = nullptr;

void print_table() {
  std::lock_guard<std::mutex> lock(table_mu);
  if (!table || table->empty()) return;
  std::vector<std::pair<std::string, Row>> rows(table->begin(), table->end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (auto& [op, r] : rows) total += r.ms;
  std::fprintf(stderr, "lazyjit: per-op time in compiled graphs (LAZYJIT_DEBUG=4; a fused kernel's time split evenly among its ops)\n");
  std::fprintf(stderr, "  %-36s %8s %11s %6s  %s\n", "op", "calls", "total ms", "%", "recorded at");
  for (auto& [op, r] : rows) {
    std::string sites;
    for (const std::string& s : r.sites) {
      if (sites.size() > 60) { sites += ", ..."; break; }
      sites += (sites.empty() ? "" : ", ") + s;
    }
    std::fprintf(stderr, "  %-36s %8lld %11.3f %5.1f%%  %s\n", op.c_str(), static_cast<long long>(r.calls), r.ms,
                 total > 0 ? 100 * r.ms / total : 0.0, sites.c_str());
  }
}

}  // namespace

void add_to_timing_table(const std::vector<OpEvent>& events) {
  std::lock_guard<std::mutex> lock(table_mu);
  if (!table) {
    table = new std::map<std::string, Row>();
    std::atexit(print_table);
  }
  for (const OpEvent& e : events) {
    Row& r = (*table)[e.op];
    ++r.calls;
    r.ms += e.duration_ms;
    if (!e.site.empty() && r.sites.size() < 8) r.sites.insert(e.site);
  }
}

}  // namespace lazyjit::tracer
