// The CUDA target's kernel emitter (targets/cuda/kernel_emitter.h): kernels of
// plans made by plan_graph, emitted into nvptx64 modules, checked on their IR
// (the ABI of targets/cuda/device_kernel.h, annotations, indexing, block
// reductions), verified, and, for kernels without transcendental math (which
// needs libdevice, linked by the target, not the emitter), taken to PTX by
// LLVM's NVPTX back end. No GPU needed.
//
// Vectorized element kernels are also run on the CPU (CpuKernel: the kernel's
// IR, its special registers made globals, JIT-compiled for the host and called
// once per thread of a simulated grid), for what PTX text cannot show: the
// tail after the last full chunk, misaligned buffers, any grid.
//
// LAZYJIT_TEST_PTX_DIR: also write each PTX and its IR there (<n>_<symbol>.ptx, .ll),
// for ptxas.
#include <gtest/gtest.h>

#include <sstream>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include "targets/cuda/kernel_emitter.h"
#include "lowering/plan.h"
#include "tests/lowering/test_support.h"

namespace lazyjit::lowering {
namespace {

using ir::Attr;
using ir::OpKind;
using test::dt;
using test::tt;

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

llvm::TargetMachine& nvptx() {
  static std::unique_ptr<llvm::TargetMachine> tm = [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    std::string err;
    const llvm::Target* t = llvm::TargetRegistry::lookupTarget(kTriple, err);
    if (!t) throw std::runtime_error("no NVPTX target: " + err);
    return std::unique_ptr<llvm::TargetMachine>(
        t->createTargetMachine(kTriple, "sm_90", "+ptx78", llvm::TargetOptions(), std::nullopt));
  }();
  return *tm;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

struct Emitted {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m;
  llvm::Function* fn = nullptr;
  DeviceKernel dk;
  LaunchShape shape;  // what it was emitted for (the config's, or the kernel's own)
  std::string ir;
  std::string ptx;  // when asked for
};

// Emits kernel `ki` of `p` as "<name>_k" and verifies the module; with `ptx`,
// also runs the NVPTX code generator on it.
std::unique_ptr<Emitted> emit(const ir::Graph& g, const FusedKernel& k, const cuda::KernelConfig& cfg,
                              bool ptx) {
  auto e = std::make_unique<Emitted>();
  e->m = std::make_unique<llvm::Module>("cuda_test", e->ctx);
  e->m->setTargetTriple(kTriple);
  e->m->setDataLayout(nvptx().createDataLayout());
  const std::string sym = k.name + "_k";
  e->dk = cuda::emit_kernel(*e->m, g, k, sym, cfg);
  e->shape = cfg.shape ? *cfg.shape : k.launch;
  e->fn = e->m->getFunction(sym);
  std::string err;
  llvm::raw_string_ostream es(err);
  EXPECT_FALSE(llvm::verifyModule(*e->m, &es)) << es.str();
  llvm::raw_string_ostream os(e->ir);
  e->m->print(os, nullptr);
  if (ptx) {
    llvm::SmallString<0> out;
    llvm::raw_svector_ostream ps(out);
    llvm::legacy::PassManager pm;
    EXPECT_FALSE(nvptx().addPassesToEmitFile(pm, ps, nullptr, llvm::CodeGenFileType::AssemblyFile));
    pm.run(*e->m);
    e->ptx = out.str().str();
    EXPECT_NE(e->ptx.find(".entry " + sym), std::string::npos) << e->ptx;
    if (const char* dir = std::getenv("LAZYJIT_TEST_PTX_DIR")) {
      static int n = 0;
      std::string base = std::string(dir) + "/" + std::to_string(n++) + "_" + sym;
      std::ofstream(base + ".ptx") << e->ptx;
      std::ofstream(base + ".ll") << e->ir;
    }
  }
  return e;
}

std::unique_ptr<Emitted> emit(const ir::Graph& g, const FusedKernel& k, bool ptx, bool generic = false) {
  cuda::KernelConfig cfg;
  cfg.generic = generic;
  return emit(g, k, cfg, ptx);
}

size_t buffer_loads(const FusedKernel& k) {
  size_t n = 0;
  for (const Access& a : k.loads) n += a.scalar_index < 0;
  return n;
}

// The parameters device_kernel.h lists, in order.
void expect_abi(const Emitted& e, const FusedKernel& k, bool check_stores = false) {
  ASSERT_NE(e.fn, nullptr);
  const size_t nbuf = buffer_loads(k) + k.stores.size();
  const size_t nparams = nbuf + (check_stores ? 1 : 0) + 2;
  ASSERT_EQ(e.fn->arg_size(), nparams) << e.ir;
  for (size_t i = 0; i < nbuf + (check_stores ? 1 : 0); ++i) {
    auto* pt = llvm::dyn_cast<llvm::PointerType>(e.fn->getArg(i)->getType());
    ASSERT_TRUE(pt) << i;
    EXPECT_EQ(pt->getAddressSpace(), 1u) << i;
    if (i < nbuf) {
      EXPECT_TRUE(e.fn->hasParamAttribute(i, llvm::Attribute::NoAlias)) << i;
    }
    if (i < buffer_loads(k)) {
      EXPECT_TRUE(e.fn->getArg(i)->onlyReadsMemory()) << i;
    }
  }
  EXPECT_TRUE(e.fn->getArg(nparams - 2)->getType()->isIntegerTy(64));
  llvm::Argument* dims = e.fn->getArg(nparams - 1);
  ASSERT_TRUE(dims->hasByValAttr());
  auto* at = llvm::dyn_cast<llvm::ArrayType>(dims->getParamByValType());
  ASSERT_TRUE(at);
  EXPECT_EQ(at->getNumElements(), kernel_dims(k).size());
  EXPECT_TRUE(at->getElementType()->isIntegerTy(64));
  EXPECT_EQ(dims->getParamAlign().valueOrOne().value(), 8u);
  EXPECT_TRUE(e.fn->hasExternalLinkage());
  const std::string sym = e.fn->getName().str();
  EXPECT_NE(e.ir.find("!{ptr @" + sym + ", !\"kernel\", i32 1}"), std::string::npos) << e.ir;
  // The shape's block (the plan's, launch_shape.h) is the kernel's maxntidx and its launch's.
  EXPECT_NE(e.ir.find("!{ptr @" + sym + ", !\"maxntidx\", i32 " + std::to_string(e.shape.block) + "}"),
            std::string::npos)
      << e.ir;
  EXPECT_EQ(e.dk.grid, k.row ? DeviceKernel::Grid::Rows : DeviceKernel::Grid::Elements);
  EXPECT_EQ(e.dk.block, e.shape.block);
  EXPECT_EQ(e.dk.rows_per_block, k.row ? e.shape.rows_per_block() : 1);
  EXPECT_TRUE(e.dk.image.empty()) << "the emitter makes IR, no image";
}

const DType f = DType::Float32;
Attr dims_attr(std::vector<int64_t> d) { return Attr{std::move(d)}; }

TEST(CudaKernelEmitter, ElementwiseChainIs32BitGridStride) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {4, 8}));
  ValueId y = g.add_input(tt(f, {4, 8}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId m = g.add_node1(OpKind::Mul, {x, s}, {dt(f)}, tt(f, {4, 8}));
  ValueId a = g.add_node1(OpKind::Add, {m, y}, {dt(f)}, tt(f, {4, 8}));
  ValueId r = g.add_node1(OpKind::Relu, {a}, {dt(f)}, tt(f, {4, 8}));
  g.add_output(r);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  auto e = emit(g, p.kernels[0], true);
  expect_abi(*e, p.kernels[0]);
  // The scalar is its dims entry's own bits.
  EXPECT_NE(e->ir.find("bitcast i64"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("to double"), std::string::npos) << e->ir;
  // Grid-stride over the elements, 32-bit index arithmetic.
  EXPECT_NE(e->ir.find("llvm.nvvm.read.ptx.sreg.nctaid.x"), std::string::npos);
  EXPECT_NE(e->ir.find("getelementptr inbounds float, ptr addrspace(1) %in0, i32"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("!invariant.load"), std::string::npos);
  EXPECT_NE(e->ptx.find("ld.global.nc.f32"), std::string::npos) << e->ptx;
  EXPECT_NE(e->ptx.find("st.global.f32"), std::string::npos) << e->ptx;
  EXPECT_EQ(e->ir.find("nvptx-f32ftz"), std::string::npos);
}

TEST(CudaKernelEmitter, BroadcastAddReadsStrideZero) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {6, 40}));
  ValueId b = g.add_input(tt(f, {40}));
  ValueId a = g.add_node1(OpKind::Add, {x, b}, {dt(f)}, tt(f, {6, 40}));
  g.add_output(a);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  const FusedKernel& k = p.kernels[0];
  ASSERT_EQ(k.sizes.size(), 2u) << p.str(g);
  for (bool generic : {false, true}) {
    auto e = emit(g, k, true, generic);
    expect_abi(*e, k);
    // The flat index splits into (row, col) by the inner size.
    EXPECT_NE(e->ir.find(generic ? "urem i64" : "urem i32 %"), std::string::npos) << e->ir;
    EXPECT_EQ(count(e->ptx, "ld.global.nc.f32"), 2u) << e->ptx;
  }
}

TEST(CudaKernelEmitter, CastsToHalfAndBFloat16) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {100}));
  ValueId h = g.add_node1(OpKind::Cast, {x}, {dt(DType::Float16)}, tt(DType::Float16, {100}));
  ValueId bf = g.add_node1(OpKind::Cast, {x}, {dt(DType::BFloat16)}, tt(DType::BFloat16, {100}));
  ValueId h2 = g.add_node1(OpKind::Mul, {h, h}, {dt(DType::Float16)}, tt(DType::Float16, {100}));
  g.add_output(h2);
  g.add_output(bf);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  auto e = emit(g, p.kernels[0], true);
  expect_abi(*e, p.kernels[0]);
  EXPECT_NE(e->ir.find("fptrunc float"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("to half"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("store i16"), std::string::npos) << e->ir;  // bf16's memory form
  EXPECT_NE(e->ptx.find("st.global.b16"), std::string::npos) << e->ptx;
}

TEST(CudaKernelEmitter, WhereOfACompare) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {3, 7}));
  ValueId y = g.add_input(tt(f, {3, 7}));
  ValueId c = g.add_node1(OpKind::Gt, {x, y}, {dt(f)}, tt(DType::Bool, {3, 7}));
  ValueId w = g.add_node1(OpKind::Where, {c, x, y}, {dt(f)}, tt(f, {3, 7}));
  ValueId cl = g.add_node1(OpKind::Clamp, {w, x}, {dt(f), Attr{int64_t{1}}}, tt(f, {3, 7}));
  g.add_output(cl);
  g.add_output(c);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  auto e = emit(g, p.kernels[0], true);
  expect_abi(*e, p.kernels[0]);
  EXPECT_NE(e->ir.find("fcmp ogt float"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("select i1"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("store i8"), std::string::npos) << e->ir;  // the bool output
}

TEST(CudaKernelEmitter, CatPiecesInAnIfChain) {
  for (int64_t dim : {0, 1}) {
    ir::Graph g;
    auto shape = [&](int64_t n) { return dim == 0 ? std::vector<int64_t>{n, 5} : std::vector<int64_t>{5, n}; };
    ValueId a = g.add_input(tt(f, shape(3)));
    ValueId b = g.add_input(tt(f, shape(4)));
    ValueId na = g.add_node1(OpKind::Neg, {a}, {dt(f)}, tt(f, shape(3)));
    ValueId c = g.add_node1(OpKind::Cat, {na, b}, {dt(f), Attr{dim}}, tt(f, shape(7)));
    ValueId two = g.add_scalar(DType::Float64);
    ValueId y = g.add_node1(OpKind::Mul, {c, two}, {dt(f)}, tt(f, shape(7)));
    g.add_output(y);
    Plan p = plan_graph(g);
    const FusedKernel* cat = nullptr;
    for (const FusedKernel& k : p.kernels)
      if (k.cat_dim >= 0) cat = &k;
    ASSERT_TRUE(cat) << p.str(g);
    for (bool generic : {false, true}) {
      auto e = emit(g, *cat, true, generic);
      expect_abi(*e, *cat);
      EXPECT_NE(e->ir.find("piece0:"), std::string::npos) << e->ir;
      EXPECT_EQ(e->ir.find("piece1:"), std::string::npos) << e->ir;  // the last piece needs no test
      EXPECT_NE(e->ir.find("pieces.end:"), std::string::npos) << e->ir;
      EXPECT_EQ(count(e->ptx, "ld.global.nc.f32"), 2u) << e->ptx;  // one load per piece
    }
  }
}

// softmax(x) over the last dim (and without exp, one that llc takes whole).
ir::Graph softmax(bool with_exp, std::vector<int64_t> shape = {8, 1000}) {
  ir::Graph g;
  std::vector<int64_t> row = shape;
  row.back() = 1;
  const int64_t last = static_cast<int64_t>(shape.size()) - 1;
  ValueId x = g.add_input(tt(f, shape));
  ValueId mx = g.add_node1(OpKind::ReduceMax, {x}, {dt(f), dims_attr({last})}, tt(f, row));
  ValueId d = g.add_node1(OpKind::Sub, {x, mx}, {dt(f)}, tt(f, shape));
  ValueId e = with_exp ? g.add_node1(OpKind::Exp, {d}, {dt(f)}, tt(f, shape)) : d;
  ValueId s = g.add_node1(OpKind::ReduceSum, {e}, {dt(f), dims_attr({last})}, tt(f, row));
  ValueId o = g.add_node1(OpKind::Div, {e, s}, {dt(f)}, tt(f, shape));
  g.add_output(o);
  return g;
}

const FusedKernel& only_row_kernel(const Plan& p, const ir::Graph& g) {
  const FusedKernel* r = nullptr;
  for (const FusedKernel& k : p.kernels)
    if (k.row) {
      EXPECT_EQ(r, nullptr) << p.str(g);
      r = &k;
    }
  if (!r) throw std::runtime_error("no row kernel in\n" + p.str(g));
  return *r;
}

// Block rows (forced here: a block of 256 for the row of 1000): two block
// reductions, each a warp butterfly, partials through shared memory, another
// butterfly. Warp rows (the plan's choice for 8 rows of 1000): one butterfly
// per reduction, no shared memory, no barrier.
TEST(CudaKernelEmitter, SoftmaxRowKernel) {
  ir::Graph g = softmax(true);
  Plan p = plan_graph(g);
  const FusedKernel& k = only_row_kernel(p, g);
  ASSERT_EQ(k.launch.rows, LaunchShape::Rows::Warp) << p.str(g);
  ASSERT_EQ(k.launch.block, 128) << p.str(g);
  LaunchShape block_rows;
  block_rows.block = 256;
  for (bool generic : {false, true}) {
    cuda::KernelConfig cfg;
    cfg.generic = generic;
    cfg.shape = block_rows;
    auto e = emit(g, k, cfg, false);
    expect_abi(*e, k);
    EXPECT_EQ(e->dk.rows_per_block, 1);
    // Two block reductions: 5 butterfly steps per warp level, two levels each.
    EXPECT_EQ(count(e->ir, "call float @llvm.nvvm.shfl.sync.bfly.f32"), 20u) << e->ir;
    EXPECT_NE(e->ir.find("call float @llvm.maximum.f32"), std::string::npos) << e->ir;
    EXPECT_EQ(count(e->ir, "call void @llvm.nvvm.barrier0()"), 4u) << e->ir;
    EXPECT_NE(e->ir.find("@" + k.name + "_k.partials = internal addrspace(3) global [8 x i64]"), std::string::npos)
        << e->ir;
    EXPECT_NE(e->ir.find("llvm.exp.f32"), std::string::npos) << e->ir;  // for the target's libdevice pass
    auto w = emit(g, k, false, generic);
    expect_abi(*w, k);
    EXPECT_EQ(w->dk.rows_per_block, 4);
    EXPECT_EQ(count(w->ir, "call float @llvm.nvvm.shfl.sync.bfly.f32"), 10u) << w->ir;
    EXPECT_EQ(count(w->ir, "barrier"), 0u) << w->ir;
    EXPECT_EQ(count(w->ir, "addrspace(3)"), 0u) << w->ir;
  }
  // The same rows without exp: all the way to PTX, in both modes.
  ir::Graph g2 = softmax(false);
  Plan p2 = plan_graph(g2);
  const FusedKernel& k2 = only_row_kernel(p2, g2);
  for (bool generic : {false, true}) {
    cuda::KernelConfig cfg;
    cfg.generic = generic;
    cfg.shape = block_rows;
    auto e = emit(g2, k2, cfg, true);
    expect_abi(*e, k2);
    EXPECT_NE(e->ptx.find("shfl.sync.bfly.b32"), std::string::npos) << e->ptx;
    EXPECT_NE(e->ptx.find("bar.sync"), std::string::npos) << e->ptx;
    EXPECT_NE(e->ptx.find(".shared"), std::string::npos) << e->ptx;
    EXPECT_NE(e->ptx.find(".maxntid 256, 1, 1"), std::string::npos) << e->ptx;
    auto w = emit(g2, k2, true, generic);
    expect_abi(*w, k2);
    EXPECT_EQ(count(w->ptx, "shfl.sync.bfly.b32"), 10u) << w->ptx;
    EXPECT_EQ(w->ptx.find("bar.sync"), std::string::npos) << w->ptx;
    EXPECT_EQ(w->ptx.find("barrier"), std::string::npos) << w->ptx;
    EXPECT_EQ(w->ptx.find(".shared"), std::string::npos) << w->ptx;
    EXPECT_NE(w->ptx.find(".maxntid 128, 1, 1"), std::string::npos) << w->ptx;
  }
}

TEST(CudaKernelEmitter, SumOverTheLastTwoDimsOfA3dTensor) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {4, 6, 9000}));
  ValueId sq = g.add_node1(OpKind::Mul, {x, x}, {dt(f)}, tt(f, {4, 6, 9000}));
  ValueId s = g.add_node1(OpKind::ReduceSum, {sq}, {dt(f), dims_attr({1, 2})}, tt(f, {4, 1, 1}));
  g.add_output(s);
  Plan p = plan_graph(g);
  const FusedKernel& k = only_row_kernel(p, g);
  ASSERT_EQ(k.reduce_rank, 1) << p.str(g);  // coalesced: [4, 54000]
  for (bool generic : {false, true}) {
    auto e = emit(g, k, true, generic);
    expect_abi(*e, k);
    // float32 accumulators (no float64 sum blocks on the GPU), 32-bit indices when exact.
    EXPECT_NE(e->ir.find("fadd reassoc float"), std::string::npos) << e->ir;
    EXPECT_EQ(e->ir.find("fadd reassoc double"), std::string::npos) << e->ir;
    EXPECT_EQ(e->ir.find("i32 %col.i") != std::string::npos, !generic) << e->ir;
    EXPECT_EQ(count(e->ir, "call float @llvm.nvvm.shfl.sync.bfly.f32"), 10u) << e->ir;
    // Thread 0 stores the row's sum.
    EXPECT_NE(e->ir.find("store.rows:"), std::string::npos) << e->ir;
  }
}

