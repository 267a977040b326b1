// The CUDA target without a GPU (CudaOptions::arch named): plans compiled to
// PTX and cubins (ptxas from the nvidia-cuda-nvcc wheel, libdevice from the
// nvidia-nvvm wheel: scripts/setup.sh installs both), the kernel archive of
// object() and load(), and libdevice's mapping on hand-written IR. A missing
// toolkit fails these tests: it never skips them.
#include <gtest/gtest.h>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>

#include <cstring>
#include <map>
#include <regex>
#include <stdexcept>

#include "targets/cuda/driver.h"
#include "targets/cuda/kernel_archive.h"
#include "graph_ir/bytes.h"
#include "targets/cuda/libdevice.h"
#include "targets/cuda/ptx.h"
#include "targets/cuda/ptxas.h"
#include "targets/cuda/toolkit.h"
#include "lowering/lower.h"
#include "lowering/plan.h"
#include "lowering/target.h"
#include "targets/cuda/cuda_target.h"
#include "tests/lowering/test_support.h"
#include "targets/cuda/device_kernel.h"

namespace lazyjit::lowering {
namespace {

using ir::Attr;
using ir::OpKind;
using namespace test;

constexpr const char* kSetup = " (run scripts/setup.sh: it installs the nvidia-cuda-nvcc and nvidia-nvvm wheels)";

std::unique_ptr<Target> cuda_target(const std::string& arch) {
  CudaOptions o;
  o.arch = arch;
  try {
    return make_cuda_target(o);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "make_cuda_target(" << arch << "): " << e.what() << kSetup;
    return nullptr;
  }
}

// One unit of the "LJCU" archive (targets/cuda/kernel_archive.h), in the fields the
// tests below check.
struct Unit {
  bool generic;
  std::string symbol;
  uint8_t grid;
  int32_t block, shared, elements_per_thread, rows_per_block;
  std::string ptx, cubin;
  bool operator==(const Unit&) const = default;
};
struct Archive {
  std::string arch;
  uint32_t isa;
  std::vector<Unit> units;
  std::vector<uint32_t> of;
  bool operator==(const Archive&) const = default;
};
// Through the reader the target and lazyjit-cache share.
Archive read_archive(const std::string& object) {
  formats::CudaArchive f = formats::read_cuda_archive(object);
  Archive a{f.arch, f.ptx_isa, {}, f.kernel_units};
  for (const formats::CudaUnit& u : f.units)
    a.units.push_back({u.generic, u.symbol, static_cast<uint8_t>(u.launch.grid), u.launch.block,
                       u.launch.shared_bytes, u.launch.elements_per_thread, u.launch.rows_per_block, u.ptx, u.cubin});
  return a;
}
// The same bytes read independently, field by field as the format is
// documented, not through the shared reader: one check that the layout holds.
Archive read_layout(const std::string& object) {
  ir::ByteReader r(object);
  r.expect_header("LJCU", 3, "CUDA kernels");
  Archive a;
  a.arch = r.str();
  a.isa = r.u32();
  uint32_t n = r.u32();
  for (uint32_t i = 0; i < n; ++i) {
    Unit u;
    r.u64();
    r.u64();
    u.generic = r.boolean();
    u.symbol = r.str();
    u.grid = r.u8();
    u.block = r.i32();
    u.shared = r.i32();
    u.elements_per_thread = r.i32();
    u.rows_per_block = r.i32();
    u.ptx = r.str();
    u.cubin = r.str();
    a.units.push_back(std::move(u));
  }
  a.of = r.u32s();
  r.expect_end("CUDA kernels");
  return a;
}

// The SM a cubin is for: ELF e_machine EM_CUDA (190), the SM in e_flags (bits
// 8-15 since CUDA 12.8's ELF ABI, bits 0-7 before).
int cubin_sm(const std::string& cubin) {
  if (cubin.size() < 64 || cubin.compare(0, 4, "\x7f" "ELF") != 0) return -1;
  uint16_t machine;
  uint32_t flags;
  std::memcpy(&machine, cubin.data() + 18, 2);
  std::memcpy(&flags, cubin.data() + 48, 4);
  if (machine != 190) return -2;
  int hi = (flags >> 8) & 0xff, lo = flags & 0xff;
  return hi >= 50 ? hi : lo;
}

std::string what_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Compiles `g` on `t`, checks what every CUDA compile must give, returns the object.
struct Compiled {
  Plan plan;
  std::unique_ptr<CompiledCode> code;
  std::string object;
  Archive archive;
};
Compiled compile_and_check(Target& t, const ir::Graph& g, const std::string& arch, Shapes shapes = Shapes::Auto) {
  Compiled c;
  EXPECT_EQ(g.verify(), "");
  c.plan = plan_graph(g);
  EXPECT_FALSE(c.plan.kernels.empty());
  try {
    c.code = t.compile(g, c.plan, shapes);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "compile for " << arch << ": " << e.what() << "\n" << c.plan.str(g);
    return c;
  }
  const size_t n = c.plan.kernels.size();
  EXPECT_EQ(c.plan.kernel_fns.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(c.plan.kernel_fns[i], nullptr);
  }
  c.object = c.code->object();
  c.archive = read_archive(c.object);
  // Each kernel's code is bytes, not loaded anywhere: the cubin its archive
  // unit holds, its symbol and launch (the executor loads it at its first run).
  const formats::CudaArchive units = formats::read_cuda_archive(c.object);
  for (size_t i = 0; i < n && units.kernel_units.size() == n; ++i) {
    const DeviceKernel* dk = device_kernel(*c.code, i);
    if (!dk) {
      ADD_FAILURE() << "kernel " << i << ": no device kernel";
      continue;
    }
    const formats::CudaUnit& u = units.units[units.kernel_units[i]];
    EXPECT_EQ(std::string(dk->image), u.cubin) << i;
    EXPECT_EQ(dk->symbol, u.symbol) << i;
    EXPECT_EQ(static_cast<int>(dk->grid), static_cast<int>(u.launch.grid)) << i;
    EXPECT_EQ(dk->block, u.launch.block) << i;
  }
  EXPECT_EQ(c.archive.arch, arch);
  const int sm = std::stoi(arch.substr(3));
  // PTX 8.1 on sm_70+: kernel parameters up to 32,764 bytes there.
  const uint32_t isa = sm >= 70 ? 81 : 78;
  EXPECT_EQ(c.archive.isa, isa);
  EXPECT_EQ(c.archive.of.size(), n);
  for (const Unit& u : c.archive.units) {
    EXPECT_NE(u.ptx.find(".entry " + u.symbol), std::string::npos) << u.ptx.substr(0, 2000);
    EXPECT_NE(u.ptx.find(".target " + arch), std::string::npos);
    EXPECT_NE(u.ptx.find(".version " + std::to_string(isa / 10) + "." + std::to_string(isa % 10)), std::string::npos);
    // libdevice linked and inlined: nothing left to resolve
    EXPECT_EQ(u.ptx.find(".extern .func"), std::string::npos) << u.ptx;
    EXPECT_EQ(u.ptx.find("__nv_"), std::string::npos) << "libdevice not inlined";
    EXPECT_EQ(u.ptx.find("__nvvm_reflect"), std::string::npos);
    EXPECT_EQ(u.cubin.compare(0, 4, "\x7f" "ELF"), 0) << "cubin is no ELF";
    EXPECT_EQ(cubin_sm(u.cubin), sm) << "ptxas ran for another arch";
    // Row kernels take 1 element a thread; element kernels 1, 2, 4, 8 or 16.
    if (u.grid == 1) EXPECT_EQ(u.elements_per_thread, 1);
    if (u.grid == 0) EXPECT_EQ(u.rows_per_block, 1);
    EXPECT_TRUE(u.elements_per_thread >= 1 && u.elements_per_thread <= 16 &&
                (u.elements_per_thread & (u.elements_per_thread - 1)) == 0)
        << u.elements_per_thread;
  }
  // Each kernel follows its plan's launch shape (launch_shape.h): its block is
  // the archive's and the PTX's .maxntid; warp rows run block / 32 rows a block.
  for (size_t i = 0; i < n && i < c.archive.of.size(); ++i) {
    const FusedKernel& k = c.plan.kernels[i];
    const Unit& u = c.archive.units.at(c.archive.of[i]);
    EXPECT_EQ(u.block, k.launch.block) << k.name;
    EXPECT_NE(u.ptx.find(".maxntid " + std::to_string(k.launch.block) + ", 1, 1"), std::string::npos) << k.name;
    EXPECT_EQ(u.rows_per_block, k.row ? k.launch.rows_per_block() : 1) << k.name;
    if (k.row && k.launch.rows == LaunchShape::Rows::Warp) {
      EXPECT_EQ(u.ptx.find("bar.sync"), std::string::npos) << k.name << ": warp rows need no barrier";
      EXPECT_EQ(u.ptx.find(".shared"), std::string::npos) << k.name << ": warp rows need no shared memory";
    }
  }
  // The PTX dump: one section per plan kernel.
  const std::string& a = c.code->assembly();
  EXPECT_NE(a.find("// ==== " + c.plan.kernels[0].name), std::string::npos) << a.substr(0, 500);
  EXPECT_NE(a.find(".entry"), std::string::npos);
  return c;
}

// x -> exp, tanh, erf, pow, log1p, expm1, sin, cos, log, gelu, sigmoid chain.
ir::Graph math_chain(DType t) {
  ir::Graph g;
  auto ty = tt(t, {4, 1000});
  ValueId x = g.add_input(ty);
  ValueId y = g.add_input(ty);
  auto un = [&](OpKind k, ValueId a) { return g.add_node1(k, {a}, {dt(t)}, ty); };
  auto bin = [&](OpKind k, ValueId a, ValueId b) { return g.add_node1(k, {a, b}, {dt(t)}, ty); };
  ValueId v = un(OpKind::Exp, x);
  v = bin(OpKind::Add, v, un(OpKind::Tanh, y));
  v = bin(OpKind::Mul, v, un(OpKind::Erf, x));
  v = bin(OpKind::Pow, v, y);
  v = bin(OpKind::Add, v, un(OpKind::Log1p, un(OpKind::Abs, y)));
  v = bin(OpKind::Sub, v, un(OpKind::Expm1, x));
  v = bin(OpKind::Add, un(OpKind::Sin, v), un(OpKind::Cos, y));
  v = bin(OpKind::Add, v, un(OpKind::Log, un(OpKind::Abs, x)));
  v = bin(OpKind::Add, un(OpKind::Gelu, v), un(OpKind::Sigmoid, y));
  v = bin(OpKind::Remainder, v, y);
  g.add_output(v);
  return g;
}

// softmax over the last dim of [rows, cols].
ir::Graph softmax_graph(DType t, int64_t rows, int64_t cols) {
  ir::Graph g;
  auto full = tt(t, {rows, cols}), row = tt(t, {rows, 1});
  ValueId x = g.add_input(full);
  Attr red{std::vector<int64_t>{1}};
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(t), red}, row);
  ValueId d = g.add_node1(OpKind::Sub, {x, m}, {dt(t)}, full);
  ValueId e = g.add_node1(OpKind::Exp, {d}, {dt(t)}, full);
  ValueId s = g.add_node1(OpKind::ReduceSum, {e}, {dt(t), red}, row);
  g.add_output(g.add_node1(OpKind::Div, {e, s}, {dt(t)}, full));
  return g;
}

