#include "targets/cuda_sim/host_kernel.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/ReplaceConstant.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/Alignment.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "targets/cuda_sim/sim_thread.h"

namespace lazyjit::lowering::cuda_sim {

namespace {

[[noreturn]] void refuse(const std::string& symbol, const std::string& what) {
  throw std::runtime_error("cuda-sim: kernel " + symbol + ": " + what);
}

// A field of the SimThread `st` at `offset`, as a `type` value.
llvm::Value* field(llvm::IRBuilder<>& b, llvm::Value* st, size_t offset, llvm::Type* type) {
  return b.CreateLoad(type, b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), st, offset));
}

// The value of special register `reg` ("tid.x", "laneid", ...), or null when unknown.
llvm::Value* special_register(llvm::IRBuilder<>& b, llvm::Value* st, const std::string& reg) {
  auto reg_at = [&](int r) { return field(b, st, 4 * r, b.getInt32Ty()); };
  if (reg == "tid.x") return reg_at(kRegTid);
  if (reg == "ntid.x") return reg_at(kRegNtid);
  if (reg == "ctaid.x") return reg_at(kRegCtaid);
  if (reg == "nctaid.x") return reg_at(kRegNctaid);
  if (reg == "laneid") return reg_at(kRegLane);
  if (reg == "warpsize") return b.getInt32(32);
  // One-dimensional grids and blocks: y and z are index 0 of extent 1.
  if (reg == "tid.y" || reg == "tid.z" || reg == "ctaid.y" || reg == "ctaid.z") return b.getInt32(0);
  if (reg == "ntid.y" || reg == "ntid.z" || reg == "nctaid.y" || reg == "nctaid.z") return b.getInt32(1);
  return nullptr;
}

// Rewrites one llvm.nvvm.* call of the kernel; returns whether it is a meeting
// point (shuffle or barrier).
bool rewrite_call(llvm::CallInst* c, llvm::Value* st, const std::string& symbol) {
  const std::string name = c->getCalledFunction()->getName().str();
  llvm::IRBuilder<> b(c);
  llvm::Type* i32 = b.getInt32Ty();
  const std::string sreg = "llvm.nvvm.read.ptx.sreg.";
  if (name.rfind(sreg, 0) == 0) {
    llvm::Value* v = special_register(b, st, name.substr(sreg.size()));
    if (!v) refuse(symbol, "reads special register " + name.substr(sreg.size()) + ", which cuda-sim does not simulate");
    c->replaceAllUsesWith(v);
    c->eraseFromParent();
    return false;
  }
  const std::string shfl = "llvm.nvvm.shfl.sync.";
  if (name.rfind(shfl, 0) == 0) {
    const std::string rest = name.substr(shfl.size());  // "bfly.f32"
    const size_t dot = rest.find('.');
    const std::string mode = rest.substr(0, dot), type = dot == std::string::npos ? "" : rest.substr(dot + 1);
    const int m = mode == "up" ? 0 : mode == "down" ? 1 : mode == "bfly" ? 2 : mode == "idx" ? 3 : -1;
    if (m < 0 || (type != "i32" && type != "f32")) refuse(symbol, "calls " + name + ", which cuda-sim does not simulate");
    // (mask, value, b, c)
    llvm::Value* value = c->getArgOperand(1);
    if (type == "f32") value = b.CreateBitCast(value, i32);
    auto* fn_type = llvm::FunctionType::get(i32, {b.getPtrTy(), i32, i32, i32, i32, i32}, false);
    llvm::Value* fn = field(b, st, kShuffleOffset, b.getPtrTy());
    llvm::Value* r = b.CreateCall(fn_type, fn, {st, b.getInt32(m), value, c->getArgOperand(2), c->getArgOperand(3),
                                                c->getArgOperand(0)});
    if (type == "f32") r = b.CreateBitCast(r, b.getFloatTy());
    c->replaceAllUsesWith(r);
    c->eraseFromParent();
    return true;
  }
  if (name == "llvm.nvvm.barrier0" || name == "llvm.nvvm.barrier.sync" || name == "llvm.nvvm.barrier.sync.aligned") {
    if (name != "llvm.nvvm.barrier0") {
      auto* id = llvm::dyn_cast<llvm::ConstantInt>(c->getArgOperand(0));
      if (!id || !id->isZero()) refuse(symbol, "calls " + name + " with a barrier other than 0");
    }
    auto* fn_type = llvm::FunctionType::get(b.getVoidTy(), {b.getPtrTy()}, false);
    b.CreateCall(fn_type, field(b, st, kBarrierOffset, b.getPtrTy()), {st});
    c->eraseFromParent();
    return true;
  }
  // Fences order memory between threads; the simulated threads of a block run
  // on one host thread, one at a time.
  if (name.rfind("llvm.nvvm.membar.", 0) == 0) {
    c->eraseFromParent();
    return false;
  }
  refuse(symbol, "calls " + name + ", which cuda-sim cannot run on the host");
}

}  // namespace

