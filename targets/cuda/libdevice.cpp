#include "targets/cuda/libdevice.h"

#include <llvm/ADT/StringSet.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "graph_ir/hash.h"

namespace lazyjit::lowering::cuda {

namespace {

// Intrinsics NVPTX cannot lower (LLVM 19), by ID, with libdevice's base name.
// Unary unless noted: pow (float, float), powi (float, int), ldexp (float, int).
const std::vector<std::pair<llvm::Intrinsic::ID, const char*>>& intrinsic_table() {
  static const std::vector<std::pair<llvm::Intrinsic::ID, const char*>> t{
      {llvm::Intrinsic::exp, "exp"},     {llvm::Intrinsic::exp2, "exp2"},   {llvm::Intrinsic::exp10, "exp10"},
      {llvm::Intrinsic::log, "log"},     {llvm::Intrinsic::log2, "log2"},   {llvm::Intrinsic::log10, "log10"},
      {llvm::Intrinsic::sin, "sin"},     {llvm::Intrinsic::cos, "cos"},     {llvm::Intrinsic::tan, "tan"},
      {llvm::Intrinsic::asin, "asin"},   {llvm::Intrinsic::acos, "acos"},   {llvm::Intrinsic::atan, "atan"},
      {llvm::Intrinsic::sinh, "sinh"},   {llvm::Intrinsic::cosh, "cosh"},   {llvm::Intrinsic::tanh, "tanh"},
      {llvm::Intrinsic::pow, "pow"},     {llvm::Intrinsic::powi, "powi"},   {llvm::Intrinsic::ldexp, "ldexp"},
  };
  return t;
}

// libm functions libdevice has as __nv_<name> (double) and __nv_<name>f (float),
// with their arity: every name the element emitters call (math_emitter.cpp:
// tanh, erf, log1p, expm1, and exp/log/sin/cos when it calls libm for libmvec)
// and the rest of C99's math a future emitter may call.
const std::map<std::string, int>& libm_table() {
  static const std::map<std::string, int> t{
      {"exp", 1},   {"exp2", 1},  {"exp10", 1}, {"expm1", 1},  {"log", 1},    {"log2", 1},   {"log10", 1},
      {"log1p", 1}, {"sin", 1},   {"cos", 1},   {"tan", 1},    {"asin", 1},   {"acos", 1},   {"atan", 1},
      {"sinh", 1},  {"cosh", 1},  {"tanh", 1},  {"asinh", 1},  {"acosh", 1},  {"atanh", 1},  {"erf", 1},
      {"erfc", 1},  {"erfinv", 1}, {"erfcinv", 1}, {"lgamma", 1}, {"tgamma", 1}, {"cbrt", 1}, {"rsqrt", 1},
      {"sqrt", 1},  {"fabs", 1},  {"floor", 1}, {"ceil", 1},   {"trunc", 1},  {"round", 1},  {"rint", 1},
      {"nearbyint", 1}, {"logb", 1}, {"sinpi", 1}, {"cospi", 1},
      {"pow", 2},   {"atan2", 2}, {"hypot", 2}, {"fmod", 2},   {"remainder", 2}, {"fmin", 2}, {"fmax", 2},
      {"copysign", 2}, {"fdim", 2}, {"nextafter", 2},
      {"fma", 3},
  };
  return t;
}

// The libdevice base name (and arity) of a libm function name: "tanhf" ->
// ("tanh", 1, float), "tanh" -> ("tanh", 1, double).
struct LibmName {
  std::string base;
  int arity = 0;
  bool f32 = false;
};
bool libm_name(llvm::StringRef name, LibmName& out) {
  const auto& t = libm_table();
  if (auto it = t.find(name.str()); it != t.end()) {
    out = {it->first, it->second, false};
    return true;
  }
  if (name.ends_with("f")) {
    if (auto it = t.find(name.drop_back().str()); it != t.end()) {
      out = {it->first, it->second, true};
      return true;
    }
  }
  return false;
}

const char* intrinsic_base(llvm::Intrinsic::ID id) {
  for (const auto& [i, name] : intrinsic_table())
    if (i == id) return name;
  return nullptr;
}

std::string type_name(llvm::Type* t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t->print(os);
  return s;
}

// Calls __nv_<base>[f] on scalar operands of a floating type (half and bfloat
// through float); integer operands (powi's, ldexp's exponent) pass as i32.
llvm::Value* call_scalar(llvm::IRBuilder<>& b, llvm::Module& m, const std::string& base,
                         llvm::ArrayRef<llvm::Value*> args, llvm::Type* ret) {
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* f64 = b.getDoubleTy();
  llvm::Type* comp = ret->isDoubleTy() ? f64 : f32;
  if (!ret->isFloatTy() && !ret->isDoubleTy() && !ret->isHalfTy() && !ret->isBFloatTy())
    throw std::runtime_error("lazyjit: CUDA target: no libdevice function for " + base + " on " + type_name(ret));
  std::vector<llvm::Value*> cargs;
  std::vector<llvm::Type*> types;
  for (llvm::Value* a : args) {
    llvm::Type* t = a->getType();
    if (t->isIntegerTy()) {
      cargs.push_back(b.CreateSExtOrTrunc(a, b.getInt32Ty()));
    } else if (t->isFloatingPointTy()) {
      cargs.push_back(t == comp ? a : b.CreateFPCast(a, comp));
    } else {
      throw std::runtime_error("lazyjit: CUDA target: no libdevice function for " + base + " with a " +
                               type_name(t) + " operand");
    }
    types.push_back(cargs.back()->getType());
  }
  std::string name = "__nv_" + base + (comp->isFloatTy() ? "f" : "");
  auto* fty = llvm::FunctionType::get(comp, types, false);
  llvm::FunctionCallee callee = m.getOrInsertFunction(name, fty);
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee()); f && f->getFunctionType() != fty)
    throw std::runtime_error("lazyjit: CUDA target: " + name + " declared with another type in the module");
  llvm::Value* r = b.CreateCall(callee, cargs);
  return ret == comp ? r : b.CreateFPCast(r, ret);
}

