// The host CPU target: codegen (codegen.h) + ORC (jit.h); the kernel loop and
// cache are targets/kernel_target.h's.
//
// Each kernel is compiled alone, into an object of its own linked into a
// JITDylib of its own, and found by key (kernel_key.h) while a program using it
// is alive: a plan whose kernels such programs hold (another shape, another
// graph, identical layers) costs no LLVM work. The last program using a kernel
// takes its JITDylib with it. The kernels a plan still needs compile in parallel.
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "debug/trace.h"
#include "graph_ir/bytes.h"
#include "targets/cpu/codegen.h"
#include "targets/cpu/jit.h"
#include "targets/cpu/cpu_target.h"
#include "targets/kernel_target.h"
#include "targets/llvm_file.h"

namespace lazyjit::lowering {

std::string CodegenOptions::str() const {
  return "O" + std::to_string(opt_level) + ",vecmath=" + (vectorize_math ? "1" : "0") +
         ",vbits=" + std::to_string(vector_bits) +
         (fault.empty() ? "" : ",FAULT=" + fault);
}

namespace {

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

// Emits `m` as a relocatable object file (or assembly text) for `tm`'s machine.
std::string object_file(llvm::Module& m, llvm::TargetMachine& tm,
                        llvm::CodeGenFileType type = llvm::CodeGenFileType::ObjectFile) {
  return emit_file(m, tm, type, "lazyjit: the target machine cannot emit object files or assembly");
}

// The assembly of an optimized module, for dumps: codegen changes the module
// it runs on, so it runs on a copy (and a target machine of its own), and the
// object file is made from the original as when not dumping.
std::string assembly_text(const llvm::Module& m, cpu::Jit& j) {
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(m);
  auto tm = j.make_target_machine();
  return object_file(*copy, *tm, llvm::CodeGenFileType::AssemblyFile);
}

// One compiled kernel: its object, linked into a JITDylib of its own.
struct KernelCode {
  std::shared_ptr<cpu::Jit> jit;  // outlives the dylib
  llvm::orc::JITDylib* jd = nullptr;
  ir::Hash128 key;  // the key it is kept under: exact, or generic when `generic`
  bool generic = false;
  std::string symbol;
  std::string object;
  std::string ir;        // when CodegenOptions::keep_llvm_ir
  std::string assembly;  // when CodegenOptions::keep_asm
  KernelFn fn = nullptr;
  ~KernelCode() {
    if (jd) jit->remove(*jd);
  }
};
using KernelRef = std::shared_ptr<const KernelCode>;

// The object code of a plan (what Program bytes carry), as one blob:
//   "LJKO" u32 version, u32 unit count, per unit: u64 key lo, u64 key hi,
//   u8 generic, str symbol, str object; then u32 kernel count, per kernel: u32 unit.
constexpr std::string_view kArchiveTag = "LJKO";
constexpr uint32_t kArchiveVersion = 1;

class CpuCode : public KernelsCode<KernelCode> {
 public:
  CpuCode(std::vector<KernelRef> kernels, std::string ir, std::string assembly)
      : KernelsCode(std::move(kernels), std::move(ir)), asm_(std::move(assembly)) {}
  std::string object() const override {
    if (kernels_.empty()) return std::string();
    std::vector<const KernelCode*> units;
    std::vector<uint32_t> of;
    distinct_kernels(kernels_, &units, &of);
    ir::ByteWriter w;
    w.header(kArchiveTag, kArchiveVersion);
    w.count(units.size());
    for (const KernelCode* u : units) {
      w.u64(u->key.lo);
      w.u64(u->key.hi);
      w.boolean(u->generic);
      w.str(u->symbol);
      w.str(u->object);
    }
    w.u32s(of);
    return w.take();
  }
  const std::string& assembly() const override { return asm_; }

 private:
  std::string asm_;  // for dumps (kernel_texts)
};

class CpuTarget : public KernelTarget<KernelCode> {
 public:
  explicit CpuTarget(const CodegenOptions& opts) : KernelTarget(/*launch_shapes=*/false), opts_(opts) {}

  std::string fingerprint() const override {
    std::string fp = std::string("llvm ") + LLVM_VERSION_STRING + ";cpu " + cpu::host_cpu_name() +
                     ";features " + cpu::host_cpu_features() + ";rev " + std::to_string(kCodegenRevision) + ";" +
                     opts_.str();
    // Whether libmvec is found changes the code; knowing needs the JIT.
    if (opts_.vectorize_math) fp += jit().has_libmvec() ? ",libmvec" : ",no-libmvec";
    return fp;
  }

  void warm_up() override {
    // The JIT and its symbol generators (libmvec), the optimizer's and the code generator's first use.
    warm_up_kernel([this](const ir::Graph& g, const FusedKernel& k) {
      compile_one(jit(), g, k, ir::Hash128{}, /*generic=*/true, /*check_stores=*/false);
    });
  }

