// The stand-in libcuda.so.1 (tests/executor/fake_libcuda.c) from a test: load
// it as the driver (LAZYJIT_TEST_LIBCUDA) and reach its fake_cuda_* handles.
// For death tests: the driver layer loads its library once per process.
#pragma once
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "targets/cuda/driver.h"

namespace lazyjit::test_fake_driver {

// The stand-in's own function `name`, from the library the driver layer
// loaded (dlopen of the same path gives the same library); exits 9 without it.
template <class F>
F fake(const char* name) {
  void* lib = dlopen(LAZYJIT_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  void* f = lib ? dlsym(lib, name) : nullptr;
  if (!f) {
    std::fprintf(stderr, "no %s in %s\n", name, LAZYJIT_FAKE_LIBCUDA);
    std::exit(9);
  }
  return reinterpret_cast<F>(f);
}

// Makes the stand-in this process's driver; exits 8 when it is not usable.
inline void use_fake_driver() {
  setenv("LAZYJIT_TEST_LIBCUDA", LAZYJIT_FAKE_LIBCUDA, 1);
  std::string why;
  if (!cuda_driver::available(&why)) {
    std::fprintf(stderr, "stand-in driver not available: %s\n", why.c_str());
    std::exit(8);
  }
}

}  // namespace lazyjit::test_fake_driver