// The butterfly's adds combine a lane's value with a shuffled one: they carry
// no fast-math flag (reassoc would let LLVM regroup them across the shuffles,
// and lanes could then disagree by an ulp), while the per-thread accumulation
// before them keeps reassoc.
TEST(CudaKernelEmitter, ButterflyAddsCarryNoFastMathFlags) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {4, 6, 9000}));
  ValueId s = g.add_node1(OpKind::ReduceSum, {x}, {dt(f), dims_attr({1, 2})}, tt(f, {4, 1, 1}));
  g.add_output(s);
  Plan p = plan_graph(g);
  const FusedKernel& k = only_row_kernel(p, g);
  auto e = emit(g, k, true, false);
  std::vector<std::string> shuffled;  // the names of the shuffles' results
  std::istringstream lines(e->ir);
  for (std::string l; std::getline(lines, l);) {
    auto eq = l.find(" = call float @llvm.nvvm.shfl.sync.bfly.f32");
    if (eq != std::string::npos) shuffled.push_back(l.substr(l.find('%'), eq - l.find('%')));
  }
  ASSERT_EQ(shuffled.size(), 10u) << e->ir;
  size_t butterfly_adds = 0;
  std::istringstream again(e->ir);
  for (std::string l; std::getline(again, l);) {
    if (l.find(" fadd ") == std::string::npos) continue;
    for (const auto& s : shuffled) {
      const auto at = l.find(s);
      if (at == std::string::npos || at + s.size() < l.size() && std::isalnum(static_cast<unsigned char>(l[at + s.size()])))
        continue;
      ++butterfly_adds;
      EXPECT_NE(l.find(" fadd float "), std::string::npos) << "a butterfly add with fast-math flags: " << l;
    }
  }
  EXPECT_EQ(butterfly_adds, 10u) << e->ir;
  EXPECT_NE(e->ir.find("fadd reassoc float"), std::string::npos) << e->ir;  // the per-thread sums
}

