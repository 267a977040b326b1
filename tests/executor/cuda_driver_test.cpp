// The CUDA driver API through dlopen (targets/cuda/driver.h) where it cannot be
// used: no libcuda.so.1 (this test's machine, or LAZYJIT_TEST_LIBCUDA naming a
// library that is not there), or a library that is not the driver. available()
// says why and never throws; every other call throws std::runtime_error with
// that reason instead of crashing. With a driver, tests/gpu/ covers the rest.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "targets/cuda/driver.h"
#include "tests/executor/fake_driver.h"

using namespace lazyjit;

namespace {

bool driver_installed() {
  if (const char* t = std::getenv("LAZYJIT_TEST_LIBCUDA"); t && *t) return false;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) dlclose(lib);
  return lib != nullptr;
}

// What `call` throws: a std::runtime_error's message ("" when it throws none).
std::string thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Every call but available() throws, naming the reason available() gives.
void expect_calls_throw(const std::string& why) {
  std::string image = "\x7f" "ELF not really";
  for (const auto& [name, call] : std::initializer_list<std::pair<const char*, std::function<void()>>>{
           {"load_module", [&] { cuda_driver::load_module(image); }},
           {"load_module (PTX)", [] { cuda_driver::load_module(".version 8.0\n"); }},
           {"assemble", [] { cuda_driver::assemble(".version 8.0\n"); }},
           {"launch", [] { cuda_driver::launch(nullptr, 1, 32, 0, nullptr, nullptr); }},
           {"driver_version", [] { cuda_driver::driver_version(); }},
           {"current_arch", [] { cuda_driver::current_arch(); }}}) {
    std::string what = thrown(call);
    EXPECT_NE(what.find("lazyjit: the CUDA driver is not usable: " + why), std::string::npos) << name << ": " << what;
  }
}

}  // namespace

TEST(CudaDriver, WithoutTheDriverItIsUnavailableAndSaysWhy) {
  if (driver_installed()) GTEST_SKIP() << "libcuda.so.1 loads here: tests/gpu/ covers the driver";
  std::string why;
  EXPECT_FALSE(cuda_driver::available(&why));
  // The soname, and dlerror's own words after it.
  EXPECT_EQ(why.rfind("libcuda.so.1 not found: ", 0), 0u) << why;
  EXPECT_GT(why.size(), std::string("libcuda.so.1 not found: ").size()) << why;
  EXPECT_FALSE(cuda_driver::available());  // no `why`: still no throw
  std::string again;
  EXPECT_FALSE(cuda_driver::available(&again));
  EXPECT_EQ(again, why);  // loaded (tried) once
  expect_calls_throw(why);
}

// Each in a process of its own (the driver is loaded once per process), with
// LAZYJIT_TEST_LIBCUDA naming the library to load instead of libcuda.so.1.
class CudaDriverLibrary : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  // Exits 0 when available() is false and every call throws naming `want`.
  static void probe(const char* lib, const std::string& want) {
    setenv("LAZYJIT_TEST_LIBCUDA", lib, 1);
    std::string why;
    if (cuda_driver::available(&why)) std::exit(2);
    std::fprintf(stderr, "why: %s\n", why.c_str());
    if (why.find(want) == std::string::npos) std::exit(3);
    if (thrown([] { cuda_driver::launch(nullptr, 1, 32, 0, nullptr, nullptr); }).find(why) == std::string::npos)
      std::exit(4);
    if (thrown([] { cuda_driver::load_module("x"); }).find(why) == std::string::npos) std::exit(5);
    std::exit(0);
  }
};

TEST_F(CudaDriverLibrary, AMissingLibraryIsNamed) {
  EXPECT_EXIT(probe("libnosuch-cuda.so.1", "libnosuch-cuda.so.1 not found: "), ::testing::ExitedWithCode(0),
              "why: libnosuch-cuda.so.1 not found: .*libnosuch-cuda.so.1");
}

TEST_F(CudaDriverLibrary, ALibraryThatIsNotTheDriverIsNamedWithWhatItLacks) {
  // libm loads, and has none of the driver's functions.
  EXPECT_EXIT(probe("libm.so.6", "libm.so.6 has no cuInit"), ::testing::ExitedWithCode(0),
              "why: libm.so.6 has no cuInit");
}