 private:
  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const Plan& plan, const Job& job) override {
    return compile_one(jit(), g, plan.kernels[job.kernel], job.key, job.generic, plan.check_stores);
  }
  KernelArchive<KernelCode> read(const std::string& object, const Plan& plan) override {
    ir::ByteReader r(object);
    r.expect_header(kArchiveTag, kArchiveVersion, "kernel objects");
    KernelArchive<KernelCode> a;
    uint32_t nunits = r.u32();
    for (uint32_t u = 0; u < nunits; ++u) {
      auto c = std::make_shared<KernelCode>();
      c->key.lo = r.u64();
      c->key.hi = r.u64();
      c->generic = r.u8() != 0;
      c->symbol = r.str();
      c->object = r.str();
      a.units.push_back(std::move(c));
    }
    a.kernel_units = r.u32s();
    r.expect_end("kernel objects");
    if (a.kernel_units.size() != plan.kernels.size())
      r.fail("object code for " + std::to_string(a.kernel_units.size()) + " kernels, plan has " +
             std::to_string(plan.kernels.size()));
    for (uint32_t u : a.kernel_units)
      if (u >= a.units.size()) r.fail("kernel object index out of range");
    return a;
  }
  std::unique_ptr<CompiledCode> make_code(std::vector<KernelRef> refs, const Plan& plan,
                                          const std::vector<bool>* reused) override {
    std::string ir, assembly;
    if (reused && (opts_.keep_llvm_ir || opts_.keep_asm)) {
      std::vector<std::string> names = kernel_names(plan);
      if (opts_.keep_llvm_ir) ir = kernel_texts(names, refs, *reused, &KernelCode::ir, ";");
      if (opts_.keep_asm) assembly = kernel_texts(names, refs, *reused, &KernelCode::assembly, "#");
    }
    return std::make_unique<CpuCode>(std::move(refs), std::move(ir), std::move(assembly));
  }
  KernelFn kernel_fn(const KernelCode& c) const override { return c.fn; }
  int compile_threads() const override { return opts_.compile_threads; }
  debug::TraceArgs cached_trace(const std::string& shared_with) const override {
    return debug::TraceArgs{{"shared_with", shared_with}};
  }
  debug::TraceArgs compile_trace(const FusedKernel& k) const override {
    return debug::TraceArgs{{"nodes", k.nodes.size()}};
  }

  std::shared_ptr<KernelCode> compile_one(cpu::Jit& j, const ir::Graph& g, const FusedKernel& k, const ir::Hash128& key,
                                          bool generic, bool check_stores) {
    cpu::CodegenConfig cfg{opts_, j.has_libmvec(), "", generic, check_stores};
    // Phases as trace spans: where a kernel's compile time goes.
    std::optional<debug::TraceSpan> phase;
    auto start = [&](const char* name) {
      phase.reset();
      if (debug::trace_enabled()) phase.emplace("compile", name);
    };
    start("emit IR");
    auto tm = j.make_target_machine();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = cpu::emit_kernel_module(*ctx, g, k, *tm, cfg);
    auto c = std::make_shared<KernelCode>();
    if (opts_.keep_llvm_ir) c->ir = "; ---- before optimization\n" + module_text(*m);
    start("optimize IR");
    cpu::optimize_module(*m, *tm, cfg);
    if (opts_.keep_llvm_ir) c->ir += "; ---- after optimization\n" + module_text(*m);
    if (opts_.keep_asm) c->assembly = assembly_text(*m, j);
    c->key = key;
    c->generic = generic;
    c->symbol = k.name;
    start("machine code");
    c->object = object_file(*m, *tm);
    start("link");
    link(*c);
    return c;
  }

  void link(KernelCode& c) override {
    cpu::Jit& j = jit();
    c.jit = jit_;
    c.jd = &j.add_object(c.object);
    try {
      c.fn = reinterpret_cast<KernelFn>(j.lookup(*c.jd, c.symbol));
    } catch (const std::exception& e) {
      throw std::runtime_error("kernel " + c.symbol + ": " + e.what());
    }
  }

  // Created on first use so that an empty plan never touches LLVM.
  cpu::Jit& jit() const {
    std::call_once(jit_once_, [this] { jit_ = cpu::Jit::Create(); });
    return *jit_;
  }

  CodegenOptions opts_;
  mutable std::once_flag jit_once_;
  mutable std::shared_ptr<cpu::Jit> jit_;
};

}  // namespace

std::unique_ptr<Target> make_cpu_target(const CodegenOptions& opts) {
  return std::make_unique<CpuTarget>(opts);
}

}  // namespace lazyjit::lowering