TEST(CudaKernelEmitter, Int64MaxRowKernelShufflesHalves) {
  const DType i64 = DType::Int64;
  ir::Graph g;
  ValueId x = g.add_input(tt(i64, {5, 33}));
  ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(i64), dims_attr({1})}, tt(i64, {5, 1}));
  ValueId d = g.add_node1(OpKind::Sub, {x, m}, {dt(i64)}, tt(i64, {5, 33}));
  g.add_output(d);
  g.add_output(m);
  Plan p = plan_graph(g);
  const FusedKernel& k = only_row_kernel(p, g);
  for (bool generic : {false, true}) {
    auto e = emit(g, k, true, generic);
    expect_abi(*e, k);
    // Warp rows (5 rows of 33): 2 halves x 5 steps, one level.
    EXPECT_EQ(k.launch.rows, LaunchShape::Rows::Warp);
    EXPECT_EQ(count(e->ir, "call i32 @llvm.nvvm.shfl.sync.bfly.i32"), 10u) << e->ir;
    EXPECT_NE(e->ir.find("call i64 @llvm.smax.i64"), std::string::npos) << e->ir;
    EXPECT_NE(e->ptx.find("max.s64"), std::string::npos) << e->ptx;
    EXPECT_NE(e->ptx.find("st.global.u64"), std::string::npos) << e->ptx;
  }
}

