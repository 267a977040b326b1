// Where a CUDA program's code is loaded (targets/cuda/module_loads.h), with
// the stand-in driver (tests/executor/fake_libcuda.c: two devices, a module
// belongs to the context it was loaded into): the CUDA target compiles to bytes
// and loads nothing; a kernel's module is loaded into a device's context at
// its first run there, once per device, and unloaded when the program goes.
// Each test in a process of its own (the driver is loaded once per process).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "targets/cuda/driver.h"
#include "targets/cuda/kernel_thunk.h"
#include "targets/cuda/module_loads.h"
#include "executor/executable.h"
#include "lowering/lower.h"
#include "lowering/target.h"
#include "targets/cuda/cuda_target.h"
#include "tests/executor/fake_driver.h"
#include "test_graphs.h"
#include "targets/cuda/device_kernel.h"

using namespace lazyjit;
using namespace test_graphs;
using test_fake_driver::fake;
using test_fake_driver::use_fake_driver;

namespace {

// y = tanh(x * 2): one kernel, "fused_0" (the one symbol the stand-in has).
std::shared_ptr<lowering::Program> one_kernel_program(lowering::Target& t) {
  ir::Graph g;
  ValueId x = g.add_input(f32({64}));
  ValueId two = g.add_scalar(DType::Float64);
  ValueId y = g.add_node1(OpKind::Mul, {x, two}, {dt(DType::Float32)}, f32({64}));
  g.add_output(g.add_node1(OpKind::Tanh, {y}, {dt(DType::Float32)}, f32({64})));
  return lowering::lower(std::move(g), t, lowering::LowerOptions{});
}

class ModuleLoadsStandIn : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

}  // namespace

// The CUDA target made with the driver at hand (the architecture is the
// current device's, sm_90 on the stand-in) compiles a program and loads none
// of its code: a Program is bytes and launch data.
TEST_F(ModuleLoadsStandIn, TheCudaTargetLoadsNothingAtCompile) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        auto loads = fake<int (*)()>("fake_cuda_loads");
        std::unique_ptr<lowering::Target> t = lowering::make_cuda_target(lowering::CudaOptions{});
        auto p = one_kernel_program(*t);
        if (p->plan.kernels.size() != 1 || p->plan.kernels[0].name != "fused_0") std::exit(3);
        std::fprintf(stderr, "loads after compile %d\n", loads());
        std::exit(loads() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "loads after compile 0");
}

namespace {

// The stand-in's counters.
struct Counts {
  int (*loads)() = fake<int (*)()>("fake_cuda_loads");
  int (*unloads)() = fake<int (*)()>("fake_cuda_unloads");
  int (*launches)() = fake<int (*)()>("fake_cuda_launches");
  void (*make_current)(int) = fake<void (*)(int)>("fake_cuda_make_current");
};

// The CUDA executor's view of kernel 0 of `p`: its thunk's modules (the ones
// every thunk of that image shares), as the thunk's run uses them on the
// device its guard made current.
void* run_on(const lowering::Program& p, const Counts& c, int device) {
  c.make_current(device);
  return executor::module_loads(*lowering::device_kernel(*p.code, 0))->function(device);
}

// The CUDA target's thunks (ATen steps on the CPU: there is no CUDA PyTorch here).
executor::ExecutionTarget cuda_execution() {
  return executor::ExecutionTarget{c10::Device(c10::kCPU), executor::cuda_kernel_thunk};
}

}  // namespace

// A program's kernel is loaded at its first run on a device, in that device's
// context (the function launches there), once per device: a second run on
// the same device, or a second program with the same kernel, loads nothing.
TEST_F(ModuleLoadsStandIn, AKernelIsLoadedAtItsFirstRunOnEachDeviceOnce) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        Counts c;
        std::unique_ptr<lowering::Target> t = lowering::make_cuda_target(lowering::CudaOptions{});
        auto p = one_kernel_program(*t);
        const lowering::DeviceKernel* dk = lowering::device_kernel(*p->code, 0);
        // The CUDA target's kernel: an image and its symbol, no host code.
        if (!dk || dk->image.empty() || dk->symbol != "fused_0") std::exit(3);
        const executor::ExecutionTarget cuda = cuda_execution();
        executor::Executable e(p, cuda);
        const int at_thunks = c.loads();
        void* on0 = run_on(*p, c, 0);
        const int first = c.loads();
        void* again0 = run_on(*p, c, 0);
        const int second = c.loads();
        void* on1 = run_on(*p, c, 1);
        const int other = c.loads();
        run_on(*p, c, 1);
        auto p2 = one_kernel_program(*t);  // the same kernel: the target's kernel cache shares its code
        run_on(*p2, c, 0);
        run_on(*p2, c, 1);
        const int shared = c.loads();
        // Each function launches in its own device's context only (the stand-in checks).
        c.make_current(0);
        cuda_driver::launch(on0, 1, 32, 0, nullptr, nullptr);
        c.make_current(1);
        cuda_driver::launch(on1, 1, 32, 0, nullptr, nullptr);
        std::fprintf(stderr, "loads: thunks %d first run %d second run %d device 1 %d again and program 2 %d; %s\n",
                     at_thunks, first, second, other, shared,
                     again0 == on0 && on1 != on0 && c.launches() == 2 ? "functions per device" : "mixed functions");
        std::exit(at_thunks == 0 && first == 1 && second == 1 && other == 2 && shared == 2 && again0 == on0 &&
                          on1 != on0 && c.launches() == 2
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0),
      "loads: thunks 0 first run 1 second run 1 device 1 2 again and program 2 2; functions per device");
}

