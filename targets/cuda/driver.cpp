// The CUDA driver API through dlopen (targets/cuda/driver.h). No CUDA header:
// the few types and enums used are declared here, as cuda.h declares them, and
// each function is looked up by the name cuda.h maps it to (cuLinkCreate is
// cuLinkCreate_v2 since CUDA 7.5).
#include "targets/cuda/driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "env/env.h"

namespace lazyjit::cuda_driver {

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUlinkState = struct CUlinkState_st*;
using CUjit_option = int;
using CUjitInputType = int;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr CUjitInputType CU_JIT_INPUT_PTX = 1;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;  // CUstreamCaptureMode
// Dynamic shared memory a launch gets without opting in (cuFuncSetAttribute).
constexpr uint32_t kDefaultSharedBytes = 48 * 1024;

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, CUjit_option*, void**);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuStreamIsCapturing)(CUstream, int*);  // CUstreamCaptureStatus: 1 active
  CUresult (*cuThreadExchangeStreamCaptureMode)(int*);  // CUDA 10.1 on
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuLinkCreate)(unsigned, CUjit_option*, void**, CUlinkState*);
  CUresult (*cuLinkAddData)(CUlinkState, CUjitInputType, void*, size_t, const char*, unsigned, CUjit_option*,
                            void**);
  CUresult (*cuLinkComplete)(CUlinkState, void**, size_t*);
  CUresult (*cuLinkDestroy)(CUlinkState);
};

// The driver, loaded and initialized once; `error` says why not when `ok` is false.
struct Driver {
  bool ok = false;
  std::string error;
  Api api{};
};

// "CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)", or the number
// when the driver names no such error.
std::string error_text(const Api& api, CUresult r) {
  const char* name = nullptr;
  const char* what = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &what);
  std::string s = name ? name : "CUDA error " + std::to_string(r);
  if (what) s += std::string(" (") + what + ")";
  return s;
}

// What the driver wrote into an error-log buffer, without trailing newlines;
// never past the buffer, whether or not the driver ended it with a NUL.
std::string log_text(const std::vector<char>& log) {
  std::string text(log.data(), strnlen(log.data(), log.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    // The soname the driver installs (libcuda.so is a development symlink
    // only); tests name another library (a missing one, one without cuInit).
    const std::string test_lib = env::get("LAZYJIT_TEST_LIBCUDA");
    const std::string name = test_lib.empty() ? "libcuda.so.1" : test_lib;
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      d.error = name + " not found: " + (e ? e : "dlopen failed");
      return;
    }
    // Kept loaded for the life of the process: modules and PyTorch use it.
    bool missing = false;
    const std::string& lib_name = name;
    auto sym = [&](auto& fn, const char* name, bool required = true) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && required && !missing) {
        missing = true;
        d.error = lib_name + " has no " + name + " (not the CUDA driver, or one older than CUDA 8)";
      }
    };
    Api& a = d.api;
    sym(a.cuInit, "cuInit");
    sym(a.cuDriverGetVersion, "cuDriverGetVersion");
    sym(a.cuDeviceGetCount, "cuDeviceGetCount");
    sym(a.cuDeviceGet, "cuDeviceGet");
    sym(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
    sym(a.cuCtxGetCurrent, "cuCtxGetCurrent");
    sym(a.cuCtxSetCurrent, "cuCtxSetCurrent");
    sym(a.cuCtxGetDevice, "cuCtxGetDevice");
    sym(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    sym(a.cuModuleLoadDataEx, "cuModuleLoadDataEx");
    sym(a.cuModuleUnload, "cuModuleUnload");
    sym(a.cuStreamSynchronize, "cuStreamSynchronize");
    sym(a.cuModuleGetFunction, "cuModuleGetFunction");
    sym(a.cuFuncSetAttribute, "cuFuncSetAttribute", /*required=*/false);
    sym(a.cuLaunchKernel, "cuLaunchKernel");
    sym(a.cuGetErrorName, "cuGetErrorName");
    sym(a.cuStreamIsCapturing, "cuStreamIsCapturing", /*required=*/false);
    sym(a.cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", /*required=*/false);
    sym(a.cuGetErrorString, "cuGetErrorString", /*required=*/false);
    sym(a.cuLinkCreate, "cuLinkCreate_v2");
    sym(a.cuLinkAddData, "cuLinkAddData_v2");
    sym(a.cuLinkComplete, "cuLinkComplete");
    sym(a.cuLinkDestroy, "cuLinkDestroy");
    if (missing) return;
    if (CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
      d.error = "cuInit: " + error_text(a, r);
      return;
    }
    int count = 0;
    if (CUresult r = a.cuDeviceGetCount(&count); r != CUDA_SUCCESS) {
      d.error = "cuDeviceGetCount: " + error_text(a, r);
      return;
    }
    if (count < 1) {
      d.error = "the CUDA driver sees no GPU (cuDeviceGetCount: 0)";
      return;
    }
    d.ok = true;
  });
  return d;
}