TEST(CudaKernelEmitter, ShapeGenericReadsItsShapeFromDims) {
  ir::Graph g;
  ValueId x = g.add_input(ir::TensorType{f, {4, 8}, {1, 4}});  // transposed: stride 4
  ValueId y = g.add_input(tt(f, {4, 8}));
  ValueId a = g.add_node1(OpKind::Add, {x, y}, {dt(f)}, tt(f, {4, 8}));
  g.add_output(a);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  const FusedKernel& k = p.kernels[0];
  auto exact = emit(g, k, true, false);
  auto generic = emit(g, k, true, true);
  expect_abi(*exact, k);
  expect_abi(*generic, k);
  // Exact code: constants; generic code: sizes and the stride 4 from dims.
  EXPECT_EQ(exact->ir.find("getelementptr inbounds i64, ptr %dims"), std::string::npos) << exact->ir;
  EXPECT_NE(generic->ir.find("getelementptr inbounds i64, ptr %dims"), std::string::npos) << generic->ir;
  EXPECT_EQ(generic->ir.find("ptr addrspace(1) %in0, i32"), std::string::npos) << generic->ir;
  EXPECT_EQ(generic->ir.find("urem i32"), std::string::npos) << generic->ir;
  EXPECT_NE(generic->ir.find("udiv i64"), std::string::npos) << generic->ir;
  EXPECT_NE(exact->ir.find("urem i32"), std::string::npos) << exact->ir;
}

TEST(CudaKernelEmitter, LargeExactKernelsIndexIn64Bits) {
  ir::Graph g;
  const int64_t n = int64_t{1} << 16;
  ValueId x = g.add_input(tt(f, {n, n}));
  ValueId r = g.add_node1(OpKind::Neg, {x}, {dt(f)}, tt(f, {n, n}));
  g.add_output(r);
  FusedKernel k;
  k.sizes = {n, n};
  k.nodes = {g.value(r).node};
  Access a{};
  a.operand = a.value = x;
  a.dtype = f;
  a.strides = {n, 1};
  k.loads = {a};
  k.stores = {r};
  k.name = "fused_big";
  auto e = emit(g, k, true);
  expect_abi(*e, k);
  EXPECT_NE(e->ir.find("getelementptr inbounds float, ptr addrspace(1) %in0, i64"), std::string::npos) << e->ir;
  // A far offset alone also needs 64 bits.
  k.sizes = {4, 4};
  k.loads[0].strides = {4, 1};
  k.loads[0].offset = int64_t{1} << 31;
  auto far = emit(g, k, true);
  EXPECT_NE(far->ir.find("getelementptr inbounds float, ptr addrspace(1) %in0, i64"), std::string::npos) << far->ir;
  k.loads[0].offset = 16;
  auto near = emit(g, k, true);
  EXPECT_NE(near->ir.find("getelementptr inbounds float, ptr addrspace(1) %in0, i32"), std::string::npos) << near->ir;
}

TEST(CudaKernelEmitter, CheckStoresFlagsNonFiniteFloats) {
  ir::Graph g = softmax(false);
  Plan p = plan_graph(g);
  const FusedKernel& k = only_row_kernel(p, g);
  cuda::KernelConfig cfg;
  cfg.check_stores = true;
  auto e = emit(g, k, cfg, true);
  expect_abi(*e, k, /*check_stores=*/true);
  EXPECT_NE(e->ir.find("and i32 %"), std::string::npos) << e->ir;
  EXPECT_NE(e->ir.find("2139095040"), std::string::npos) << e->ir;  // 0x7f800000
  EXPECT_NE(e->ir.find("store i32 1, ptr addrspace(1) %nonfinite"), std::string::npos) << e->ir;
}

TEST(CudaKernelEmitter, ZeroDimKernelAndFaults) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {}));
  ValueId r = g.add_node1(OpKind::Add, {x, x}, {dt(f)}, tt(f, {}));
  g.add_output(r);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  auto e = emit(g, p.kernels[0], true);
  expect_abi(*e, p.kernels[0]);
  cuda::KernelConfig cfg;
  cfg.opts.fault = "add";
  auto bad = emit(g, p.kernels[0], cfg, true);
  EXPECT_NE(bad->ir.find("1.250000e+00"), std::string::npos) << bad->ir;
  EXPECT_EQ(e->ir.find("1.250000e+00"), std::string::npos) << e->ir;
}

TEST(CudaKernelEmitter, UnsupportedThrowsNamingTheKernelAndLeavesTheModule) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {8}));
  ValueId r = g.add_node1(OpKind::Add, {x, x}, {dt(DType::Complex64)}, tt(f, {8}));
  g.add_output(r);
  FusedKernel k;
  k.sizes = {8};
  k.nodes = {g.value(r).node};
  Access a{};
  a.operand = a.value = x;
  a.dtype = f;
  a.strides = {1};
  k.loads = {a};
  k.stores = {r};
  k.name = "fused_7";
  llvm::LLVMContext ctx;
  llvm::Module m("t", ctx);
  m.setTargetTriple(kTriple);
  m.setDataLayout(nvptx().createDataLayout());
  try {
    cuda::emit_kernel(m, g, k, "sym", {});
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel fused_7: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c64"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.getFunction("sym"), nullptr);
  EXPECT_EQ(m.getNamedMetadata("nvvm.annotations"), nullptr);
}

}  // namespace
}  // namespace lazyjit::lowering

namespace lazyjit::lowering {
namespace {

// Every lowerable dtype through every reduction: the block reduction's
// shuffles and shared partials on each register form, down to PTX.
TEST(CudaKernelEmitter, ReductionsOfEveryDtype) {
  for (DType t : {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::Float16,
                  DType::BFloat16, DType::Float32, DType::Float64})
    for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin}) {
      SCOPED_TRACE(std::string(ir::dtype_name(t)) + " " + std::string(ir::op_name(op)));
      ir::Graph g;
      ValueId x = g.add_input(tt(t, {3, 50}));
      ValueId r = g.add_node1(op, {x}, {dt(t), dims_attr({1})}, tt(t, {3, 1}));
      g.add_output(r);
      Plan p = plan_graph(g);
      const FusedKernel& k = only_row_kernel(p, g);
      for (bool generic : {false, true}) {
        auto e = emit(g, k, true, generic);
        expect_abi(*e, k);
        EXPECT_NE(e->ptx.find("shfl.sync.bfly.b32"), std::string::npos);
      }
    }
}