// The same, lane by lane on vectors.
llvm::Value* call_libdevice(llvm::IRBuilder<>& b, llvm::Module& m, const std::string& base,
                            llvm::ArrayRef<llvm::Value*> args, llvm::Type* ret) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(ret);
  if (!vt) return call_scalar(b, m, base, args, ret);
  llvm::Value* out = llvm::PoisonValue::get(vt);
  for (unsigned i = 0; i < vt->getNumElements(); ++i) {
    std::vector<llvm::Value*> lane;
    for (llvm::Value* a : args)
      lane.push_back(a->getType()->isVectorTy() ? b.CreateExtractElement(a, i) : a);
    out = b.CreateInsertElement(out, call_scalar(b, m, base, lane, vt->getElementType()), i);
  }
  return out;
}

bool is_kernel(const llvm::Function& f, const std::unordered_set<std::string>& names,
               const std::unordered_set<const llvm::Function*>& annotated) {
  return f.getCallingConv() == llvm::CallingConv::PTX_Kernel || names.count(f.getName().str()) ||
         annotated.count(&f);
}

// Functions nvvm.annotations marks {ptr @f, !"kernel", i32 1}.
std::unordered_set<const llvm::Function*> annotated_kernels(const llvm::Module& m) {
  std::unordered_set<const llvm::Function*> out;
  const llvm::NamedMDNode* md = m.getNamedMetadata("nvvm.annotations");
  if (!md) return out;
  for (const llvm::MDNode* n : md->operands()) {
    for (unsigned i = 1; i + 1 < n->getNumOperands(); i += 2) {
      auto* key = llvm::dyn_cast_or_null<llvm::MDString>(n->getOperand(i).get());
      if (!key || key->getString() != "kernel") continue;
      if (auto* v = llvm::dyn_cast_or_null<llvm::ValueAsMetadata>(n->getOperand(0).get()))
        if (auto* f = llvm::dyn_cast<llvm::Function>(v->getValue())) out.insert(f);
    }
  }
  return out;
}

// Whether an intrinsic call of this ID must become a libdevice call.
bool unlowerable(llvm::Intrinsic::ID id) { return intrinsic_base(id) != nullptr; }

}  // namespace

const std::vector<std::string>& libdevice_intrinsics() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r;
    for (const auto& [id, name] : intrinsic_table()) r.push_back(name);
    return r;
  }();
  return v;
}

const std::vector<std::string>& libdevice_libm_names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r;
    for (const auto& [name, arity] : libm_table()) r.push_back(name);
    return r;
  }();
  return v;
}

std::shared_ptr<const Libdevice> load_libdevice(const std::string& path) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const Libdevice>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("lazyjit: CUDA target: cannot read libdevice " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto ld = std::make_shared<Libdevice>();
  ld->path = path;
  ld->bytes = ss.str();
  if (ld->bytes.size() < 4 || ld->bytes.compare(0, 2, "BC") != 0)
    throw std::runtime_error("lazyjit: CUDA target: " + path + " is not LLVM bitcode (libdevice.10.bc)");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(ir::hash64(ld->bytes.data(), ld->bytes.size())));
  ld->hash = std::string(hex, 12);
  loaded.emplace(path, ld);
  return ld;
}