// With a stand-in driver (tests/executor/fake_libcuda.c: two devices, a
// module's functions launch only in the context it was loaded into, a real
// driver's rules on captures: what breaks one, in which capture mode), each in
// a process of its own.
#ifdef LAZYJIT_FAKE_LIBCUDA
namespace {

using test_fake_driver::fake;
using test_fake_driver::use_fake_driver;

const std::string kImage = std::string("\x7f" "ELF a good cubin");

}  // namespace

class CudaDriverStandIn : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A module the driver refuses: the error holds the driver's error log, not
// only CUDA_ERROR_INVALID_IMAGE.
TEST_F(CudaDriverStandIn, ALoadThatFailsSaysWhatTheDriversLogSays) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        std::string what = thrown([] { cuda_driver::load_module(std::string("\x7f" "ELFbad cubin")); });
        std::fprintf(stderr, "error: %s\n", what.c_str());
        std::exit(what.find("CUDA_ERROR_INVALID_IMAGE") != std::string::npos &&
                          what.find("ptxas fatal: bad thing") != std::string::npos
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "error: .*CUDA_ERROR_INVALID_IMAGE.*ptxas fatal: bad thing");
}

// A program loaded with device 0's context current (a thread with no context:
// device 0's primary) launched on device 1: the kernel runs there (its module
// is loaded into device 1's context once), not CUDA_ERROR_INVALID_HANDLE.
TEST_F(CudaDriverStandIn, AKernelLaunchedOnAnotherDeviceRunsThere) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        auto make_current = fake<void (*)(int)>("fake_cuda_make_current");
        auto launches = fake<int (*)()>("fake_cuda_launches");
        auto loads = fake<int (*)()>("fake_cuda_loads");
        make_current(-1);
        auto m = cuda_driver::load_module(kImage);
        void* f = m->function("fused_0");
        for (int device : {1, 0, 1}) {
          make_current(device);
          std::string what = thrown([&] { cuda_driver::launch(f, 1, 32, 0, nullptr, nullptr); });
          if (!what.empty()) {
            std::fprintf(stderr, "launch on device %d: %s\n", device, what.c_str());
            std::exit(1);
          }
        }
        std::fprintf(stderr, "launches %d loads %d\n", launches(), loads());
        std::exit(launches() == 3 && loads() == 2 ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "launches 3 loads 2");
}

// A program dropped on another thread while a graph capture is under way: its
// module is not unloaded then (the unload, and the wait for its kernels
// before it, would break the capture), but when the capture ends.
TEST_F(CudaDriverStandIn, AModuleDroppedDuringACaptureIsUnloadedAfterIt) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        auto capturing = fake<void (*)(int)>("fake_cuda_set_capturing");
        auto broken = fake<int (*)()>("fake_cuda_capture_broken");
        auto unloads = fake<int (*)()>("fake_cuda_unloads");
        auto make_current = fake<void (*)(int)>("fake_cuda_make_current");
        make_current(0);
        auto m = cuda_driver::load_module(kImage);
        m->function("fused_0");
        cuda_driver::capture_began();
        capturing(1);
        std::thread([&] { m.reset(); }).join();
        const int during = unloads();
        capturing(0);
        cuda_driver::capture_ended();
        std::fprintf(stderr, "broken %d unloads during %d after %d\n", broken(), during, unloads());
        std::exit(broken() == 0 && during == 0 && unloads() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "broken 0 unloads during 0 after 1");
}

