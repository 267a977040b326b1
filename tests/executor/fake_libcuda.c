// A stand-in for libcuda.so.1 (loaded through LAZYJIT_TEST_LIBCUDA by
// tests/executor/cuda_driver_test.cpp): the driver functions
// targets/cuda/driver.cpp looks up, with a real driver's rules where the tests
// need them and no GPU:
//  - two devices, each with a primary context; the current context is per
//    thread, none at first;
//  - a module belongs to the context current when it was loaded; its functions
//    launch only there (else CUDA_ERROR_INVALID_HANDLE, as a real driver says);
//  - an image starting "\x7f" "ELFbad" fails to load with
//    CUDA_ERROR_INVALID_IMAGE and writes "ptxas fatal: bad thing" into the
//    error-log buffer (CU_JIT_ERROR_LOG_BUFFER, 5; its size, 6);
//  - captures with a real driver's mode rules: fake_cuda_begin_capture(stream,
//    mode) starts one on `stream` from the calling thread, in global (0),
//    thread-local (1) or relaxed (2) mode; fake_cuda_set_capturing(1) starts a
//    global one on every stream but the legacy one. cuStreamIsCapturing says
//    which streams capture. Each thread has a capture mode of its own
//    (cuThreadExchangeStreamCaptureMode; global at first). A "potentially
//    unsafe" call (cuModuleLoadDataEx, cuModuleUnload) is refused with
//    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and breaks the capture, when the
//    calling thread's mode is not relaxed and the capture is global, or is
//    this thread's own and not relaxed. cuCtxSynchronize during any capture,
//    and cuStreamSynchronize on a capturing stream, break it in every mode;
//  - it counts the calls a real driver refuses during a capture, and every
//    cuModuleUnload made while one runs (legal or not).
// fake_cuda_* functions let the test drive and inspect it.
#include <pthread.h>
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
static int capture_broken, unloads, launches, loads;

// The capture under way (one at a time): its stream (NULL: every stream but
// the legacy one), mode and thread.
enum { kModeGlobal = 0, kModeThreadLocal = 1, kModeRelaxed = 2 };
static int capturing, capture_mode;
static void* capture_stream;
static pthread_t capture_thread;
static __thread int thread_mode = kModeGlobal;
static int refused_in_capture, unloads_in_capture;

static int stream_captures(void* stream) {
  return capturing && stream && (!capture_stream || capture_stream == stream);
}
// A potentially unsafe call on this thread now: refused, and the capture broken.
static int unsafe_refused(void) {
  if (!capturing || thread_mode == kModeRelaxed || capture_mode == kModeRelaxed) return 0;
  if (capture_mode == kModeGlobal || pthread_equal(capture_thread, pthread_self())) {
    ++refused_in_capture;
    capture_broken = 1;
    return 1;
  }
  return 0;
}

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
  if (unsafe_refused()) return kCaptureUnsupported;
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
  if (capturing) ++unloads_in_capture;
  if (unsafe_refused()) return kCaptureUnsupported;
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
CUresult cuStreamSynchronize(void* stream) {
  if (!current) return kInvalidContext;
  if (stream_captures(stream)) {
    capture_broken = 1;
    return kCaptureUnsupported;
  }
  return kSuccess;
}
CUresult cuStreamIsCapturing(void* stream, int* status) {
  *status = stream_captures(stream);
  return kSuccess;
}
CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
  if (*mode < kModeGlobal || *mode > kModeRelaxed) return kInvalidValue;
  int old = thread_mode;
  thread_mode = *mode;
  *mode = old;
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
void fake_cuda_begin_capture(void* stream, int mode) {
  capturing = 1;
  capture_stream = stream;
  capture_mode = mode;
  capture_thread = pthread_self();
}
void fake_cuda_end_capture(void) { capturing = 0; }
void fake_cuda_set_capturing(int on) {
  if (on)
    fake_cuda_begin_capture(NULL, kModeGlobal);
  else
    fake_cuda_end_capture();
}
int fake_cuda_thread_mode(void) { return thread_mode; }
int fake_cuda_refused_in_capture(void) { return refused_in_capture; }
int fake_cuda_unloads_in_capture(void) { return unloads_in_capture; }
int fake_cuda_capture_broken(void) { return capture_broken; }
int fake_cuda_unloads(void) { return unloads; }
int fake_cuda_launches(void) { return launches; }
int fake_cuda_loads(void) { return loads; }
void fake_cuda_make_current(int device) { current = device < 0 ? NULL : &contexts[device]; }
