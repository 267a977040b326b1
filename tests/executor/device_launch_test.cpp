// The GPU launch (targets/cuda/device_launch.h) without a GPU: the grid and `total`
// a kernel gets, the dims it is passed (scalars' bits in their slots), and that
// an Executable sends a kernel to it exactly when the program's code holds a
// device kernel for it (the CPU path unchanged otherwise). On a CPU-only
// PyTorch the launch fails as a step failure (no CUDA there), not a crash.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>

#include "targets/cuda/driver.h"
#include "targets/cuda/device_launch.h"
#include "targets/cuda/kernel_thunk.h"
#include "executor/executable.h"
#include "lowering/lower.h"
#include "test_graphs.h"
#include "targets/cpu/cpu_target.h"
#include "tests/executor/cpu_execution.h"

using namespace lazyjit;
using namespace test_graphs;
using lowering::DeviceKernel;

namespace {

lowering::Access buffer_load(ValueId v, std::vector<int64_t> strides, int64_t offset = 0) {
  lowering::Access a{v, v, DType::Float32, std::move(strides), offset};
  return a;
}

lowering::Access scalar_load(ValueId v, int32_t index) {
  lowering::Access a{v, v, DType::Float64, {}, 0};
  a.scalar_index = index;
  return a;
}

int64_t bits(double d) {
  int64_t i;
  std::memcpy(&i, &d, sizeof i);
  return i;
}

}  // namespace

TEST(DeviceLaunch, TotalIsElementsOrRows) {
  lowering::FusedKernel k;
  k.sizes = {6, 5, 7};
  EXPECT_EQ(executor::device_total(k, DeviceKernel::Grid::Elements), 210);
  k.row = true;
  k.reduce_rank = 1;
  EXPECT_EQ(executor::device_total(k, DeviceKernel::Grid::Rows), 30);
  k.reduce_rank = 2;
  EXPECT_EQ(executor::device_total(k, DeviceKernel::Grid::Rows), 6);
  // Rows over empty cols are still rows (their sums are 0); no rows: no work.
  k.sizes = {6, 0};
  k.reduce_rank = 1;
  EXPECT_EQ(executor::device_total(k, DeviceKernel::Grid::Rows), 6);
  EXPECT_EQ(executor::device_total(k, DeviceKernel::Grid::Elements), 0);
  k.sizes = {0, 9};
  EXPECT_EQ(executor::device_total(k, DeviceKernel::Grid::Rows), 0);
}

TEST(DeviceLaunch, GridCoversTheWorkUpToACap) {
  DeviceKernel elems;
  elems.block = 256;
  EXPECT_EQ(executor::device_grid(elems, 0), 0u);  // no launch
  EXPECT_EQ(executor::device_grid(elems, 1), 1u);
  EXPECT_EQ(executor::device_grid(elems, 256), 1u);
  EXPECT_EQ(executor::device_grid(elems, 257), 2u);
  EXPECT_EQ(executor::device_grid(elems, int64_t{1} << 40), 1u << 20);  // grid-stride beyond
  DeviceKernel vec = elems;  // a vectorized kernel: 4 elements a thread
  vec.elements_per_thread = 4;
  EXPECT_EQ(executor::device_grid(vec, 3), 1u);
  EXPECT_EQ(executor::device_grid(vec, 1024), 1u);
  EXPECT_EQ(executor::device_grid(vec, 1025), 2u);
  EXPECT_EQ(executor::device_grid(vec, int64_t{1} << 40), 1u << 20);
  DeviceKernel rows;
  rows.grid = DeviceKernel::Grid::Rows;
  rows.block = 128;
  EXPECT_EQ(executor::device_grid(rows, 0), 0u);
  EXPECT_EQ(executor::device_grid(rows, 1000), 1000u);  // one block per row
  EXPECT_EQ(executor::device_grid(rows, int64_t{1} << 40), static_cast<uint32_t>(INT32_MAX));
  DeviceKernel warps = rows;  // warp rows: one warp a row, 4 rows a block
  warps.rows_per_block = 4;
  EXPECT_EQ(executor::device_grid(warps, 0), 0u);
  EXPECT_EQ(executor::device_grid(warps, 1), 1u);
  EXPECT_EQ(executor::device_grid(warps, 1000), 250u);
  EXPECT_EQ(executor::device_grid(warps, 1001), 251u);
  EXPECT_EQ(executor::device_grid(warps, int64_t{1} << 40), static_cast<uint32_t>(INT32_MAX));
}