// Float ops whose lowering is not one PTX instruction (maximum on f64, half
// arithmetic) still make PTX without libdevice; frem becomes libm's fmod (for
// the target's libdevice pass), never NVPTX's inexact expansion.
TEST(CudaKernelEmitter, FloatOpsWithoutLibdevice) {
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64})
    for (OpKind op : {OpKind::Remainder, OpKind::DivFloor, OpKind::DivTrunc, OpKind::Maximum, OpKind::Div}) {
      SCOPED_TRACE(std::string(ir::dtype_name(t)) + " " + std::string(ir::op_name(op)));
      ir::Graph g;
      ValueId x = g.add_input(tt(t, {64}));
      ValueId y = g.add_input(tt(t, {64}));
      ValueId r = g.add_node1(op, {x, y}, {dt(t)}, tt(t, {64}));
      g.add_output(r);
      Plan p = plan_graph(g);
      ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
      const bool rem = op == OpKind::Remainder || op == OpKind::DivFloor;
      auto e = emit(g, p.kernels[0], !rem);
      EXPECT_EQ(e->ir.find(" frem "), std::string::npos) << e->ir;
      if (rem) {
        EXPECT_NE(e->ir.find(t == DType::Float64 ? "call double @fmod(" : "call float @fmodf("), std::string::npos)
            << e->ir;
      }
    }
}

}  // namespace
}  // namespace lazyjit::lowering

namespace lazyjit::lowering {
namespace {

// A kernel as emit_kernel makes it for the GPU, run on the CPU: every
// llvm.nvvm.read.ptx.sreg.* call becomes a call of sreg(which), which returns
// the calling host thread's simulated register; the dims parameter becomes a
// plain pointer; the module is then JIT-compiled for the host.
//  - run(): threads run one after another (plain kernels, whose threads write
//    disjoint elements and never meet).
//  - run_threads(): each block's threads run at once as host threads, one
//    block after another, with the GPU's meeting points emulated:
//    shfl.sync.bfly (each warp's lanes publish their value, wait for the
//    warp, read their partner's, wait again) and barrier0 (the block's
//    threads wait for each other). The kernel's shared memory becomes a host
//    global, which blocks run one at a time may share. For row kernels, in
//    both row modes.
namespace sim {
struct Block {
  explicit Block(uint32_t threads) : all(threads), warps(threads / 32), slots(threads) {
    for (auto& w : warps) w = std::make_unique<std::barrier<>>(32);
  }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<uint32_t> slots;  // per thread: the value it shuffles
};
thread_local uint32_t regs[4];  // tid.x, ntid.x, ctaid.x, nctaid.x
thread_local Block* block = nullptr;
int32_t sreg(int32_t which) { return static_cast<int32_t>(regs[which]); }
uint32_t shuffle(uint32_t v, int32_t lane_mask) {
  const uint32_t tid = regs[0], warp = tid / 32;
  block->slots[tid] = v;
  block->warps[warp]->arrive_and_wait();
  uint32_t r = block->slots[warp * 32 + ((tid % 32) ^ static_cast<uint32_t>(lane_mask))];
  block->warps[warp]->arrive_and_wait();
  return r;
}
int32_t shfl_i32(int32_t v, int32_t m) { return static_cast<int32_t>(shuffle(static_cast<uint32_t>(v), m)); }
float shfl_f32(float v, int32_t m) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = shuffle(u, m);
  std::memcpy(&v, &u, 4);
  return v;
}
void barrier0() { block->all.arrive_and_wait(); }
}  // namespace sim

class CpuKernel {
 public:
  CpuKernel(const ir::Graph& g, const FusedKernel& k, bool generic, std::optional<LaunchShape> shape = {}) {
    static const bool init = [] {
      llvm::InitializeNativeTarget();
      llvm::InitializeNativeTargetAsmPrinter();
      return true;
    }();
    (void)init;
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = std::make_unique<llvm::Module>("cpu_run", *ctx);
    m->setTargetTriple(kTriple);
    m->setDataLayout(nvptx().createDataLayout());
    cuda::KernelConfig cfg;
    cfg.generic = generic;
    cfg.shape = shape;
    dk = cuda::emit_kernel(*m, g, k, "kern", cfg);
    nbuf_ = buffer_loads(k) + k.stores.size();
    m->setTargetTriple(llvm::sys::getProcessTriple());
    m->setDataLayout("");
    if (llvm::NamedMDNode* md = m->getNamedMetadata("nvvm.annotations")) m->eraseNamedMetadata(md);
    auto* i32 = llvm::Type::getInt32Ty(*ctx);
    auto* f32 = llvm::Type::getFloatTy(*ctx);
    auto host = [&](const char* name, llvm::Type* ret, std::vector<llvm::Type*> params) {
      return m->getOrInsertFunction(name, llvm::FunctionType::get(ret, params, false));
    };
    std::vector<llvm::Function*> gone;
    for (llvm::Function& f : *m) {
      llvm::StringRef name = f.getName();
      if (!name.starts_with("llvm.nvvm.")) continue;
      std::vector<llvm::CallInst*> calls;
      for (llvm::User* u : f.users()) calls.push_back(llvm::cast<llvm::CallInst>(u));
      for (llvm::CallInst* c : calls) {
        llvm::IRBuilder<> b(c);
        llvm::Value* r = nullptr;
        if (name.starts_with("llvm.nvvm.read.ptx.sreg.")) {
          const std::string reg = name.drop_front(std::strlen("llvm.nvvm.read.ptx.sreg.")).str();
          const int which = reg == "tid.x" ? 0 : reg == "ntid.x" ? 1 : reg == "ctaid.x" ? 2 : reg == "nctaid.x" ? 3 : -1;
          if (which < 0) throw std::runtime_error("CpuKernel: special register " + reg);
          r = b.CreateCall(host("sim_sreg", i32, {i32}), {b.getInt32(which)});
        } else if (name == "llvm.nvvm.shfl.sync.bfly.i32") {
          r = b.CreateCall(host("sim_shfl_i32", i32, {i32, i32}), {c->getArgOperand(1), c->getArgOperand(2)});
        } else if (name == "llvm.nvvm.shfl.sync.bfly.f32") {
          r = b.CreateCall(host("sim_shfl_f32", f32, {f32, i32}), {c->getArgOperand(1), c->getArgOperand(2)});
        } else if (name == "llvm.nvvm.barrier0") {
          b.CreateCall(host("sim_barrier0", b.getVoidTy(), {}));
        } else {
          throw std::runtime_error("CpuKernel: cannot run " + name.str() + " on the CPU");
        }
        if (r) c->replaceAllUsesWith(r);
        c->eraseFromParent();
      }
      gone.push_back(&f);
    }
    for (llvm::Function* f : gone) f->eraseFromParent();
    llvm::Function* fn = m->getFunction("kern");
    fn->removeParamAttr(fn->arg_size() - 1, llvm::Attribute::ByVal);
    std::string err;
    llvm::raw_string_ostream es(err);
    if (llvm::verifyModule(*m, &es)) throw std::runtime_error("CpuKernel: " + es.str());
    jit_ = llvm::cantFail(llvm::orc::LLJITBuilder().create());
    llvm::orc::SymbolMap syms;
    auto def = [&](const char* name, auto* fp) {
      syms[jit_->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(fp), llvm::JITSymbolFlags::Exported};
    };
    def("sim_sreg", &sim::sreg);
    def("sim_shfl_i32", &sim::shfl_i32);
    def("sim_shfl_f32", &sim::shfl_f32);
    def("sim_barrier0", &sim::barrier0);
    llvm::cantFail(jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(syms))));
    llvm::cantFail(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))));
    fn_ = llvm::cantFail(jit_->lookup("kern")).toPtr<void*>();
  }

  // bufs: one per buffer load, then one per store (device_kernel.h's order).
  void run(const std::vector<void*>& bufs, int64_t total, const std::vector<int64_t>& dims, uint32_t grid,
           uint32_t block) {
    ASSERT_EQ(bufs.size(), nbuf_);
    for (uint32_t c = 0; c < grid; ++c)
      for (uint32_t t = 0; t < block; ++t) call(bufs, total, dims, t, block, c, grid);
  }

  // Each block's `block` threads at once (block: a multiple of 32).
  void run_threads(const std::vector<void*>& bufs, int64_t total, const std::vector<int64_t>& dims, uint32_t grid,
                   uint32_t block) {
    ASSERT_EQ(bufs.size(), nbuf_);
    ASSERT_EQ(block % 32, 0u);
    for (uint32_t c = 0; c < grid; ++c) {
      sim::Block shared(block);
      std::vector<std::thread> threads;
      for (uint32_t t = 0; t < block; ++t)
        threads.emplace_back([&, t] {
          sim::block = &shared;
          call(bufs, total, dims, t, block, c, grid);
        });
      for (std::thread& th : threads) th.join();
    }
  }

  DeviceKernel dk;

 private:
  void call(const std::vector<void*>& bufs, int64_t total, const std::vector<int64_t>& dims, uint32_t tid,
            uint32_t ntid, uint32_t ctaid, uint32_t nctaid) {
    sim::regs[0] = tid, sim::regs[1] = ntid, sim::regs[2] = ctaid, sim::regs[3] = nctaid;
    switch (bufs.size()) {
      case 2:
        reinterpret_cast<void (*)(void*, void*, int64_t, const int64_t*)>(fn_)(bufs[0], bufs[1], total, dims.data());
        break;
      case 3:
        reinterpret_cast<void (*)(void*, void*, void*, int64_t, const int64_t*)>(fn_)(bufs[0], bufs[1], bufs[2], total,
                                                                                      dims.data());
        break;
      default:
        ADD_FAILURE() << bufs.size() << " buffers";
    }
  }
  size_t nbuf_ = 0;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  void* fn_ = nullptr;
};