int map_to_libdevice(llvm::Module& m) {
  std::vector<llvm::CallInst*> calls;
  for (llvm::Function& f : m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& i : bb)
        if (auto* c = llvm::dyn_cast<llvm::CallInst>(&i))
          if (llvm::Function* callee = c->getCalledFunction(); callee && callee->isDeclaration()) {
            LibmName ln;
            if (unlowerable(callee->getIntrinsicID()) ||
                (!callee->isIntrinsic() && libm_name(callee->getName(), ln)))
              calls.push_back(c);
          }
  std::set<llvm::Function*> maybe_dead;
  for (llvm::CallInst* c : calls) {
    llvm::Function* callee = c->getCalledFunction();
    std::string base;
    if (const char* b = intrinsic_base(callee->getIntrinsicID())) {
      base = b;
    } else {
      LibmName ln;
      libm_name(callee->getName(), ln);
      if (static_cast<int>(c->arg_size()) != ln.arity)
        throw std::runtime_error("lazyjit: CUDA target: call to " + callee->getName().str() + " with " +
                                 std::to_string(c->arg_size()) + " arguments, libm's takes " +
                                 std::to_string(ln.arity));
      base = ln.base;
    }
    llvm::IRBuilder<> b(c);
    if (llvm::isa<llvm::FPMathOperator>(c)) b.setFastMathFlags(c->getFastMathFlags());
    std::vector<llvm::Value*> args(c->arg_begin(), c->arg_end());
    llvm::Value* r = call_libdevice(b, m, base, args, c->getType());
    r->takeName(c);
    c->replaceAllUsesWith(r);
    c->eraseFromParent();
    maybe_dead.insert(callee);
  }
  for (llvm::Function* f : maybe_dead)
    if (f->use_empty()) f->eraseFromParent();
  return static_cast<int>(calls.size());
}

void link_libdevice(llvm::Module& m, const Libdevice& ld, const std::vector<std::string>& kernels) {
  map_to_libdevice(m);
  bool needs = false;
  for (const llvm::Function& f : m)
    if (f.isDeclaration() && f.getName().starts_with("__nv_") && !f.use_empty()) needs = true;
  if (needs) {
    llvm::MemoryBufferRef buf(ld.bytes, ld.path);
    auto lazy = llvm::getLazyBitcodeModule(buf, m.getContext());
    if (!lazy) {
      std::string err;
      llvm::raw_string_ostream os(err);
      os << lazy.takeError();
      throw std::runtime_error("lazyjit: CUDA target: cannot read libdevice " + ld.path + ": " + err);
    }
    std::unique_ptr<llvm::Module> lib = std::move(*lazy);
    // libdevice says "nvptx64-nvidia-gpulibs" and an older data layout: take
    // ours, as clang does, so the linker has nothing to warn about.
    lib->setTargetTriple(m.getTargetTriple());
    lib->setDataLayout(m.getDataLayout());
    if (llvm::Linker::linkModules(m, std::move(lib), llvm::Linker::Flags::LinkOnlyNeeded))
      throw std::runtime_error("lazyjit: CUDA target: linking libdevice " + ld.path + " failed");
  }
  if (!m.getModuleFlag("nvvm-reflect-ftz"))
    m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
  std::unordered_set<std::string> names(kernels.begin(), kernels.end());
  auto annotated = annotated_kernels(m);
  llvm::internalizeModule(m, [&](const llvm::GlobalValue& gv) {
    auto* f = llvm::dyn_cast<llvm::Function>(&gv);
    return f && is_kernel(*f, names, annotated);
  });
  check_lowerable(m, "after linking libdevice");
}

void check_lowerable(const llvm::Module& m, const std::string& when) {
  std::set<std::string> bad;
  for (const llvm::Function& f : m) {
    if (!f.isDeclaration() || f.use_empty()) continue;
    if (f.isIntrinsic()) {
      if (unlowerable(f.getIntrinsicID())) bad.insert(f.getName().str());
      continue;
    }
    if (f.getName() == "__nvvm_reflect") continue;  // NVVMReflect folds it (codegen runs it too)
    bad.insert(f.getName().str());
  }
  if (bad.empty()) return;
  std::string list;
  for (const std::string& b : bad) list += (list.empty() ? "" : ", ") + b;
  throw std::runtime_error("lazyjit: CUDA target: " + when + ", the kernel still calls " + list +
                           ": neither libdevice nor the NVPTX back end defines it (ptxas would refuse the PTX)");
}

}  // namespace lazyjit::lowering::cuda