TEST(DeviceLaunch, DimsHoldEachScalarsBitsInItsSlot) {
  lowering::FusedKernel k;
  k.sizes = {3, 4};
  k.loads = {buffer_load(0, {4, 1}, 2), scalar_load(1, 1), buffer_load(2, {0, 1}), scalar_load(3, 0)};
  std::vector<int64_t> dims = lowering::kernel_dims(k);
  // sizes | load 0: strides, offset | scalar 1's slot | load 2 | scalar 0's slot
  ASSERT_EQ(dims, (std::vector<int64_t>{3, 4, 4, 1, 2, 1, 0, 1, 0, 0}));
  std::vector<int64_t> scalars = {bits(-0.5), 42};
  std::vector<int64_t> d = executor::device_dims(k, dims, scalars);
  EXPECT_EQ(d, (std::vector<int64_t>{3, 4, 4, 1, 2, 42, 0, 1, 0, bits(-0.5)}));
  // A 0-d kernel's dims start with one size.
  lowering::FusedKernel k0;
  k0.loads = {scalar_load(0, 0)};
  EXPECT_EQ(executor::device_dims(k0, lowering::kernel_dims(k0), {7}), (std::vector<int64_t>{1, 7}));
  // A scalar the run does not bind is a bug, said as one.
  EXPECT_THROW(executor::device_dims(k, dims, {bits(1.0)}), std::logic_error);
}

namespace {

// The CPU target's code, claiming a device kernel for the kernels in `device`.
class DeviceClaimingCode final : public lowering::CompiledCode {
 public:
  DeviceClaimingCode(std::unique_ptr<lowering::CompiledCode> real, std::vector<bool> device)
      : real_(std::move(real)), device_(std::move(device)) {}
  std::string object() const override { return real_->object(); }
  const std::string& llvm_ir() const override { return real_->llvm_ir(); }
  const lowering::KernelLaunch* kernel(size_t i) const override {
    return i < device_.size() && device_[i] ? &kernel_ : nullptr;
  }