// The driver, or a std::runtime_error saying why it is not usable.
const Api& api() {
  const Driver& d = driver();
  if (!d.ok) throw std::runtime_error("lazyjit: the CUDA driver is not usable: " + d.error);
  return d.api;
}

void check(const Api& a, CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(std::string("lazyjit: ") + call + ": " + error_text(a, r));
}

// Makes sure a context is current on this thread: PyTorch's (its primary
// context for the current device, made current by the CUDA runtime on threads
// that used CUDA), else device 0's primary context, which PyTorch uses too.
const Api& with_context() {
  const Api& a = api();
  CUcontext ctx = nullptr;
  check(a, a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx) return a;
  // Retained once for the process (never released: PyTorch keeps it alive too).
  static CUcontext primary = [&] {
    CUdevice dev = 0;
    check(a, a.cuDeviceGet(&dev, 0), "cuDeviceGet");
    CUcontext c = nullptr;
    check(a, a.cuDevicePrimaryCtxRetain(&c, dev), "cuDevicePrimaryCtxRetain");
    return c;
  }();
  check(a, a.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  return a;
}

// A cubin (ELF) or fatbin, which cuModuleLoadDataEx takes as it is; anything else
// is PTX text.
bool is_binary(const std::string& image) {
  if (image.size() >= 4 && image.compare(0, 4, "\x7f" "ELF") == 0) return true;
  static const unsigned char kFatbin[4] = {0x50, 0xed, 0x55, 0xba};  // 0xBA55ED50, little-endian
  return image.size() >= 4 && std::equal(kFatbin, kFatbin + 4, reinterpret_cast<const unsigned char*>(image.data()));
}

// This thread in relaxed stream-capture mode for the scope, its own mode
// after. Loading and unloading a module are calls the driver refuses while a
// capture runs in global mode (on any thread) or in thread-local mode (on
// this one), and the refusal breaks that capture: a program's first run
// inside a capture of PyTorch's (torch.cuda.graph is global by default), or
// one loaded or dropped on another thread meanwhile. In relaxed mode this
// thread may make them. (PyTorch's caching allocator does the same around
// cudaMalloc.)
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const Api& a) : a_(a) {
    if (a_.cuThreadExchangeStreamCaptureMode && a_.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS)
      swapped_ = true;
  }
  ~RelaxedCaptureMode() {
    if (swapped_) a_.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  const Api& a_;
  int mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;  // then the one it replaced
  bool swapped_ = false;
};

// Loads `image` into the context current on this thread. The driver's error
// log goes into the error: CUDA_ERROR_INVALID_IMAGE alone does not say why.
CUmodule load_here(const Api& a, const std::string& image) {
  std::vector<char> log(16 * 1024, '\0');
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size() - 1))};
  CUmodule m = nullptr;
  RelaxedCaptureMode relaxed(a);
  if (CUresult r = a.cuModuleLoadDataEx(&m, image.data(), 2, opts, values); r != CUDA_SUCCESS) {
    std::string text = log_text(log);
    throw std::runtime_error("lazyjit: cuModuleLoadDataEx: " + error_text(a, r) + (text.empty() ? "" : ": " + text));
  }
  return m;
}

