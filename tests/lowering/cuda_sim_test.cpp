// The cuda-sim target's pieces without the executor (tests/cuda_sim/ runs its
// kernels end to end against eager): its keys, its archive as untrusted bytes,
// and the simulated GPU on hand-written NVPTX IR: PTX's shuffle modes, threads
// that never meet (an error, not a hang), intrinsics it cannot run.
#include <gtest/gtest.h>

#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "targets/cpu/codegen.h"
#include "targets/cpu/jit.h"
#include "targets/cuda/ptx.h"
#include "targets/cuda_sim/host_kernel.h"
#include "targets/cuda_sim/sim_grid.h"
#include "targets/cuda_sim/sim_target.h"
#include "lowering/plan.h"
#include "lowering/target.h"
#include "targets/cpu/cpu_target.h"
#include "tests/lowering/test_support.h"

namespace lazyjit::lowering {
namespace {

using ir::OpKind;
using namespace test;

// An NVPTX module's kernel `k(ptr addrspace(1) %out, i64 %total, ptr byval([1 x i64]) %dims)`
// with `body`, rewritten for the host, compiled and linked.
struct HandKernel {
  HandKernel(const std::string& body, const std::string& decls) {
    jit = cpu::Jit::Create();
    llvm::LLVMContext ctx;
    const std::string text =
        "target triple = \"nvptx64-nvidia-cuda\"\n"
        "define void @k(ptr addrspace(1) %out, i64 %total, ptr byval([1 x i64]) align 8 %dims) {\n" +
        body + "}\n" + decls;
    llvm::SMDiagnostic diag;
    std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(text, diag, ctx);
    if (!m) throw std::runtime_error("bad test IR: " + diag.getMessage().str());
    auto device = cuda::make_target_machine("sm_80");
    m->setDataLayout(device->createDataLayout());
    auto tm = jit->make_target_machine();
    cuda_sim::HostKernel h = cuda_sim::rewrite_for_host(*m, "k", tm->getTargetTriple(), jit->data_layout());
    cpu::CodegenConfig cc;
    cpu::optimize_module(*m, *tm, cc);
    llvm::SmallVector<char, 0> buf;
    llvm::raw_svector_ostream os(buf);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) throw std::runtime_error("no object");
    pm.run(*m);
    jd = &jit->add_object(std::string(buf.data(), buf.size()));
    sim.entry = reinterpret_cast<cuda_sim::SimEntry>(jit->lookup(*jd, h.entry));
    sim.meets = h.meets;
    sim.shared_bytes = h.shared_bytes;
    sim.name = "k";
  }
  ~HandKernel() { jit->remove(*jd); }
  // Runs `grid` blocks of `block` threads over `out`.
  void run(std::vector<int32_t>& out, uint32_t grid, uint32_t block) {
    void* bufs[] = {out.data()};
    int64_t dims[] = {0};
    cuda_sim::run_blocks(sim, bufs, static_cast<int64_t>(out.size()), dims, grid, block, 0, grid);
  }
  std::shared_ptr<cpu::Jit> jit;
  llvm::orc::JITDylib* jd = nullptr;
  cuda_sim::SimKernel sim;
};

// out[tid] = shfl.sync.<mode>(tid * 10, b, c)
std::vector<int32_t> shuffled(const std::string& mode, int b, int c, uint32_t block = 64) {
  HandKernel k(
      "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
      "  %v = mul i32 %t, 10\n"
      "  %r = call i32 @llvm.nvvm.shfl.sync." + mode + ".i32(i32 -1, i32 %v, i32 " + std::to_string(b) +
      ", i32 " + std::to_string(c) + ")\n"
      "  %p = getelementptr i32, ptr addrspace(1) %out, i32 %t\n"
      "  store i32 %r, ptr addrspace(1) %p\n"
      "  ret void\n",
      "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
      "declare i32 @llvm.nvvm.shfl.sync." + mode + ".i32(i32, i32, i32, i32)\n");
  std::vector<int32_t> out(block, -1);
  k.run(out, 1, block);
  return out;
}

TEST(CudaSim, ShufflesFollowPtxForEveryMode) {
  // PTX ISA, shfl.sync: lane j = f(lane, b) within the warp; out of the
  // segment [min, max] the lane keeps its own value.
  auto bfly = shuffled("bfly", 5, 0x1f), up = shuffled("up", 3, 0), down = shuffled("down", 4, 0x1f),
       idx = shuffled("idx", 7, 0x1f), seg = shuffled("idx", 2, 0x181f);  // segments of 8 lanes
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, warp = t / 32 * 32;
    EXPECT_EQ(bfly[t], (warp + (lane ^ 5)) * 10) << t;
    EXPECT_EQ(up[t], (lane >= 3 ? t - 3 : t) * 10) << t;
    EXPECT_EQ(down[t], (lane + 4 <= 31 ? t + 4 : t) * 10) << t;
    EXPECT_EQ(idx[t], (warp + 7) * 10) << t;
    EXPECT_EQ(seg[t], (warp + (lane & ~7) + 2) * 10) << t;
  }
}

