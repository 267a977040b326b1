#include "lowering/program_bytes.h"

#include <stdexcept>

#include "formats/program_bytes.h"
#include "graph_ir/bytes.h"
#include "graph_ir/graph_io.h"
#include "lowering/plan_io.h"

namespace lazyjit::lowering {

// The frame (tag, tail, checksum) is formats/program_bytes.h's; the graph and
// plan inside are written and read here.
std::string program_to_bytes(const Program& p) {
  ir::ByteWriter w;
  w.header(formats::kProgramTag, formats::kProgramVersion);
  ir::write_graph(w, p.graph);
  write_plan(w, p.plan);
  return formats::seal_program(w.take(), p.compile_ms, p.code ? p.code->object() : std::string());
}

std::shared_ptr<Program> program_from_bytes(std::string_view bytes, Target& target) {
  std::string_view body = formats::unseal_program(bytes);
  ir::ByteReader r(body);
  r.expect_header(formats::kProgramTag, formats::kProgramVersion, "program");
  auto p = std::make_shared<Program>();
  p->graph = ir::read_graph(r);
  p->plan = read_plan(r, p->graph);
  formats::ProgramTail tail = formats::read_program_tail(body.substr(r.offset()));
  p->compile_ms = tail.compile_ms;
  std::string object(tail.object);
  if (p->plan.kernels.empty() != object.empty())
    r.fail(p->plan.kernels.empty() ? "object code for a plan without kernels" : "kernels without object code");
  if (!object.empty()) p->code = target.load(object, p->plan);
  return p;
}

}  // namespace lazyjit::lowering
