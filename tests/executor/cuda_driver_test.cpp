// The CUDA driver API through dlopen (cuda_driver/driver.h) where it cannot be
// used: no libcuda.so.1 (this test's machine, or LAZYJIT_TEST_LIBCUDA naming a
// library that is not there), or a library that is not the driver. available()
// says why and never throws; every other call throws std::runtime_error with
// that reason instead of crashing. With a driver, tests/gpu/ covers the rest.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

#include "cuda_driver/driver.h"

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