TEST(CudaSim, ABarrierSomeThreadsNeverReachIsAnErrorNotAHang) {
  // Threads below 32 wait at a barrier the others skip.
  HandKernel k(
      "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
      "  %low = icmp ult i32 %t, 32\n"
      "  br i1 %low, label %wait, label %done\n"
      "wait:\n"
      "  call void @llvm.nvvm.barrier0()\n"
      "  br label %done\n"
      "done:\n"
      "  ret void\n",
      "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
      "declare void @llvm.nvvm.barrier0()\n");
  EXPECT_TRUE(k.sim.meets);
  std::vector<int32_t> out(1);
  try {
    k.run(out, 2, 64);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "cuda-sim: kernel k, block 0: its threads do not meet: 32 wait at a barrier, 0 at a shuffle, "
                 "32 of 64 finished");
  }
}

TEST(CudaSim, SharedMemoryIsEachBlocksOwnAndBarriersOrderIt) {
  // Each thread writes tid + 1000 * ctaid to shared[tid], syncs, reads its
  // mirror's slot.
  HandKernel k(
      "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
      "  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"
      "  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
      "  %c1000 = mul i32 %c, 1000\n"
      "  %v = add i32 %t, %c1000\n"
      "  %s = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %t\n"
      "  store i32 %v, ptr addrspace(3) %s\n"
      "  call void @llvm.nvvm.barrier0()\n"
      "  %n1 = sub i32 %n, 1\n"
      "  %m = sub i32 %n1, %t\n"
      "  %ms = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %m\n"
      "  %r = load i32, ptr addrspace(3) %ms\n"
      "  %bt = mul i32 %c, %n\n"
      "  %o = add i32 %bt, %t\n"
      "  %p = getelementptr i32, ptr addrspace(1) %out, i32 %o\n"
      "  store i32 %r, ptr addrspace(1) %p\n"
      "  ret void\n",
      "@sh = internal addrspace(3) global [128 x i32] undef, align 4\n"
      "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
      "declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"
      "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
      "declare void @llvm.nvvm.barrier0()\n");
  EXPECT_EQ(k.sim.shared_bytes, 512);
  std::vector<int32_t> out(3 * 128, -1);
  k.run(out, 3, 128);
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < 128; ++t) EXPECT_EQ(out[c * 128 + t], 127 - t + 1000 * c) << c << " " << t;
}

TEST(CudaSim, AnIntrinsicItCannotRunIsNamed) {
  try {
    HandKernel k(
        "  %t = call i32 @llvm.nvvm.read.ptx.sreg.clock()\n"
        "  ret void\n",
        "declare i32 @llvm.nvvm.read.ptx.sreg.clock()\n");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "cuda-sim: kernel k: reads special register clock, which cuda-sim does not simulate");
  }
}

ir::Graph softmax_graph(int64_t rows, int64_t cols) {
  ir::Graph g;
  const DType f = DType::Float32;
  ValueId x = g.add_input(tt(f, {rows, cols}));
  ValueId mx = g.add_node1(OpKind::ReduceMax, {x}, {dt(f), ir::Attr{std::vector<int64_t>{1}}}, tt(f, {rows, 1}));
  ValueId d = g.add_node1(OpKind::Sub, {x, mx}, {dt(f)}, tt(f, {rows, cols}));
  ValueId e = g.add_node1(OpKind::Exp, {d}, {dt(f)}, tt(f, {rows, cols}));
  g.add_output(e);
  return g;
}

TEST(CudaSim, ItsKeysAreItsOwnAndItsArchiveIsCheckedAsUntrusted) {
  auto sim = make_cuda_sim_target();
  auto cpu = make_cpu_target();
  EXPECT_EQ(sim->fingerprint().rfind("target cuda-sim;", 0), 0u) << sim->fingerprint();
  EXPECT_NE(sim->fingerprint(), cpu->fingerprint());
  ir::Graph g = softmax_graph(4, 5000);
  Plan p = plan_graph(g);
  auto code = sim->compile(g, p);
  // Its kernels are SimKernels: the CUDA target's launch and host code, not
  // CUDA DeviceKernels (the CUDA thunk refuses them).
  ASSERT_TRUE(cuda_sim::sim_kernel(*code, 0));
  EXPECT_EQ(device_kernel(*code, 0), nullptr);
  EXPECT_NE(cuda_sim::sim_kernel(*code, 0)->entry, nullptr);
  const std::string obj = code->object();
  // Read back: the same launch, no codegen.
  Plan p2 = plan_graph(g);
  auto back = make_cuda_sim_target()->load(obj, p2);
  ASSERT_TRUE(cuda_sim::sim_kernel(*back, 0));
  EXPECT_EQ(cuda_sim::sim_kernel(*back, 0)->launch.block, cuda_sim::sim_kernel(*code, 0)->launch.block);
  // Garbage, truncations and a CPU archive: errors naming what was refused.
  for (size_t cut : {size_t{0}, size_t{7}, obj.size() / 2, obj.size() - 1}) {
    Plan p3 = plan_graph(g);
    EXPECT_THROW(make_cuda_sim_target()->load(obj.substr(0, cut), p3), std::runtime_error) << cut;
  }
  Plan p4 = plan_graph(g);
  auto cpu_code = cpu->compile(g, p4);
  Plan p5 = plan_graph(g);
  try {
    make_cuda_sim_target()->load(cpu_code->object(), p5);
    FAIL() << "a CPU archive loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda-sim kernels"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lazyjit::lowering
