// The CUDA target: per kernel, the compile pipeline of compiler.h (LLVM IR for
// NVPTX, libdevice linked in, optimized, PTX, a cubin by ptxas; the driver's
// assembler when there is no ptxas). It loads nothing: its code hands out each
// kernel's cubin, symbol and launch (device_kernel.h), and the executor loads
// the cubin into each device's context at the kernel's first run there
// (executor/cuda/module_loads.h). A program's object is the kernels' archive
// (formats/kernel_archive.h, "LJCU").
//
// As on the CPU (lowering/cpu/cpu_target.cpp), each kernel compiles alone and
// is kept by key (kernel_key.h): equal kernels compile once, and a plan whose
// kernels were all compiled before costs no LLVM work. The kernels a plan still
// needs compile in parallel (LLVM and ptxas; the driver's assembler, when there
// is no ptxas, runs on the caller's thread).
#include <llvm/Config/llvm-config.h>

#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "cuda_driver/driver.h"
#include "debug/trace.h"
#include "formats/kernel_archive.h"
#include "lowering/cuda/compiler.h"
#include "lowering/cuda/ptx.h"
#include "lowering/cuda/ptxas.h"
#include "lowering/cuda/toolkit.h"
#include "lowering/kernel_jobs.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

namespace {

// The bytes of a kernel's parameters (device_kernel.h): a pointer per buffer
// load and store and for the NaN/Inf flag, `total`, and the dims array.
size_t param_bytes(const FusedKernel& k, bool check_stores) {
  size_t words = k.stores.size() + (check_stores ? 1 : 0) + 1 + kernel_dims(k).size();
  for (const Access& a : k.loads) words += a.scalar_index < 0 ? 1 : 0;
  return 8 * words;
}

// One compiled kernel: PTX, cubin, and its launch (which refers to the cubin:
// never copied).
struct KernelCode {
  KernelCode() = default;
  KernelCode(const KernelCode&) = delete;
  KernelCode& operator=(const KernelCode&) = delete;
  ir::Hash128 key;  // the key it is kept under: exact, or generic when `generic`
  bool generic = false;
  std::string symbol;
  DeviceKernel launch;  // image: `cubin`, symbol: `symbol` (set by finish)
  std::string ptx;
  std::string cubin;
  std::string ir;  // when CodegenOptions::keep_llvm_ir
};
using KernelRef = std::shared_ptr<const KernelCode>;

class CudaCode : public CompiledCode {
 public:
  CudaCode(std::string arch, int isa, std::vector<KernelRef> kernels, std::vector<std::string> names,
           std::vector<bool> reused, std::string ir = {})
      : arch_(std::move(arch)),
        isa_(isa),
        kernels_(std::move(kernels)),
        names_(std::move(names)),
        reused_(std::move(reused)),
        ir_(std::move(ir)) {}

  std::string object() const override {
    if (kernels_.empty()) return std::string();
    std::vector<const KernelCode*> units;
    formats::CudaArchive a;
    distinct_kernels(kernels_, &units, &a.kernel_units);
    a.arch = arch_;
    a.ptx_isa = static_cast<uint32_t>(isa_);
    for (const KernelCode* u : units) {
      formats::CudaUnit& out = a.units.emplace_back();
      out.key_lo = u->key.lo;
      out.key_hi = u->key.hi;
      out.generic = u->generic;
      out.symbol = u->symbol;
      out.launch = cuda::archived_launch(u->launch);
      out.ptx = u->ptx;
      out.cubin = u->cubin;
    }
    return formats::write_cuda_archive(a);
  }
  const std::string& llvm_ir() const override { return ir_; }
  // The PTX of every kernel (it is in the object anyway), one section per kernel.
  const std::string& assembly() const override {
    std::call_once(asm_once_, [this] { asm_ = kernel_texts(names_, kernels_, reused_, &KernelCode::ptx, "//"); });
    return asm_;
  }
  bool all_generic() const override {
    for (const KernelRef& k : kernels_)
      if (!k->generic) return false;
    return true;
  }
  const DeviceKernel* device_kernel(size_t i) const override {
    return i < kernels_.size() ? &kernels_[i]->launch : nullptr;
  }

