#include "lowering/lower.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "debug/dump.h"
#include "debug/metrics.h"
#include "lowering/passes.h"

namespace lazyjit::lowering {

std::shared_ptr<Program> lower(ir::Graph graph, Target& target, const PlanOptions& opts,
                               const std::string& dump_name) {
  auto t0 = std::chrono::steady_clock::now();
  if (std::string err = graph.verify(); !err.empty())
    throw std::runtime_error("lazyjit: malformed graph: " + err + "\n" + graph.str());
  auto program = std::make_shared<Program>();
  const bool dumping = !debug::dump_dir().empty();
  if (dumping) debug::write_dump(dump_name + ".graph.txt", graph.str());
  std::vector<std::string> disabled = opts.disabled;
  for (const std::string& name : disabled_passes_from_env()) disabled.push_back(name);
  auto off = [&](const char* name) { return std::find(disabled.begin(), disabled.end(), name) != disabled.end(); };
  int pass_no = 0;
  graph = run_graph_passes(std::move(graph), disabled, [&](const std::string& pass, const ir::Graph& g) {
    ++pass_no;
    if (dumping) debug::write_dump(dump_name + ".pass" + std::to_string(pass_no) + "-" + pass + ".txt", g.str());
  });
  if (std::string err = graph.verify(); !err.empty())
    throw std::runtime_error("lazyjit: a graph pass made a malformed graph: " + err + "\n" + graph.str());
  PlanOptions plan_opts = opts;
  plan_opts.fuse = opts.fuse && !off("fuse");
  plan_opts.buffers = opts.buffers && !off("buffers");
  program->plan = plan_graph(graph, plan_opts);
  if (dumping) debug::write_dump(dump_name + ".plan.txt", program->plan.str(graph));
  if (!program->plan.kernels.empty()) {
    program->code = target.compile(graph, program->plan);
    debug::Metrics::get().add(debug::Counter::Compiles);
    debug::write_dump(dump_name + ".ll", program->code->llvm_ir());
  }
  program->graph = std::move(graph);
  program->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  debug::Metrics::get().time("compile", program->compile_ms);
  return program;
}

}  // namespace lazyjit::lowering