 private:
  std::unique_ptr<lowering::CompiledCode> real_;
  std::vector<bool> device_;
  lowering::DeviceKernel kernel_;  // no image: nothing to load
};

// y = x * s + 1; z = tanh(w): two kernels (other iteration spaces).
std::shared_ptr<lowering::Program> two_kernels(std::vector<bool> device) {
  ir::Graph g;
  ValueId x = g.add_input(f32({8, 16}));
  ValueId w = g.add_input(f32({5}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId one = g.add_scalar(DType::Float64);
  ValueId y = g.add_node1(OpKind::Add, {g.add_node1(OpKind::Mul, {x, s}, {dt(DType::Float32)}, f32({8, 16})), one},
                          {dt(DType::Float32)}, f32({8, 16}));
  ValueId z = g.add_node1(OpKind::Tanh, {w}, {dt(DType::Float32)}, f32({5}));
  g.add_output(y);
  g.add_output(z);
  static std::unique_ptr<lowering::Target> target = lowering::make_cpu_target();
  lowering::LowerOptions opts;
  auto p = lowering::lower(std::move(g), *target, opts);
  p->code = std::make_unique<DeviceClaimingCode>(std::move(p->code), std::move(device));
  return p;
}

executor::Bindings bindings(const at::Tensor& x, const at::Tensor& w) { return {{x, w}, {bits(3.0), bits(1.0)}}; }

}  // namespace

TEST(DeviceLaunch, KernelsWithoutDeviceCodeRunOnTheCpuAsBefore) {
  auto p = two_kernels({false, false});
  ASSERT_EQ(p->plan.kernels.size(), 2u);
  at::Tensor x = torch::randn({8, 16}), w = torch::randn({5});
  executor::RunResult r = executor::Executable(p, cpu_execution()).run(bindings(x, w), 1);
  ASSERT_TRUE(r.failures.empty());
  EXPECT_TRUE(torch::allclose(r.outputs[0], x * 3 + 1));
  EXPECT_TRUE(torch::allclose(r.outputs[1], w.tanh()));
}

// The CUDA target leaves every kernel_fns entry null; a kernel whose device
// kernel is missing (not loaded) must fail its step, not call a null function
// on the CPU (it crashed the process with SIGSEGV).
TEST(DeviceLaunch, AKernelWithNeitherDeviceNorCpuCodeFailsItsStep) {
  auto p = two_kernels({false, false});
  ASSERT_EQ(p->plan.kernels.size(), 2u);
  p->plan.kernel_fns[1] = nullptr;
  at::Tensor x = torch::randn({8, 16}), w = torch::randn({5});
  executor::RunResult r = executor::Executable(p, cpu_execution()).run(bindings(x, w), 1);
  ASSERT_EQ(r.failures.size(), 1u);
  try {
    std::rethrow_exception(r.failures[0].error);
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("kernel " + p->plan.kernels[1].name + " has no CPU code and no loaded device kernel"),
              std::string::npos)
        << e.what();
  }
  // The other kernel's output is still computed.
  const std::vector<ValueId>& lost = p->plan.kernels[1].stores;
  for (size_t o = 0; o < p->graph.outputs().size(); ++o) {
    bool made_there = std::find(lost.begin(), lost.end(), p->graph.outputs()[o]) != lost.end();
    EXPECT_EQ(r.outputs[o].defined(), !made_there) << o;
  }
}

TEST(DeviceLaunch, AKernelWithDeviceCodeGoesToTheGpuLaunch) {
  if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) GTEST_SKIP() << "a CUDA PyTorch: tests/gpu/ launches";
  // Each kernel claimed in turn: the outputs it makes are lost with the CUDA
  // error of a CPU-only PyTorch; the other kernel has no device kernel, and the
  // CUDA target's thunk runs no CPU code: its step fails saying so.
  at::Tensor x = torch::randn({8, 16}), w = torch::randn({5});
  auto cpu = two_kernels({false, false});
  ASSERT_EQ(cpu->plan.kernels.size(), 2u);
  for (size_t ki = 0; ki < cpu->plan.kernels.size(); ++ki) {
    std::vector<bool> device(cpu->plan.kernels.size(), false);
    device[ki] = true;
    auto p = two_kernels(device);
    const executor::ExecutionTarget cuda{c10::Device(c10::kCPU), executor::cuda_kernel_thunk};
    executor::RunResult r = executor::Executable(p, cuda).run(bindings(x, w), 1);
    ASSERT_EQ(r.failures.size(), 2u) << "kernel " << ki;
    for (const executor::StepFailure& f : r.failures) {
      try {
        std::rethrow_exception(f.error);
      } catch (const std::exception& e) {
        const bool claimed = f.node == p->plan.kernels[ki].nodes.front();
        EXPECT_NE(std::string(e.what()).find(claimed ? "cuda" : "has no CPU code and no loaded device kernel"),
                  std::string::npos)
            << e.what();
      }
    }
    for (size_t o = 0; o < p->graph.outputs().size(); ++o) EXPECT_FALSE(r.outputs[o].defined()) << o;
  }
}