// y = (x - mean) * rsqrt(var + eps) * w + b, with mean and rstd as outputs.
ir::Graph layer_norm_graph(int64_t rows, int64_t cols) {
  const DType t = DType::Float32;
  ir::Graph g;
  auto full = tt(t, {rows, cols}), row = tt(t, {rows, 1}), col = tt(t, {cols});
  ValueId x = g.add_input(full);
  ValueId w = g.add_input(col);
  ValueId b = g.add_input(col);
  ValueId inv = g.add_scalar(DType::Float64, true);
  ValueId eps = g.add_scalar(DType::Float64, true);
  Attr red{std::vector<int64_t>{1}};
  ValueId sum = g.add_node1(OpKind::ReduceSum, {x}, {dt(t), red}, row);
  ValueId mean = g.add_node1(OpKind::Mul, {sum, inv}, {dt(t)}, row);
  ValueId d = g.add_node1(OpKind::Sub, {x, mean}, {dt(t)}, full);
  ValueId sq = g.add_node1(OpKind::Mul, {d, d}, {dt(t)}, full);
  ValueId ss = g.add_node1(OpKind::ReduceSum, {sq}, {dt(t), red}, row);
  ValueId var = g.add_node1(OpKind::Mul, {ss, inv}, {dt(t)}, row);
  ValueId rstd = g.add_node1(OpKind::Rsqrt, {g.add_node1(OpKind::Add, {var, eps}, {dt(t)}, row)}, {dt(t)}, row);
  ValueId y = g.add_node1(OpKind::Mul, {d, rstd}, {dt(t)}, full);
  y = g.add_node1(OpKind::Add, {g.add_node1(OpKind::Mul, {y, w}, {dt(t)}, full), b}, {dt(t)}, full);
  g.add_output(y);
  g.add_output(mean);
  g.add_output(rstd);
  return g;
}