HostKernel rewrite_for_host(llvm::Module& m, const std::string& symbol, const llvm::Triple& triple,
                            const llvm::DataLayout& layout, int32_t dynamic_shared) {
  llvm::Function* f = m.getFunction(symbol);
  if (!f || f->isDeclaration()) refuse(symbol, "not in its module");
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
  const llvm::DataLayout device_layout = m.getDataLayout();
  if (llvm::NamedMDNode* md = m.getNamedMetadata("nvvm.annotations")) m.eraseNamedMetadata(md);

  // device_kernel.h's parameters: pointers, then i64 total, then the dims.
  const unsigned n = f->arg_size();
  if (n < 2 || !f->getArg(n - 2)->getType()->isIntegerTy(64) || !f->getArg(n - 1)->getType()->isPointerTy())
    refuse(symbol, "parameters are not device_kernel.h's");
  for (unsigned i = 0; i + 2 < n; ++i)
    if (!f->getArg(i)->getType()->isPointerTy()) refuse(symbol, "parameter " + std::to_string(i) + " is not a pointer");

  // The kernel with the SimThread as its last parameter.
  std::vector<llvm::Type*> params(f->getFunctionType()->param_begin(), f->getFunctionType()->param_end());
  params.push_back(ptr);
  auto* nf = llvm::Function::Create(llvm::FunctionType::get(f->getReturnType(), params, false),
                                    llvm::GlobalValue::InternalLinkage, symbol + ".thread", &m);
  llvm::ValueToValueMapTy vmap;
  for (unsigned i = 0; i < n; ++i) {
    vmap[f->getArg(i)] = nf->getArg(i);
    nf->getArg(i)->setName(f->getArg(i)->getName());
  }
  llvm::SmallVector<llvm::ReturnInst*, 4> returns;
  llvm::CloneFunctionInto(nf, f, vmap, llvm::CloneFunctionChangeType::LocalChangesOnly, returns);
  f->eraseFromParent();
  nf->setLinkage(llvm::GlobalValue::InternalLinkage);
  nf->setCallingConv(llvm::CallingConv::C);
  nf->removeParamAttr(n - 1, llvm::Attribute::ByVal);
  nf->removeFnAttr(llvm::Attribute::NoInline);
  nf->removeFnAttr(llvm::Attribute::OptimizeNone);
  nf->addFnAttr(llvm::Attribute::AlwaysInline);
  llvm::Argument* st = nf->getArg(n);
  st->setName("sim.thread");

  HostKernel out;
  out.entry = symbol + "_sim_entry";
  std::vector<llvm::CallInst*> calls;
  for (llvm::BasicBlock& bb : *nf)
    for (llvm::Instruction& i : bb)
      if (auto* c = llvm::dyn_cast<llvm::CallInst>(&i))
        if (llvm::Function* callee = c->getCalledFunction(); callee && callee->getName().starts_with("llvm.nvvm."))
          calls.push_back(c);
  for (llvm::CallInst* c : calls) out.meets |= rewrite_call(c, st, symbol);

  // Shared memory: each addrspace(3) global at an offset of the block's memory.
  std::vector<llvm::GlobalVariable*> shared;
  for (llvm::GlobalVariable& g : m.globals())
    if (g.getAddressSpace() == 3) shared.push_back(&g);
  std::stable_partition(shared.begin(), shared.end(), [](llvm::GlobalVariable* g) { return g->hasInitializer(); });
  uint64_t offset = 0;
  llvm::IRBuilder<> entry(&*nf->getEntryBlock().getFirstInsertionPt());
  llvm::Value* base = shared.empty() ? nullptr : field(entry, st, kSharedOffset, llvm::PointerType::get(ctx, 3));
  for (llvm::GlobalVariable* g : shared) {
    const uint64_t align = std::max<uint64_t>(g->getAlign().valueOrOne().value(), 16);
    offset = llvm::alignTo(offset, align);
    const uint64_t size = g->hasInitializer() ? device_layout.getTypeAllocSize(g->getValueType()).getFixedValue()
                                              : static_cast<uint64_t>(std::max(dynamic_shared, 0));
    llvm::convertUsersOfConstantsToInstructions({g});
    llvm::Value* at = entry.CreateConstInBoundsGEP1_64(entry.getInt8Ty(), base, offset, g->getName());
    std::vector<llvm::User*> users(g->user_begin(), g->user_end());
    for (llvm::User* u : users) {
      auto* i = llvm::dyn_cast<llvm::Instruction>(u);
      if (!i || i->getFunction() != nf) refuse(symbol, "shared memory " + g->getName().str() + " used outside the kernel");
      i->replaceUsesOfWith(g, at);
    }
    g->eraseFromParent();
    offset += size;
  }
  if (offset > (1u << 20)) refuse(symbol, std::to_string(offset) + " bytes of shared memory a block");
  out.shared_bytes = static_cast<int32_t>(llvm::alignTo(offset, 16));

  // The entry: SimEntry(bufs, total, dims, thread).
  auto* ef = llvm::Function::Create(
      llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, llvm::Type::getInt64Ty(ctx), ptr, ptr}, false),
      llvm::GlobalValue::ExternalLinkage, out.entry, &m);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", ef));
  std::vector<llvm::Value*> args;
  for (unsigned i = 0; i + 2 < n; ++i)
    args.push_back(b.CreateLoad(params[i], b.CreateConstInBoundsGEP1_64(ptr, ef->getArg(0), i)));
  args.push_back(ef->getArg(1));
  args.push_back(ef->getArg(2));
  args.push_back(ef->getArg(3));
  b.CreateCall(nf, args);
  b.CreateRetVoid();

  // Host code: no NVPTX processor or features on any function.
  for (llvm::Function& fn : m) {
    fn.removeFnAttr("target-cpu");
    fn.removeFnAttr("target-features");
  }
  m.setTargetTriple(triple.str());
  m.setDataLayout(layout);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(m, &os)) refuse(symbol, "host IR does not verify: " + os.str());
  return out;
}

}  // namespace lazyjit::lowering::cuda_sim
