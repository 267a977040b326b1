// The CUDA target's compile pipeline (compiler.h): the pipeline first, then
// each stage.
#include "targets/cuda/compiler.h"

#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cctype>
#include <optional>
#include <stdexcept>

#include "debug/trace.h"
#include "targets/cuda/ptx.h"
#include "targets/cuda/ptxas.h"

namespace lazyjit::lowering::cuda {

KernelBinary compile_kernel(const Toolchain& tc, const ir::Graph& g, const FusedKernel& k, const KernelConfig& cfg,
                            bool assemble) {
  std::optional<debug::TraceSpan> phase;
  auto stage = [&](const char* name) {
    phase.reset();
    if (debug::trace_enabled()) phase.emplace("compile", name);
  };
  const int opt = cfg.opts.opt_level;
  const bool keep_ir = cfg.opts.keep_llvm_ir;
  KernelBinary out;
  stage("emit IR");
  KernelIR ir = make_llvm_ir(g, k, cfg, tc.arch);  // its errors name the kernel
  out.symbol = ir.symbol;
  out.launch = ir.launch;
  try {
    if (keep_ir) out.ir = "; ---- before optimization\n" + llvm_ir_text(*ir.module);
    stage("link libdevice");
    ir = make_linked_ir(std::move(ir), *tc.libdevice);
    stage("optimize IR");
    ir = make_optimized_ir(std::move(ir), *tc.libdevice, opt);
    if (keep_ir) out.ir += "; ---- after optimization\n" + llvm_ir_text(*ir.module);
    stage("PTX");
    out.ptx = make_ptx(std::move(ir));
    if (assemble) {
      stage("ptxas");
      out.cubin = make_cubin(tc, out.ptx, opt, "kernel " + k.name);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("kernel " + k.name + ": " + e.what());
  }
  return out;
}

// --- the stages ----------------------------------------------------------------

KernelIR make_llvm_ir(const ir::Graph& g, const FusedKernel& k, const KernelConfig& cfg, const std::string& arch) {
  KernelIR ir;
  ir.ctx = std::make_unique<llvm::LLVMContext>();
  ir.tm = make_target_machine(arch, cfg.opts.opt_level);
  ir.module = new_module(*ir.ctx, *ir.tm, k.name);
  ir.symbol = kernel_symbol(k.name);
  ir.launch = emit_kernel(*ir.module, g, k, ir.symbol, cfg);  // throws "kernel <k.name>: ..."
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*ir.module, &os)) throw std::runtime_error("kernel " + k.name + ": invalid IR: " + err);
  return ir;
}

KernelIR make_linked_ir(KernelIR ir, const Libdevice& ld) {
  link_libdevice(*ir.module, ld, {ir.symbol});
  return ir;
}

KernelIR make_optimized_ir(KernelIR ir, const Libdevice& ld, int opt_level) {
  optimize(*ir.module, *ir.tm, opt_level);
  if (map_to_libdevice(*ir.module) > 0) {
    link_libdevice(*ir.module, ld, {ir.symbol});
    optimize(*ir.module, *ir.tm, opt_level);
  }
  check_lowerable(*ir.module, "after optimization");
  return ir;
}

std::string make_ptx(KernelIR ir) { return emit_ptx(*ir.module, *ir.tm); }

std::string make_cubin(const Toolchain& tc, const std::string& ptx, int opt_level, const std::string& what) {
  return run_ptxas(tc.ptxas, tc.arch, ptx, opt_level, what);
}

// --- shared by both targets ------------------------------------------------------

std::string kernel_symbol(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

std::string llvm_ir_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

formats::KernelLaunch archived_launch(const DeviceKernel& k) {
  formats::KernelLaunch l;
  l.grid = k.grid == DeviceKernel::Grid::Rows ? formats::KernelLaunch::Grid::Rows : formats::KernelLaunch::Grid::Elements;
  l.block = k.block;
  l.shared_bytes = k.shared_bytes;
  l.elements_per_thread = k.elements_per_thread;
  l.rows_per_block = k.rows_per_block;
  return l;
}

DeviceKernel device_launch(const formats::KernelLaunch& l) {
  DeviceKernel k;
  k.grid = l.grid == formats::KernelLaunch::Grid::Rows ? DeviceKernel::Grid::Rows : DeviceKernel::Grid::Elements;
  k.block = l.block;
  k.shared_bytes = l.shared_bytes;
  k.elements_per_thread = l.elements_per_thread;
  k.rows_per_block = l.rows_per_block;
  return k;
}

}  // namespace lazyjit::lowering::cuda