// float32 -> half and bfloat16 (and back to float32 through a tanh).
ir::Graph casts_graph() {
  ir::Graph g;
  ValueId x = g.add_input(tt(DType::Float32, {3, 777}));
  for (DType to : {DType::Float16, DType::BFloat16}) {
    ValueId h = g.add_node1(OpKind::Cast, {x}, {dt(DType::Float32)}, tt(to, {3, 777}));
    g.add_output(h);
    g.add_output(g.add_node1(OpKind::Tanh, {h}, {dt(DType::Float32)}, tt(DType::Float32, {3, 777})));
  }
  return g;
}

class CudaTarget : public ::testing::TestWithParam<std::string> {};

TEST(CudaToolkit, FindsPtxasAndLibdevice) {
  std::string looked;
  std::string ptxas = cuda::find_ptxas(CudaOptions{}, &looked);
  ASSERT_FALSE(ptxas.empty()) << "ptxas not found; looked in " << looked << kSetup;
  std::string version;
  ASSERT_NO_THROW(version = cuda::ptxas_version(ptxas));
  EXPECT_TRUE(std::regex_match(version, std::regex("[0-9]+\\.[0-9]+\\.[0-9]+"))) << version;
  std::string libdevice;
  ASSERT_NO_THROW(libdevice = cuda::find_libdevice(CudaOptions{})) << kSetup;
  EXPECT_EQ(cuda::load_libdevice(libdevice)->hash.size(), 12u);
}

TEST(CudaToolkit, ExplicitPathsMustExist) {
  CudaOptions o;
  o.libdevice = "/nonexistent/libdevice.10.bc";
  EXPECT_NE(error_of([&] { cuda::find_libdevice(o); }).find("/nonexistent/libdevice.10.bc"), std::string::npos);
  o.ptxas = "/nonexistent/ptxas";
  EXPECT_NE(error_of([&] { cuda::find_ptxas(o); }).find("/nonexistent/ptxas"), std::string::npos);
  // make_cuda_target says which file it misses
  o.arch = "sm_90";
  EXPECT_NE(error_of([&] { make_cuda_target(o); }).find("/nonexistent/"), std::string::npos);
}

