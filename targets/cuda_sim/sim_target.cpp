// The cuda-sim target (sim_target.h). As the CUDA target
// (targets/cuda/cuda_target.cpp), each kernel compiles alone, is kept by its
// key (with its launch shape: the code follows it) and compiles in parallel
// with the plan's others. Its IR is the CUDA pipeline's first stage
// (targets/cuda/compiler.h make_llvm_ir); from there, instead of PTX and a
// cubin, a program's object holds each kernel's host object file, linked into
// a JITDylib of its own (targets/cuda/kernel_archive.h, "LJCS").
#include "targets/cuda_sim/sim_target.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Support/raw_ostream.h>

#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "targets/cuda/kernel_archive.h"
#include "targets/cpu/codegen.h"
#include "targets/cpu/jit.h"
#include "targets/cuda/compiler.h"
#include "targets/cuda/ptx.h"
#include "targets/cuda_sim/host_kernel.h"
#include "targets/cuda_sim/sim_grid.h"
#include "targets/kernel_target.h"
#include "targets/llvm_file.h"

namespace lazyjit::lowering {

namespace {

// The NVPTX machine the emitter's modules are made for; the code is run by the
// host, so the arch only names the module's data layout.
constexpr const char* kEmitArch = "sm_80";

std::string object_file(llvm::Module& m, llvm::TargetMachine& tm) {
  return emit_file(m, tm, llvm::CodeGenFileType::ObjectFile, "cuda-sim: the host target machine cannot emit object files");
}

// One compiled kernel: its launch, its host object, linked.
struct KernelCode {
  KernelCode() = default;
  KernelCode(const KernelCode&) = delete;
  KernelCode& operator=(const KernelCode&) = delete;
  ~KernelCode() {
    if (jd) jit->remove(*jd);
  }
  ir::Hash128 key;
  bool generic = false;
  std::string symbol;
  cuda_sim::SimKernel sim;  // its launch (the CUDA target's) and host entry
  std::string object;
  std::string ir;  // when CodegenOptions::keep_llvm_ir
  std::shared_ptr<cpu::Jit> jit;
  llvm::orc::JITDylib* jd = nullptr;
};
using KernelRef = std::shared_ptr<const KernelCode>;

class SimCode : public KernelsCode<KernelCode> {
 public:
  using KernelsCode::KernelsCode;
  std::string object() const override {
    if (kernels_.empty()) return std::string();
    formats::SimArchive a;
    archive_units(kernels_, a, [](formats::SimUnit& out, const KernelCode& u) {
      out.launch = cuda::archived_launch(u.sim.launch);
      out.meets = u.sim.meets;
      out.host_shared_bytes = u.sim.shared_bytes;
      out.object = u.object;
    });
    return formats::write_sim_archive(a);
  }
  const KernelLaunch* kernel(size_t i) const override { return i < kernels_.size() ? &kernels_[i]->sim : nullptr; }
};

class SimTarget : public KernelTarget<KernelCode> {
 public:
  explicit SimTarget(const CodegenOptions& o)
      : KernelTarget(/*launch_shapes=*/true), o_(o), jit_(cpu::Jit::Create()) {
    cuda::make_target_machine(kEmitArch);  // throws when LLVM lacks NVPTX
  }

  std::string fingerprint() const override {
    return std::string("target cuda-sim;emitter ") + kEmitArch + ";llvm " + LLVM_VERSION_STRING + ";cpu " +
           cpu::host_cpu_name() + ";features " + cpu::host_cpu_features() + ";rev " +
           std::to_string(kCodegenRevision) + ";archive " + std::to_string(formats::kSimArchiveVersion) + ";" + o_.str();
  }

 private:
  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const Plan& plan, const Job& job) override {
    return compile_one(g, plan.kernels[job.kernel], job.key, job.generic, plan.check_stores);
  }
  // Links c.object; its SimKernel's entry is the linked function.
  void link(KernelCode& c) override {
    c.jit = jit_;
    c.jd = &jit_->add_object(c.object);
    c.sim.entry = reinterpret_cast<cuda_sim::SimEntry>(jit_->lookup(*c.jd, c.symbol + "_sim_entry"));
    c.sim.name = c.symbol;
  }
  KernelArchive<KernelCode> read(const std::string& object, const Plan& plan) override {
    const formats::SimArchive a = formats::read_sim_archive(object);  // every byte and index checked
    return archive_kernels<KernelCode>(a, plan, "cuda-sim", [](KernelCode& c, const formats::SimUnit& u) {
      c.sim.launch = cuda::device_launch(u.launch);
      c.sim.meets = u.meets;
      c.sim.shared_bytes = u.host_shared_bytes;
      c.object = u.object;
    });
  }
  std::unique_ptr<CompiledCode> make_code(std::vector<KernelRef> refs, const Plan& plan,
                                          const std::vector<bool>* reused) override {
    std::string ir;
    if (reused && o_.keep_llvm_ir) ir = kernel_texts(kernel_names(plan), refs, *reused, &KernelCode::ir, ";");
    return std::make_unique<SimCode>(std::move(refs), std::move(ir));
  }
  int compile_threads() const override { return o_.compile_threads; }
  debug::TraceArgs cached_trace(const std::string&) const override { return debug::TraceArgs{{"target", "cuda-sim"}}; }
  debug::TraceArgs compile_trace(const FusedKernel&) const override { return debug::TraceArgs{{"target", "cuda-sim"}}; }

  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const FusedKernel& k, const ir::Hash128& key,
                                          bool generic, bool check_stores) {
    auto c = std::make_shared<KernelCode>();
    c->key = key;
    c->generic = generic;
    // The CUDA pipeline's first stage: the kernel's IR as it goes to NVPTX.
    cuda::KernelConfig cfg{o_, generic, check_stores, k.launch};  // the plan's launch shape
    cuda::KernelIR kir = cuda::make_llvm_ir(g, k, cfg, kEmitArch);  // its errors name the kernel
    c->symbol = kir.symbol;
    c->sim.launch = kir.launch;
    llvm::Module* m = kir.module.get();
    try {
      if (o_.keep_llvm_ir) c->ir = "; ---- for NVPTX, as the CUDA target emits it\n" + cuda::llvm_ir_text(*m);
      auto tm = jit_->make_target_machine();
      cuda_sim::HostKernel h =
          cuda_sim::rewrite_for_host(*m, c->symbol, tm->getTargetTriple(), jit_->data_layout(), c->sim.launch.shared_bytes);
      cpu::CodegenConfig cc;
      cc.opts = o_;
      cpu::optimize_module(*m, *tm, cc);
      if (o_.keep_llvm_ir) c->ir += "; ---- for the host, optimized\n" + cuda::llvm_ir_text(*m);
      c->object = object_file(*m, *tm);
      c->sim.meets = h.meets;
      c->sim.shared_bytes = h.shared_bytes;
      link(*c);
    } catch (const std::exception& e) {
      throw std::runtime_error("kernel " + k.name + ": " + e.what());
    }
    return c;
  }

  CodegenOptions o_;
  std::shared_ptr<cpu::Jit> jit_;
};

}  // namespace

std::unique_ptr<Target> make_cuda_sim_target(const CodegenOptions& opts) { return std::make_unique<SimTarget>(opts); }

}  // namespace lazyjit::lowering
