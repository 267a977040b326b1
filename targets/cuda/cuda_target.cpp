// The CUDA target: per kernel, the compile pipeline of compiler.h (LLVM IR for
// NVPTX, libdevice linked in, optimized, PTX, a cubin by ptxas; the driver's
// assembler when there is no ptxas). It loads nothing: its code hands out each
// kernel's cubin, symbol and launch (device_kernel.h), and the executor loads
// the cubin into each device's context at the kernel's first run there
// (targets/cuda/module_loads.h). A program's object is the kernels' archive
// (targets/cuda/kernel_archive.h, "LJCU").
//
// The per-kernel loop is targets/kernel_target.h's, as on the CPU: each kernel compiles alone and
// is kept by key (kernel_key.h): equal kernels compile once, and a plan whose
// kernels were all compiled before costs no LLVM work. The kernels a plan still
// needs compile in parallel (LLVM and ptxas; the driver's assembler, when there
// is no ptxas, runs on the caller's thread).
#include <llvm/Config/llvm-config.h>

#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "targets/cuda/driver.h"
#include "debug/trace.h"
#include "targets/cuda/kernel_archive.h"
#include "targets/cuda/compiler.h"
#include "targets/cuda/ptx.h"
#include "targets/cuda/ptxas.h"
#include "targets/cuda/toolkit.h"
#include "targets/cuda/cuda_target.h"
#include "targets/cuda/device_kernel.h"
#include "targets/kernel_target.h"

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

class CudaCode : public KernelsCode<KernelCode> {
 public:
  CudaCode(std::string arch, int isa, std::vector<KernelRef> kernels, std::vector<std::string> names,
           std::vector<bool> reused, std::string ir)
      : KernelsCode(std::move(kernels), std::move(ir)),
        arch_(std::move(arch)),
        isa_(isa),
        names_(std::move(names)),
        reused_(std::move(reused)) {}

  std::string object() const override {
    if (kernels_.empty()) return std::string();
    formats::CudaArchive a;
    a.arch = arch_;
    a.ptx_isa = static_cast<uint32_t>(isa_);
    archive_units(kernels_, a, [](formats::CudaUnit& out, const KernelCode& u) {
      out.launch = cuda::archived_launch(u.launch);
      out.ptx = u.ptx;
      out.cubin = u.cubin;
    });
    return formats::write_cuda_archive(a);
  }
  // The PTX of every kernel (it is in the object anyway), one section per kernel.
  const std::string& assembly() const override {
    std::call_once(asm_once_, [this] { asm_ = kernel_texts(names_, kernels_, reused_, &KernelCode::ptx, "//"); });
    return asm_;
  }
  const KernelLaunch* kernel(size_t i) const override { return i < kernels_.size() ? &kernels_[i]->launch : nullptr; }

 private:
  std::string arch_;
  int isa_;
  std::vector<std::string> names_;  // the plan's kernel names (dump sections)
  std::vector<bool> reused_;
  mutable std::once_flag asm_once_;
  mutable std::string asm_;
};

class CudaTarget : public KernelTarget<KernelCode> {
 public:
  explicit CudaTarget(const CudaOptions& o) : KernelTarget(/*launch_shapes=*/true), o_(o) {
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

  void warm_up() override {
    // NVPTX's first use (target machine, pipeline, codegen) and libdevice's parse. No ptxas.
    warm_up_kernel([this](const ir::Graph& g, const FusedKernel& k) {
      compile_one(g, k, ir::Hash128{}, /*generic=*/true, /*check_stores=*/false, /*assemble=*/false);
    });
  }

  int64_t max_kernel_param_bytes() const override { return cuda::max_param_bytes(o_.arch, isa_); }

 private:
  // Refused before any compile: ptxas would only say "too much parameter space".
  void check_plan(const Plan& plan) const override {
    const size_t limit = static_cast<size_t>(cuda::max_param_bytes(o_.arch, isa_));
    for (const FusedKernel& k : plan.kernels)
      if (size_t bytes = param_bytes(k, plan.check_stores); bytes > limit)
        throw std::runtime_error("lazyjit: CUDA target: kernel " + k.name + " needs " + std::to_string(bytes) +
                                 " bytes of kernel parameters (" + std::to_string(k.loads.size()) + " loads, " +
                                 std::to_string(k.stores.size()) + " stores at rank " +
                                 std::to_string(k.sizes.size()) + "), more than the " + std::to_string(limit) +
                                 " bytes PTX " + cuda::ptx_isa_text(isa_) + " allows on " + o_.arch +
                                 " (sm_70 and later allow 32764): not compiled");
  }
  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const Plan& plan, const Job& job) override {
    return compile_one(g, plan.kernels[job.kernel], job.key, job.generic, plan.check_stores,
                       /*assemble=*/!toolchain_.ptxas.empty());
  }
  // On the caller's thread: the driver's assembler when there is no ptxas.
  void link_compiled(KernelCode& c) override { finish(c); }
  void link(KernelCode& c) override { finish(c); }
  KernelArchive<KernelCode> read(const std::string& object, const Plan& plan) override {
    const formats::CudaArchive a = formats::read_cuda_archive(object);  // every byte and index checked
    if (a.arch != o_.arch || static_cast<int>(a.ptx_isa) != isa_)
      throw std::runtime_error("lazyjit: CUDA kernels compiled for " + a.arch + " (PTX " +
                               cuda::ptx_isa_text(static_cast<int>(a.ptx_isa)) + "), this target makes " + o_.arch +
                               " (PTX " + cuda::ptx_isa_text(isa_) + ") code: not loaded");
    return archive_kernels<KernelCode>(a, plan, "CUDA", [](KernelCode& c, const formats::CudaUnit& u) {
      c.launch = cuda::device_launch(u.launch);
      c.ptx = u.ptx;
      c.cubin = u.cubin;
    });
  }
  std::unique_ptr<CompiledCode> make_code(std::vector<KernelRef> refs, const Plan& plan,
                                          const std::vector<bool>* reused) override {
    std::string ir;
    if (reused && o_.codegen.keep_llvm_ir) ir = kernel_texts(kernel_names(plan), refs, *reused, &KernelCode::ir, ";");
    std::vector<bool> found = reused ? *reused : std::vector<bool>(refs.size(), false);
    return std::make_unique<CudaCode>(o_.arch, isa_, std::move(refs), kernel_names(plan), std::move(found),
                                      std::move(ir));
  }
  int compile_threads() const override { return o_.codegen.compile_threads; }
  debug::TraceArgs cached_trace(const std::string&) const override { return debug::TraceArgs{{"target", "cuda"}}; }
  debug::TraceArgs compile_trace(const FusedKernel&) const override { return debug::TraceArgs{{"target", "cuda"}}; }

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
};

}  // namespace

std::unique_ptr<Target> make_cuda_target(const CudaOptions& opts) { return std::make_unique<CudaTarget>(opts); }

}  // namespace lazyjit::lowering