TEST(CudaToolkit, ArchitecturesLlvmDoesNotKnowAreRefused) {
  CudaOptions o;
  o.arch = "sm_100";
  EXPECT_NE(error_of([&] { make_cuda_target(o); }).find("cannot make code for sm_100"), std::string::npos);
  o.arch = "volta";
  EXPECT_NE(error_of([&] { make_cuda_target(o); }).find("not a GPU architecture"), std::string::npos);
  o.arch = "";
  // Without a GPU there is no current device to make code for.
  if (!cuda_driver::available())
    EXPECT_NE(error_of([&] { make_cuda_target(o); }).find("arch is empty and no GPU is usable"), std::string::npos);
  else
    EXPECT_EQ(error_of([&] { make_cuda_target(o); }), "") << "the current device's arch";
}

TEST(CudaLibdevice, MapsIntrinsicsAndLibmCallsAndInlines) {
  llvm::LLVMContext ctx;
  auto tm = cuda::make_target_machine("sm_90");
  auto m = cuda::new_module(ctx, *tm, "t");
  llvm::IRBuilder<> b(ctx);
  auto* f32 = b.getFloatTy();
  auto* f64 = b.getDoubleTy();
  auto* ptr = llvm::PointerType::get(ctx, 1);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr}, false),
                                    llvm::Function::ExternalLinkage, "k", *m);
  fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  llvm::Value* x = b.CreateLoad(f32, fn->getArg(0));
  llvm::Value* xd = b.CreateLoad(f64, fn->getArg(1));
  auto libm = [&](const char* name, llvm::Value* v) {
    return b.CreateCall(m->getOrInsertFunction(name, v->getType(), v->getType()), {v});
  };
  llvm::Value* r = b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
  r = b.CreateFAdd(r, b.CreateUnaryIntrinsic(llvm::Intrinsic::sin, x));
  r = b.CreateFAdd(r, b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, r));
  r = b.CreateFAdd(r, libm("expm1f", x));
  r = b.CreateFAdd(r, libm("erff", r));
  // half through float, a <2 x float> lane by lane
  llvm::Value* h = b.CreateFPTrunc(r, b.getHalfTy());
  r = b.CreateFAdd(r, b.CreateFPExt(b.CreateUnaryIntrinsic(llvm::Intrinsic::log, h), f32));
  auto* v2 = llvm::FixedVectorType::get(f32, 2);
  llvm::Value* v = b.CreateInsertElement(b.CreateInsertElement(llvm::PoisonValue::get(v2), r, uint64_t{0}), x, 1);
  v = b.CreateUnaryIntrinsic(llvm::Intrinsic::cos, v);
  r = b.CreateFAdd(b.CreateExtractElement(v, uint64_t{0}), b.CreateExtractElement(v, 1));
  b.CreateStore(r, fn->getArg(0));
  llvm::Value* d = libm("tanh", xd);
  d = b.CreateFAdd(d, libm("log1p", d));
  d = b.CreateFAdd(d, b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, d));
  b.CreateStore(d, fn->getArg(1));
  b.CreateRetVoid();
  ASSERT_FALSE(llvm::verifyModule(*m, &llvm::errs()));

  EXPECT_EQ(cuda::map_to_libdevice(*m), 10);  // 7 float (cos on <2 x float> once), 3 double
  for (const char* name : {"__nv_expf", "__nv_sinf", "__nv_powf", "__nv_expm1f", "__nv_erff", "__nv_logf",
                           "__nv_cosf", "__nv_tanh", "__nv_log1p", "__nv_exp"})
    EXPECT_NE(m->getFunction(name), nullptr) << name;
  for (const char* gone : {"expm1f", "erff", "tanh", "log1p", "llvm.exp.f32", "llvm.cos.v2f32"})
    EXPECT_EQ(m->getFunction(gone), nullptr) << gone;
  ASSERT_FALSE(llvm::verifyModule(*m, &llvm::errs()));

  auto ld = cuda::load_libdevice(cuda::find_libdevice(CudaOptions{}));
  ASSERT_NO_THROW(cuda::link_libdevice(*m, *ld, {"k"}));
  const auto* ftz = llvm::mdconst::extract_or_null<llvm::ConstantInt>(m->getModuleFlag("nvvm-reflect-ftz"));
  ASSERT_NE(ftz, nullptr);
  EXPECT_EQ(ftz->getZExtValue(), 0u);
  EXPECT_TRUE(m->getFunction("__nv_expf") && !m->getFunction("__nv_expf")->isDeclaration());
  EXPECT_TRUE(m->getFunction("__nv_expf")->hasLocalLinkage());
  EXPECT_FALSE(m->getFunction("k")->hasLocalLinkage());
  cuda::optimize(*m, *tm, 3);
  // NVVMReflect ran in the pipeline (the NVPTX target machine's callbacks),
  // everything of libdevice was inlined and dropped
  for (const llvm::Function& f : *m)
    if (!f.isIntrinsic()) EXPECT_EQ(f.getName().str(), "k") << "left after O3";
  ASSERT_NO_THROW(cuda::check_lowerable(*m, "after optimization"));
  std::string ptx = cuda::emit_ptx(*m, *tm);
  EXPECT_NE(ptx.find(".visible .entry k("), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find(".func"), std::string::npos) << ptx;
  std::string cubin = cuda::run_ptxas(cuda::find_ptxas(CudaOptions{}), "sm_90", ptx, 3, "test kernel");
  EXPECT_EQ(cubin_sm(cubin), 90);
}