 private:
  std::string arch_;
  int isa_;
  std::vector<KernelRef> kernels_;  // one per plan kernel (equal ones shared)
  std::vector<std::string> names_;  // the plan's kernel names (dump sections)
  std::vector<bool> reused_;
  std::string ir_;
  mutable std::once_flag asm_once_;
  mutable std::string asm_;
};

class CudaTarget : public Target {
 public:
  explicit CudaTarget(const CudaOptions& o) : o_(o) {
    // The driver only where the code needs it: the current device's arch, and
    // the assembler when there is no ptxas. Never to load.
    if (o_.arch.empty()) {
      std::string why;
      if (!cuda_driver::available(&why))
        throw std::runtime_error("lazyjit: CUDA target: CudaOptions::arch is empty and no GPU is usable (" + why +
                                 "): name the GPU architecture (\"sm_90\") when compiling without a GPU");
      driver_ = std::to_string(cuda_driver::driver_version());
      o_.arch = cuda_driver::current_arch();
    }
    isa_ = cuda::ptx_isa(o_.arch);
    cuda::make_target_machine(o_.arch);  // throws for an arch LLVM does not know
    toolchain_.arch = o_.arch;
    toolchain_.libdevice = cuda::load_libdevice(cuda::find_libdevice(o_));
    std::string looked;
    toolchain_.ptxas = cuda::find_ptxas(o_, &looked);
    if (!toolchain_.ptxas.empty()) {
      ptxas_version_ = cuda::ptxas_version(toolchain_.ptxas);
    } else if (!cuda_driver::available()) {
      throw std::runtime_error("lazyjit: CUDA target: ptxas not found (needed to make cubins without a GPU); looked in " +
                               looked + ". Run scripts/setup.sh (it installs the nvidia-cuda-nvcc wheel into .venv) "
                               "or set LAZYJIT_PTXAS");
    } else {
      ptxas_version_ = "driver";  // cuLinkCreate's assembler, the driver's version
      if (driver_.empty()) driver_ = std::to_string(cuda_driver::driver_version());
    }
  }

  std::string fingerprint() const override {
    // "name value" parts, as the CPU's: the disk tier's manifest splits them
    // into its `target` fields (lazyjit-cache explain compares those).
    return "target cuda;arch " + o_.arch + ";ptx " + cuda::ptx_isa_text(isa_) + ";llvm " + LLVM_VERSION_STRING +
           ";libdevice " + toolchain_.libdevice->hash + ";ptxas " + ptxas_version_ + ";driver " +
           (driver_.empty() ? std::string("none") : driver_) + ";rev " + std::to_string(kCodegenRevision) + ";archive " +
           std::to_string(formats::kCudaArchiveVersion) + ";" + o_.codegen.str();
  }

  std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan, Shapes shapes) override {
    plan.kernel_fns.clear();
    const size_t n = plan.kernels.size();
    if (n == 0) return make_code({}, plan, {});
    // Refused before any compile: ptxas would only say "too much parameter space".
    const size_t limit = static_cast<size_t>(cuda::max_param_bytes(o_.arch, isa_));
    for (const FusedKernel& k : plan.kernels)
      if (size_t bytes = param_bytes(k, plan.check_stores); bytes > limit)
        throw std::runtime_error("lazyjit: CUDA target: kernel " + k.name + " needs " + std::to_string(bytes) +
                                 " bytes of kernel parameters (" + std::to_string(k.loads.size()) + " loads, " +
                                 std::to_string(k.stores.size()) + " stores at rank " +
                                 std::to_string(k.sizes.size()) + "), more than the " + std::to_string(limit) +
                                 " bytes PTX " + cuda::ptx_isa_text(isa_) + " allows on " + o_.arch +
                                 " (sm_70 and later allow 32764): not compiled");
    // The code follows each kernel's launch shape: it is part of the keys.
    KernelJobs<KernelCode> work(g, plan, shapes, cache_, /*launch_shapes=*/true);
    work.trace_cached([](size_t) { return debug::TraceArgs{{"target", "cuda"}}; });
    work.compile(
        o_.codegen.compile_threads, [](const auto&) { return debug::TraceArgs{{"target", "cuda"}}; },
        [&](const auto& job) {
          return compile_one(g, plan.kernels[job.kernel], job.key, job.generic, plan.check_stores,
                             /*assemble=*/!toolchain_.ptxas.empty());
        });
    // On the caller's thread: the driver's assembler when there is no ptxas.
    for (auto& j : work.jobs) finish(*j.code);
    work.keep(cache_);
    std::vector<KernelRef> refs = work.refs();
    std::vector<bool> reused = work.reused();
    std::string ir;
    if (o_.codegen.keep_llvm_ir) ir = kernel_texts(kernel_names(plan), refs, reused, &KernelCode::ir, ";");
    plan.kernel_fns.assign(n, nullptr);  // the executor launches device_kernel(i)
    auto code = make_code(std::move(refs), plan, std::move(reused), std::move(ir));
    work.count(*code);
    return code;
  }

