// The CUDA target: per kernel, LLVM IR for NVPTX (kernel_emitter.h), libdevice
// linked in (libdevice.h), optimized and emitted as PTX (ptx.h), assembled into
// a cubin by ptxas (ptxas.h; the driver's assembler when there is no ptxas) and
// loaded into the current CUDA context (cuda_driver/driver.h) unless
// CudaOptions::load is off.
//
// As on the CPU (lowering/cpu/cpu_target.cpp), each kernel compiles alone and
// is kept by key (kernel_key.h): equal kernels compile once, and a plan whose
// kernels were all compiled before costs no LLVM work. The kernels a plan still
// needs compile in parallel (LLVM and ptxas; loading runs on the caller's
// thread, the one whose CUDA context is current).
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cctype>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "cuda_driver/driver.h"
#include "debug/trace.h"
#include "graph_ir/bytes.h"
#include "lowering/cuda/kernel_emitter.h"
#include "lowering/cuda/libdevice.h"
#include "lowering/cuda/ptx.h"
#include "lowering/cuda/ptxas.h"
#include "lowering/cuda/toolkit.h"
#include "lowering/kernel_jobs.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

namespace {

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

// A PTX identifier: [A-Za-z_][A-Za-z0-9_]* (kernel names are "fused_<n>").
std::string ptx_symbol(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

// The bytes of a kernel's parameters (device_kernel.h): a pointer per buffer
// load and store and for the NaN/Inf flag, `total`, and the dims array.
size_t param_bytes(const FusedKernel& k, bool check_stores) {
  size_t words = k.stores.size() + (check_stores ? 1 : 0) + 1 + kernel_dims(k).size();
  for (const Access& a : k.loads) words += a.scalar_index < 0 ? 1 : 0;
  return 8 * words;
}

// One compiled kernel: PTX, cubin, and when loaded, its module and function.
struct KernelCode {
  ir::Hash128 key;  // the key it is kept under: exact, or generic when `generic`
  bool generic = false;
  std::string symbol;
  DeviceKernel launch;  // function set when loaded
  std::string ptx;
  std::string cubin;
  std::string ir;  // when CodegenOptions::keep_llvm_ir
  std::shared_ptr<cuda_driver::Module> module;  // keeps `launch.function` valid
};
using KernelRef = std::shared_ptr<const KernelCode>;

// The code of a plan (what Program bytes carry), as one blob:
//   "LJCU" u32 version, str arch, u32 PTX ISA (81: 8.1), u32 unit count, per
//   unit: u64 key lo, u64 key hi, u8 generic, str symbol, u8 grid (0: Elements,
//   1: Rows), i32 block, i32 shared bytes, i32 elements per thread, i32 rows
//   per block, str PTX, str cubin; then u32 kernel count, per kernel: u32 unit.
// Version 2 added elements per thread (vectorized element kernels), 3 rows per
// block (warp rows); other versions are refused (their code would be launched
// with the wrong grid).
constexpr std::string_view kArchiveTag = "LJCU";
constexpr uint32_t kArchiveVersion = 3;

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
    std::vector<uint32_t> of;
    distinct_kernels(kernels_, &units, &of);
    ir::ByteWriter w;
    w.header(kArchiveTag, kArchiveVersion);
    w.str(arch_);
    w.u32(static_cast<uint32_t>(isa_));
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
      w.str(u->ptx);
      w.str(u->cubin);
    }
    w.u32s(of);
    return w.take();
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
    if (i >= kernels_.size() || !kernels_[i]->launch.function) return nullptr;
    return &kernels_[i]->launch;
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
    if (o_.load) {
      std::string why;
      if (!cuda_driver::available(&why))
        throw std::runtime_error("lazyjit: CUDA target: no usable GPU (" + why +
                                 "); CudaOptions::load = false compiles without one");
      driver_ = std::to_string(cuda_driver::driver_version());
      if (o_.arch.empty()) o_.arch = cuda_driver::current_arch();
    } else if (o_.arch.empty()) {
      throw std::runtime_error("lazyjit: CUDA target: CudaOptions::arch is empty and load is off: "
                               "name the GPU architecture (\"sm_90\") when compiling without a GPU");
    }
    isa_ = cuda::ptx_isa(o_.arch);
    cuda::make_target_machine(o_.arch);  // throws for an arch LLVM does not know
    libdevice_ = cuda::load_libdevice(cuda::find_libdevice(o_));
    std::string looked;
    ptxas_ = cuda::find_ptxas(o_, &looked);
    if (!ptxas_.empty()) {
      ptxas_version_ = cuda::ptxas_version(ptxas_);
    } else if (!o_.load) {
      throw std::runtime_error("lazyjit: CUDA target: ptxas not found (needed to make cubins without a GPU); looked in " +
                               looked + ". Run scripts/setup.sh (it installs the nvidia-cuda-nvcc wheel into .venv) "
                               "or set LAZYJIT_PTXAS");
    } else {
      ptxas_version_ = "driver";  // cuLinkCreate's assembler, the driver's version
    }
  }

  std::string fingerprint() const override {
    // "name value" parts, as the CPU's: the disk tier's manifest splits them
    // into its `target` fields (lazyjit-cache explain compares those).
    return "target cuda;arch " + o_.arch + ";ptx " + cuda::ptx_isa_text(isa_) + ";llvm " + LLVM_VERSION_STRING +
           ";libdevice " + libdevice_->hash + ";ptxas " + ptxas_version_ + ";driver " +
           (o_.load ? driver_ : std::string("none")) + ";rev " + std::to_string(kCodegenRevision) + ";archive " + std::to_string(kArchiveVersion) + ";" +
           o_.codegen.str();
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
                             /*assemble=*/!ptxas_.empty());
        });
    // On the caller's thread (its CUDA context): the driver's assembler, loading.
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
    ir::ByteReader r(object);
    r.expect_header(kArchiveTag, kArchiveVersion, "CUDA kernels");
    std::string arch = r.str();
    uint32_t isa = r.u32();
    if (arch != o_.arch || static_cast<int>(isa) != isa_)
      throw std::runtime_error("lazyjit: CUDA kernels compiled for " + arch + " (PTX " +
                               cuda::ptx_isa_text(static_cast<int>(isa)) + "), this target makes " + o_.arch +
                               " (PTX " + cuda::ptx_isa_text(isa_) + ") code: not loaded");
    // Each unit takes at least its fixed fields (8 + 8 + 1 + 4 + 1 + 4 + 4 + 4 + 4 + 4 + 4).
    size_t nunits = r.count(46, "CUDA kernel units");
    std::vector<KernelRef> units;
    int loaded = 0;
    for (size_t u = 0; u < nunits; ++u) {
      auto c = std::make_shared<KernelCode>();
      c->key.lo = r.u64();
      c->key.hi = r.u64();
      c->generic = r.boolean();
      c->symbol = r.str();
      uint8_t grid = r.u8();
      if (grid > 1) r.fail("unknown grid kind " + std::to_string(grid) + " of CUDA kernel " + c->symbol);
      c->launch.grid = grid ? DeviceKernel::Grid::Rows : DeviceKernel::Grid::Elements;
      c->launch.block = r.i32();
      if (c->launch.block <= 0 || c->launch.block > 1024 || c->launch.block % 32)
        r.fail("block of " + std::to_string(c->launch.block) + " threads for CUDA kernel " + c->symbol);
      c->launch.shared_bytes = r.i32();
      if (c->launch.shared_bytes < 0) r.fail("negative shared memory for CUDA kernel " + c->symbol);
      c->launch.elements_per_thread = r.i32();
      if (c->launch.elements_per_thread < 1 || c->launch.elements_per_thread > 64 ||
          (grid && c->launch.elements_per_thread != 1))
        r.fail(std::to_string(c->launch.elements_per_thread) + " elements per thread for CUDA kernel " + c->symbol);
      c->launch.rows_per_block = r.i32();
      if (grid ? c->launch.rows_per_block != 1 && c->launch.rows_per_block * 32 != c->launch.block
               : c->launch.rows_per_block != 1)
        r.fail(std::to_string(c->launch.rows_per_block) + " rows per block of " + std::to_string(c->launch.block) +
               " threads for CUDA kernel " + c->symbol);
      c->ptx = r.str();
      c->cubin = r.str();
      if (c->cubin.size() < 4 || c->cubin.compare(0, 4, "\x7f" "ELF") != 0)
        r.fail("CUDA kernel " + c->symbol + " has no cubin (no ELF header)");
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        if (KernelRef have = cache_.use(c->key)) {
          units.push_back(have);
          continue;
        }
      }
      finish(*c);
      ++loaded;
      KernelRef ref = c;
      {
        std::lock_guard<std::mutex> lock(cache_.mu);
        cache_.keep(c);
      }
      units.push_back(std::move(ref));
    }
    std::vector<uint32_t> of = r.u32s();
    r.expect_end("CUDA kernels");
    if (of.size() != plan.kernels.size())
      r.fail("CUDA code for " + std::to_string(of.size()) + " kernels, plan has " + std::to_string(plan.kernels.size()));
    std::vector<KernelRef> refs;
    for (uint32_t u : of) {
      if (u >= units.size()) r.fail("CUDA kernel unit index out of range");
      refs.push_back(units[u]);
    }
    plan.kernel_fns.assign(plan.kernels.size(), nullptr);
    std::vector<bool> reused(refs.size(), false);
    auto code = make_code(std::move(refs), plan, std::move(reused));
    code->kernel_hits = static_cast<int>(nunits) - loaded;
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

  // On the caller's thread: the cubin by the driver when there is no ptxas, and
  // with CudaOptions::load, the module and the function.
  void finish(KernelCode& c) {
    try {
      if (c.cubin.empty()) c.cubin = cuda_driver::assemble(c.ptx);
      if (o_.load) {
        c.module = cuda_driver::load_module(c.cubin);
        c.launch.function = c.module->function(c.symbol);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("CUDA kernel " + c.symbol + ": " + e.what());
    }
  }

  std::shared_ptr<KernelCode> compile_one(const ir::Graph& g, const FusedKernel& k, const ir::Hash128& key,
                                          bool generic, bool check_stores, bool assemble) {
    std::optional<debug::TraceSpan> phase;
    auto start = [&](const char* name) {
      phase.reset();
      if (debug::trace_enabled()) phase.emplace("compile", name);
    };
    auto c = std::make_shared<KernelCode>();
    c->key = key;
    c->generic = generic;
    c->symbol = ptx_symbol(k.name);
    const int opt = o_.codegen.opt_level;
    start("emit IR");
    auto tm = cuda::make_target_machine(o_.arch, opt);
    llvm::LLVMContext ctx;
    auto m = cuda::new_module(ctx, *tm, k.name);
    cuda::KernelConfig cfg{o_.codegen, generic, check_stores, k.launch};  // the plan's launch shape
    c->launch = cuda::emit_kernel(*m, g, k, c->symbol, cfg);
    c->launch.function = nullptr;
    try {
      std::string err;
      llvm::raw_string_ostream os(err);
      if (llvm::verifyModule(*m, &os)) throw std::runtime_error("invalid IR: " + err);
      if (o_.codegen.keep_llvm_ir) c->ir = "; ---- before optimization\n" + module_text(*m);
      start("link libdevice");
      cuda::link_libdevice(*m, *libdevice_, {c->symbol});
      start("optimize IR");
      cuda::optimize(*m, *tm, opt);
      // The optimizer may make a math intrinsic of its own (pow(2, x) -> exp2):
      // map, link and clean up once more.
      if (cuda::map_to_libdevice(*m) > 0) {
        cuda::link_libdevice(*m, *libdevice_, {c->symbol});
        cuda::optimize(*m, *tm, opt);
      }
      cuda::check_lowerable(*m, "after optimization");
      if (o_.codegen.keep_llvm_ir) c->ir += "; ---- after optimization\n" + module_text(*m);
      start("PTX");
      c->ptx = cuda::emit_ptx(*m, *tm);
      if (assemble) {
        start("ptxas");
        c->cubin = cuda::run_ptxas(ptxas_, o_.arch, c->ptx, opt, "kernel " + k.name);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("kernel " + k.name + ": " + e.what());
    }
    return c;
  }

  CudaOptions o_;
  int isa_ = 81;
  std::string driver_;
  std::shared_ptr<const cuda::Libdevice> libdevice_;
  std::string ptxas_;          // empty: the driver assembles
  std::string ptxas_version_;  // "13.0.88", or "driver"
  KernelCache<KernelCode> cache_;
};

}  // namespace

std::unique_ptr<Target> make_cuda_target(const CudaOptions& opts) { return std::make_unique<CudaTarget>(opts); }

}  // namespace lazyjit::lowering