TEST(CudaLibdevice, UnresolvedCallsAreErrorsNamingTheFunction) {
  llvm::LLVMContext ctx;
  auto tm = cuda::make_target_machine("sm_80");
  auto m = cuda::new_module(ctx, *tm, "t");
  llvm::IRBuilder<> b(ctx);
  auto* ptr = llvm::PointerType::get(ctx, 1);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {ptr}, false),
                                    llvm::Function::ExternalLinkage, "k", *m);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  llvm::Value* x = b.CreateLoad(b.getFloatTy(), fn->getArg(0));
  x = b.CreateCall(m->getOrInsertFunction("my_undefined_mathf", x->getType(), x->getType()), {x});
  b.CreateStore(x, fn->getArg(0));
  b.CreateRetVoid();
  auto ld = cuda::load_libdevice(cuda::find_libdevice(CudaOptions{}));
  std::string err = error_of([&] { cuda::link_libdevice(*m, *ld, {"k"}); });
  EXPECT_NE(err.find("my_undefined_mathf"), std::string::npos) << err;
}

TEST(CudaPtxas, ErrorsQuotePtxas) {
  std::string ptxas = cuda::find_ptxas(CudaOptions{});
  ASSERT_FALSE(ptxas.empty()) << kSetup;
  std::string err = error_of([&] {
    cuda::run_ptxas(ptxas, "sm_90", ".version 7.8\n.target sm_90\n.address_size 64\nthis is no ptx\n", 3, "kernel x");
  });
  EXPECT_NE(err.find("ptxas"), std::string::npos) << err;
  EXPECT_NE(err.find("kernel x"), std::string::npos) << err;
  EXPECT_NE(err.find("syntax error"), std::string::npos) << "ptxas's own message quoted: " << err;
}

TEST_P(CudaTarget, ElementwiseMathFloat32AndFloat64) {
  const std::string arch = GetParam();
  auto t = cuda_target(arch);
  ASSERT_TRUE(t);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    ir::Graph g = math_chain(dtype);
    Compiled c = compile_and_check(*t, g, arch);
    ASSERT_TRUE(c.code);
    EXPECT_EQ(c.code->llvm_compiles, 1);
    EXPECT_EQ(c.code->generic_compiles, 1);
    EXPECT_TRUE(c.code->all_generic());
    ASSERT_EQ(c.archive.units.size(), 1u);
    EXPECT_EQ(c.archive.units[0].grid, 0);  // Grid::Elements
    // Contiguous [4, 1000] (one dim after coalescing): 16-byte chunks.
    EXPECT_EQ(c.archive.units[0].elements_per_thread, dtype == DType::Float32 ? 4 : 2);
    EXPECT_NE(c.archive.units[0].ptx.find(dtype == DType::Float32 ? "ld.global.nc.v4.f32" : "ld.global.nc.v2.f64"),
              std::string::npos);
    // IR kept (keep_llvm_ir is on by default): the mapped calls before O3
    const std::string& ir = c.code->llvm_ir();
    EXPECT_NE(ir.find("; ---- after optimization"), std::string::npos);
    // The same plan again: every kernel from the kernel cache.
    Plan again = plan_graph(g);
    auto code2 = t->compile(g, again);
    EXPECT_EQ(code2->llvm_compiles, 0);
    EXPECT_EQ(code2->kernel_hits, 1);
    // Exact sizes are other code.
    Plan exact = plan_graph(g);
    auto code3 = t->compile(g, exact, Shapes::Off);
    EXPECT_EQ(code3->llvm_compiles, 1);
    EXPECT_FALSE(code3->all_generic());
  }
}

TEST_P(CudaTarget, RowKernelsSoftmaxAndLayerNorm) {
  const std::string arch = GetParam();
  auto t = cuda_target(arch);
  ASSERT_TRUE(t);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Compiled c = compile_and_check(*t, softmax_graph(dtype, 64, 1000), arch);
    ASSERT_TRUE(c.code);
    ASSERT_EQ(c.archive.units.size(), 1u);
    EXPECT_EQ(c.archive.units[0].grid, 1);  // Grid::Rows
    EXPECT_NE(c.archive.units[0].ptx.find("shfl.sync"), std::string::npos) << "a warp reduction";
  }
  Compiled ln = compile_and_check(*t, layer_norm_graph(32, 768), arch);
  ASSERT_TRUE(ln.code);
  ASSERT_EQ(ln.archive.units.size(), 1u);
  EXPECT_EQ(ln.archive.units[0].grid, 1);
}

TEST_P(CudaTarget, CastsToHalfAndBFloat16) {
  const std::string arch = GetParam();
  auto t = cuda_target(arch);
  ASSERT_TRUE(t);
  Compiled c = compile_and_check(*t, casts_graph(), arch);
  ASSERT_TRUE(c.code);
  std::string all;
  for (const Unit& u : c.archive.units) all += u.ptx;
  EXPECT_NE(all.find("cvt.rn.f16.f32"), std::string::npos);
  // bfloat16 is rounded in integer ops (element/dtype_emitter.cpp), stored as 16 bits
  EXPECT_TRUE(std::regex_search(all, std::regex("st\\.global\\.[ub]16"))) << all;
}