// 16-byte aligned float storage; at(shift) is `shift` floats past the aligned start.
struct Floats {
  explicit Floats(size_t n, float fill = 0) : v((n + 8) / 4 + 1) { std::fill_n(at(0), n + 4, fill); }
  float* at(size_t shift) { return reinterpret_cast<float*>(v.data()) + shift; }
  struct alignas(16) Quad { float f[4]; };
  std::vector<Quad> v;
};

// relu(x * y + x) over float32 x, y of `n` elements (exact in float: small
// multiples of 1/2).
ir::Graph f32_chain(int64_t n) {
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {n}));
  ValueId y = g.add_input(tt(f, {n}));
  ValueId m = g.add_node1(OpKind::Mul, {x, y}, {dt(f)}, tt(f, {n}));
  ValueId a = g.add_node1(OpKind::Add, {m, x}, {dt(f)}, tt(f, {n}));
  g.add_output(g.add_node1(OpKind::Relu, {a}, {dt(f)}, tt(f, {n})));
  return g;
}
float xv(int64_t i) { return static_cast<float>(i % 97) * 0.5f - 20.0f; }
float yv(int64_t i) { return static_cast<float>(i % 7) - 3.0f; }

TEST(CudaKernelEmitter, Float32ChainLoadsAndStoresFourWide) {
  const int64_t n = 1003;  // not a multiple of 4: a tail of 3
  ir::Graph g = f32_chain(n);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  const FusedKernel& k = p.kernels[0];
  ASSERT_EQ(k.sizes, std::vector<int64_t>{n});
  for (bool generic : {false, true}) {
    SCOPED_TRACE(generic ? "generic" : "exact");
    auto e = emit(g, k, true, generic);
    expect_abi(*e, k);
    EXPECT_EQ(e->dk.elements_per_thread, 4);
    EXPECT_EQ(count(e->ir, "load <4 x float>"), 2u) << e->ir;
    EXPECT_EQ(count(e->ir, "align 16, !invariant.load"), 2u) << e->ir;
    EXPECT_EQ(count(e->ir, "store <4 x float>"), 1u) << e->ir;
    // 16-byte, non-coherent (read-only) loads and one 16-byte store per chunk...
    EXPECT_EQ(count(e->ptx, "ld.global.nc.v4.f32"), 2u) << e->ptx;
    EXPECT_EQ(count(e->ptx, "st.global.v4.f32"), 1u) << e->ptx;
    // ...and the scalar loop for the tail (and misaligned buffers).
    EXPECT_EQ(count(e->ptx, "ld.global.nc.f32"), 2u) << e->ptx;
    EXPECT_EQ(count(e->ptx, "st.global.f32"), 1u) << e->ptx;
  }
}

TEST(CudaKernelEmitter, VectorizedKernelsCoverEveryElementOnAnyGridAndAlignment) {
  const int64_t n = 1003;
  ir::Graph g = f32_chain(n);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  const FusedKernel& k = p.kernels[0];
  const std::vector<int64_t> dims = kernel_dims(k);
  for (bool generic : {false, true}) {
    CpuKernel ck(g, k, generic);
    ASSERT_EQ(ck.dk.elements_per_thread, 4);
    // The launcher's grid (ceil(n / 4) threads), fewer threads (grid-stride), more.
    for (auto [grid, block] : {std::pair<uint32_t, uint32_t>{1, 256}, {1, 32}, {3, 64}, {2, 1024}})
      // Aligned buffers, then each one misaligned (the scalar loop takes everything).
      for (int shifted = -1; shifted < 3; ++shifted) {
        SCOPED_TRACE(std::string(generic ? "generic" : "exact") + ", grid " + std::to_string(grid) + " x " +
                     std::to_string(block) + ", shifted buffer " + std::to_string(shifted));
        Floats x(n), y(n), out(n, -12345.f);
        float* px = x.at(shifted == 0 ? 1 : 0);
        float* py = y.at(shifted == 1 ? 2 : 0);
        float* po = out.at(shifted == 2 ? 3 : 0);
        for (int64_t i = 0; i < n; ++i) px[i] = xv(i), py[i] = yv(i);
        ck.run({px, py, po}, n, dims, grid, block);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          float want = std::max(xv(i) * yv(i) + xv(i), 0.f);
          if (po[i] != want && bad++ < 5) ADD_FAILURE() << "element " << i << ": " << po[i] << ", want " << want;
        }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(po[n], -12345.f) << "wrote past total";
      }
  }
}