// With a GPU (a CUDA PyTorch, the driver, a device): a hand-written PTX kernel
// of the launch ABI (targets/cuda/device_kernel.h) for y = x * s, run by
// launch_device_kernel on PyTorch's current stream: buffer pointers, `total`
// and the dims array by value with the scalar's bits in its slot. Loaded both
// as PTX and as the cubin the driver's assembler makes of it.
namespace {

// Params: x, y, total, dims = [N, x's stride, x's offset, s's bits].
const char* const kScalePtx = R"(.version 7.0
.target sm_75
.address_size 64

.visible .entry scale(.param .u64 p_x, .param .u64 p_y, .param .u64 p_total, .param .align 8 .b8 p_dims[32])
{
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<10>;
  .reg .f32 %f<4>;
  .reg .f64 %fd<2>;
  ld.param.u64 %rd1, [p_x];
  ld.param.u64 %rd2, [p_y];
  ld.param.u64 %rd3, [p_total];
  ld.param.f64 %fd1, [p_dims+24];
  cvt.rn.f32.f64 %f1, %fd1;
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.s64 %rd4, %rd4, %rd5;
  setp.ge.s64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd6, %rd4, 2;
  add.s64 %rd7, %rd1, %rd6;
  ld.global.f32 %f2, [%rd7];
  mul.f32 %f3, %f2, %f1;
  add.s64 %rd8, %rd2, %rd6;
  st.global.f32 [%rd8], %f3;
DONE:
  ret;
}
)";

}  // namespace

TEST(DeviceLaunch, AHandWrittenKernelRunsOnTorchsCudaTensors) {
  std::string why;
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) || !torch::cuda::is_available() ||
      !cuda_driver::available(&why))
    GTEST_SKIP() << "no GPU here (" << (why.empty() ? "no CUDA PyTorch or device" : why) << ")";
  constexpr int64_t n = 1000;
  ir::Graph g;
  ValueId x = g.add_input(f32({n}));
  ValueId s = g.add_scalar(DType::Float64);
  ValueId y = g.add_node1(OpKind::Mul, {x, s}, {dt(DType::Float32)}, f32({n}));
  g.add_output(y);
  lowering::FusedKernel k;
  k.sizes = {n};
  k.nodes = {g.value(y).node};
  k.loads = {buffer_load(x, {1}), scalar_load(s, 0)};
  k.stores = {y};
  std::vector<int64_t> dims = lowering::kernel_dims(k);
  ASSERT_EQ(dims.size(), 4u);
  torch::manual_seed(0);
  at::Tensor in = torch::randn({n}, torch::kCUDA);
  for (bool as_cubin : {false, true}) {
    const std::string image = as_cubin ? cuda_driver::assemble(kScalePtx) : std::string(kScalePtx);
    DeviceKernel dk;
    dk.image = image;
    dk.symbol = "scale";
    dk.block = 128;
    executor::ModuleLoads m(dk);  // loaded at the first launch
    std::vector<at::Tensor> env(g.values().size());
    env[x] = in;
    EXPECT_FALSE(executor::launch_device_kernel(k, dk, m, dims, g, env, {bits(-2.5)}, {}, /*check_stores=*/false));
    ASSERT_TRUE(env[y].defined());
    EXPECT_EQ(env[y].device(), in.device());
    EXPECT_EQ(m.devices(), std::vector<int>{in.device().index()}) << "loaded on its device at the first launch";
    EXPECT_TRUE(torch::equal(env[y].cpu(), in.cpu() * -2.5f)) << (as_cubin ? "cubin" : "PTX");
    // A CPU tensor read by the kernel is copied to its device first.
    env[x] = in.cpu();
    executor::launch_device_kernel(k, dk, m, dims, g, env, {bits(0.5)}, {}, false);
    EXPECT_EQ(env[y].device(), torch::Device(torch::kCUDA, 0));
    EXPECT_TRUE(torch::equal(env[y].cpu(), in.cpu() * 0.5f));
  }
  EXPECT_THROW(cuda_driver::load_module(".version 7.0\n.target sm_75\nnot ptx"), std::runtime_error);
}