// Elementwise kernels over contiguous tensors load and store 16 bytes a thread
// (kernel_emitter.h), through O3, libdevice and ptxas for both archs.
TEST_P(CudaTarget, ContiguousElementKernelsAreVectorized) {
  const std::string arch = GetParam();
  auto t = cuda_target(arch);
  ASSERT_TRUE(t);
  struct Case {
    DType t;
    int32_t lanes;
    std::regex load, store;
  };
  const std::vector<Case> cases = {
      {DType::Float32, 4, std::regex("ld\\.global\\.nc\\.v4\\.f32"), std::regex("st\\.global\\.v4\\.f32")},
      {DType::Float16, 8, std::regex("ld\\.global\\.nc\\.v4\\.[bu]32"), std::regex("st\\.global\\.v4\\.[bu]32")},
      {DType::BFloat16, 8, std::regex("ld\\.global\\.nc\\.v4\\.[bu]32"), std::regex("st\\.global\\.v4\\.[bu]32")},
  };
  for (const Case& c : cases)
    for (Shapes shapes : {Shapes::Auto, Shapes::Off}) {
      SCOPED_TRACE(std::string(ir::dtype_name(c.t)) + (shapes == Shapes::Off ? " exact" : " generic"));
      ir::Graph g;
      auto ty = tt(c.t, {3, 1001});  // 3003 elements: a tail after the last chunk
      ValueId x = g.add_input(ty);
      ValueId y = g.add_input(ty);
      ValueId v = g.add_node1(OpKind::Tanh, {g.add_node1(OpKind::Mul, {x, y}, {dt(c.t)}, ty)}, {dt(c.t)}, ty);
      g.add_output(g.add_node1(OpKind::Add, {v, x}, {dt(c.t)}, ty));
      Compiled cc = compile_and_check(*t, g, arch, shapes);
      ASSERT_TRUE(cc.code);
      ASSERT_EQ(cc.archive.units.size(), 1u);
      const Unit& u = cc.archive.units[0];
      EXPECT_EQ(u.grid, 0);
      EXPECT_EQ(u.elements_per_thread, c.lanes);
      EXPECT_TRUE(std::regex_search(u.ptx, c.load)) << u.ptx;
      EXPECT_TRUE(std::regex_search(u.ptx, c.store)) << u.ptx;
      // The scalar loop for the tail and misaligned buffers.
      EXPECT_TRUE(std::regex_search(u.ptx, std::regex(c.t == DType::Float32 ? "ld\\.global\\.nc\\.f32"
                                                                             : "ld\\.global\\.nc\\.[bu]16")))
          << u.ptx;
    }
  // A transposed input: one element a thread, no vector access.
  ir::Graph g;
  ValueId x = g.add_input(ir::TensorType{DType::Float32, {64, 48}, {1, 64}});
  ValueId y = g.add_input(tt(DType::Float32, {64, 48}));
  g.add_output(g.add_node1(OpKind::Add, {x, y}, {dt(DType::Float32)}, tt(DType::Float32, {64, 48})));
  Compiled cc = compile_and_check(*t, g, arch);
  ASSERT_TRUE(cc.code);
  ASSERT_EQ(cc.archive.units.size(), 1u);
  EXPECT_EQ(cc.archive.units[0].elements_per_thread, 1);
  EXPECT_EQ(cc.archive.units[0].ptx.find(".v4."), std::string::npos) << cc.archive.units[0].ptx;
}

