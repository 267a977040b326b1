#include "lowering/program_bytes.h"

#include <stdexcept>

#include "graph_ir/bytes.h"
#include "graph_ir/graph_io.h"
#include "graph_ir/hash.h"
#include "lowering/plan_io.h"

namespace lazyjit::lowering {

namespace {
constexpr std::string_view kTag = "LJPG";
constexpr uint32_t kVersion = 2;  // 2: the object is a kernel archive (one object per kernel)
}  // namespace

std::string program_to_bytes(const Program& p) {
  ir::ByteWriter w;
  w.header(kTag, kVersion);
  ir::write_graph(w, p.graph);
  write_plan(w, p.plan);
  w.f64(p.compile_ms);
  w.str(p.code ? p.code->object() : std::string());
  // The object code is native code: a flipped bit must never reach the linker.
  w.u64(ir::hash64(w.bytes().data(), w.bytes().size()));
  return w.take();
}

std::shared_ptr<Program> program_from_bytes(std::string_view bytes, Target& target) {
  if (bytes.size() < 8) ir::ByteReader(bytes).fail("program shorter than its checksum");
  ir::ByteReader sum(bytes.substr(bytes.size() - 8));
  if (sum.u64() != ir::hash64(bytes.data(), bytes.size() - 8))
    ir::ByteReader(bytes).fail("program checksum mismatch");
  ir::ByteReader r(bytes.substr(0, bytes.size() - 8));
  r.expect_header(kTag, kVersion, "program");
  auto p = std::make_shared<Program>();
  p->graph = ir::read_graph(r);
  p->plan = read_plan(r, p->graph);
  p->compile_ms = r.f64();
  std::string object = r.str();
  r.expect_end("program");
  if (p->plan.kernels.empty() != object.empty())
    r.fail(p->plan.kernels.empty() ? "object code for a plan without kernels" : "kernels without object code");
  if (!object.empty()) p->code = target.load(object, p->plan);
  return p;
}

}  // namespace lazyjit::lowering