// A kernel's modules go with the last program that runs it: one unload per
// device it was loaded on; a program dropped during a CUDA graph capture
// unloads them when the capture ends (an unload would break it).
TEST_F(ModuleLoadsStandIn, TheModulesUnloadWhenTheProgramGoes) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        Counts c;
        std::unique_ptr<lowering::Target> t = lowering::make_cuda_target(lowering::CudaOptions{});
        const executor::ExecutionTarget cuda = cuda_execution();
        auto p = one_kernel_program(*t);
        auto e = std::make_unique<executor::Executable>(p, cuda);
        run_on(*p, c, 0);
        run_on(*p, c, 1);
        const int running = c.unloads();
        t->clear_kernels();  // the target keeps no code of it: the program holds the last
        e.reset();
        p.reset();
        const int gone = c.unloads();
        // Again, dropped on another thread during a capture.
        auto q = one_kernel_program(*t);
        auto eq = std::make_unique<executor::Executable>(q, cuda);
        run_on(*q, c, 0);
        run_on(*q, c, 1);
        t->clear_kernels();
        cuda_driver::capture_began();
        fake<void (*)(int)>("fake_cuda_set_capturing")(1);
        std::thread([&] {
          eq.reset();
          q.reset();
        }).join();
        const int during = c.unloads();
        fake<void (*)(int)>("fake_cuda_set_capturing")(0);
        cuda_driver::capture_ended();
        const int broken = fake<int (*)()>("fake_cuda_capture_broken")();
        std::fprintf(stderr, "unloads: running %d gone %d during capture %d after it %d; broken %d\n", running, gone,
                     during, c.unloads(), broken);
        std::exit(running == 0 && gone == 2 && during == 2 && c.unloads() == 4 && broken == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "unloads: running 0 gone 2 during capture 2 after it 4; broken 0");
}

// A program's first run inside a capture of PyTorch's (torch.cuda.graph, here
// thread-local on this thread) loads its kernel in relaxed mode, and a module
// waiting to be unloaded (dropped during an earlier capture) stays loaded
// while this one runs: the unload, and the wait before it, would break it.
TEST_F(ModuleLoadsStandIn, AFirstRunInsideACaptureLoadsAndUnloadsNothingThatBreaksIt) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        Counts c;
        auto begin = fake<void (*)(void*, int)>("fake_cuda_begin_capture");
        auto end = fake<void (*)()>("fake_cuda_end_capture");
        auto broken = fake<int (*)()>("fake_cuda_capture_broken");
        auto refused = fake<int (*)()>("fake_cuda_refused_in_capture");
        auto in_capture = fake<int (*)()>("fake_cuda_unloads_in_capture");
        std::unique_ptr<lowering::Target> t = lowering::make_cuda_target(lowering::CudaOptions{});
        const executor::ExecutionTarget cuda = cuda_execution();
        int s1 = 0;  // two CUstreams
        int s2 = 0;
        // p ran on s1, and is dropped while s1 captures: its module waits.
        auto p = one_kernel_program(*t);
        auto e = std::make_unique<executor::Executable>(p, cuda);
        c.make_current(0);
        cuda_driver::launch(executor::module_loads(*lowering::device_kernel(*p->code, 0))->function(0, &s1), 1, 32, 0, &s1,
                            nullptr);
        t->clear_kernels();
        begin(&s1, 1);
        e.reset();
        p.reset();
        end();
        const int waiting = c.unloads();
        // q's first run, inside a capture on s2.
        auto q = one_kernel_program(*t);
        auto eq = std::make_unique<executor::Executable>(q, cuda);
        begin(&s2, 1);
        std::string error;
        try {
          void* f = executor::module_loads(*lowering::device_kernel(*q->code, 0))->function(0, &s2);
          cuda_driver::launch(f, 1, 32, 0, &s2, nullptr);
        } catch (const std::exception& x) {
          error = x.what();
        }
        const int during = c.unloads();
        end();
        t->clear_kernels();
        eq.reset();
        q.reset();  // no capture now: both modules go
        std::fprintf(stderr, "loads %d refused %d broken %d unloads in capture %d: waiting %d during %d after %d [%s]\n",
                     c.loads(), refused(), broken(), in_capture(), waiting, during, c.unloads(), error.c_str());
        std::exit(c.loads() == 2 && refused() == 0 && broken() == 0 && in_capture() == 0 && waiting == 0 &&
                          during == 0 && c.unloads() == 2 && error.empty()
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0),
      "loads 2 refused 0 broken 0 unloads in capture 0: waiting 0 during 0 after 2 \\[\\]");
}
