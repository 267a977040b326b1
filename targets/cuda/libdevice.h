// The device math library: what the element emitters' math calls become on a
// GPU. The NVPTX back end lowers sqrt, fabs, fma, floor/ceil/trunc/rint/round,
// min/max and copysign itself, but not exp, log, sin, pow, ... (llc: "no libcall
// available", or an abort in instruction selection for sin/cos/pow), nor libm's
// functions (tanhf, erff, ...). Those become calls to libdevice's __nv_*
// functions (NVIDIA's libdevice.10.bc), linked in and inlined.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <llvm/IR/Module.h>

namespace lazyjit::lowering::cuda {

// libdevice.10.bc's bytes, read once per path (thread-safe), and a short hash
// of them for the fingerprint.
struct Libdevice {
  std::string path;
  std::string bytes;
  std::string hash;  // 12 hex digits of the bytes' xxHash64
};
std::shared_ptr<const Libdevice> load_libdevice(const std::string& path);

// Replaces every call to a math intrinsic NVPTX cannot lower (llvm.exp, .log,
// .sin, .pow, ...: libdevice_intrinsics()) and every call to a libm function
// (libdevice_libm_names(): expf/exp, tanhf/tanh, erff/erf, ...) with a call to
// its __nv_* function (float: __nv_expf, double: __nv_exp; half and bfloat
// through float; vectors lane by lane). Returns how many calls it replaced.
int map_to_libdevice(llvm::Module& m);

// Links what `m` calls of libdevice into it (only what is needed), after
// map_to_libdevice; internalizes every function but the kernels (`kernels` by
// name, and every ptx_kernel or nvvm.annotations "kernel" function), so the
// optimizer inlines libdevice and drops the rest; sets the module flag
// "nvvm-reflect-ftz" to 0 (libdevice's __nvvm_reflect("__CUDA_FTZ") paths:
// subnormals kept, as on the CPU). Throws std::runtime_error naming every
// function still undefined after linking (a call ptxas would refuse).
void link_libdevice(llvm::Module& m, const Libdevice& ld, const std::vector<std::string>& kernels);

// Throws std::runtime_error naming each call the NVPTX back end cannot lower
// (an intrinsic of libdevice_intrinsics(), a function without a body) left in
// `m`, with `when` ("after optimization") in the message.
void check_lowerable(const llvm::Module& m, const std::string& when);

// What map_to_libdevice maps, for tests and the docs: intrinsic base names
// ("exp", "pow", ...) and libm names (double's, without the f: "tanh", ...).
const std::vector<std::string>& libdevice_intrinsics();
const std::vector<std::string>& libdevice_libm_names();

}  // namespace lazyjit::lowering::cuda