// `ctx` current on this thread for the scope; the one before it after.
class ContextScope {
 public:
  ContextScope(const Api& a, CUcontext ctx) : a_(a) {
    check(a, a.cuCtxGetCurrent(&saved_), "cuCtxGetCurrent");
    if (saved_ != ctx) {
      check(a, a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      swapped_ = true;
    }
  }
  ~ContextScope() {
    if (swapped_) a_.cuCtxSetCurrent(saved_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Api& a_;
  CUcontext saved_ = nullptr;
  bool swapped_ = false;
};

// Graph captures under way, and the modules dropped during one: their
// unload waits for the captures to end. An unload first waits for the
// module's kernels (the driver does not promise to), and a wait on a
// capturing stream breaks its capture, as the unload itself does in global or
// thread-local mode. Captures seen: lazyjit's own (capture_began), and any
// running on a stream lazyjit launched on or loaded for (asked of the driver
// at each unload: a capture of PyTorch's around lazyjit's kernels, or one that
// began on such a stream later). `g_unload_mu` is held while unloading, so no
// capture of ours starts then.
std::mutex g_unload_mu;
int g_captures = 0;
// Every stream lazyjit launched on or loaded for, with its context: what an
// unload waits for, and where it looks for captures. A handful (PyTorch's
// current streams); one the driver no longer knows is forgotten.
std::vector<std::pair<CUcontext, CUstream>> g_streams;
std::vector<std::pair<CUcontext, CUmodule>> g_pending;

// Under g_unload_mu.
void note_stream(CUcontext ctx, CUstream s) {
  auto key = std::make_pair(ctx, s);
  if (std::find(g_streams.begin(), g_streams.end(), key) == g_streams.end()) g_streams.push_back(key);
}

// Under g_unload_mu: whether a capture is under way that an unload could break.
bool capture_under_way(const Api& a) {
  if (g_captures > 0) return true;
  if (!a.cuStreamIsCapturing) return false;
  bool capturing = false;
  auto gone = [&](const std::pair<CUcontext, CUstream>& cs) {
    int status = 0;
    if (!cs.second) {
      // The legacy stream never captures, but waiting on it waits on a
      // blocking stream that does (the driver says so, and breaks nothing).
      try {
        ContextScope in(a, cs.first);
        capturing |= a.cuStreamIsCapturing(nullptr, &status) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      } catch (...) {
      }
      return false;
    }
    if (a.cuStreamIsCapturing(cs.second, &status) != CUDA_SUCCESS) return true;
    capturing |= status != 0;  // active, or invalidated and not yet ended
    return false;
  };
  g_streams.erase(std::remove_if(g_streams.begin(), g_streams.end(), gone), g_streams.end());
  return capturing;
}

// Under g_unload_mu, with no capture under way: waits for each module's
// context's streams lazyjit used (its kernels may still be queued there;
// a stream, not the whole context: a capture on a stream lazyjit never used
// is not touched; dropping a program is rare, so a full wait is fine), and
// unloads the modules, in relaxed mode (a capture lazyjit cannot see, on
// another thread, is not broken by the call).
void unload_now(const Api& a, std::vector<std::pair<CUcontext, CUmodule>>& mods) {
  std::vector<CUcontext> synced;
  for (auto& [ctx, m] : mods) {
    try {
      ContextScope in(a, ctx);
      RelaxedCaptureMode relaxed(a);
      if (std::find(synced.begin(), synced.end(), ctx) == synced.end()) {
        for (const auto& [c, s] : g_streams)
          if (c == ctx) a.cuStreamSynchronize(s);
        synced.push_back(ctx);
      }
      a.cuModuleUnload(m);
    } catch (...) {
    }
  }
  mods.clear();
}

// Unloads `mods` now, or after the captures under way end. `stream` (with
// the current context `ctx`): one lazyjit is about to launch on, as a load
// for a first run inside a capture is.
void unload(const Api& a, std::vector<std::pair<CUcontext, CUmodule>> mods, CUcontext ctx = nullptr,
            CUstream stream = nullptr) {
  std::lock_guard<std::mutex> lock(g_unload_mu);
  if (stream) note_stream(ctx, stream);
  g_pending.insert(g_pending.end(), mods.begin(), mods.end());
  if (!g_pending.empty() && !capture_under_way(a)) unload_now(a, g_pending);
}

class LoadedModule;
// Each function handed out, by its handle: the module and name it has, so a
// launch in another context runs the same kernel loaded there.
struct FunctionHome {
  const LoadedModule* module;
  std::string name;
  CUcontext ctx;
};
std::mutex g_functions_mu;
std::unordered_map<CUfunction, FunctionHome> g_functions;

// A module image, loaded into each context that launches one of its kernels:
// a CUmodule and its functions belong to one context, and with several GPUs
// (or a thread whose current device is not the one the program was loaded
// on) a launch happens in another.
class LoadedModule final : public Module {
 public:
  LoadedModule(std::string image, CUcontext ctx, CUmodule m) : image_(std::move(image)), home_(ctx) {
    modules_[ctx] = m;
  }
  ~LoadedModule() override {
    // At exit the driver may be torn down already: nothing to report then.
    try {
      {
        std::lock_guard<std::mutex> lock(g_functions_mu);
        for (CUfunction f : handed_out_) g_functions.erase(f);
      }
      unload(api(), std::vector<std::pair<CUcontext, CUmodule>>(modules_.begin(), modules_.end()));
    } catch (...) {
    }
  }
  void* function(const std::string& name) const override {
    CUfunction f = in_context(api(), home_, name);
    std::lock_guard<std::mutex> lock(g_functions_mu);
    g_functions[f] = FunctionHome{this, name, home_};
    handed_out_.push_back(f);
    return f;
  }
  // `name` in context `ctx`, the image loaded there first when it is not yet.
  CUfunction in_context(const Api& a, CUcontext ctx, const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_pair(ctx, name);
    for (const auto& [k, f] : functions_)
      if (k == key) return f;
    ContextScope in(a, ctx);
    auto it = modules_.find(ctx);
    if (it == modules_.end()) it = modules_.emplace(ctx, load_here(a, image_)).first;
    CUfunction f = nullptr;
    CUresult r = a.cuModuleGetFunction(&f, it->second, name.c_str());
    if (r != CUDA_SUCCESS)
      throw std::runtime_error("lazyjit: cuModuleGetFunction(\"" + name + "\"): " + error_text(a, r));
    functions_.emplace_back(key, f);
    return f;
  }

 private:
  std::string image_;
  CUcontext home_;
  mutable std::mutex mu_;
  mutable std::unordered_map<CUcontext, CUmodule> modules_;
  mutable std::vector<std::pair<std::pair<CUcontext, std::string>, CUfunction>> functions_;
  mutable std::vector<CUfunction> handed_out_;  // under g_functions_mu
};

// `f` (a function handed out by a LoadedModule) as it is in `ctx`.
CUfunction for_context(const Api& a, CUfunction f, CUcontext ctx) {
  const LoadedModule* module = nullptr;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(g_functions_mu);
    auto it = g_functions.find(f);
    if (it == g_functions.end() || it->second.ctx == ctx) return f;
    module = it->second.module;
    name = it->second.name;
  }
  // The program launching `f` holds its module.
  return module->in_context(a, ctx, name);
}

}  // namespace

bool available(std::string* why) {
  try {
    const Driver& d = driver();
    if (!d.ok && why) *why = d.error;
    return d.ok;
  } catch (const std::exception& e) {  // std::call_once may throw (std::system_error)
    if (why) *why = e.what();
    return false;
  } catch (...) {
    if (why) *why = "the CUDA driver could not be loaded";
    return false;
  }
}

int driver_version() {
  const Api& a = api();
  int v = 0;
  check(a, a.cuDriverGetVersion(&v), "cuDriverGetVersion");
  return v;
}

std::string current_arch() {
  const Api& a = with_context();
  CUdevice dev = 0;
  check(a, a.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  int major = 0, minor = 0;
  check(a, a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  check(a, a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  return "sm_" + std::to_string(major * 10 + minor);
}

std::shared_ptr<Module> load_module(const std::string& image, void* stream) {
  if (image.empty()) throw std::invalid_argument("lazyjit: load_module: an empty image");
  const Api& a = with_context();
  // PTX goes through the driver's assembler first, whose error log says what
  // is wrong with it (loading it would only say CUDA_ERROR_INVALID_PTX).
  std::string cubin;
  const std::string& bytes = is_binary(image) ? image : (cubin = assemble(image));
  CUcontext ctx = nullptr;
  check(a, a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUmodule m = load_here(a, bytes);
  // Modules whose unload waited for a capture that has ended (not while the
  // stream this load is for captures).
  unload(a, {}, ctx, static_cast<CUstream>(stream));
  return std::make_shared<LoadedModule>(bytes, ctx, m);
}

std::string assemble(const std::string& ptx) {
  const Api& a = with_context();
  std::vector<char> log(16 * 1024, '\0');
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size() - 1))};
  CUlinkState state = nullptr;
  RelaxedCaptureMode relaxed(a);  // the driver's assembler: as a load
  check(a, a.cuLinkCreate(2, opts, values, &state), "cuLinkCreate");
  struct Destroy {
    const Api& a;
    CUlinkState s;
    ~Destroy() { a.cuLinkDestroy(s); }
  } destroy{a, state};
  auto fail = [&](const char* call, CUresult r) {
    std::string text = log_text(log);
    throw std::runtime_error(std::string("lazyjit: ") + call + ": " + error_text(a, r) +
                             (text.empty() ? "" : ": " + text));
  };
  // The driver reads PTX as a NUL-terminated string: the size counts the NUL.
  std::string text = ptx;
  if (CUresult r = a.cuLinkAddData(state, CU_JIT_INPUT_PTX, text.data(), text.size() + 1, "lazyjit.ptx", 0, nullptr,
                                   nullptr);
      r != CUDA_SUCCESS)
    fail("cuLinkAddData", r);
  void* out = nullptr;
  size_t size = 0;
  if (CUresult r = a.cuLinkComplete(state, &out, &size); r != CUDA_SUCCESS) fail("cuLinkComplete", r);
  // `out` belongs to the link state: copied before it is destroyed.
  return std::string(static_cast<const char*>(out), size);
}

void launch(void* function, uint32_t grid, uint32_t block, uint32_t shared_bytes, void* stream, void** params) {
  const Api& a = with_context();
  CUcontext ctx = nullptr;
  check(a, a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUfunction f = for_context(a, static_cast<CUfunction>(function), ctx);
  if (shared_bytes > kDefaultSharedBytes && a.cuFuncSetAttribute)
    check(a, a.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared_bytes)),
          "cuFuncSetAttribute");
  check(a, a.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shared_bytes, static_cast<CUstream>(stream), params, nullptr),
        "cuLaunchKernel");
  // The stream, remembered (once per thread while it launches on the same
  // one): an unload waits for it, and not while it captures.
  thread_local std::pair<CUcontext, CUstream> last{nullptr, nullptr};
  thread_local bool noted = false;
  if (!noted || last != std::make_pair(ctx, static_cast<CUstream>(stream))) {
    last = {ctx, static_cast<CUstream>(stream)};
    noted = true;
    std::lock_guard<std::mutex> lock(g_unload_mu);
    note_stream(ctx, static_cast<CUstream>(stream));
  }
}

void capture_began() {
  std::lock_guard<std::mutex> lock(g_unload_mu);
  ++g_captures;
}

void capture_ended() {
  std::lock_guard<std::mutex> lock(g_unload_mu);
  if (g_captures > 0) --g_captures;
  if (g_pending.empty()) return;
  try {
    const Api& a = api();
    if (!capture_under_way(a)) unload_now(a, g_pending);
  } catch (...) {
  }
}

}  // namespace lazyjit::cuda_driver
