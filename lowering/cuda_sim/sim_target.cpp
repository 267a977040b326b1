// The cuda-sim target (sim_target.h). As the CUDA target
// (lowering/cuda/cuda_target.cpp), each kernel compiles alone, is kept by its
// key (with its launch shape: the code follows it) and compiles in parallel
// with the plan's others. Its IR is the CUDA pipeline's first stage
// (lowering/cuda/compiler.h make_llvm_ir); from there, instead of PTX and a
// cubin, a program's object holds each kernel's host object file, linked into
// a JITDylib of its own (formats/kernel_archive.h, "LJCS").
#include "lowering/cuda_sim/sim_target.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Support/raw_ostream.h>

#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "formats/kernel_archive.h"
#include "lowering/cpu/codegen.h"
#include "lowering/cpu/jit.h"
#include "lowering/cuda/compiler.h"
#include "lowering/cuda/ptx.h"
#include "lowering/cuda_sim/host_kernel.h"
#include "lowering/cuda_sim/sim_grid.h"
#include "lowering/kernel_jobs.h"

namespace lazyjit::lowering {

namespace {

// The NVPTX machine the emitter's modules are made for; the code is run by the
// host, so the arch only names the module's data layout.
constexpr const char* kEmitArch = "sm_80";

std::string object_file(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw std::runtime_error("cuda-sim: the host target machine cannot emit object files");
  pm.run(m);
  return std::string(buf.data(), buf.size());
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
  DeviceKernel launch;  // host_function: &sim
  cuda_sim::SimKernel sim;
  std::string object;
  std::string ir;  // when CodegenOptions::keep_llvm_ir
  std::shared_ptr<cpu::Jit> jit;
  llvm::orc::JITDylib* jd = nullptr;
};
using KernelRef = std::shared_ptr<const KernelCode>;

class SimCode : public CompiledCode {
 public:
  SimCode(std::vector<KernelRef> kernels, std::string ir) : kernels_(std::move(kernels)), ir_(std::move(ir)) {}
  std::string object() const override {
    if (kernels_.empty()) return std::string();
    std::vector<const KernelCode*> units;
    formats::SimArchive a;
    distinct_kernels(kernels_, &units, &a.kernel_units);
    for (const KernelCode* u : units) {
      formats::SimUnit& out = a.units.emplace_back();
      out.key_lo = u->key.lo;
      out.key_hi = u->key.hi;
      out.generic = u->generic;
      out.symbol = u->symbol;
      out.launch = cuda::archived_launch(u->launch);
      out.meets = u->sim.meets;
      out.host_shared_bytes = u->sim.shared_bytes;
      out.object = u->object;
    }
    return formats::write_sim_archive(a);
  }
  const std::string& llvm_ir() const override { return ir_; }
  bool all_generic() const override {
    for (const KernelRef& k : kernels_)
      if (!k->generic) return false;
    return true;
  }
  const DeviceKernel* device_kernel(size_t i) const override {
    return i < kernels_.size() ? &kernels_[i]->launch : nullptr;
  }

 private:
  std::vector<KernelRef> kernels_;
  std::string ir_;
};

class SimTarget : public Target {
 public:
  explicit SimTarget(const CodegenOptions& o) : o_(o), jit_(cpu::Jit::Create()) {
    cuda::make_target_machine(kEmitArch);  // throws when LLVM lacks NVPTX
  }

  std::string fingerprint() const override {
    return std::string("target cuda-sim;emitter ") + kEmitArch + ";llvm " + LLVM_VERSION_STRING + ";cpu " +
           cpu::host_cpu_name() + ";features " + cpu::host_cpu_features() + ";rev " +
           std::to_string(kCodegenRevision) + ";archive " + std::to_string(formats::kSimArchiveVersion) + ";" + o_.str();
  }

