#include "lowering/lower.h"

#include <chrono>
#include <stdexcept>

#include "debug/dump.h"
#include "debug/metrics.h"

namespace lazyjit::lowering {

std::shared_ptr<Program> lower(ir::Graph graph, Target& target, const PlanOptions& opts,
                               const std::string& dump_name) {
  auto t0 = std::chrono::steady_clock::now();
  if (std::string err = graph.verify(); !err.empty())
    throw std::runtime_error("lazyjit: malformed graph: " + err + "\n" + graph.str());
  auto program = std::make_shared<Program>();
  debug::write_dump(dump_name + ".graph.txt", graph.str());
  program->plan = plan_graph(graph, opts);
  debug::write_dump(dump_name + ".plan.txt", program->plan.str(graph));
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