// The same for a capture lazyjit did not start (PyTorch's torch.cuda.graph
// around lazyjit's kernels), seen by a launch into it: the module is unloaded
// once the stream captures no more, at the next load.
TEST_F(CudaDriverStandIn, AModuleDroppedDuringACaptureOfItsKernelsIsUnloadedAfterIt) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        auto capturing = fake<void (*)(int)>("fake_cuda_set_capturing");
        auto broken = fake<int (*)()>("fake_cuda_capture_broken");
        auto unloads = fake<int (*)()>("fake_cuda_unloads");
        auto make_current = fake<void (*)(int)>("fake_cuda_make_current");
        make_current(0);
        auto m = cuda_driver::load_module(kImage);
        void* f = m->function("fused_0");
        capturing(1);
        int stream = 0;  // any non-null CUstream
        cuda_driver::launch(f, 1, 32, 0, &stream, nullptr);
        std::thread([&] { m.reset(); }).join();
        const int during = unloads();
        capturing(0);
        auto other = cuda_driver::load_module(kImage);
        std::fprintf(stderr, "broken %d unloads during %d after %d\n", broken(), during, unloads());
        std::exit(broken() == 0 && during == 0 && unloads() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "broken 0 unloads during 0 after 1");
}
// Loading a module is a call the driver refuses during a stream capture in
// global mode (any thread's) or thread-local mode (this thread's), and the
// refusal breaks the capture: a program's first run inside torch.cuda.graph
// (global by default), or a program first run on another thread meanwhile.
// The load switches its thread to relaxed mode for the call, and back.
TEST_F(CudaDriverStandIn, AModuleLoadedDuringACaptureIsLoadedInRelaxedMode) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        auto begin = fake<void (*)(void*, int)>("fake_cuda_begin_capture");
        auto end = fake<void (*)()>("fake_cuda_end_capture");
        auto refused = fake<int (*)()>("fake_cuda_refused_in_capture");
        auto broken = fake<int (*)()>("fake_cuda_capture_broken");
        auto mode = fake<int (*)()>("fake_cuda_thread_mode");
        auto make_current = fake<void (*)(int)>("fake_cuda_make_current");
        int stream = 0;  // any non-null CUstream
        make_current(0);
        begin(&stream, 0);  // global, this thread
        std::string here = thrown([] { cuda_driver::load_module(kImage)->function("fused_0"); });
        const int mode_after = mode();
        std::string other;
        std::thread([&] {
          make_current(1);
          other = thrown([] { cuda_driver::load_module(kImage)->function("fused_0"); });
        }).join();
        end();
        begin(&stream, 1);  // thread-local, this thread
        std::string local = thrown([] { cuda_driver::load_module(kImage)->function("fused_0"); });
        end();
        std::fprintf(stderr, "refused %d broken %d mode after %d; errors [%s] [%s] [%s]\n", refused(), broken(),
                     mode_after, here.c_str(), other.c_str(), local.c_str());
        std::exit(refused() == 0 && broken() == 0 && mode_after == 0 && here.empty() && other.empty() && local.empty()
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "refused 0 broken 0 mode after 0; errors \\[\\] \\[\\] \\[\\]");
}

// A capture that begins on a stream lazyjit's kernels ran on before (a
// torch.cuda.graph on a stream a program ran on uncaptured): a module dropped
// meanwhile on another thread is not unloaded during the capture (an unload,
// and the wait before it, would break it), but by the next load after it.
TEST_F(CudaDriverStandIn, AModuleDroppedWhileAStreamItRanOnCapturesIsUnloadedAfterIt) {
  EXPECT_EXIT(
      {
        use_fake_driver();
        auto begin = fake<void (*)(void*, int)>("fake_cuda_begin_capture");
        auto end = fake<void (*)()>("fake_cuda_end_capture");
        auto broken = fake<int (*)()>("fake_cuda_capture_broken");
        auto unloads = fake<int (*)()>("fake_cuda_unloads");
        auto in_capture = fake<int (*)()>("fake_cuda_unloads_in_capture");
        auto make_current = fake<void (*)(int)>("fake_cuda_make_current");
        make_current(0);
        auto m = cuda_driver::load_module(kImage);
        void* f = m->function("fused_0");
        int stream = 0;
        cuda_driver::launch(f, 1, 32, 0, &stream, nullptr);  // not capturing then
        begin(&stream, 0);
        std::thread([&] { m.reset(); }).join();
        const int during = unloads();
        end();
        auto other = cuda_driver::load_module(kImage);
        std::fprintf(stderr, "broken %d unloads in capture %d during %d after %d\n", broken(), in_capture(), during,
                     unloads());
        std::exit(broken() == 0 && in_capture() == 0 && during == 0 && unloads() == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "broken 0 unloads in capture 0 during 0 after 1");
}
#endif