  std::unique_ptr<CompiledCode> load(const std::string& object, Plan& plan) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return make_code({}, plan, {});
    const formats::CudaArchive a = formats::read_cuda_archive(object);  // every byte checked
    if (a.arch != o_.arch || static_cast<int>(a.ptx_isa) != isa_)
      throw std::runtime_error("lazyjit: CUDA kernels compiled for " + a.arch + " (PTX " +
                               cuda::ptx_isa_text(static_cast<int>(a.ptx_isa)) + "), this target makes " + o_.arch +
                               " (PTX " + cuda::ptx_isa_text(isa_) + ") code: not loaded");
    if (a.kernel_units.size() != plan.kernels.size())
      throw std::runtime_error("lazyjit: CUDA code for " + std::to_string(a.kernel_units.size()) +
                               " kernels, plan has " + std::to_string(plan.kernels.size()) + ": not loaded");
    std::vector<KernelRef> units;
    int loaded = 0;
    for (const formats::CudaUnit& u : a.units) {
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
      c->ptx = u.ptx;
      c->cubin = u.cubin;
      finish(*c);
      ++loaded;
      KernelRef ref = c;
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        cache_.keep(c);
      }
      units.push_back(std::move(ref));
    }
    std::vector<KernelRef> refs;
    for (uint32_t u : a.kernel_units) refs.push_back(units[u]);  // read_cuda_archive checked each index
    plan.kernel_fns.assign(plan.kernels.size(), nullptr);
    std::vector<bool> reused(refs.size(), false);
    auto code = make_code(std::move(refs), plan, std::move(reused));
    code->kernel_hits = static_cast<int>(a.units.size()) - loaded;
    return code;
  }

  void clear_kernels() override {
    std::lock_guard<std::mutex> lock(cache_.mu);
    cache_.clear();
  }

  void warm_up() override {
    // tanh over float32: NVPTX's first use (target machine, pipeline, codegen)
    // and libdevice's parse. Not kept, no ptxas.
    ir::Graph g;
    const ir::TensorType t{ir::DType::Float32, {64}, {1}};
    ir::ValueId x = g.add_input(t);
    g.add_output(g.add_node1(ir::OpKind::Tanh, {x}, {ir::Attr{static_cast<int64_t>(ir::DType::Float32)}}, t));
    Plan plan = plan_graph(g);
    if (plan.kernels.size() != 1) return;
    compile_one(g, plan.kernels[0], ir::Hash128{}, /*generic=*/true, /*check_stores=*/false, /*assemble=*/false);
  }

  int64_t max_kernel_param_bytes() const override { return cuda::max_param_bytes(o_.arch, isa_); }

 private:
  std::unique_ptr<CudaCode> make_code(std::vector<KernelRef> refs, const Plan& plan, std::vector<bool> reused,
                                      std::string ir = {}) const {
    return std::make_unique<CudaCode>(o_.arch, isa_, std::move(refs), kernel_names(plan), std::move(reused),
                                      std::move(ir));
  }

  // On the caller's thread: the cubin by the driver's assembler when there is
  // no ptxas; the launch's image and symbol. Loads nothing.
  void finish(KernelCode& c) const {
    try {
      if (c.cubin.empty()) c.cubin = cuda_driver::assemble(c.ptx);
    } catch (const std::exception& e) {
      throw std::runtime_error("CUDA kernel " + c.symbol + ": " + e.what());
    }
    c.launch.image = c.cubin;
    c.launch.symbol = c.symbol;
  }

  // compiler.h's pipeline for one kernel of the plan.
  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const FusedKernel& k, const ir::Hash128& key,
                                          bool generic, bool check_stores, bool assemble) {
    cuda::KernelConfig cfg{o_.codegen, generic, check_stores, k.launch};  // the plan's launch shape
    cuda::KernelBinary b = cuda::compile_kernel(toolchain_, g, k, cfg, assemble);
    auto c = std::make_shared<KernelCode>();
    c->key = key;
    c->generic = generic;
    c->symbol = std::move(b.symbol);
    c->launch = b.launch;
    c->ptx = std::move(b.ptx);
    c->cubin = std::move(b.cubin);
    c->ir = std::move(b.ir);
    return c;
  }

  CudaOptions o_;
  int isa_ = 81;
  std::string driver_;  // the driver's version when the target asked it (for arch or assembler); else empty
  cuda::Toolchain toolchain_;  // ptxas empty: the driver assembles
  std::string ptxas_version_;  // "13.0.88", or "driver"
  KernelCache<KernelCode> cache_;
};

}  // namespace

std::unique_ptr<Target> make_cuda_target(const CudaOptions& opts) { return std::make_unique<CudaTarget>(opts); }

}  // namespace lazyjit::lowering