TEST_P(CudaTarget, ObjectRoundTripsThroughLoad) {
  const std::string arch = GetParam();
  auto t = cuda_target(arch);
  ASSERT_TRUE(t);
  // Two equal kernels (compiled once, one unit) and a row kernel.
  ir::Graph g;
  auto ty = tt(DType::Float32, {8, 300});
  ValueId x = g.add_input(ty);
  ValueId y = g.add_input(tt(DType::Float32, {300, 8}));
  g.add_output(g.add_node1(OpKind::Tanh, {x}, {dt(DType::Float32)}, ty));
  ValueId yt = g.add_node1(OpKind::Tanh, {y}, {dt(DType::Float32)}, tt(DType::Float32, {300, 8}));
  g.add_output(yt);
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(DType::Float32), Attr{std::vector<int64_t>{1}}},
                          tt(DType::Float32, {8, 1}));
  g.add_output(g.add_node1(OpKind::Sub, {x, m}, {dt(DType::Float32)}, ty));
  ValueId w = g.add_input(tt(DType::Float32, {30, 7}));  // tanh again: y's kernel at other sizes
  g.add_output(g.add_node1(OpKind::Tanh, {w}, {dt(DType::Float32)}, tt(DType::Float32, {30, 7})));
  ValueId z = g.add_input(tt(DType::Float64, {5}));
  g.add_output(g.add_node1(OpKind::Expm1, {z}, {dt(DType::Float64)}, tt(DType::Float64, {5})));
  Compiled c = compile_and_check(*t, g, arch);
  ASSERT_TRUE(c.code);
  const size_t n = c.plan.kernels.size();
  ASSERT_GE(n, 4u) << c.plan.str(g);
  EXPECT_LT(c.archive.units.size(), n) << "equal kernels share one unit";
  EXPECT_GE(c.code->llvm_compiles, 3) << "compiled in parallel (oneTBB)";
  EXPECT_EQ(c.code->kernel_hits, static_cast<int>(n) - c.code->llvm_compiles);
  EXPECT_NE(c.code->assembly().find("the same code as"), std::string::npos);

  auto fresh = cuda_target(arch);  // no kernel cache: every unit from the object
  ASSERT_TRUE(fresh);
  Plan p2 = plan_graph(g);
  std::unique_ptr<CompiledCode> loaded;
  try {
    loaded = fresh->load(c.object, p2);
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  EXPECT_EQ(p2.kernel_fns.size(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(device_kernel(*loaded, i));
    EXPECT_EQ(device_kernel(*loaded, i)->image, device_kernel(*c.code, i)->image) << "the same cubin";
    EXPECT_EQ(device_kernel(*loaded, i)->symbol, device_kernel(*c.code, i)->symbol);
  }
  EXPECT_EQ(loaded->object(), c.object) << "load(object()).object() == object()";
  EXPECT_EQ(loaded->assembly(), c.code->assembly()) << "the same PTX sections";
  EXPECT_EQ(read_layout(c.object), c.archive) << "the bytes are laid out as documented";
  Archive back = read_archive(loaded->object());
  ASSERT_EQ(back.units.size(), c.archive.units.size());
  for (size_t u = 0; u < back.units.size(); ++u) EXPECT_EQ(back.units[u].ptx, c.archive.units[u].ptx);
  EXPECT_EQ(loaded->kernel_hits, 0);
  // On the target that compiled it, the kernels are found in its cache.
  Plan p3 = plan_graph(g);
  auto again = t->load(c.object, p3);
  EXPECT_EQ(again->kernel_hits, static_cast<int>(c.archive.units.size()));
}

TEST_P(CudaTarget, CorruptArchivesAndOtherArchsAreRefused) {
  const std::string arch = GetParam();
  const std::string other = arch == "sm_90" ? "sm_80" : "sm_90";
  auto t = cuda_target(arch);
  auto o = cuda_target(other);
  ASSERT_TRUE(t && o);
  ir::Graph g = math_chain(DType::Float32);
  Plan p = plan_graph(g);
  std::string object = o->compile(g, p)->object();
  Plan q = plan_graph(g);
  std::string err = error_of([&] { t->load(object, q); });
  EXPECT_NE(err.find("compiled for " + other), std::string::npos) << err;
  EXPECT_NE(err.find("makes " + arch), std::string::npos) << err;

  Plan mine = plan_graph(g);
  object = t->compile(g, mine)->object();
  t->clear_kernels();  // so load reads every unit, not the cache
  for (size_t cut : {size_t{3}, size_t{20}, object.size() / 2, object.size() - 1}) {
    Plan r = plan_graph(g);
    std::string e = error_of([&] { t->load(object.substr(0, cut), r); });
    EXPECT_NE(e.find(cut < 4 ? "not a CUDA kernels archive (LJCU)" : "CUDA kernels archive (LJCU) is damaged: "),
              std::string::npos)
        << "cut at " << cut << ": " << e;
  }
  // Archives of other format versions (1: before elements per thread, 2:
  // before rows per block): refused, not misread.
  for (char version : {1, 2}) {
    std::string old = object;
    old[4] = version;
    Plan r1 = plan_graph(g);
    std::string e1 = error_of([&] { t->load(old, r1); });
    EXPECT_NE(e1.find("CUDA kernels archive (LJCU) has format version " + std::to_string(version) +
                      "; this build reads version 3"),
              std::string::npos)
        << e1;
  }
  std::string other_tag = object;
  other_tag.replace(0, 4, "LJKO");
  Plan r = plan_graph(g);
  EXPECT_NE(error_of([&] { t->load(other_tag, r); }).find("CUDA kernels"), std::string::npos);
  // A cubin that is no ELF.
  std::string bad = object;
  size_t at = bad.find("\x7f" "ELF");
  ASSERT_NE(at, std::string::npos);
  bad[at + 1] = 'X';
  Plan s = plan_graph(g);
  EXPECT_NE(error_of([&] { t->load(bad, s); }).find("no cubin"), std::string::npos);
  // Another plan (more kernels than the object has).
  Plan two = plan_graph(softmax_graph(DType::Float32, 4, 4));
  two.kernels.push_back(two.kernels[0]);
  EXPECT_NE(error_of([&] { t->load(object, two); }).find("plan has 2"), std::string::npos);
}

TEST(CudaTargetFingerprint, NamesArchPtxAndToolkit) {
  auto a = cuda_target("sm_80");
  auto b = cuda_target("sm_90");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->fingerprint(), b->fingerprint());
  std::string fp = b->fingerprint();
  for (const char* part : {"target cuda;arch sm_90;", "ptx 8.1;", "llvm 19", ";libdevice ", ";ptxas ", ";driver none;", ";rev "})
    EXPECT_NE(fp.find(part), std::string::npos) << part << " in " << fp;
  EXPECT_EQ(fp.find(";rev "), fp.rfind(";rev "));
}