TEST(CudaKernelEmitter, HalfAndBFloat16ChainsAreEightWideFloat64TwoWide) {
  struct Case {
    DType t;
    int32_t lanes;
    const char* ir_load;
    std::regex load, store;
  };
  const std::vector<Case> cases = {
      // 16 bytes of 16-bit elements: four 32-bit words (packed pairs).
      {DType::Float16, 8, "load <8 x half>", std::regex("ld\\.global\\.nc\\.v4\\.[bu]32"),
       std::regex("st\\.global\\.v4\\.[bu]32")},
      {DType::BFloat16, 8, "load <8 x i16>", std::regex("ld\\.global\\.nc\\.v4\\.[bu]32"),
       std::regex("st\\.global\\.v4\\.[bu]32")},
      {DType::Float64, 2, "load <2 x double>", std::regex("ld\\.global\\.nc\\.v2\\.f64"),
       std::regex("st\\.global\\.v2\\.f64")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(ir::dtype_name(c.t));
    ir::Graph g;
    ValueId x = g.add_input(tt(c.t, {4096}));
    ValueId y = g.add_input(tt(c.t, {4096}));
    ValueId m = g.add_node1(OpKind::Mul, {x, y}, {dt(c.t)}, tt(c.t, {4096}));
    g.add_output(g.add_node1(OpKind::Sub, {m, y}, {dt(c.t)}, tt(c.t, {4096})));
    Plan p = plan_graph(g);
    ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
    for (bool generic : {false, true}) {
      auto e = emit(g, p.kernels[0], true, generic);
      expect_abi(*e, p.kernels[0]);
      EXPECT_EQ(e->dk.elements_per_thread, c.lanes);
      EXPECT_EQ(count(e->ir, c.ir_load), 2u) << e->ir;
      EXPECT_EQ(count(e->ir, ", align 16, !invariant.load"), 2u) << e->ir;
      auto n = [&](const std::regex& r) {
        return std::distance(std::sregex_iterator(e->ptx.begin(), e->ptx.end(), r), std::sregex_iterator());
      };
      EXPECT_EQ(n(c.load), 2) << e->ptx;
      EXPECT_EQ(n(c.store), 1) << e->ptx;
    }
  }
  // float32 in, bool out: the widest element (4 bytes) sets the lanes; the
  // bools go out 4 bytes a chunk.
  ir::Graph g;
  ValueId x = g.add_input(tt(f, {4096}));
  ValueId y = g.add_input(tt(f, {4096}));
  g.add_output(g.add_node1(OpKind::Gt, {x, y}, {dt(f)}, tt(DType::Bool, {4096})));
  Plan p = plan_graph(g);
  auto e = emit(g, p.kernels[0], true);
  EXPECT_EQ(e->dk.elements_per_thread, 4);
  EXPECT_NE(e->ir.find("store <4 x i8> "), std::string::npos) << e->ir;
  EXPECT_EQ(count(e->ptx, "ld.global.nc.v4.f32"), 2u) << e->ptx;
}

TEST(CudaKernelEmitter, BroadcastScalarLikeOperandStaysAScalarLoad) {
  ir::Graph g;
  const int64_t n = 1001;
  ValueId x = g.add_input(tt(f, {n}));
  ValueId b = g.add_input(tt(f, {1}));  // broadcast over all of x: stride 0
  g.add_output(g.add_node1(OpKind::Sub, {x, b}, {dt(f)}, tt(f, {n})));
  Plan p = plan_graph(g);
  ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
  const FusedKernel& k = p.kernels[0];
  for (bool generic : {false, true}) {
    SCOPED_TRACE(generic ? "generic" : "exact");
    auto e = emit(g, k, true, generic);
    expect_abi(*e, k);
    EXPECT_EQ(e->dk.elements_per_thread, 4);
    EXPECT_EQ(count(e->ir, "load <4 x float>"), 1u) << e->ir;  // x only
    EXPECT_EQ(count(e->ptx, "ld.global.nc.v4.f32"), 1u) << e->ptx;
    EXPECT_EQ(count(e->ptx, "st.global.v4.f32"), 1u) << e->ptx;
    EXPECT_GE(count(e->ptx, "ld.global.nc.f32"), 2u) << "b in the chunk loop and the tail\n" << e->ptx;
    // b misaligned does not matter (it is no vector access); x misaligned does.
    CpuKernel ck(g, k, generic);
    for (int shift_b : {0, 1})
      for (int shift_x : {0, 2}) {
        Floats xs(n), bs(1), out(n, -1.f);
        float* px = xs.at(shift_x);
        float* pb = bs.at(shift_b);
        for (int64_t i = 0; i < n; ++i) px[i] = xv(i);
        *pb = 2.5f;
        ck.run({px, pb, out.at(0)}, n, kernel_dims(k), 1, 64);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.at(0)[i], xv(i) - 2.5f) << i;
        EXPECT_EQ(out.at(0)[n], -1.f);
      }
  }
}

// A contiguous load at an offset (a folded slice): its own address + offset is
// what must be aligned.
TEST(CudaKernelEmitter, ContiguousLoadAtAnOffsetIsCheckedAtItsOffset) {
  ir::Graph g;
  const int64_t n = 1002;
  ValueId x = g.add_input(tt(f, {n + 8}));
  ValueId r = g.add_node1(OpKind::Neg, {x}, {dt(f)}, tt(f, {n}));
  g.add_output(r);
  FusedKernel k;
  k.sizes = {n};
  k.nodes = {g.value(r).node};
  Access a{};
  a.operand = a.value = x;
  a.dtype = f;
  a.strides = {1};
  k.loads = {a};
  k.stores = {r};
  k.name = "fused_slice";
  k.launch = choose_launch_shape(g, k);
  for (int64_t offset : {0, 1, 4, 6})
    for (bool generic : {false, true}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + (generic ? ", generic" : ", exact"));
      k.loads[0].offset = offset;
      auto e = emit(g, k, true, generic);
      EXPECT_EQ(e->dk.elements_per_thread, 4);
      EXPECT_EQ(count(e->ptx, "ld.global.nc.v4.f32"), 1u) << e->ptx;
      CpuKernel ck(g, k, generic);
      Floats xs(n + 8), out(n, 7.f);
      for (int64_t i = 0; i < n + 8; ++i) xs.at(0)[i] = xv(i);
      ck.run({xs.at(0), out.at(0)}, n, kernel_dims(k), 2, 32);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.at(0)[i], -xv(i + offset)) << i;
      EXPECT_EQ(out.at(0)[n], 7.f);
    }
}