  std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan, Shapes shapes) override {
    plan.kernel_fns.clear();
    const size_t n = plan.kernels.size();
    if (n == 0) return std::make_unique<SimCode>(std::vector<KernelRef>{}, std::string());
    KernelJobs<KernelCode> work(g, plan, shapes, cache_, /*launch_shapes=*/true);
    work.trace_cached([](size_t) { return debug::TraceArgs{{"target", "cuda-sim"}}; });
    work.compile(
        o_.compile_threads, [](const auto&) { return debug::TraceArgs{{"target", "cuda-sim"}}; },
        [&](const auto& job) { return compile_one(g, plan.kernels[job.kernel], job.key, job.generic, plan.check_stores); });
    work.keep(cache_);
    std::vector<KernelRef> refs = work.refs();
    std::string ir;
    if (o_.keep_llvm_ir) ir = kernel_texts(kernel_names(plan), refs, work.reused(), &KernelCode::ir, ";");
    plan.kernel_fns.assign(n, nullptr);  // the executor launches device_kernel(i)
    auto code = std::make_unique<SimCode>(std::move(refs), std::move(ir));
    work.count(*code);
    return code;
  }

  std::unique_ptr<CompiledCode> load(const std::string& object, Plan& plan) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return std::make_unique<SimCode>(std::vector<KernelRef>{}, std::string());
    const formats::SimArchive a = formats::read_sim_archive(object);  // every byte checked
    if (a.kernel_units.size() != plan.kernels.size())
      throw std::runtime_error("lazyjit: cuda-sim code for " + std::to_string(a.kernel_units.size()) +
                               " kernels, plan has " + std::to_string(plan.kernels.size()) + ": not loaded");
    std::vector<KernelRef> units;
    int loaded = 0;
    for (const formats::SimUnit& u : a.units) {
      auto c = std::make_shared<KernelCode>();
      c->key.lo = u.key_lo;
      c->key.hi = u.key_hi;
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        if (KernelRef have = cache_.use(c->key)) {
          units.push_back(have);
          continue;
        }
      }
      c->generic = u.generic;
      c->symbol = u.symbol;
      c->launch = cuda::device_launch(u.launch);
      c->sim.meets = u.meets;
      c->sim.shared_bytes = u.host_shared_bytes;
      c->object = u.object;
      link(*c);
      ++loaded;
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        cache_.keep(c);
      }
      units.push_back(std::move(c));
    }
    std::vector<KernelRef> refs;
    for (uint32_t u : a.kernel_units) refs.push_back(units[u]);  // read_sim_archive checked each index
    plan.kernel_fns.assign(plan.kernels.size(), nullptr);
    auto code = std::make_unique<SimCode>(std::move(refs), std::string());
    code->kernel_hits = static_cast<int>(a.units.size()) - loaded;
    return code;
  }

  void clear_kernels() override {
    std::lock_guard<std::mutex> lock(cache_.mu);
    cache_.clear();
  }

 private:
  // Links c.object; sets the launch's function to its SimKernel.
  void link(KernelCode& c) const {
    c.jit = jit_;
    c.jd = &jit_->add_object(c.object);
    c.sim.entry = reinterpret_cast<cuda_sim::SimEntry>(jit_->lookup(*c.jd, c.symbol + "_sim_entry"));
    c.sim.name = c.symbol;
    c.launch.host_function = &c.sim;
    c.launch.simulated = true;
  }

  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const FusedKernel& k, const ir::Hash128& key,
                                          bool generic, bool check_stores) const {
    auto c = std::make_shared<KernelCode>();
    c->key = key;
    c->generic = generic;
    // The CUDA pipeline's first stage: the kernel's IR as it goes to NVPTX.
    cuda::KernelConfig cfg{o_, generic, check_stores, k.launch};  // the plan's launch shape
    cuda::KernelIR kir = cuda::make_llvm_ir(g, k, cfg, kEmitArch);  // its errors name the kernel
    c->symbol = kir.symbol;
    c->launch = kir.launch;
    llvm::Module* m = kir.module.get();
    try {
      if (o_.keep_llvm_ir) c->ir = "; ---- for NVPTX, as the CUDA target emits it\n" + cuda::llvm_ir_text(*m);
      auto tm = jit_->make_target_machine();
      cuda_sim::HostKernel h =
          cuda_sim::rewrite_for_host(*m, c->symbol, tm->getTargetTriple(), jit_->data_layout(), c->launch.shared_bytes);
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
  mutable KernelCache<KernelCode> cache_;
};

}  // namespace

std::unique_ptr<Target> make_cuda_sim_target(const CodegenOptions& opts) { return std::make_unique<SimTarget>(opts); }

}  // namespace lazyjit::lowering