// 1 + 2 * `fmas` float32 inputs at rank 4, v = fma(v, a, b) down a chain (two
// loads a node: a plan's kernel holds at most 64 nodes), broadcast ([2,1,4,1]
// and [1,3,1,5] into [2,3,4,5]) so that no dims coalesce: one kernel whose
// parameters take 8 bytes a load pointer and 40 bytes a load's strides and
// offset in its dims, ~4.9 KB for 101 loads.
ir::Graph many_loads_graph(int fmas) {
  ir::Graph g;
  const DType f = DType::Float32;
  ValueId v = g.add_input(tt(f, {2, 1, 4, 1}));
  for (int i = 0; i < fmas; ++i) {
    ValueId a = g.add_input(tt(f, {1, 3, 1, 5}));
    ValueId b = g.add_input(tt(f, {2, 1, 4, 1}));
    v = g.add_node1(OpKind::Fma, {v, a, b}, {dt(f)}, tt(f, {2, 3, 4, 5}));
  }
  g.add_output(v);
  return g;
}

// PTX 7.8 keeps kernel parameters to 4,096 bytes: ptxas refused such a kernel
// ("Entry function ... uses too much parameter space"). PTX 8.1 on sm_70+
// allows 32,764; an older arch refuses the kernel before compiling it.
TEST(CudaTargetParams, AHundredLoadsAtRankFourAssembleOnSm75AndLater) {
  ir::Graph g = many_loads_graph(50);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  ASSERT_EQ(p.kernels[0].sizes.size(), 4u) << p.str(g);
  ASSERT_GE(p.kernels[0].loads.size(), 100u);
  ASSERT_GT(8 * (kernel_dims(p.kernels[0]).size() + p.kernels[0].loads.size()), 4096u);
  for (const std::string arch : {"sm_75", "sm_90"}) {
    auto t = cuda_target(arch);
    ASSERT_TRUE(t);
    Compiled c = compile_and_check(*t, g, arch);
    ASSERT_TRUE(c.code) << arch;
    ASSERT_EQ(c.archive.units.size(), 1u);
    EXPECT_EQ(c.archive.isa, 81u);
  }
  auto old = cuda_target("sm_60");
  ASSERT_TRUE(old);
  Plan p60 = plan_graph(g);
  std::string err = error_of([&] { old->compile(g, p60); });
  EXPECT_NE(err.find("kernel " + p60.kernels[0].name + " needs "), std::string::npos) << err;
  EXPECT_NE(err.find("more than the 4096 bytes PTX 7.8 allows on sm_60"), std::string::npos) << err;
  EXPECT_EQ(err.find("ptxas"), std::string::npos) << "refused before ptxas: " << err;
  // Small kernels still compile there (PTX 7.8, the 4 KB limit).
  ir::Graph small = many_loads_graph(10);
  Plan ps = plan_graph(small);
  EXPECT_EQ(error_of([&] { old->compile(small, ps); }).find("kernel parameters"), std::string::npos);
}

// A target whose kernels take at most 4 KB of parameters (sm_60: PTX 7.8) gets
// plans whose kernels fit: lower() cuts the fused chain where the parameters
// would pass the limit, instead of the compile refusing the kernel.
TEST(CudaTargetParams, PlansForAnOlderArchCutKernelsToItsLimit) {
  auto old = cuda_target("sm_60");
  auto now = cuda_target("sm_90");
  ASSERT_TRUE(old && now);
  EXPECT_EQ(old->max_kernel_param_bytes(), 4096);
  EXPECT_EQ(now->max_kernel_param_bytes(), 32764);
  ir::Graph g = many_loads_graph(50);
  // The parameter bytes of each kernel, counted as device_kernel.h lays them out.
  auto bytes = [](const FusedKernel& k) {
    size_t words = k.stores.size() + 1 + kernel_dims(k).size();
    for (const Access& a : k.loads) words += a.scalar_index < 0 ? 1 : 0;
    return 8 * words;
  };
  PlanOptions o;
  o.max_kernel_param_bytes = old->max_kernel_param_bytes();
  Plan p = plan_graph(g, o);
  EXPECT_GE(p.kernels.size(), 2u) << p.str(g);
  for (const FusedKernel& k : p.kernels) EXPECT_LE(bytes(k), 4096u) << k.name << "\n" << p.str(g);
  // Every node still runs, once.
  size_t nodes = 0;
  for (const FusedKernel& k : p.kernels) nodes += k.nodes.size();
  EXPECT_EQ(nodes, 50u);
  // lower() asks the target: no kernel is refused for its parameters (sm_60's
  // cubins may still fail in a ptxas that no longer makes them).
  std::string err = error_of([&] { lower(ir::Graph(g), *old, LowerOptions{}); });
  EXPECT_EQ(err.find("bytes of kernel parameters"), std::string::npos) << err;
  // The sm_90 plan keeps the chain in one kernel.
  auto prog = lower(ir::Graph(g), *now, LowerOptions{});
  EXPECT_EQ(prog->plan.kernels.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaTarget, ::testing::Values("sm_80", "sm_90"));

}  // namespace
}  // namespace lazyjit::lowering