// The scalar path only: strided (transposed) inputs, broadcast rows, cat
// kernels, row kernels, and exact kernels smaller than one chunk.
TEST(CudaKernelEmitter, NonContiguousKernelsKeepOneElementPerThread) {
  auto scalar_only = [](const Emitted& e) {
    EXPECT_EQ(e.dk.elements_per_thread, 1);
    EXPECT_EQ(e.ir.find(" x float>"), std::string::npos) << e.ir;
    EXPECT_EQ(e.ptx.find(".v4."), std::string::npos) << e.ptx;
    EXPECT_EQ(e.ptx.find(".v2."), std::string::npos) << e.ptx;
  };
  {
    ir::Graph g;
    ValueId x = g.add_input(ir::TensorType{f, {40, 64}, {1, 40}});  // transposed
    ValueId y = g.add_input(tt(f, {40, 64}));
    g.add_output(g.add_node1(OpKind::Add, {x, y}, {dt(f)}, tt(f, {40, 64})));
    Plan p = plan_graph(g);
    ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
    for (bool generic : {false, true}) scalar_only(*emit(g, p.kernels[0], true, generic));
  }
  {
    ir::Graph g;
    ValueId x = g.add_input(tt(f, {64, 40}));
    ValueId b = g.add_input(tt(f, {40}));  // a row broadcast: neither contiguous nor one element
    g.add_output(g.add_node1(OpKind::Mul, {x, b}, {dt(f)}, tt(f, {64, 40})));
    Plan p = plan_graph(g);
    ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
    for (bool generic : {false, true}) scalar_only(*emit(g, p.kernels[0], true, generic));
  }
  {
    ir::Graph g = f32_chain(3);  // exact: no full chunk
    Plan p = plan_graph(g);
    ASSERT_EQ(p.kernels.size(), 1u) << p.str(g);
    scalar_only(*emit(g, p.kernels[0], true, false));
  }
  {
    ir::Graph g = softmax(false);
    Plan p = plan_graph(g);
    auto e = emit(g, only_row_kernel(p, g), false);
    EXPECT_EQ(e->dk.elements_per_thread, 1);
  }
}

// Rows in both modes, run on the CPU with every block's threads at once
// (shuffles and barriers emulated): y = (x - max) / sum(x - max) and max per
// row, over rows x cols of small integers (every sum exact in float32, so any
// reduction order gives the same bits). Warp rows: 2 a block of 64; block
// rows: one a block of 64. Grids smaller than the rows (grid-stride), cols
// shorter and longer than a warp and than the block.
TEST(CudaKernelEmitter, WarpAndBlockRowsComputeEveryRowOnAnyGrid) {
  LaunchShape warp, block;
  warp.block = block.block = 64;
  warp.rows = LaunchShape::Rows::Warp;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 33}, {7, 1}, {3, 100}, {4, 31}, {2, 200}}) {
    ir::Graph g;
    auto full = tt(f, {rows, cols}), row = tt(f, {rows, 1});
    ValueId x = g.add_input(full);
    ValueId m = g.add_node1(OpKind::ReduceMax, {x}, {dt(f), dims_attr({1})}, row);
    ValueId d = g.add_node1(OpKind::Sub, {x, m}, {dt(f)}, full);
    ValueId s = g.add_node1(OpKind::ReduceSum, {d}, {dt(f), dims_attr({1})}, row);
    g.add_output(g.add_node1(OpKind::Div, {d, s}, {dt(f)}, full));
    g.add_output(m);
    Plan p = plan_graph(g);
    const FusedKernel& k = only_row_kernel(p, g);
    ASSERT_EQ(k.stores.size(), 2u) << p.str(g);
    const bool y_first = k.stores[0] != m;
    std::vector<float> xs(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(static_cast<int64_t>((i * 7 + 3) % 11) - 5);
    std::vector<float> want_y(xs.size()), want_m(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      float mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xs[r * cols + c]);
      for (int64_t c = 0; c < cols; ++c) sum += xs[r * cols + c] - mx;
      for (int64_t c = 0; c < cols; ++c) want_y[r * cols + c] = (xs[r * cols + c] - mx) / sum;
      want_m[r] = mx;
    }
    for (const LaunchShape& shape : {warp, block})
      for (bool generic : {false, true}) {
        CpuKernel ck(g, k, generic, shape);
        ASSERT_EQ(ck.dk.rows_per_block, shape.rows == LaunchShape::Rows::Warp ? 2 : 1);
        for (uint32_t grid : {1u, 2u, 5u}) {
          SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(cols) + ", " + shape.str(true) + ", " +
                       (generic ? "generic" : "exact") + ", grid " + std::to_string(grid));
          std::vector<float> y(xs.size() + 1, 99.f), mx(static_cast<size_t>(rows) + 1, 99.f);
          ck.run_threads({xs.data(), y_first ? y.data() : mx.data(), y_first ? mx.data() : y.data()}, rows,
                         kernel_dims(k), grid, static_cast<uint32_t>(shape.block));
          for (size_t i = 0; i < xs.size(); ++i)
            if (!(y[i] == want_y[i] || (std::isnan(y[i]) && std::isnan(want_y[i])))) {
              ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", want " << want_y[i];
              break;
            }
          for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(mx[r], want_m[r]) << "row " << r;
          EXPECT_EQ(y[xs.size()], 99.f) << "wrote past the rows";
          EXPECT_EQ(mx[rows], 99.f) << "wrote past the rows";
        }
      }
  }
}

// A shape asking for 8 elements a thread in vectors of 4: two 16-byte loads
// per operand and two stores per chunk, and still every element on any grid.
TEST(CudaKernelEmitter, ElementsPerThreadAreWholeVectors) {
  const int64_t n = 1003;
  ir::Graph g = f32_chain(n);
  Plan p = plan_graph(g);
  const FusedKernel& k = p.kernels.at(0);
  LaunchShape two;
  two.block = 64;
  two.vector_width = 4;
  two.elements_per_thread = 8;
  for (bool generic : {false, true}) {
    cuda::KernelConfig cfg;
    cfg.generic = generic;
    cfg.shape = two;
    auto e = emit(g, k, cfg, true);
    expect_abi(*e, k);
    EXPECT_EQ(e->dk.elements_per_thread, 8);
    EXPECT_EQ(count(e->ptx, "ld.global.nc.v4.f32"), 4u) << e->ptx;
    EXPECT_EQ(count(e->ptx, "st.global.v4.f32"), 2u) << e->ptx;
    EXPECT_NE(e->ptx.find(".maxntid 64, 1, 1"), std::string::npos) << e->ptx;
    CpuKernel ck(g, k, generic, two);
    for (auto [grid, block] : {std::pair<uint32_t, uint32_t>{1, 64}, {2, 32}, {3, 64}})
      for (int shifted = -1; shifted < 1; ++shifted) {
        SCOPED_TRACE(std::string(generic ? "generic" : "exact") + ", grid " + std::to_string(grid) + ", shifted " +
                     std::to_string(shifted));
        Floats x(n), y(n), out(n, -12345.f);
        float* px = x.at(shifted == 0 ? 1 : 0);
        for (int64_t i = 0; i < n; ++i) px[i] = xv(i), y.at(0)[i] = yv(i);
        ck.run({px, y.at(0), out.at(0)}, n, kernel_dims(k), grid, block);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.at(0)[i], std::max(xv(i) * yv(i) + xv(i), 0.f)) << i;
        EXPECT_EQ(out.at(0)[n], -12345.f);
      }
  }
  // A plan's scalar shape (vector width 1) keeps the kernel scalar.
  LaunchShape scalar;
  cuda::KernelConfig cfg;
  cfg.shape = scalar;
  auto e = emit(g, k, cfg, true);
  EXPECT_EQ(e->dk.elements_per_thread, 1);
  EXPECT_EQ(count(e->ptx, "ld.global.nc.v4.f32"), 0u) << e->ptx;
}

}  // namespace
}  // namespace lazyjit::lowering
