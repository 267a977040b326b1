// A stand-in for libcuda.so.1 (loaded through LAZYJIT_TEST_LIBCUDA by
// tests/executor/cuda_driver_test.cpp): the driver functions
// cuda_driver/driver.cpp looks up, with a real driver's rules where the tests
// need them and no GPU:
//  - two devices, each with a primary context; the current context is per
//    thread, none at first;
//  - a module belongs to the context current when it was loaded; its functions
//    launch only there (else CUDA_ERROR_INVALID_HANDLE, as a real driver says);
//  - an image starting "\x7f" "ELFbad" fails to load with
//    CUDA_ERROR_INVALID_IMAGE and writes "ptxas fatal: bad thing" into the
//    error-log buffer (CU_JIT_ERROR_LOG_BUFFER, 5; its size, 6);
//  - while fake_cuda_set_capturing(1), cuCtxSynchronize breaks the capture
//    (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), as a real one does, and
//    cuStreamIsCapturing says every stream but the legacy one captures.
// fake_cuda_* functions let the test drive and inspect it.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kInvalidHandle = 400,
  kNotFound = 500,
  kCaptureUnsupported = 900,
  kNotSupported = 801,
};

struct Ctx {
  int device;
};
struct Mod {
  struct Ctx* ctx;
  int unloaded;
};
struct Func {
  struct Mod* mod;
};

static struct Ctx contexts[2] = {{0}, {1}};
static __thread struct Ctx* current;
static int capturing, capture_broken, unloads, launches, loads;

CUresult cuInit(unsigned flags) { return flags == 0 ? kSuccess : kInvalidValue; }
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 2;
  return kSuccess;
}
CUresult cuDeviceGet(int* d, int i) {
  if (i < 0 || i > 1) return kInvalidDevice;
  *d = i;
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev < 0 || dev > 1) return kInvalidDevice;
  *v = attr == 75 ? 9 : 0;  // sm_90
  return kSuccess;
}
CUresult cuCtxGetCurrent(void** c) {
  *c = current;
  return kSuccess;
}
CUresult cuCtxSetCurrent(void* c) {
  current = (struct Ctx*)c;
  return kSuccess;
}
CUresult cuCtxGetDevice(int* d) {
  if (!current) return kInvalidContext;
  *d = current->device;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** c, int d) {
  if (d < 0 || d > 1) return kInvalidDevice;
  *c = &contexts[d];
  return kSuccess;
}
CUresult cuModuleLoadDataEx(void** m, const void* image, unsigned n, int* opts, void** values) {
  if (!current) return kInvalidContext;
  if (memcmp(image, "\x7f" "ELFbad", 7) == 0) {
    char* log = NULL;
    size_t size = 0;
    for (unsigned i = 0; i < n; ++i) {
      if (opts[i] == 5) log = (char*)values[i];
      if (opts[i] == 6) size = (size_t)(uintptr_t)values[i];
    }
    const char text[] = "ptxas fatal: bad thing";
    if (log && size > 0) {
      size_t len = sizeof text < size ? sizeof text : size - 1;
      memcpy(log, text, len);
      log[len] = 0;
    }
    return kInvalidImage;
  }
  struct Mod* mod = calloc(1, sizeof *mod);
  mod->ctx = current;
  *m = mod;
  ++loads;
  return kSuccess;
}
CUresult cuModuleLoadData(void** m, const void* image) { return cuModuleLoadDataEx(m, image, 0, NULL, NULL); }
CUresult cuModuleUnload(void* m) {
  struct Mod* mod = (struct Mod*)m;
  if (!current || mod->ctx != current) return kInvalidHandle;
  mod->unloaded = 1;
  ++unloads;
  return kSuccess;
}
CUresult cuCtxSynchronize(void) {
  if (!current) return kInvalidContext;
  if (capturing) {
    capture_broken = 1;
    return kCaptureUnsupported;
  }
  return kSuccess;
}
CUresult cuStreamIsCapturing(void* stream, int* status) {
  *status = capturing && stream ? 1 : 0;
  return kSuccess;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  struct Mod* mod = (struct Mod*)m;
  if (!current || mod->ctx != current || mod->unloaded) return kInvalidHandle;
  if (strcmp(name, "fused_0") != 0) return kNotFound;
  struct Func* fn = calloc(1, sizeof *fn);
  fn->mod = mod;
  *f = fn;
  return kSuccess;
}
CUresult cuFuncSetAttribute(void* f, int attr, int value) {
  (void)f, (void)attr, (void)value;
  return kSuccess;
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params, (void)extra;
  struct Func* fn = (struct Func*)f;
  if (!current) return kInvalidContext;
  if (!fn || fn->mod->ctx != current || fn->mod->unloaded) return kInvalidHandle;
  ++launches;
  return kSuccess;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  switch (r) {
    case kInvalidImage: *s = "CUDA_ERROR_INVALID_IMAGE"; return kSuccess;
    case kInvalidContext: *s = "CUDA_ERROR_INVALID_CONTEXT"; return kSuccess;
    case kInvalidHandle: *s = "CUDA_ERROR_INVALID_HANDLE"; return kSuccess;
    case kCaptureUnsupported: *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return kSuccess;
    case kNotFound: *s = "CUDA_ERROR_NOT_FOUND"; return kSuccess;
    default: *s = NULL; return kInvalidValue;
  }
}
CUresult cuLinkCreate_v2(unsigned n, int* o, void** v, void** state) {
  (void)n, (void)o, (void)v, (void)state;
  return kNotSupported;
}
CUresult cuLinkAddData_v2(void* s, int t, void* d, size_t n, const char* name, unsigned k, int* o, void** v) {
  (void)s, (void)t, (void)d, (void)n, (void)name, (void)k, (void)o, (void)v;
  return kNotSupported;
}
CUresult cuLinkComplete(void* s, void** out, size_t* n) {
  (void)s, (void)out, (void)n;
  return kNotSupported;
}
CUresult cuLinkDestroy(void* s) {
  (void)s;
  return kSuccess;
}

// The test's handles on the fake.
void fake_cuda_set_capturing(int on) { capturing = on; }
int fake_cuda_capture_broken(void) { return capture_broken; }
int fake_cuda_unloads(void) { return unloads; }
int fake_cuda_launches(void) { return launches; }
int fake_cuda_loads(void) { return loads; }
void fake_cuda_make_current(int device) { current = device < 0 ? NULL : &contexts[device]; }
