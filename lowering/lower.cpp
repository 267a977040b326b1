#include "lowering/lower.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include "debug/dump.h"
#include "debug/metrics.h"
#include "debug/trace.h"
#include "graph_ir/graph_dot.h"
#include "lowering/passes.h"
#include "lowering/plan_dot.h"

namespace lazyjit::lowering {

std::shared_ptr<Program> lower(ir::Graph graph, Target& target, const LowerOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  // The whole compile, and its phases, in the trace (debug/trace.h).
  std::optional<debug::TraceSpan> span, phase;
  const bool tracing = debug::trace_enabled();
  if (tracing)
    span.emplace("compile", opts.op_by_op ? "program (op by op)" : "program",
                 debug::TraceArgs{{"key", opts.dump_name}, {"nodes", graph.nodes().size()}});
  if (std::string err = graph.verify(); !err.empty())
    throw std::runtime_error("lazyjit: malformed graph: " + err + "\n" + graph.str());
  auto program = std::make_shared<Program>();
  const bool dumping = !opts.dump_dir.empty();
  auto dump = [&](const std::string& suffix, const std::string& text) {
    if (dumping) debug::write_dump(opts.dump_dir, opts.dump_name + suffix, text);
  };
  dump(".graph.txt", graph.str());
  if (dumping) dump(".graph.dot", ir::graph_dot(graph, opts.dump_name));
  const std::vector<std::string>& disabled = opts.plan.disabled;
  auto off = [&](const char* name) { return std::find(disabled.begin(), disabled.end(), name) != disabled.end(); };
  int pass_no = 0;
  if (tracing) phase.emplace("compile", "graph passes");
  graph = run_graph_passes(std::move(graph), disabled, [&](const std::string& pass, const ir::Graph& g) {
    ++pass_no;
    if (dumping) dump(".pass" + std::to_string(pass_no) + "-" + pass + ".txt", g.str());
  }, nullptr, opts.pass_rules);
  if (std::string err = graph.verify(); !err.empty())
    throw std::runtime_error("lazyjit: a graph pass made a malformed graph: " + err + "\n" + graph.str());
  if (tracing) phase.emplace("compile", "plan", debug::TraceArgs{{"nodes", graph.nodes().size()}});
  PlanOptions plan_opts = opts.plan;
  plan_opts.fuse = opts.plan.fuse && !off("fuse");
  plan_opts.buffers = opts.plan.buffers && !off("buffers");
  // A GPU target's limit on kernel parameters (the caller's, when tighter).
  if (int64_t cap = target.max_kernel_param_bytes();
      cap > 0 && (plan_opts.max_kernel_param_bytes <= 0 || cap < plan_opts.max_kernel_param_bytes))
    plan_opts.max_kernel_param_bytes = cap;
  program->plan = opts.op_by_op ? plan_op_by_op(graph, plan_opts) : plan_graph(graph, plan_opts);
  dump(".plan.txt", program->plan.str(graph));
  if (dumping) dump(".plan.dot", plan_dot(graph, program->plan, opts.dump_name));
  phase.reset();
  if (span) {
    span->arg("steps", program->plan.steps.size());
    span->arg("kernels", program->plan.kernels.size());
  }
  if (!program->plan.kernels.empty()) {
    if (tracing) phase.emplace("compile", "codegen", debug::TraceArgs{{"kernels", program->plan.kernels.size()}});
    auto c0 = std::chrono::steady_clock::now();
    program->code = target.compile(graph, program->plan, opts.shapes);
    debug::Metrics& m = debug::Metrics::get();
    m.time("codegen", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count());
    m.add(debug::Counter::Compiles);
    m.add(debug::Counter::LlvmCompiles, program->code->llvm_compiles);
    m.add(debug::Counter::KernelHits, program->code->kernel_hits);
    m.add(debug::Counter::GenericCompiles, program->code->generic_compiles);
    // Only when the target kept them (CodegenOptions::keep_llvm_ir, keep_asm).
    if (!program->code->llvm_ir().empty()) dump(".ll", program->code->llvm_ir());
    if (!program->code->assembly().empty()) dump(".s", program->code->assembly());
    if (phase) {
      phase->arg("llvm_compiles", program->code->llvm_compiles);
      phase->arg("kernel_hits", program->code->kernel_hits);
    }
    phase.reset();
  }
  program->graph = std::move(graph);
  program->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  debug::Metrics::get().time("compile", program->compile_ms);
  return program;
}

}  // namespace lazyjit::lowering
