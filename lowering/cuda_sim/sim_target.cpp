// The cuda-sim target (sim_target.h). As the CUDA target
// (lowering/cuda/cuda_target.cpp), each kernel compiles alone, is kept by its
// key (with its launch shape: the code follows it) and compiles in parallel
// with the plan's others; instead of PTX and a cubin, a program's object holds
// each kernel's host object file, linked into a JITDylib of its own.
#include "lowering/cuda_sim/sim_target.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cctype>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "graph_ir/bytes.h"
#include "lowering/cpu/codegen.h"
#include "lowering/cpu/jit.h"
#include "lowering/cuda/kernel_emitter.h"
#include "lowering/cuda/ptx.h"
#include "lowering/cuda_sim/host_kernel.h"
#include "lowering/cuda_sim/sim_grid.h"
#include "lowering/kernel_jobs.h"

namespace lazyjit::lowering {

namespace {

// The NVPTX machine the emitter's modules are made for; the code is run by the
// host, so the arch only names the module's data layout.
constexpr const char* kEmitArch = "sm_80";

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

std::string object_file(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw std::runtime_error("cuda-sim: the host target machine cannot emit object files");
  pm.run(m);
  return std::string(buf.data(), buf.size());
}

std::string symbol_of(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
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
  DeviceKernel launch;  // function: &sim
  cuda_sim::SimKernel sim;
  std::string object;
  std::string ir;  // when CodegenOptions::keep_llvm_ir
  std::shared_ptr<cpu::Jit> jit;
  llvm::orc::JITDylib* jd = nullptr;
};
using KernelRef = std::shared_ptr<const KernelCode>;

// A program's code as one blob:
//   "LJCS" u32 version, u32 unit count, per unit: u64 key lo, u64 key hi, u8
//   generic, str symbol, u8 grid (0: Elements, 1: Rows), i32 block, i32
//   dynamic shared bytes, i32 elements per thread, i32 rows per block, u8
//   meets, i32 host shared bytes, str host object; then u32 kernel count, per
//   kernel: u32 unit.
constexpr std::string_view kArchiveTag = "LJCS";
constexpr uint32_t kArchiveVersion = 1;

class SimCode : public CompiledCode {
 public:
  SimCode(std::vector<KernelRef> kernels, std::string ir) : kernels_(std::move(kernels)), ir_(std::move(ir)) {}
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
      w.u8(u->launch.grid == DeviceKernel::Grid::Rows ? 1 : 0);
      w.i32(u->launch.block);
      w.i32(u->launch.shared_bytes);
      w.i32(u->launch.elements_per_thread);
      w.i32(u->launch.rows_per_block);
      w.boolean(u->sim.meets);
      w.i32(u->sim.shared_bytes);
      w.str(u->object);
    }
    w.u32s(of);
    return w.take();
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
           std::to_string(kCodegenRevision) + ";archive " + std::to_string(kArchiveVersion) + ";" + o_.str();
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
    ir::ByteReader r(object);
    r.expect_header(kArchiveTag, kArchiveVersion, "cuda-sim kernels");
    // Each unit takes at least its fixed fields (8 + 8 + 1 + 4 + 1 + 4 * 4 + 1 + 4 + 4).
    const size_t nunits = r.count(47, "cuda-sim kernel units");
    std::vector<KernelRef> units;
    int loaded = 0;
    for (size_t u = 0; u < nunits; ++u) {
      auto c = std::make_shared<KernelCode>();
      c->key.lo = r.u64();
      c->key.hi = r.u64();
      c->generic = r.boolean();
      c->symbol = r.str();
      const uint8_t grid = r.u8();
      if (grid > 1) r.fail("unknown grid kind " + std::to_string(grid) + " of cuda-sim kernel " + c->symbol);
      c->launch.grid = grid ? DeviceKernel::Grid::Rows : DeviceKernel::Grid::Elements;
      c->launch.block = r.i32();
      if (c->launch.block <= 0 || c->launch.block > 1024 || c->launch.block % 32)
        r.fail("block of " + std::to_string(c->launch.block) + " threads for cuda-sim kernel " + c->symbol);
      c->launch.shared_bytes = r.i32();
      c->launch.elements_per_thread = r.i32();
      c->launch.rows_per_block = r.i32();
      const int32_t ept = c->launch.elements_per_thread, rows = c->launch.rows_per_block;
      if (c->launch.shared_bytes < 0 || c->launch.shared_bytes > (1 << 20) || ept < 1 || ept > 64 ||
          (grid && ept != 1) || (grid ? rows != 1 && rows * 32 != c->launch.block : rows != 1))
        r.fail("launch data out of range for cuda-sim kernel " + c->symbol);
      c->sim.meets = r.boolean();
      c->sim.shared_bytes = r.i32();
      if (c->sim.shared_bytes < 0 || c->sim.shared_bytes > (1 << 20))
        r.fail(std::to_string(c->sim.shared_bytes) + " bytes of shared memory for cuda-sim kernel " + c->symbol);
      c->object = r.str();
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        if (KernelRef have = cache_.use(c->key)) {
          units.push_back(have);
          continue;
        }
      }
      link(*c);
      ++loaded;
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        cache_.keep(c);
      }
      units.push_back(std::move(c));
    }
    std::vector<uint32_t> of = r.u32s();
    r.expect_end("cuda-sim kernels");
    if (of.size() != plan.kernels.size())
      r.fail("cuda-sim code for " + std::to_string(of.size()) + " kernels, plan has " +
             std::to_string(plan.kernels.size()));
    std::vector<KernelRef> refs;
    for (uint32_t u : of) {
      if (u >= units.size()) r.fail("cuda-sim kernel unit index out of range");
      refs.push_back(units[u]);
    }
    plan.kernel_fns.assign(plan.kernels.size(), nullptr);
    auto code = std::make_unique<SimCode>(std::move(refs), std::string());
    code->kernel_hits = static_cast<int>(nunits) - loaded;
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
    c.launch.function = &c.sim;
    c.launch.simulated = true;
  }

  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const FusedKernel& k, const ir::Hash128& key,
                                          bool generic, bool check_stores) const {
    auto c = std::make_shared<KernelCode>();
    c->key = key;
    c->generic = generic;
    c->symbol = symbol_of(k.name);
    try {
      auto device_tm = cuda::make_target_machine(kEmitArch, o_.opt_level);
      llvm::LLVMContext ctx;
      auto m = cuda::new_module(ctx, *device_tm, k.name);
      cuda::KernelConfig cfg{o_, generic, check_stores, k.launch};  // the plan's launch shape
      c->launch = cuda::emit_kernel(*m, g, k, c->symbol, cfg);
      std::string err;
      llvm::raw_string_ostream os(err);
      if (llvm::verifyModule(*m, &os)) throw std::runtime_error("invalid IR: " + err);
      if (o_.keep_llvm_ir) c->ir = "; ---- for NVPTX, as the CUDA target emits it\n" + module_text(*m);
      auto tm = jit_->make_target_machine();
      cuda_sim::HostKernel h =
          cuda_sim::rewrite_for_host(*m, c->symbol, tm->getTargetTriple(), jit_->data_layout(), c->launch.shared_bytes);
      cpu::CodegenConfig cc;
      cc.opts = o_;
      cpu::optimize_module(*m, *tm, cc);
      if (o_.keep_llvm_ir) c->ir += "; ---- for the host, optimized\n" + module_text(*m);
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
